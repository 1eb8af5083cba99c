
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_fast.algos.ppo.config import PPOConfig
from jaxrl_fast.algos.ppo.learner import make_ppo
from jaxrl_fast.config.presets import resolve_defaults
from jaxrl_fast.config.run import TrainConfig
from jaxrl_fast.engine.acting import EnvOptions
from jaxrl_fast.engine.schedules.sync import make_sync_loop, split_call
from jaxrl_fast.env.envpool import make_xla_env
from jaxrl_fast.types import Rollout, Transition
from support import make_config, train


@pytest.mark.slow
def test_ppo_learns_cartpole(tmp_path):
    """The default preset and budget, seeds 0-2 as three agents of one process: at least two end solved.

    Why the margin holds on any machine: another machine's or JAX release's last bits send a run down
    another trajectory, as another seed would. Over seeds 0-47 (`experiments/learning_margins.py`,
    case ppo_cartpole) every agent reached 475 by 30k of the 100k steps and ended at 500, but 17 of
    the 398 evaluations after an agent first reached 475 fell below it: one agent ends below 475 with
    a chance of about 4%, two of three with about 0.5%."""
    config = make_config("CartPole-v1", "ppo", seed=0, num_seeds=3, run_dir=tmp_path / "run", progress="off")
    summary = train(config)
    assert summary["steps"] >= 99_000
    finals = summary["final_eval_return_mean"]
    assert sum(final >= 475.0 for final in finals) >= 2, finals
    assert summary["eval_failures"] == 0


@pytest.mark.slow
def test_target_return_stops_at_first_evaluation_that_reaches_it(tmp_path):
    config = make_config("CartPole-v1", "ppo", run_dir=tmp_path / "run", progress="off", target_return=150.0, log_interval=2048, eval_interval=2048)
    summary = train(config)
    assert summary["time_to_target_s"] > 0
    assert summary["steps"] < config.total_steps  # stopped early
    assert summary["target_step"] <= summary["steps"]


def make_loop(env_id, ppo, num_envs=4, iterations_per_call=3, **options):
    env = make_xla_env(env_id, num_envs=num_envs, num_threads=1, seed=0)
    algo = make_ppo(ppo, env.spec, total_steps=10_000)
    opts = EnvOptions(options.get("normalize", False), options.get("scale", False), 0.99)
    loop = make_sync_loop(algo, env, opts, iterations_per_call, eval_every_iterations=0, on_eval=None)
    state = jax.jit(loop.init)(jax.random.key(0), env.handle, env.reset())
    return env, algo, loop, state


def test_training_iteration_compiles_once():
    _, _, loop, state = make_loop("CartPole-v1", PPOConfig(num_steps=16, num_minibatches=2, update_epochs=2))
    state, _ = loop.run(state, jnp.int32(3))
    state, metrics = loop.run(state, jnp.int32(1))  # a shorter last call reuses the program
    state, _ = loop.run(state, jnp.int32(3))
    assert loop.run._cache_size() == 1
    assert int(metrics.iterations) == 1
    assert int(state.iteration) == 7


def test_split_iterations_are_the_fused_loops():
    """EnvPool runs dispatch each iteration as a rollout and an update program (so that the update
    is served by the persistent cache): same envs and seed, they reach the fused loop's state."""
    ppo = PPOConfig(num_steps=32, num_minibatches=4, update_epochs=2)
    _, _, loop, fused = make_loop("CartPole-v1", ppo, normalize=True, scale=True)
    _, _, twin, split = make_loop("CartPole-v1", ppo, normalize=True, scale=True)  # its own pool
    fused, metrics = loop.run(fused, jnp.int32(3))
    split, split_metrics, episodes = split_call(twin.collect_batch, twin.learn_batch, split, 3)
    assert int(split.iteration) == int(fused.iteration) == 3
    close = lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)  # noqa: E731
    jax.tree.map(close, jax.device_get(split.algo.params), jax.device_get(fused.algo.params))
    jax.tree.map(close, split.env.obs_moments, fused.env.obs_moments)
    assert set(split_metrics) == set(metrics.train)
    for name, value in split_metrics.items():
        close(value, metrics.train[name])
    assert int(episodes.count) == int(metrics.episodes.count) > 0
    close(episodes.return_sum, metrics.episodes.return_sum)


