"""The Python API: `jaxrl_fast.train` builds the config the CLI would, refuses what the CLI refuses
with the same one-line message (as `jaxrl_fast.ConfigError`, before anything is written), trains,
and returns the run's summary, directory and policy."""

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

import jaxrl_fast
from jaxrl_fast.cli.train import main, parse_args
from jaxrl_fast.run.api import requested_config
from support import checkpoint_steps, lines_of


def test_keywords_build_the_config_the_flags_build():
    flags = ["--env", "Pendulum-v1", "--algo", "sac", "--total-steps", "3000", "--sac.batch-size", "64",
             "--sac.hidden-sizes", "32", "32", "--env-kwargs", "max_episode_steps=100", "--target-return", "-300"]
    keywords = dict(env="Pendulum-v1", algo="sac", total_steps=3000, sac={"batch_size": 64, "hidden_sizes": [32, 32]},
                    env_kwargs={"max_episode_steps": 100}, target_return=-300)
    assert requested_config(None, None, keywords) == parse_args(flags)
    one_string = dict(keywords, env_kwargs="max_episode_steps=100")  # as one --env-kwargs flag takes it
    assert requested_config(None, None, one_string) == parse_args(flags)
    with pytest.raises(jaxrl_fast.ConfigError, match="first argument is a TrainConfig"):
        requested_config({"env": "CartPole-v1"}, None, {})
    # a config given whole is taken as it is, with keywords over it
    config = parse_args(flags)
    assert requested_config(config, None, {"seed": 3}) == dataclasses.replace(config, seed=3)


@pytest.mark.parametrize("keywords, flags", [
    (dict(algo="sac", env="CartPole-v1"), ["--algo", "sac", "--env", "CartPole-v1"]),
    (dict(env="CartPol-v1"), ["--env", "CartPol-v1"]),
    (dict(td3={"policy_noise": float("nan")}, algo="td3", env="Pendulum-v1"),
     ["--algo", "td3", "--env", "Pendulum-v1", "--td3.policy-noise", "nan"]),
    (dict(ppo={"num_minibatches": 3}), ["--ppo.num-minibatches", "3"]),
    (dict(total_steps=0), ["--total-steps", "0"]),
])
def test_bad_input_raises_the_clis_message_and_writes_nothing(tmp_path, capsys, keywords, flags):
    run_dir = tmp_path / "run"
    with pytest.raises(jaxrl_fast.ConfigError) as raised:
        jaxrl_fast.train(run_dir=run_dir, **keywords)
    assert main([*flags, "--run-dir", str(run_dir)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {raised.value}"
    assert not run_dir.exists()


@pytest.mark.parametrize("keywords, message", [
    (dict(total_step=10), "total_step: no such setting. Did you mean: total_steps?"),
    (dict(total_steps="many"), "--total-steps takes int, got 'many'"),
    (dict(schedule="later"), "--schedule takes one of 'auto', 'sync', 'concurrent', 'async', got 'later'"),
    (dict(sac={"tau": 0.1}), "sac=...: the run's algorithm is ppo"),
    (dict(ppo={"learning_rat": 0.1}), "--ppo.learning-rat: ppo has no such setting. Did you mean: learning_rate?"),
    (dict(ppo=0.1), "ppo=...: give a dict of its settings"),
    (dict(env=None), "env must be a string (an id, as --env takes), got None"),
    (dict(algo=3), "algo must be a string"),
])
def test_keywords_the_cli_has_no_flag_for_are_refused_by_name(tmp_path, keywords, message):
    with pytest.raises(jaxrl_fast.ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        jaxrl_fast.train(run_dir=tmp_path / "run", **keywords)
    assert not (tmp_path / "run").exists()


def test_a_run_through_the_api_returns_its_summary_directory_and_policy(ppo_2048):
    """The shared run (conftest.py) was trained through `jaxrl_fast.train`; its result, again."""
    result = jaxrl_fast.train(resume=ppo_2048.run_dir)  # a finished run: nothing more to train
    assert result.run_dir == ppo_2048.run_dir
    assert result.summary == json.loads((ppo_2048.run_dir / "summary.json").read_text())
    assert result.summary["steps"] == 2048
    assert result.policy(np.zeros(4, np.float32)) in (0, 1)
    assert result.policy.step == 2048 == result.policies[0].step


def test_resume_through_the_api_continues_the_runs_clock(ppo_2048):
    before = lines_of(ppo_2048.run_dir)
    result = jaxrl_fast.train(resume=ppo_2048.run_dir, total_steps=2560, progress="off")
    assert result.summary["steps"] == 2560 and checkpoint_steps(ppo_2048.run_dir) == [2048, 2560]
    after = [line for line in lines_of(ppo_2048.run_dir) if line["step"] > 2048]
    # wall_s goes on from where the run stopped, never back to this process's start
    assert min(line["wall_s"] for line in after) >= max(line["wall_s"] for line in before)
    assert result.summary["wall_s"] >= max(line["wall_s"] for line in before)
    with pytest.raises(jaxrl_fast.ConfigError, match="only total_steps, progress, compile_cache may be given"):
        jaxrl_fast.train(resume=ppo_2048.run_dir, seed=4)


def test_the_function_is_not_shadowed_by_the_command_module():
    """`jaxrl_fast.train` is the function even after the command's code is imported, and the
    `python -m` module refuses an import that would shadow it."""
    import jaxrl_fast.cli.train  # noqa: F401

    assert callable(jaxrl_fast.train) and jaxrl_fast.train.__module__ == "jaxrl_fast.run.api"
    proc = subprocess.run([sys.executable, "-c", "import jaxrl_fast.train"], capture_output=True, text=True)
    assert proc.returncode == 1 and "jaxrl_fast.cli.train" in proc.stderr
