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



def test_an_evaluation_later_than_the_lines_kept_in_memory_still_goes_in_step_order(tmp_path):
    sink = MetricsSink(tmp_path, tensorboard=False)
    steps = [256 * (i + 1) for i in range(MetricsSink.TAIL_LINES + 44)]
    for step in steps:
        sink.write(step, {"sps": 1.0})
    sink.write(2560, {"eval_return_mean": 10.0})  # an evaluation that took 290 log lines
    sink.write(steps[-1] + 256, {"sps": 1.0})
    sink.close()
    logged = steps_in(tmp_path / "metrics.jsonl")
    assert [step for step, _ in logged] == sorted(step for step, _ in logged)
    assert logged[logged.index((2560, "train")) + 1] == (2560, "eval") and len(logged) == len(steps) + 2

def test_a_resumed_sink_appends_after_the_lines_kept(tmp_path):
    sink = MetricsSink(tmp_path, tensorboard=False)
    sink.write(256, {"sps": 1.0})
    sink.close()
    sink = MetricsSink(tmp_path, tensorboard=False)
    sink.write(512, {"sps": 1.0})
    sink.write(256, {"eval_return_mean": 10.0})  # earlier than anything this process wrote: after the kept lines
    sink.close()
    assert steps_in(tmp_path / "metrics.jsonl") == [(256, "train"), (256, "eval"), (512, "train")]


def test_a_write_that_fails_halfway_leaves_every_line_logged_before_it_whole(tmp_path, monkeypatch):
    import errno
    import os

    import pytest

    sink = MetricsSink(tmp_path, tensorboard=False)
    for step in (256, 512, 768):
        sink.write(step, {"sps": 1.0})
    before = (tmp_path / "metrics.jsonl").read_bytes()
    real_pwrite, calls = os.pwrite, []

    def disk_fills(fd, data, offset):  # the late line's rewrite gets 10 bytes on disk, then no space
        calls.append(len(data))
        if len(calls) == 1:
            return real_pwrite(fd, data[:10], offset)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, data, offset)  # putting the moved lines back: blocks the file has

    monkeypatch.setattr(os, "pwrite", disk_fills)
    with pytest.raises(OSError, match="No space left"):
        sink.write(256, {"eval_return_mean": 10.0})  # moves the lines of 512 and 768
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    assert (tmp_path / "metrics.jsonl").read_bytes() == before  # as it was, and the sink goes on from there
    sink.write(1024, {"sps": 1.0})
    sink.close()
    sink.write(1280, {"sps": 1.0})  # after close (an evaluation the run's end did not wait for): nothing written
    assert steps_in(tmp_path / "metrics.jsonl") == [(256, "train"), (512, "train"), (768, "train"), (1024, "train")]


def test_the_process_start_is_read_to_the_clock_tick_not_early_by_the_boots_whole_second():
    """Times to a target count from the process's creation: the start a child reads lies after the
    moment its parent spawned it (to a 10 ms tick), where /proc/stat's whole-second `btime` put
    it up to a second early."""
    import subprocess
    import sys
    import time

    before = time.time()
    child = subprocess.run([sys.executable, "-c", "from jaxrl_fast.outputs.metrics import process_start_time; "
                            "print(repr(process_start_time()))"], capture_output=True, text=True, check=True)
    started = float(child.stdout)
    assert before - 0.02 <= started <= time.time()