def test_continuous_ppo_with_normalization_runs_and_stays_finite():
    ppo = PPOConfig(num_steps=32, num_minibatches=4, update_epochs=2)
    env, _, loop, state = make_loop("Pendulum-v1", ppo, normalize=True, scale=True)
    state, metrics = loop.run(state, jnp.int32(3))
    values = jax.device_get(metrics.train)
    assert all(np.isfinite(v) for v in values.values())
    assert float(state.env.obs_moments.count) > 3 * 32 * 4  # observation statistics are run state
    assert float(state.env.reward_scale.moments.var) != 1.0


def test_log_std_init_sets_the_initial_exploration_noise():
    env = make_xla_env("Pendulum-v1", num_envs=1, num_threads=1, seed=0)
    mean_log_prob = {}
    for log_std in (0.0, -2.0):
        algo = make_ppo(PPOConfig(log_std_init=log_std), env.spec, total_steps=1000)
        state = algo.init(jax.random.key(0))
        obs = jnp.zeros((4096, *env.spec.obs_shape))  # one observation: the actions' spread is the noise alone
        mean_log_prob[log_std] = float(jnp.mean(algo.act(state, obs, jax.random.key(1)).extras.log_prob))
    # the log-density of a 1-d Gaussian's own samples averages -log(sigma) - (1 + log 2 pi) / 2
    # (4,096 samples: standard error 0.011)
    assert mean_log_prob[0.0] == pytest.approx(-0.5 * (1 + np.log(2 * np.pi)), abs=0.05)
    assert mean_log_prob[-2.0] - mean_log_prob[0.0] == pytest.approx(2.0, abs=1e-4)  # same key, same draws


def test_reset_steps_do_not_contribute_to_the_update():
    """Changing everything about transitions marked invalid leaves the update unchanged."""
    ppo = PPOConfig(num_steps=8, num_minibatches=1, update_epochs=1, normalize_advantages=True)
    env = make_xla_env("CartPole-v1", num_envs=2, num_threads=1, seed=0)
    algo = make_ppo(ppo, env.spec, total_steps=1000)
    state = algo.init(jax.random.key(0))
    key = jax.random.key(1)
    obs = jax.random.normal(key, (8, 2, 4))
    acts = [algo.act(state, obs[t], jax.random.key(t)) for t in range(8)]
    stack = lambda xs: jax.tree.map(lambda *a: jnp.stack(a), *xs)  # noqa: E731
    act = stack(acts)
    valid = jnp.ones((8, 2), bool).at[3, 0].set(False).at[6, 1].set(False)
    done = jnp.zeros((8, 2), bool).at[2, 0].set(True).at[5, 1].set(True)
    base = Transition(obs, act.action, jnp.ones((8, 2)), done, jnp.zeros((8, 2), bool), valid, act.extras)
    noisy = base._replace(
        obs=jnp.where(valid[..., None], obs, 100.0),
        reward=jnp.where(valid, base.reward, -50.0),
        action=jnp.where(valid, base.action, 1 - base.action),
    )
    last = jnp.zeros((2, 4))
    s1, _ = algo.update(state, Rollout(base, last), jax.random.key(2))
    s2, _ = algo.update(state, Rollout(noisy, last), jax.random.key(2))
    # values at the reset steps bootstrap the truncated/terminated step before them only through
    # next_value, which termination zeroes here; nothing else of those steps may matter
    chex.assert_trees_all_close(s1.params, s2.params, rtol=1e-5, atol=1e-6)


