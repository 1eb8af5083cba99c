"""The rollout: episode statistics computed after the loop, per-step keys, and `collect` itself."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_fast.engine.acting import EnvOptions, env_options, init_env_carry, make_collect, step_keys
from jaxrl_fast.env.envpool import make_xla_env
from jaxrl_fast.env.episodes import EpisodeState, init_episode_state, track_episodes, track_rollout_episodes
from jaxrl_fast.types import Act, Step


def stepwise(state: EpisodeState, score, terminated, truncated, game_over=None):
    """The reference: `track_episodes` scanned step by step; totals summed, and each step's validity.
    Without `game_over`, every episode is a whole game (as outside Atari)."""
    game_over = terminated | truncated if game_over is None else game_over

    def body(s, x):
        r, term, trunc, over = x
        valid = ~s.reset_step
        s, finished = track_episodes(s, Step(None, jnp.sign(r), term, trunc, None, r, over))
        return s, (finished, valid)

    state, (finished, valid) = jax.lax.scan(body, state, (score, terminated, truncated, game_over))
    return state, jax.tree.map(lambda x: x.sum(0), finished), valid


def envpool_like_flags(rng: np.random.Generator, reset_step: np.ndarray, steps: int):
    """Random end flags with EnvPool's auto-reset: the step after an end is a reset step (reward 0, no
    end). With episodic lives, some terminations are lost lives and the game goes on after the reset
    step; the others, and truncations, end the game."""
    num_envs = reset_step.shape[0]
    score = rng.normal(size=(steps, num_envs)).astype(np.float32)
    terminated = rng.random((steps, num_envs)) < 0.15
    truncated = (rng.random((steps, num_envs)) < 0.05) & ~terminated
    game_over = truncated | (terminated & (rng.random((steps, num_envs)) < 0.4))
    valid = np.zeros((steps, num_envs), bool)
    previous_end = reset_step.copy()
    for t in range(steps):
        valid[t] = ~previous_end
        terminated[t] &= valid[t]
        truncated[t] &= valid[t]
        game_over[t] &= valid[t]
        score[t] = np.where(valid[t], score[t], 0.0)
        previous_end = terminated[t] | truncated[t]
    return score, terminated, truncated, game_over, valid


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rollout_episodes_match_stepwise_tracking(seed):
    rng = np.random.default_rng(seed)
    num_envs, steps = 6, 40
    state = EpisodeState(
        episode_return=jnp.asarray(rng.normal(size=num_envs) * 10, jnp.float32),
        episode_length=jnp.asarray(rng.integers(0, 50, num_envs), jnp.int32),
        reset_step=jnp.asarray(rng.random(num_envs) < 0.3),
    )
    state = state._replace(episode_return=jnp.where(state.reset_step, 0.0, state.episode_return),
                           episode_length=jnp.where(state.reset_step, 0, state.episode_length))
    score, terminated, truncated, game_over, valid = envpool_like_flags(rng, np.asarray(state.reset_step), steps)
    assert game_over.any() and (terminated & ~game_over).any() and (~valid).any()

    want_state, want, want_valid = stepwise(state, score, terminated, truncated, game_over)
    last_reset_step = valid[-1] & (terminated[-1] | truncated[-1])  # the step after the rollout resets these envs
    got_state, got = jax.jit(track_rollout_episodes)(state, score, game_over, valid, last_reset_step)

    assert int(got.count) == int(want.count) > 0
    assert int(got.length_sum) == int(want.length_sum)
    np.testing.assert_allclose(got.return_sum, want.return_sum, rtol=1e-5)
    np.testing.assert_allclose(got_state.episode_return, want_state.episode_return, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got_state.episode_length, want_state.episode_length)
    np.testing.assert_array_equal(got_state.reset_step, want_state.reset_step)
    np.testing.assert_array_equal(valid, want_valid)  # the generator follows EnvPool's rule


def test_step_keys_are_distinct_and_sample_the_right_distribution():
    keys = step_keys(jax.random.key(0), 4000)
    assert keys.shape == (4000,)
    logits = jnp.log(jnp.asarray([0.2, 0.8]))
    draws = jax.vmap(lambda k: jax.random.categorical(k, logits, shape=(8,)))(keys)  # [4000, 8]
    assert 0.78 < float(draws.mean()) < 0.82  # 32,000 draws: std of the mean about 0.002
    uniforms = np.asarray(jax.vmap(lambda k: jax.random.uniform(k, (8,)))(keys))
    assert len(np.unique(uniforms)) > 31_900  # every step draws afresh (float32 has 2**23 values in [0.5, 1))


def test_collect_statistics_match_stepwise_tracking_on_cartpole():
    env = make_xla_env("CartPole-v1", num_envs=4, num_threads=1, seed=3)
    options = EnvOptions(normalize_observations=False, scale_rewards=False, gamma=0.99)
    collect = make_collect(env, options, length=60)

    def policy(obs, key):
        action = jax.random.randint(key, (obs.shape[0],), 0, 2)
        return Act(action, action, ())

    carry = init_env_carry(env, options, env.handle, env.reset())
    run = jax.jit(lambda c, k: collect(c, policy, k))
    episodes = init_episode_state(4)
    for i in range(3):  # CartPole episodes under random actions last about 20 steps: many end in 180 steps
        carry, tr, finished = run(carry, jax.random.key(i))
        assert tr.obs.shape == (60, 4, 4) and tr.valid.shape == (60, 4)
        episodes, want, want_valid = stepwise(episodes, tr.reward, tr.terminated, tr.truncated)
        np.testing.assert_array_equal(tr.valid, want_valid)
        assert int(finished.count) == int(want.count) > 0
        assert int(finished.length_sum) == int(want.length_sum)
        np.testing.assert_allclose(finished.return_sum, want.return_sum, rtol=1e-6)
        np.testing.assert_array_equal(carry.episodes.episode_length, episodes.episode_length)
        np.testing.assert_array_equal(carry.episodes.reset_step, episodes.reset_step)
    env.pool.close()


def test_scaled_rewards_are_clipped_in_the_rollout_only_when_asked():
    rewards = []
    for clip in (0.0, 2.0):
        env = make_xla_env("CartPole-v1", num_envs=4, num_threads=1, seed=3)
        options = EnvOptions(normalize_observations=False, scale_rewards=True, gamma=0.99, scaled_reward_clip=clip)
        collect = make_collect(env, options, length=20)

        def policy(obs, key):
            action = jax.random.randint(key, (obs.shape[0],), 0, 2)
            return Act(action, action, ())

        carry = init_env_carry(env, options, env.handle, env.reset())
        _, tr, _ = jax.jit(lambda c, k: collect(c, policy, k))(carry, jax.random.key(0))  # noqa: B023
        rewards.append(np.asarray(tr.reward)[np.asarray(tr.valid)])
        env.pool.close()
    unclipped, clipped = rewards
    assert unclipped.max() > 100  # CartPole's first rewards of 1, scaled while the return's deviation is ~0
    np.testing.assert_array_equal(clipped, np.minimum(unclipped, 2.0))  # the statistics are the same: only the clip differs


def test_a_runs_scaled_reward_clip_reaches_its_rollout_and_no_preset_sets_it():
    from support import make_config

    for env, algo in [("MountainCar-v0", "ppo"), ("MiniGrid-KeyCorridorS3R1-v0", "ppo"), ("HalfCheetah-v4", "ppo"),
                      ("BipedalWalker-v3", "ppo"), ("StarpilotEasy-v0", "pqn")]:
        preset = make_config(env, algo)
        assert preset.scale_rewards and preset.scaled_reward_clip == 0 and env_options(preset).scaled_reward_clip == 0
    assert env_options(make_config("MountainCar-v0", "ppo", scaled_reward_clip=10.0)).scaled_reward_clip == 10.0
