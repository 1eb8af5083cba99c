"""metrics.jsonl: in step order though evaluation lines arrive late, every line on disk once logged."""

import json

from jaxrl_fast.outputs.metrics import MetricsSink


def steps_in(path):
    return [(line["step"], "eval" if "eval_return_mean" in line else "train")
            for line in map(json.loads, path.read_text().splitlines())]


def test_a_late_evaluation_line_is_put_back_in_step_order(tmp_path):
    sink = MetricsSink(tmp_path, tensorboard=False)
    sink.write(256, {"sps": 1.0})
    sink.write(512, {"sps": 1.0})
    sink.write(768, {"sps": 1.0})
    # the evaluation requested at 256 ends after the training lines of 512 and 768
    assert steps_in(tmp_path / "metrics.jsonl") == [(256, "train"), (512, "train"), (768, "train")]  # on disk already
    sink.write(256, {"eval_return_mean": 10.0})
    sink.write(1024, {"sps": 1.0})
    sink.write(768, {"eval_return_mean": 20.0})  # one at a call boundary goes after that call's line
    sink.close()
    assert steps_in(tmp_path / "metrics.jsonl") == [
        (256, "train"), (256, "eval"), (512, "train"), (768, "train"), (768, "eval"), (1024, "train")]


def test_a_resumed_sink_appends_after_the_lines_kept(tmp_path):
    sink = MetricsSink(tmp_path, tensorboard=False)
    sink.write(256, {"sps": 1.0})
    sink.close()
    sink = MetricsSink(tmp_path, tensorboard=False)
    sink.write(512, {"sps": 1.0})
    sink.write(256, {"eval_return_mean": 10.0})  # earlier than anything this process wrote: after the kept lines
    sink.close()
    assert steps_in(tmp_path / "metrics.jsonl") == [(256, "train"), (256, "eval"), (512, "train")]
