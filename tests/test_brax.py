"""The JAX-native backend's physics family: Brax's envs (`brax:<name>`) stepped inside the jitted
loop, through the same protocol as gymnax's (tests/test_jax_envs.py holds what both share)."""

import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("brax", reason="the brax extra (pip install -e \".[brax]\")")

import jaxrl_fast  # noqa: E402
from jaxrl_fast.cli.train import main  # noqa: E402
from jaxrl_fast.env.envpool import make_pool, make_xla_env, probe_spec  # noqa: E402
from jaxrl_fast.run.api import preset_config  # noqa: E402
from support import rollout  # noqa: E402

PENDULUM = "brax:inverted_pendulum"


@pytest.mark.slow
def test_episodes_end_on_their_final_observation_truncated_at_their_length_or_terminated():
    env = make_xla_env(PENDULUM, num_envs=2, num_threads=1, seed=0, episode_length=10)
    assert env.spec.family == "brax" and env.spec.max_episode_steps == 10
    assert env.spec.action_shape == (1,) and env.spec.action_low == (-1.0,) and env.spec.obs_shape == (4,)
    # env 0 is not pushed (its pole stays up for 10 steps); env 1 is pushed past 0.2 rad within a few
    actions = np.zeros((25, 2, 1), np.float32)
    actions[:, 1] = 1.0
    out, _ = rollout(env, jnp.asarray(actions))
    step, reset_step, _ = out
    assert list(np.flatnonzero(step.truncated[:, 0])) == [9, 20] and not step.terminated[:, 0].any()
    assert reset_step[10, 0] and step.reward[10, 0] == 0.0 and step.elapsed_step[10, 0] == 0
    assert not np.allclose(step.obs[9, 0], step.obs[10, 0])  # the final observation, then the new episode's first
    end = int(np.flatnonzero(step.terminated[:, 1])[0])
    assert abs(step.obs[end, 1, 1]) > 0.2 and reset_step[end + 1, 1]  # the fallen angle, then a reset
    assert abs(step.obs[end + 1, 1, 1]) < 0.02  # the next episode starts near upright
    # the evaluator's host pool starts the same envs (it steps them through the same function,
    # checked against the jitted loop for gymnax's in tests/test_jax_envs.py)
    np.testing.assert_array_equal(make_pool(PENDULUM, num_envs=2, num_threads=1, seed=0).reset()[0], env.reset())


def test_brax_tasks_take_the_brax_family_presets():
    ppo = preset_config("brax:halfcheetah", "ppo")
    assert ppo.num_envs == 2048 and ppo.ppo.num_steps == 160 and ppo.ppo.gamma == 0.95  # Brax's own setting
    assert not ppo.ppo.anneal_lr and ppo.ppo.clip_coef == 0.3 and ppo.ppo.activation == "silu"
    sac = preset_config("brax:halfcheetah", "sac")
    assert sac.num_envs == 1 and sac.sac.learning_starts == 5_000
    assert probe_spec("brax:halfcheetah").obs_shape == (17,)


@pytest.mark.slow
def test_ppo_balances_brax_inverted_pendulum(tmp_path):
    """Three agents, 61,440 steps each, on the `[brax.ppo]` preset's rate schedule, clip and
    activation: at least two end balanced for most of the 1,000 steps. Seeds 0-2 end at 1,000 (this
    test's run, 2026-11-28); 16 agents in one run (`experiments/learning_margins.py --cases ppo_brax_pendulum`,
    `experiments/results/learning_margins_brax_preset.json`; a run of 16 batches its agents' maths
    differently from a run of 3, so its seeds 0-2 are other trajectories) ended 15 at 1,000 and one at
    179.6; with the preset before (an annealed rate, clip 0.2, tanh) 13 at 1,000, and 900.7, 641.7, 269.2."""
    result = jaxrl_fast.train(env=PENDULUM, algo="ppo", num_envs=16, num_seeds=3, total_steps=61_440,
                              eval_interval=20_480, progress="off", run_dir=tmp_path / "run",
                              ppo={"num_steps": 64, "num_minibatches": 4, "update_epochs": 10, "gamma": 0.99,
                                   "learning_rate": 1e-3})
    finals = result.summary["final_eval_return_mean"]
    assert sum(final >= 800.0 for final in finals) >= 2, finals
    policy = jaxrl_fast.load_policy(tmp_path / "run" / "seed_0")
    assert policy(np.zeros((3, 4), np.float32)).shape == (3, 1)


@pytest.mark.parametrize("args, message", [
    (["--env", "brax:HalfCheetah"], "not one of brax's environments. Did you mean: brax:halfcheetah"),
    (["--env", "brax:halfcheetah", "--env-kwargs", "backnd=mjx"], "has no argument 'backnd'. Did you mean: backend"),
    (["--env", "brax:halfcheetah", "--env-kwargs", "backend=mujoco"], "Brax's physics backends are positional, generalized"),
    (["--env", "brax:swimmer", "--env-kwargs", "backend=positional"], "Brax's swimmer cannot be made with backend='positional'"),
    (["--env", "brax:halfcheetah", "--data-parallel"], "--data-parallel shards EnvPool's pools"),
])
def test_bad_brax_input_is_refused_in_one_line(tmp_path, capsys, args, message):
    assert main(["--algo", "ppo", "--run-dir", str(tmp_path / "run"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "run").exists()


def test_an_env_without_the_default_physics_backend_is_built_on_its_own():
    """Brax's swimmer takes only its own `generalized` backend: built on it when none is given."""
    spec = probe_spec("brax:swimmer")
    assert spec.obs_shape[0] > 0 and spec.action_shape == (2,)
