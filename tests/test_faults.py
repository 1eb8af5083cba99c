"""What a run does when something goes wrong: bad input, kill -9, signals, a NaN, a failed save."""

import dataclasses
import json
import os
import resource
import signal
import struct
import subprocess
import sys
import time

import pytest

import jaxrl_fast
from jaxrl_fast.cli.train import main
from jaxrl_fast.config.run import EVAL_SEED_OFFSET
from jaxrl_fast.outputs.checkpoint import Checkpointer
from jaxrl_fast.outputs.metrics import MetricsSink, read_metrics
from support import checkpoint_steps, lines_of, make_config, start_cli, train, wait_for


def tensorboard_scalars(run_dir):
    """(tag, step) of every scalar in the run's event files (TFRecord framing, Event protos)."""
    from tensorboardX.proto.event_pb2 import Event

    points = []
    for path in sorted(run_dir.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            event = Event.FromString(data[offset + 12:offset + 12 + length])
            offset += 12 + length + 4
            points += [(value.tag, event.step) for value in event.summary.value]
    return points


@pytest.mark.parametrize(
    "args, message",
    [
        (["--algo", "sac", "--env", "Pendulum-v1", "--sac.hidden-sizes", "0"], "--sac.hidden-sizes must be positive"),
        (["--seed", "1099511627776"], "--seed must be between 0 and"),
        (["--seed", "-1"], "--seed must be between 0 and"),
        (["--target-return", "nan"], "--target-return must be a finite number"),
        (["--algo", "sac", "--env", "Pendulum-v1", "--sac.tau", "-0.1"], "--sac.tau must be in (0, 1]"),
        (["--algo", "sac", "--env", "Pendulum-v1", "--sac.alpha-lr", "-1"], "--sac.alpha-lr must be positive"),
        (["--algo", "td3", "--env", "Pendulum-v1", "--td3.critic-lr", "0"], "--td3.critic-lr must be positive"),
        (["--algo", "td3", "--env", "Pendulum-v1", "--td3.tau", "-1"], "--td3.tau must be in (0, 1]"),
        (["--algo", "dqn", "--dqn.learning-rate", "-1"], "--dqn.learning-rate must be positive"),
        (["--ppo.learning-rate", "-0.001"], "--ppo.learning-rate must be positive"),
        (["--algo", "td3", "--env", "Pendulum-v1", "--td3.policy-noise", "nan"], "--td3.policy-noise must be a finite number"),
        (["--ppo.ent-coef", "inf"], "--ppo.ent-coef must be a finite number"),
    ],
)
def test_wrong_values_are_refused_in_one_line_before_the_run_directory_exists(tmp_path, capsys, args, message):
    run_dir = tmp_path / "run"
    assert main([*args, "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not run_dir.exists()


def test_the_largest_seed_accepted_is_one_envpool_takes(tmp_path, capsys):
    from jaxrl_fast.env.envpool import make_pool

    config = make_config()
    largest = 2**31 - 1 - EVAL_SEED_OFFSET - max(config.num_envs, config.eval_episodes)
    assert main(["--seed", str(largest + 1), "--run-dir", str(tmp_path / "run")]) == 2
    assert f"--seed must be between 0 and {largest}" in capsys.readouterr().err
    make_pool("CartPole-v1", num_envs=config.num_envs, num_threads=1, seed=largest).reset()
    make_pool("CartPole-v1", num_envs=config.eval_episodes, num_threads=1, seed=largest + EVAL_SEED_OFFSET).reset()


def test_empty_run_dir_and_one_the_system_refuses_are_one_line_errors(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["--run-dir", ""]) == 2
    assert "--run-dir must name a directory" in capsys.readouterr().err
    assert main(["--run-dir", "/proc/jaxrl_fast_run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --run-dir: /proc/jaxrl_fast_run cannot be created") and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_run_killed_before_its_first_checkpoint_is_started_over_by_resume(tmp_path):
    run_dir = tmp_path / "run"
    # one call of all the steps: nothing is checkpointed before the kill
    proc = start_cli("--total-steps", "3000000", "--log-interval", "3000000", "--run-dir", str(run_dir))
    wait_for(lambda: (run_dir / "config.json").exists() and list(run_dir.glob("events.out.tfevents.*")), proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert checkpoint_steps(run_dir) == []

    again = start_cli("--total-steps", "3000000", "--run-dir", str(run_dir))
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 2 and f"start it over from its saved config with --resume {run_dir}" in out

    resumed = start_cli("--resume", str(run_dir), "--total-steps", "2048")
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out
    assert "has no checkpoint yet: starting the run over from its saved config" in out
    assert "previous-1" in out and (run_dir / "previous-1").is_dir()  # what the killed run wrote, kept
    assert [p.name for p in (run_dir / "previous-1").glob("events.out.tfevents.*")]
    assert [line["step"] for line in lines_of(run_dir) if "sps" in line] == [2048]
    assert checkpoint_steps(run_dir) == [2048]
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1
    config = json.loads((run_dir / "config.json").read_text())["train_config"]
    assert config["total_steps"] == 2048 and config["log_interval"] == 3_000_000  # the saved config, with the new budget


def test_tensorboard_is_rebuilt_from_metrics_jsonl_when_a_run_resumes(tmp_path):
    sink = MetricsSink(tmp_path)
    for step in (100, 200, 300):
        sink.write(step, {"sps": 1.0, "train/loss": 0.5})
    sink.close()
    # metrics.jsonl is the record: a killed run's resume keeps lines up to its checkpoint (200),
    # while its event files may miss points the writer had not flushed, or hold later ones
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines[:2]) + "\n")
    sink = MetricsSink(tmp_path, rebuild_tensorboard=True)
    sink.write(300, {"sps": 2.0, "train/loss": 0.25})
    sink.close()
    expected = sorted((tag, line["step"]) for line in read_metrics(tmp_path / "metrics.jsonl")
                      for tag in ("charts/sps", "charts/wall_s", "train/loss"))
    assert sorted(tensorboard_scalars(tmp_path)) == expected


def read_until(proc, text):
    """The process's output up to the line that holds `text`."""
    out = ""
    for line in proc.stdout:
        out += line
        if text in line:
            return out
    raise AssertionError(f"{text!r} never came:\n{out}")


def test_a_second_sigint_during_a_long_call_stops_at_once(tmp_path):
    run_dir = tmp_path / "run"
    proc = start_cli("--total-steps", "30000000", "--log-interval", "30000000", "--eval-interval", "0",
                     "--run-dir", str(run_dir))
    wait_for(lambda: (run_dir / "metrics.jsonl").exists(), proc)
    proc.send_signal(signal.SIGINT)
    read_until(proc, "SIGINT: stopping after the training call in flight, if one runs (Ctrl-C again to stop at once)")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)  # the one call alone would run for many minutes
    assert proc.returncode == 130
    assert "second SIGINT: stopped at once" in out and "Traceback" not in out
    assert checkpoint_steps(run_dir) == [] and not (run_dir / "summary.json").exists()


def test_sigterm_during_the_last_call_is_honoured(tmp_path):
    run_dir = tmp_path / "run"
    proc = start_cli("--total-steps", "400000", "--log-interval", "200000", "--eval-interval", "0",
                     "--checkpoint-interval", "0", "--run-dir", str(run_dir))
    # the first of two calls is done (and no checkpoint follows it): the second, last one starts
    wait_for(lambda: (run_dir / "metrics.jsonl").exists() and lines_of(run_dir), proc)
    # the line is written just before the last call starts; a second later that call (200k steps,
    # several seconds) is under way, so the signal lands inside it and not in the gap before it
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 130, out
    assert "SIGTERM: writing a final checkpoint" in out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["steps"] == 399_872  # the last call ran to its end
    assert checkpoint_steps(run_dir) == [399_872]


def test_a_sigint_during_compilation_is_not_lost(tmp_path):
    run_dir = tmp_path / "run"
    proc = start_cli("--total-steps", "3000000", "--run-dir", str(run_dir))
    wait_for(run_dir.exists, proc)  # made after the checks, before the env is built and the program compiled
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, out
    assert "Traceback" not in out and "SIGINT: stopping" in out
    trained = [line for line in lines_of(run_dir) if "sps" in line] if (run_dir / "metrics.jsonl").exists() else []
    assert trained == [] and checkpoint_steps(run_dir) == []  # nothing trained: --resume starts it over



def test_ctrl_c_during_the_api_runs_final_evaluation_ends_it_and_the_summary_is_written(tmp_path, monkeypatch):
    """The final evaluation can take minutes (Atari's games): through the API a first Ctrl-C there
    is noted, a second ends it (as it ends a training call), and the summary is written all the same."""
    from jaxrl_fast.run.evaluation import Evaluator

    evaluate = Evaluator.evaluate

    def interrupted(self, payload, step):
        for _ in range(2):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)  # the handler runs here, in the main thread: the second raises
        return evaluate(self, payload, step)

    monkeypatch.setattr(Evaluator, "evaluate", interrupted)
    result = jaxrl_fast.train(env="CartPole-v1", algo="ppo", total_steps=2048, eval_interval=0, progress="off",
                              run_dir=tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert result.summary["steps"] == summary["steps"] == 2048 and summary["final_eval_return_mean"] is None
    assert checkpoint_steps(tmp_path / "run") == [2048]


def test_an_interrupted_runs_summary_keeps_an_evaluation_of_its_last_step(tmp_path, monkeypatch):
    """A run stopped by a Ctrl-C runs no final evaluation, but one of its last step that was under
    way reports while the evaluator closes, and the summary takes it."""
    from jaxrl_fast.run.evaluation import Evaluator

    request = Evaluator.request

    def stop_at_2048(self, payload, step):
        request(self, payload, step)
        if step == 2048:
            os.kill(os.getpid(), signal.SIGINT)  # the stop lands with this evaluation under way

    monkeypatch.setattr(Evaluator, "request", stop_at_2048)
    result = jaxrl_fast.train(env="CartPole-v1", algo="ppo", total_steps=100_000, eval_interval=1024, log_interval=1024,
                              progress="off", run_dir=tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["interrupted"] and result.summary["steps"] == summary["steps"]
    logged = {line["step"]: line["eval_return_mean"] for line in lines_of(tmp_path / "run") if "eval_return_mean" in line}
    assert summary["steps"] in logged and summary["final_eval_return_mean"] == logged[summary["steps"]]

def test_resume_refuses_a_budget_below_the_steps_done_and_a_finished_run_logs_its_final_evaluation_once(ppo_2048, capsys):
    config = ppo_2048
    saved = (config.run_dir / "config.json").read_text()
    assert main(["--resume", str(config.run_dir), "--total-steps", "1024"]) == 2
    err = capsys.readouterr().err.strip()
    assert "has trained 2,048 steps already; --total-steps 1,024 is below that" in err and len(err.splitlines()) == 1
    assert (config.run_dir / "config.json").read_text() == saved

    before = lines_of(config.run_dir)
    assert main(["--resume", str(config.run_dir), "--progress", "off"]) == 0
    assert lines_of(config.run_dir) == before  # nothing to train: the final evaluation it logged is the final one
    summary = json.loads((config.run_dir / "summary.json").read_text())
    assert summary["final_eval_return_mean"] == before[-1]["eval_return_mean"]


def test_an_async_resume_keeps_the_log_grid(tmp_path):
    config = make_config("Pendulum-v1", "sac", schedule="async", progress="off", log_interval=256, eval_interval=0,
                         sac={"learning_starts": 500})
    train(dataclasses.replace(config, run_dir=tmp_path / "whole", total_steps=2500))
    first = dataclasses.replace(config, run_dir=tmp_path / "parts", total_steps=1500)
    train(first)
    jaxrl_fast.train(resume=first.run_dir, total_steps=2500)
    resumed_at = Checkpointer(first.run_dir, 3).restore(1472).step  # the first run's end: 23 iterations of 64 steps
    steps = [[line["step"] for line in lines_of(tmp_path / name) if "sps" in line and line["step"] > resumed_at]
             for name in ("whole", "parts")]
    assert steps[1] == steps[0]  # the resumed run logs on the grid of an uninterrupted one


def test_a_nan_in_the_first_call_says_there_is_no_checkpoint_and_logs_no_null_evaluation(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["--ppo.learning-rate", "1e38", "--total-steps", "4096", "--log-interval", "512",
                 "--eval-interval", "256", "--progress", "off", "--run-dir", str(run_dir)]) == 1
    err = capsys.readouterr().err
    assert f"training stopped, no checkpoint was written; --resume {run_dir} starts the run over" in err
    assert "last good checkpoint" not in err
    assert all(value is not None for line in lines_of(run_dir) for value in line.values())
    assert checkpoint_steps(run_dir) == []


def limit_file_size():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (32_000, 32_000))  # below one checkpoint's state file


def test_a_failed_checkpoint_write_stops_the_run_in_one_line_keeping_the_last_good_one(tmp_path):
    run_dir = tmp_path / "run"
    first = start_cli("--total-steps", "2048", "--checkpoint-interval", "1024", "--log-interval", "512",
                      "--eval-interval", "0", "--run-dir", str(run_dir))
    out, _ = first.communicate(timeout=300)
    assert first.returncode == 0 and checkpoint_steps(run_dir) == [1024, 2048], out

    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-m", "jaxrl_fast.train", "--resume", str(run_dir), "--total-steps", "8192",
                           "--progress", "plain"], capture_output=True, text=True, env=env, timeout=300,
                          preexec_fn=limit_file_size)
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:") or "ERROR" in line]
    assert len(errors) == 1 and "Traceback" not in proc.stderr
    assert errors[0].startswith("error: the checkpoint at step 3,072 could not be written")
    assert "File too large" in errors[0] and "the last good checkpoint (step 2,048) is kept" in errors[0]
    assert checkpoint_steps(run_dir) == [1024, 2048]
    assert max(line["step"] for line in lines_of(run_dir)) == 3072  # stopped at once, not at the next save
    assert Checkpointer(run_dir, 3).restore().step == 2048


def test_a_file_written_whole_is_the_old_one_or_the_new_one_never_half(tmp_path):
    from jaxrl_fast.files import written_whole

    path = tmp_path / "summary.json"
    path.write_text("old")
    with pytest.raises(OSError, match="disk full"):
        with written_whole(path) as partial:
            partial.write_text("half of the ne")
            assert path.read_text() == "old"  # a reader meets the old file meanwhile
            raise OSError("disk full")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["summary.json"]  # the partial is gone
    with written_whole(path) as first, written_whole(path) as second:  # two writers at once
        assert first != second and first.parent == tmp_path and first.name.startswith(".")
        first.write_text("first")
        second.write_text("second")
    assert path.read_text() == "first" and os.listdir(tmp_path) == ["summary.json"]
