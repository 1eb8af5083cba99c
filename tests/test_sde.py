"""gSDE (generalized state-dependent exploration): the noise ops, and how PPO and SAC hold each env's
exploration matrix."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_fast.algos import make_algorithm
from jaxrl_fast.algos.ppo.config import PPOConfig
from jaxrl_fast.algos.ppo.learner import make_ppo
from jaxrl_fast.config.run import TrainConfig
from jaxrl_fast.env.envpool import probe_spec
from jaxrl_fast.ops import distributions as dist
from jaxrl_fast.types import Rollout, Transition
from support import make_config, train

FEATURES = jnp.array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])  # [B=2, F=3]
LOG_STD = jnp.log(jnp.array([[1.0], [0.5], [2.0]]))  # [F=3, A=1]


def test_sde_ops_match_hand_computed_values():
    # var = sum_f features_f^2 std_f^2: row 0: 1 + 4 * 0.25 = 2; row 1: 9 * 4 = 36
    expected_log_std = np.array([[0.5 * np.log(2.0)], [np.log(6.0)]])
    np.testing.assert_allclose(jax.jit(dist.sde_log_std)(FEATURES, LOG_STD), expected_log_std, rtol=1e-6)
    per_row = jax.vmap(dist.sde_log_std, (0, None))(FEATURES, LOG_STD)
    np.testing.assert_allclose(per_row, expected_log_std, rtol=1e-6)
    # noise = features @ (unit * std), one matrix per row
    unit = jnp.array([[[1.0], [-1.0], [5.0]], [[0.0], [0.0], [0.5]]])  # [B, F, A]
    expected_noise = np.array([[1.0 * 1.0 + 2.0 * -0.5], [3.0 * 0.5 * 2.0]])
    np.testing.assert_allclose(jax.jit(dist.sde_noise)(FEATURES, unit, LOG_STD), expected_noise, rtol=1e-6)
    # a shared [F, A] matrix broadcasts over the batch
    np.testing.assert_allclose(dist.sde_noise(FEATURES, unit[0], LOG_STD), [[0.0], [30.0]], rtol=1e-6)


def test_sde_noise_has_the_spread_its_log_std_says():
    units = jax.random.normal(jax.random.key(0), (20_000, 2, 3, 1))
    noise = jax.vmap(lambda u: dist.sde_noise(FEATURES, u, LOG_STD))(units)  # [draws, B, A]
    np.testing.assert_allclose(noise.std(0), jnp.exp(dist.sde_log_std(FEATURES, LOG_STD)), rtol=0.03)


def rollout_of(acts, obs):
    stack = lambda xs: jax.tree.map(lambda *a: jnp.stack(a), *xs)  # noqa: E731
    act = stack(acts)
    flags = jnp.zeros(act.action.shape[:2], bool)
    return Rollout(Transition(obs, act.action, jnp.ones(flags.shape), flags, flags, ~flags, act.extras), obs[-1])


def test_ppo_sde_holds_one_matrix_per_env_for_a_rollout():
    spec = dataclasses.replace(probe_spec("Pendulum-v1"), num_envs=3)
    algo = make_ppo(PPOConfig(use_sde=True, log_std_init=-1.0, num_steps=4, num_minibatches=1), spec, total_steps=1000)
    state = algo.init(jax.random.key(0))
    assert state.sde_matrix.shape == (3, 64, 1)  # [envs, last hidden features, actions]
    obs = jnp.tile(jnp.array([[0.3, -0.2, 0.5]]), (3, 1))  # the same observation in every env
    first, again = algo.act(state, obs, jax.random.key(1)), algo.act(state, obs, jax.random.key(2))
    np.testing.assert_array_equal(first.action, again.action)  # the matrix, not the step's key, is the noise
    assert len(np.unique(np.asarray(first.action))) == 3  # each env its own matrix
    # the stored log-probability is the Gaussian's whose spread the features give
    mean, features, log_std = make_ppo_policy_apply(algo, state, obs)
    expected = dist.gaussian_log_prob(mean, dist.sde_log_std(features, log_std), first.action)
    np.testing.assert_allclose(first.extras.log_prob, expected, rtol=1e-5)
    # an update draws the next rollout's matrices
    rollout = rollout_of([algo.act(state, obs, jax.random.key(t)) for t in range(4)], jnp.stack([obs] * 4))
    new_state, _ = algo.update(state, rollout, jax.random.key(3))
    assert not np.allclose(new_state.sde_matrix, state.sde_matrix)


def make_ppo_policy_apply(algo, state, obs):
    """The policy network's `(mean, features, log_std)`, rebuilt as make_ppo builds it."""
    from jaxrl_fast.networks.heads import make_policy_network
    spec = dataclasses.replace(probe_spec("Pendulum-v1"), num_envs=3)
    return make_policy_network(spec, PPOConfig(), log_std_init=-1.0, sde=True).apply(state.params.actor, obs)


