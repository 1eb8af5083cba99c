import json
import os
import re
import subprocess
import sys

import pytest

from jaxrl_fast.cli.train import main


def run_cli(*args, cwd=None):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run(
        [sys.executable, "-m", "jaxrl_fast.train", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600
    )


@pytest.mark.slow
def test_cli_trains_and_writes_the_run_directory(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_cli("--total-steps", "6000", "--eval-interval", "2048", "--log-interval", "2048", "--run-dir", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    assert "step" in proc.stderr and "done:" in proc.stderr  # plain progress lines off a terminal
    assert "ppo on CartPole-v1: 5,888 steps, 8 envs, " in proc.stderr
    assert "placement single (acting cpu:0, actor cpu:0, critic cpu:0)" in proc.stderr  # words, not a dict
    recorded = json.loads((run_dir / "config.json").read_text())
    config = recorded["train_config"]  # the config once: the run's fields and the chosen algorithm's group
    assert config["env"] == "CartPole-v1" and config["algo"] == "ppo" and config["total_steps"] == 6000
    assert config["ppo"]["num_steps"] == 32  # from envs/CartPole-v1.toml
    assert not {"sac", "td3", "dqn"} & set(config) and not {"env", "algo", "ppo"} & set(recorded)
    assert recorded["num_threads"] >= 1 and recorded["placement"]["mode"] == "single"
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all("step" in line and "wall_s" in line for line in lines)
    steps = [line["step"] for line in lines]
    assert steps == sorted(steps)  # evaluation lines, written when they end, are put back in step order
    train_lines = [line for line in lines if "sps" in line]
    eval_lines = [line for line in lines if "eval_return_mean" in line]
    assert train_lines and all("train/policy_loss" in line and "train/value_loss" in line for line in train_lines)
    assert len(eval_lines) >= 2 and all({"eval_return_std", "eval_episodes"} <= set(line) for line in eval_lines)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert {"final_eval_return_mean", "steps", "wall_s", "sps", "update_frames_per_s"} <= set(summary)
    assert summary["steps"] == 5888  # whole iterations: 23 x 8 envs x 32 steps
    assert summary["loop"] == "fused"  # EnvPool's steps go through the forwarder: the cache keeps the whole loop
    assert list(run_dir.glob("events.out.tfevents.*"))


def test_help_shows_preset_resolved_defaults(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--env", "Pendulum-v1", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--algo", "--env", "--seed", "--total-steps", "--num-envs", "--run-dir", "--target-return",
                 "--eval-interval", "--eval-episodes", "--ppo.learning-rate"):
        assert flag in out


def help_text(capsys, *args):
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def flags_without_description(text):
    """Flags whose help entry is only `(default: ...)` (help printed wide: a flag, its description, one row)."""
    lines = text.splitlines()
    missing = []
    for line, following in zip(lines, lines[1:] + [""]):
        if not line.startswith("│ --"):  # a flag starts a row; a description continues indented
            continue
        columns = re.split(r" {2,}", line.strip("│ ").strip())
        description = columns[1] if len(columns) > 1 else following.strip("│ ")  # a long flag: on the next row
        if not description or description.startswith("(default") or following.startswith("│ --") and len(columns) == 1:
            missing.append(columns[0])
    return missing


@pytest.mark.parametrize("algo, env", [("ppo", "CartPole-v1"), ("dqn", "CartPole-v1"), ("sac", "Pendulum-v1"),
                                       ("td3", "Pendulum-v1")])
def test_help_lists_the_run_flags_and_only_the_chosen_algorithms_group_each_described(capsys, monkeypatch, algo, env):
    monkeypatch.setenv("COLUMNS", "80")
    assert len(help_text(capsys, "--algo", algo, "--env", env).splitlines()) < 230  # was 294 with every group; 205 for SAC with --env-kwargs and --sac.encoder, 210 with --scaled-reward-clip, 215-216 with --ppo.clip-value-loss and --sac.target-entropy-per-action, 221-225 with --policy-lag
    monkeypatch.setenv("COLUMNS", "400")
    text = help_text(capsys, "--algo", algo, "--env", env)
    assert text.splitlines()[0].startswith("usage: python -m jaxrl_fast.train ")
    assert "--algo sac --help" in text  # says how to see another algorithm's flags
    assert f"--{algo}.gamma" in text
    assert not [other for other in ("ppo", "dqn", "sac", "td3") if other != algo and f"--{other}." in text]
    assert flags_without_description(text) == []


def test_help_sentences_are_not_broken_mid_phrase(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # wide enough that tyro wraps nothing: every line break is ours
    text = help_text(capsys, "--algo", "sac", "--env", "Pendulum-v1")
    lines = text.splitlines()
    # an indented row after a row that is not a bare flag continues a description
    continued = [line.strip("│ ") for previous, line in zip(lines, lines[1:])
                 if line.startswith("│" + " " * 20) and not (previous.startswith("│ --") and "  " not in previous.strip("│ ").strip())]
    assert continued == []


def test_a_flag_of_another_algorithm_is_refused(tmp_path):
    proc = run_cli("--algo", "sac", "--env", "Pendulum-v1", "--ppo.gamma", "0.9", "--run-dir", str(tmp_path / "run"))
    assert proc.returncode != 0 and "--ppo.gamma" in proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env", "CartPole-v2"], "Did you mean: CartPole-v1"),
        (["--env", "D1Basic-v1"], "vector observations"),
        (["--algo", "a2c"], "--algo"),
        (["--ppo.num-minibatches", "3"], "--ppo.num-minibatches 3 does not divide"),
        (["--num-envs", "0"], "--num-envs must be positive"),
        (["--checkpoint-interval", "-1"], "--checkpoint-interval must be 0"),
        (["--keep-checkpoints", "0"], "--keep-checkpoints must be at least 1"),
        (["--algo", "sac", "--env", "Pendulum-v1", "--dispatch-steps", "-1"], "--dispatch-steps must be"),
        (["--video-interval", "-1"], "--video-interval must be 0"),
        (["--env", "Blackjack-v1", "--video-interval", "1"], "--video-interval: Blackjack-v1 cannot be rendered here"),
        (["--algo", "dqn", "--eval-policy", "sampled"], "dqn's policy is deterministic (sampled: ppo, sac)"),
        (["--eval-policy", "sampled", "--eval-epsilon", "0.05"], "give one (add --eval-epsilon 0"),
        (["--scaled-reward-clip", "10"], "clips the rewards --scale-rewards scales; add it"),
        (["--scale-rewards", "--scaled-reward-clip", "-1"], "--scaled-reward-clip must be 0 (no clip) or positive"),
    ],
)
def test_bad_input_gets_a_one_line_error_and_writes_nothing(tmp_path, capsys, args, message):
    run_dir = tmp_path / "run"
    assert main([*args, "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not run_dir.exists()


def test_run_dir_that_holds_a_run_or_is_not_writable_is_refused(tmp_path, capsys):
    used = tmp_path / "used"
    used.mkdir()
    (used / "config.json").write_text("{}")
    assert main(["--run-dir", str(used)]) == 2
    assert "already holds a run" in capsys.readouterr().err.replace("\n", " ")  # and points to --resume
    for left in ("metrics.jsonl", "checkpoints/512", "seed_1/checkpoints/512"):  # no config.json, a run's outputs
        lost = tmp_path / left.replace("/", "_")
        (lost / left).parent.mkdir(parents=True)
        (lost / left).mkdir() if left.endswith("512") else (lost / left).write_text('{"step": 512}\n')
        assert main(["--run-dir", str(lost)]) == 2
        assert f"holds another run's outputs ({left})" in capsys.readouterr().err
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert main(["--run-dir", str(a_file / "run")]) == 2
    assert "not writable" in capsys.readouterr().err
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user that can write anywhere")
        assert main(["--run-dir", str(locked / "run")]) == 2
        assert "not writable" in capsys.readouterr().err
    finally:
        locked.chmod(0o700)


def test_two_runs_never_share_a_directory(tmp_path, monkeypatch):
    from jaxrl_fast.outputs.run_dir import RunDirError, create_run_dir
    from jaxrl_fast.run.resolve import resolve
    from support import make_config

    monkeypatch.chdir(tmp_path)  # default directories go under ./runs
    frozen = "runs/CartPole-v1__ppo__0__20261129-120000"  # two runs started in one second share the default name
    monkeypatch.setattr("jaxrl_fast.run.resolve.default_run_dir", lambda env, algo, seed: type(tmp_path)(frozen))
    quiet = lambda text: None  # noqa: E731
    first, second = (resolve(make_config(run_dir=None, ppo={"learning_rate": rate}), log=quiet) for rate in (1e-3, 3e-4))
    assert (first.run_dir, second.run_dir) == (type(tmp_path)(frozen), type(tmp_path)(frozen + "-2"))
    (first.run_dir / "config.json").write_text("{}")  # the first run went on to write its config: a third moves on
    third = resolve(make_config(run_dir=None), log=quiet)
    assert third.run_dir == type(tmp_path)(frozen + "-3")
    for run in (first, second, third):
        run.lock.release()
    given = tmp_path / "given"
    given.mkdir()  # a directory the user made is theirs to give; one made by another run after the check is not
    assert create_run_dir(given) == given
    with pytest.raises(RunDirError, match="was created by another process after this run checked it"):
        create_run_dir(given, new=True)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--algo", "dqn", "--env", "Pendulum-v1"], "continuous actions"),
        (["--algo", "sac", "--env", "CartPole-v1"], "discrete actions"),
        # the action space is checked before sizes: no --total-steps makes SAC act in CartPole
        (["--algo", "sac", "--env", "CartPole-v1", "--total-steps", "5"], "discrete actions"),
        (["--algo", "sac", "--env", "Pendulum-v1", "--sac.buffer-size", "100", "--sac.batch-size", "256"],
         "smaller than one batch"),
        (["--algo", "sac", "--env", "Pendulum-v1", "--sac.buffer-size", "4000000000000"], "GiB"),
        (["--algo", "sac", "--env", "Pendulum-v1", "--normalize-observations"], "on-policy options"),
        (["--algo", "sac", "--env", "Pendulum-v1", "--sac.use-sde", "--sac.sde-sample-freq", "0"],
         "--sac.sde-sample-freq must be positive"),
        (["--algo", "ppo", "--env", "CartPole-v1", "--ppo.use-sde"], "--ppo.use-sde needs continuous actions"),
        (["--algo", "sac", "--env", "Pendulum-v1", "--sac.use-sde", "--schedule", "async", "--num-envs", "4",
          "--env-batch-size", "2"], "leave --env-batch-size at 0"),
        (["--algo", "sac", "--env", "Pendulum-v1", "--schedule", "async", "--num-envs", "4", "--env-batch-size", "8"],
         "--env-batch-size 8 must be between 0 (all envs) and --num-envs 4"),
        (["--algo", "sac", "--env", "Pendulum-v1", "--num-envs", "4", "--env-batch-size", "2"],
         "is for the --schedule async actors"),
        # whole iterations past --total-steps: the run would train 100,000 and 20,000 steps
        (["--algo", "dqn", "--schedule", "concurrent", "--dispatch-steps", "50000", "--total-steps", "2000"],
         "raise --total-steps to 100,000 or more"),
        (["--algo", "dqn", "--num-envs", "1", "--dqn.utd-ratio", "0.0001", "--total-steps", "2000"],
         "iterations of 10,000 steps (--num-envs 1 at --dqn.utd-ratio 0.0001)"),
        (["--algo", "sac", "--env", "Pendulum-v1", "--num-actors", "4"], "--num-actors 4: the --schedule async actors'"),
        (["--algo", "sac", "--env", "Pendulum-v1", "--ppo.learning-rate", "1e-3"],
         "--ppo.learning-rate: the run's algorithm is sac (give --algo ppo for its settings)"),
        # and for the others: PPO has one learner, and the flags read before the full parse
        (["--algo", "ppo", "--placement", "split"], "ppo has one learner"),
        (["--algo", "sac", "--total-steps", "2k"], "argument --total-steps: invalid int value: '2k'"),
        (["--algo", "sac", "--video-interval", "x"], "argument --video-interval: invalid int value: 'x'"),
    ],
)
def test_off_policy_bad_input_is_refused(tmp_path, capsys, args, message):
    run_dir = tmp_path / "run"
    assert main([*args, "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not run_dir.exists()


@pytest.mark.slow
def test_cli_trains_sac_with_split_placement_and_records_it(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_cli("--algo", "sac", "--env", "Pendulum-v1", "--placement", "split", "--total-steps", "1500",
                   "--sac.learning-starts", "500", "--eval-interval", "500", "--run-dir", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    config = json.loads((run_dir / "config.json").read_text())
    assert "sac on Pendulum-v1: 1,500 steps, 1 env, 1 EnvPool thread, " in proc.stderr  # singular for one
    assert "placement split (acting cpu:0, actor cpu:0, critic cpu:1, exchange fresh)" in proc.stderr
    assert config["placement"]["actor"] == "cpu:0" and config["placement"]["critic"] == "cpu:1"
    assert config["placement"]["exchange"] == "fresh"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 1500 and summary["final_eval_return_mean"] is not None


def test_async_ppo_is_refused_with_the_reason(tmp_path, capsys):
    assert main(["--schedule", "async", "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "--schedule async is for the off-policy algorithms" in err and "V-trace" in err


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_mujoco_off_policy_defaults_are_cleanrls_and_leave_out_the_on_policy_options(algo):
    from jaxrl_fast.config.checks import validate
    from jaxrl_fast.config.presets import resolve_defaults

    for env_id in ("HalfCheetah-v4", "Hopper-v4"):  # a task with its own file and one on the family's alone
        config = resolve_defaults(env_id, algo, "mujoco")
        assert not config.normalize_observations and not config.scale_rewards
        assert config.num_envs == 1 and getattr(config, algo).batch_size == 256  # CleanRL's, for every task
        validate(config)
        ppo = resolve_defaults(env_id, "ppo", "mujoco")
        assert ppo.normalize_observations and ppo.scale_rewards
    assert resolve_defaults("Hopper-v4", "ppo", "mujoco").num_envs == 8
    assert resolve_defaults("HalfCheetah-v4", "ppo", "mujoco").ppo.log_std_init == -2.0
