"""`--profile`: a real trace of a window of training calls, summarised per phase."""

import importlib.util
import json
from pathlib import Path

import jax
import pytest

from jaxrl_fast.cli.train import main, parse_args
from jaxrl_fast.engine.phases import phase_of_op_name
from jaxrl_fast.outputs.profiler import hlo_phase_map, instruction_phases
from support import resolved

SCRIPT = Path(__file__).resolve().parents[1] / "profiling" / "summarize_trace.py"


def load_summarizer():
    spec = importlib.util.spec_from_file_location("summarize_trace", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


summarize_trace = load_summarizer()

PPO_ARGS = ["--total-steps", "4096", "--log-interval", "1024", "--eval-interval", "0", "--eval-episodes", "1",
            "--progress", "off"]  # CartPole preset: 8 envs x 32 steps = 256 per iteration, 4 calls of 4 iterations


def trace_files(run_dir: Path) -> tuple[list[Path], list[Path]]:
    sessions = run_dir / "profile" / "plugins" / "profile"
    return list(sessions.glob("*/*.xplane.pb")), list(sessions.glob("*/*.trace.json.gz"))


@pytest.mark.slow
def test_ppo_profile_writes_a_trace_that_summarizes_per_phase(tmp_path, capsys):
    run_dir = tmp_path / "ppo"
    argv = [*PPO_ARGS, "--run-dir", str(run_dir), "--profile", "--profile-start", "1", "--profile-calls", "2"]
    assert main(argv) == 0
    xplanes, traces = trace_files(run_dir)
    assert len(xplanes) == 1 and traces  # TensorBoard's profile plugin / Perfetto
    assert (run_dir / "profile" / "hlo_phases.json").exists()
    window = json.loads((run_dir / "summary.json").read_text())["profile"]
    assert (window["first_call"], window["calls"], window["first_step"], window["last_step"]) == (1, 2, 1024, 3072)
    assert "error" not in window and Path(window["trace"]).exists()
    train_lines = [line for line in (run_dir / "metrics.jsonl").read_text().splitlines() if '"sps"' in line]
    assert len(train_lines) == resolved(parse_args(argv)).plan.calls == 4  # what the window was validated against

    seconds = summarize_trace.summarize(run_dir)  # reads the session's xplane.pb, the complete record
    assert seconds["env"] > 0 and seconds["inference"] > 0 and seconds["update"] > 0
    from_json = summarize_trace.summarize(traces[0])  # the Perfetto export: the same events, below its limit
    assert all(abs(from_json[phase] - seconds[phase]) < 1e-4 for phase in seconds)
    assert seconds["transfer"] == 0  # one fused program: nothing moves between devices
    calls = summarize_trace.summarize_calls(run_dir)
    assert [(c.index, c.first_step, c.last_step) for c in calls] == [(1, 1024, 2048), (2, 2048, 3072)]
    for call in calls:  # union per phase within the call: no phase can take longer than the call
        assert all(0 <= s <= call.wall_s + 1e-9 for s in call.phases.values())

    assert summarize_trace.main([str(run_dir)]) == 0
    table = capsys.readouterr().out
    assert "2 traced call(s), env steps 1,024 to 3,072" in table
    assert all(row in table for row in ("env", "inference", "update", "transfer", "other", "idle", "wall"))


@pytest.mark.slow
def test_off_policy_split_profile_shows_transfers(tmp_path):
    # SAC with the actor and the critic on two (fake CPU) devices: host-driven programs and copies.
    run_dir = tmp_path / "sac"
    assert main(["--algo", "sac", "--env", "Pendulum-v1", "--total-steps", "320", "--sac.learning-starts", "64",
                 "--sac.buffer-size", "1000", "--sac.batch-size", "64", "--log-interval", "64", "--eval-interval", "0",
                 "--eval-episodes", "1",
                 "--placement", "split", "--progress", "off", "--run-dir", str(run_dir),
                 "--profile", "--profile-start", "1", "--profile-calls", "1"]) == 0
    xplanes, traces = trace_files(run_dir)
    assert xplanes and traces
    seconds = summarize_trace.summarize(traces[0])
    assert seconds["env"] > 0 and seconds["inference"] > 0 and seconds["update"] > 0 and seconds["transfer"] > 0


@pytest.mark.slow
def test_a_trace_that_cannot_start_does_not_stop_training(tmp_path):
    jax.profiler.start_trace(str(tmp_path / "someone_elses_trace"))  # only one trace may run at a time
    try:
        run_dir = tmp_path / "run"
        assert main([*PPO_ARGS, "--run-dir", str(run_dir), "--profile", "--profile-start", "0", "--profile-calls", "1"]) == 0
    finally:
        jax.profiler.stop_trace()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 4096 and summary["final_eval_return_mean"] is not None
    assert "could not start" in summary["profile"]["error"] and summary["profile"]["calls"] == 0


@pytest.mark.parametrize("window, message", [
    (["--profile-start", "3", "--profile-calls", "2"],
     "--profile-start 3 + --profile-calls 2 does not fit in the run's 4 training calls"),
    (["--profile-calls", "0"], "--profile-calls must be at least 1"),
    (["--profile-start", "-1"], "--profile-start must be 0 or positive"),
])
def test_a_window_that_does_not_fit_is_refused_before_the_run(tmp_path, capsys, window, message):
    run_dir = tmp_path / "run"
    assert main([*PPO_ARGS, "--run-dir", str(run_dir), "--profile", *window]) == 2
    assert message in capsys.readouterr().err
    assert not run_dir.exists()


def test_a_window_that_does_not_fit_is_refused_before_calibration_measures(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main([*PPO_ARGS, "--run-dir", str(run_dir), "--calibrate", "--profile", "--profile-start", "3",
                 "--profile-calls", "2"]) == 2
    out, err = capsys.readouterr()
    assert "does not fit in the run's 4 training calls" in err and "calibration for" not in out + err
    assert not run_dir.exists()


def test_phases_are_read_from_op_name_paths():
    assert phase_of_op_name("jit(run)/while/body/closed_call/env/ffi_call") == "env"
    assert phase_of_op_name("jit(run)/while/body/update/transpose(jvp(inference))/dot_general") == "update"
    assert phase_of_op_name("jit(_lambda)/while/body/transpose(jvp(update))/mul") == "update"
    assert phase_of_op_name("jit(update)/dot_general") is None  # a program's name, not a scope
    assert phase_of_op_name("jit(run)/while/body/cond") is None


def test_hlo_phase_map_from_a_compiled_program():
    @jax.jit
    def program(x):
        with jax.named_scope("inference"):
            y = x @ x
        with jax.named_scope("update"):
            return jax.numpy.tanh(y @ y).sum()

    text = program.lower(jax.numpy.ones((8, 8))).compile().as_text()
    ops = instruction_phases(text)
    assert set(ops.values()) <= {"inference", "update"} and "update" in ops.values()
    # same-named programs that disagree on an instruction leave it out
    assert hlo_phase_map([("m", '%a = f32[] add(), metadata={op_name="jit(m)/env/add"}'),
                          ("m", '%a = f32[] add(), metadata={op_name="jit(m)/update/add"}\n'
                                '%b = f32[] mul(), metadata={op_name="jit(m)/update/mul"}')]) == {"m": {"b": "update"}}


def test_thread_segments_give_each_instant_to_the_innermost_event():
    # parent [0, 10) without a phase holds env [2, 4) and an unphased op [5, 6); update [12, 15) stands alone
    segments = summarize_trace.thread_segments([(0, 10, None), (2, 4, "env"), (5, 6, None), (12, 15, "update")])
    assert segments == [(0, 2, "other"), (2, 4, "env"), (4, 5, "other"), (5, 6, "other"), (6, 10, "other"),
                        (12, 15, "update")]
    # a phase inherited by an unphased child; a child overrunning its parent is clipped
    assert summarize_trace.thread_segments([(0, 4, "update"), (1, 6, None)]) == [(0, 1, "update"), (1, 4, "update")]
    assert summarize_trace.union_within([(0, 3), (2, 5), (7, 9)], (1, 8)) == 5  # [1, 5) and [7, 8)


def test_the_default_window_traces_what_fits_in_a_short_run(tmp_path):
    """Without --profile-start/--profile-calls a run too short for the default window (skip 1,
    trace 3) traces the calls it has; the explicit window of the test above is refused instead."""
    run_dir = tmp_path / "run"
    # 2048 steps at 1024 per call: 2 training calls, fewer than the default window's 4
    assert main(["--total-steps", "2048", "--log-interval", "1024", "--eval-interval", "0", "--eval-episodes", "1",
                 "--progress", "off", "--run-dir", str(run_dir), "--profile"]) == 0
    window = json.loads((run_dir / "summary.json").read_text())["profile"]
    assert window["first_call"] == 1 and window["calls"] == 1


def test_profile_window_rules():
    from jaxrl_fast.config.plan import ProfileWindow, WindowError, profile_window

    assert profile_window(None, None, 10) == ProfileWindow(1, 3)
    assert profile_window(None, None, 2) == ProfileWindow(1, 1)
    assert profile_window(None, None, 1) == ProfileWindow(0, 1)
    assert profile_window(0, None, 3) == ProfileWindow(0, 3)
    with pytest.raises(WindowError, match="does not fit"):
        profile_window(None, 3, 2)