def test_the_clipped_value_loss_changes_only_the_critics_update_and_only_when_it_clips():
    """One update, whole: with a clip too wide to bind, clipping the value loss changes nothing; with
    a tight one, only the critic moves otherwise (the policy's loss does not see V's error)."""
    env = make_xla_env("CartPole-v1", num_envs=2, num_threads=1, seed=0)
    obs = jax.random.normal(jax.random.key(1), (8, 2, 4))

    def updated(clip_coef, clip_value_loss):
        ppo = PPOConfig(num_steps=8, num_minibatches=2, update_epochs=2, clip_coef=clip_coef,
                        clip_value_loss=clip_value_loss)
        algo = make_ppo(ppo, env.spec, total_steps=1000)
        state = algo.init(jax.random.key(0))
        act = jax.tree.map(lambda *a: jnp.stack(a), *[algo.act(state, obs[t], jax.random.key(t)) for t in range(8)])
        rewards = 10.0 * jnp.ones((8, 2))  # targets far from the fresh critic's values: the clip binds
        rollout = Rollout(Transition(obs, act.action, rewards, jnp.zeros((8, 2), bool), jnp.zeros((8, 2), bool),
                                     jnp.ones((8, 2), bool), act.extras), jnp.zeros((2, 4)))
        return jax.jit(algo.update)(state, rollout, jax.random.key(2))[0].params

    wide_off, wide_on = updated(1e6, False), updated(1e6, True)
    chex.assert_trees_all_close(wide_off, wide_on, rtol=1e-6, atol=1e-7)
    tight_off, tight_on = updated(0.01, False), updated(0.01, True)
    chex.assert_trees_all_close(tight_off.actor, tight_on.actor, rtol=1e-6, atol=1e-7)
    moved = jax.tree.leaves(jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), tight_off.critic, tight_on.critic))
    assert max(moved) > 1e-4


def test_presets_resolve_for_every_shipped_file():
    from jaxrl_fast.config.presets import available_presets
    from jaxrl_fast.env.ids import env_family

    names = available_presets()
    assert "CartPole-v1" in names
    for env_id in names:
        config = resolve_defaults(env_id, "ppo", env_family(env_id))
        assert isinstance(config, TrainConfig) and config.env == env_id


def test_the_zoo_ppo_presets_keep_sb3s_constant_rate_where_it_was_measured():
    from jaxrl_fast.env.ids import env_family

    # level or better over seeds 0-7 (docs/benchmark.md#the-zoo-ppo-presets-at-a-constant-rate)
    constant = ("Acrobot-v1", "MountainCar-v0", "Pendulum-v1", "LunarLander-v2", "LunarLanderContinuous-v2",
                "MiniGrid-DoorKey-5x5-v0", "MiniGrid-Empty-Random-5x5-v0", "MiniGrid-Unlock-v0",
                "MiniGrid-KeyCorridorS3R1-v0")
    for env_id in constant:
        assert not resolve_defaults(env_id, "ppo", env_family(env_id)).ppo.anneal_lr, env_id
    for env_id in ("BipedalWalker-v3", "CartPole-v1"):  # not measured constant; this project's own setting
        assert resolve_defaults(env_id, "ppo", env_family(env_id)).ppo.anneal_lr, env_id


@pytest.mark.slow
def test_minigrid_is_learned_from_its_flattened_dict_observations(tmp_path):
    # MiniGrid-Empty-5x5-v0 pays 1 - 0.9 * steps / 100 at the goal: 0.955 for the shortest path (5
    # steps), about 0.3 for a random walk that reaches it within the limit. The zoo's PPO setting
    # reached 0.955 on seeds 0, 1 and 2 with the rate annealed (PQN, with no published MiniGrid
    # setting, on 2 of 3: docs); the preset keeps SB3's constant rate since 2026-11-28. One seed in
    # three or four can miss (seed 0 alone ended at 0.51 on a machine whose CPU rounds the programs'
    # last bits otherwise; one of three agents at 0.0 on JAX 0.12: docs/env-adapter.md): the median
    # of three agents
    config = make_config("MiniGrid-Empty-5x5-v0", "ppo", run_dir=tmp_path / "run", progress="off", num_seeds=3)
    final = train(config)["final_eval_return"]
    assert final["median"] >= 0.8, final  # a random walk: about 0.3