def test_sac_sde_redraws_each_envs_matrix_every_sde_sample_freq_steps():
    config = TrainConfig(algo="sac", env="Pendulum-v1", num_envs=2)
    config = dataclasses.replace(config, sac=dataclasses.replace(config.sac, use_sde=True, sde_sample_freq=4))
    algo = make_algorithm(config, dataclasses.replace(probe_spec("Pendulum-v1"), num_envs=2))
    actor, critic = algo.init(jax.random.key(0))
    params = algo.acting_params(actor, critic)
    obs = jnp.tile(jnp.array([[0.3, -0.2, 0.5]]), (2, 1))

    def action(env_step, key):  # env_step counts both envs' steps, as the schedules pass it
        return np.asarray(algo.act(params, obs, jax.random.key(key), jnp.float32(env_step)).action)

    np.testing.assert_array_equal(action(0, 1), action(6, 2))  # per-env steps 0 and 3: one matrix
    assert not np.allclose(action(0, 1), action(8, 1))  # per-env step 4: the next
    assert not np.isclose(action(0, 1)[0], action(0, 1)[1])  # each env its own
    # evaluation acts on the mean; the actor update keeps the key and moves the policy
    deterministic = algo.act_deterministic(params, obs)
    np.testing.assert_array_equal(deterministic[0], deterministic[1])
    new_actor, _ = algo.update_actor(actor, critic.q, obs, jnp.ones(2), jax.random.key(3))
    np.testing.assert_array_equal(new_actor.sde_key, actor.sde_key)
    assert not all(np.allclose(a, b) for a, b in zip(jax.tree.leaves(new_actor.policy), jax.tree.leaves(actor.policy)))


def test_sde_off_leaves_the_state_as_before():
    """Without gSDE the state holds no exploration matrix or key (so no extra draws)."""
    spec = probe_spec("Pendulum-v1")
    state = make_ppo(PPOConfig(), spec, total_steps=1000).init(jax.random.key(0))
    assert state.sde_matrix == ()
    actor, _ = make_algorithm(TrainConfig(algo="sac", env="Pendulum-v1"), spec).init(jax.random.key(0))
    assert actor.sde_key == ()


def test_ppo_with_sde_climbs_mountain_car_continuous(tmp_path):
    """The preset (gSDE), seeds 0-2 as three agents of one process: the deterministic policies of at
    least two reach the flag (an evaluation at 90) within 30,000 steps, the preset's 20,000 and half.

    Why the margin holds on any machine (where last bits differ, a run is as another seed's): over
    seeds 0-47 (`experiments/learning_margins.py`, case ppo_sde_mcc) 46 agents reached 90 within the
    preset's 20,000 steps (on average by 7,759, standard deviation 4,472): one agent misses with a
    chance of about 4%, two of three with about 0.5%. The final evaluation is no statistic to test:
    18 of the 48 ended below 90 (the flag is reached, then often lost)."""
    config = make_config("MountainCarContinuous-v0", "ppo", seed=0, num_seeds=3, total_steps=30_000, target_return=90.0, run_dir=tmp_path / "run", progress="off")
    assert config.ppo.use_sde
    summary = train(config)
    reached = [step for step in summary["target_step"] if step is not None]
    assert len(reached) >= 2, summary["target_step"]
