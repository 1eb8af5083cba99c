"""Running statistics for observation normalization and reward scaling, as (init, update) pairs.

Their state is part of the run state: it is carried through the jitted loop, handed to the
evaluator with the policy, and checkpointed with everything else.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class RunningMoments(NamedTuple):
    """Mean and variance of a stream of `[..., *shape]` batches (Chan et al. parallel update)."""

    mean: jax.Array  # float32 [*shape]
    var: jax.Array  # float32 [*shape]
    count: jax.Array  # float32 []


def init_moments(shape: tuple[int, ...]) -> RunningMoments:
    return RunningMoments(jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32), jnp.asarray(1e-4, jnp.float32))


def update_moments(moments: RunningMoments, batch: jax.Array, weight: jax.Array | None = None,
                   axis_name: str | None = None) -> RunningMoments:
    """Fold a batch `[N, *shape]` into the moments; `weight [N]` (0/1) leaves rows out. With
    `axis_name` (inside `shard_map`), the batch is every shard's rows: the moments stay equal on all."""
    w = jnp.ones(batch.shape[:1], jnp.float32) if weight is None else weight.astype(jnp.float32)
    total_over = (lambda x: x) if axis_name is None else (lambda x: jax.lax.psum(x, axis_name))  # noqa: E731
    rows = w.reshape(w.shape + (1,) * (batch.ndim - 1))
    n, weighted_sum = total_over((w.sum(), (rows * batch).sum(axis=0)))  # one all-reduce for the two (sharded)
    batch_mean = weighted_sum / jnp.maximum(n, 1.0)
    batch_var = total_over((rows * (batch - batch_mean) ** 2).sum(axis=0)) / jnp.maximum(n, 1.0)
    total = moments.count + n
    delta = batch_mean - moments.mean
    mean = moments.mean + delta * n / total
    m2 = moments.var * moments.count + batch_var * n + delta**2 * moments.count * n / total
    return RunningMoments(mean, m2 / total, total)


def normalize(moments: RunningMoments, x: jax.Array, clip: float = 10.0) -> jax.Array:
    return jnp.clip((x - moments.mean) / jnp.sqrt(moments.var + 1e-8), -clip, clip)


class RewardScale(NamedTuple):
    """Scales rewards by the standard deviation of the discounted return (as in PPO's reference code)."""

    discounted_return: jax.Array  # float32 [num_envs]
    moments: RunningMoments  # of the discounted return, scalar


def init_reward_scale(num_envs: int) -> RewardScale:
    return RewardScale(jnp.zeros((num_envs,), jnp.float32), init_moments(()))


def scale_rewards(
    scale: RewardScale, reward: jax.Array, done: jax.Array, valid: jax.Array, gamma: float, axis_name: str | None = None,
    clip: float | None = None,
) -> tuple[RewardScale, jax.Array]:
    """Update with one batched step and return the scaled rewards `[num_envs]`, clipped to ±`clip` if given.

    SB3's `VecNormalize` and CleanRL clip at 10: before the return's deviation has grown (a run's
    first steps, a sparse reward's first successes) a reward is scaled by up to hundreds
    (`experiments/reward_clip_engagement.py`); the presets do not clip (docs/benchmark.md). `valid`
    is False on EnvPool's reset steps, which are no transitions and are left out. With `axis_name`,
    the return's moments are every shard's (`update_moments`).
    """
    ret = jnp.where(valid, scale.discounted_return * gamma + reward, scale.discounted_return)
    moments = update_moments(scale.moments, ret, valid, axis_name)
    scaled = reward / jnp.sqrt(moments.var + 1e-8)
    if clip is not None:
        scaled = jnp.clip(scaled, -clip, clip)
    return RewardScale(jnp.where(done, 0.0, ret), moments), scaled
