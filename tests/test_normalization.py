import jax
import numpy as np

from jaxrl_fast.ops.normalization import init_moments, init_reward_scale, normalize, scale_rewards, update_moments


def test_running_moments_match_numpy_over_batches():
    rng = np.random.default_rng(1)
    data = rng.normal(3.0, 2.0, size=(5, 64, 3)).astype(np.float32)
    moments = init_moments((3,))
    update = jax.jit(update_moments)
    for batch in data:
        moments = update(moments, batch)
    flat = data.reshape(-1, 3)
    np.testing.assert_allclose(moments.mean, flat.mean(0), rtol=1e-3)
    np.testing.assert_allclose(moments.var, flat.var(0), rtol=1e-3)
    z = normalize(moments, flat)
    np.testing.assert_allclose(z.mean(0), 0.0, atol=1e-3)


def test_weights_leave_rows_out():
    moments = update_moments(init_moments(()), np.array([1.0, 2.0, 100.0], np.float32), np.array([1, 1, 0]))
    np.testing.assert_allclose(moments.mean, 1.5, rtol=1e-3)


def test_reward_scale_skips_reset_steps_and_restarts_returns_at_episode_end():
    scale = init_reward_scale(2)
    reward = np.array([1.0, 5.0], np.float32)
    scale, _ = scale_rewards(scale, reward, done=np.array([True, False]), valid=np.array([True, False]), gamma=0.9)
    np.testing.assert_allclose(scale.discounted_return, [0.0, 0.0])  # env 0 ended, env 1 was a reset step
    scale, scaled = scale_rewards(scale, reward, done=np.array([False, False]), valid=np.array([True, True]), gamma=0.9)
    np.testing.assert_allclose(scale.discounted_return, [1.0, 5.0])
    np.testing.assert_allclose(scaled, reward / np.sqrt(scale.moments.var + 1e-8), rtol=1e-6)


def test_scaled_rewards_are_clipped_when_asked_as_sb3_and_cleanrl_clip_them():
    # a first step of equal rewards: the return's deviation is still ~0, so -1 alone scales to ~-280
    n = 16
    first = (init_reward_scale(n), -np.ones(n, np.float32), np.zeros(n, bool), np.ones(n, bool), 0.99)
    scale, unclipped = scale_rewards(*first)
    assert (unclipped < -100).all()
    clipped_scale, clipped = scale_rewards(*first, clip=10.0)
    np.testing.assert_array_equal(clipped, np.full(n, -10.0, np.float32))
    jax.tree.map(np.testing.assert_array_equal, clipped_scale, scale)  # the statistics see the raw reward
