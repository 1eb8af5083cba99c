"""Replay buffer as a pytree with pure `init_replay` / `add_rows` / `sample_batch`.

The buffer keeps each env's stream of steps, time-major: a ring of `rows` rows of `[num_envs]`
steps. A row holds the observation an action was chosen for, the action, and what the step
returned (reward, terminated, truncated), plus `valid`, which is False on EnvPool's reset steps.
The next observation of the step in row t is the observation in row t+1 (for a step that ended
an episode, EnvPool's final observation), so observations are stored once, and n-step returns
are read off the stream at sampling time.

Reset steps are rows of the stream (their observation is the previous episode's final one, the
bootstrap target of the step before) but never transitions: a sample that lands on one gets
weight 0, and losses are weighted means. Their share is one step per episode.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np


class ReplayError(ValueError):
    pass


class Row(NamedTuple):
    """One batched environment step, `[num_envs, ...]`."""

    obs: jax.Array
    action: jax.Array
    reward: jax.Array  # float32
    terminated: jax.Array  # bool
    truncated: jax.Array  # bool
    valid: jax.Array  # bool: False on EnvPool's reset steps


class ReplayState(NamedTuple):
    rows: Row  # each field [capacity_rows, num_envs, ...]
    count: jax.Array  # int32 []: rows written so far, capped at 2**30 (only `count % rows` and the fill matter)
    head: jax.Array  # int32 []: next row to write


class Batch(NamedTuple):
    """Sampled n-step transitions, `[batch, ...]`."""

    obs: jax.Array
    action: jax.Array
    reward: jax.Array  # sum_k gamma^k r_{t+k} over the (possibly shortened) n steps
    discount: jax.Array  # gamma^m (1 - terminated): multiplies the bootstrap value
    next_obs: jax.Array  # the observation m steps later (a truncated episode's final one)
    weight: jax.Array  # 1 for transitions, 0 where the sample landed on a reset step


def capacity_rows(buffer_size: int, num_envs: int) -> int:
    """Rows needed to hold `buffer_size` transitions of `num_envs` streams."""
    return max(2, -(-buffer_size // num_envs))


def replay_nbytes(buffer_size: int, num_envs: int, obs_shape: tuple[int, ...], obs_dtype: Any,
                  action_shape: tuple[int, ...], action_dtype: Any) -> int:
    """Bytes the buffer will take, computed before anything is allocated."""
    per_step = (
        int(np.prod(obs_shape)) * np.dtype(obs_dtype).itemsize
        + int(np.prod(action_shape)) * np.dtype(action_dtype).itemsize
        + 4 + 3  # reward, three flags
    )
    return capacity_rows(buffer_size, num_envs) * num_envs * per_step


def check_fits(nbytes: int, device: jax.Device, what: str = "--buffer-size") -> None:
    """Refuse a buffer that cannot fit on its device (half its free memory at most)."""
    stats = getattr(device, "memory_stats", lambda: None)()
    if stats and "bytes_limit" in stats:
        free = stats["bytes_limit"] - stats.get("bytes_in_use", 0)
    else:
        import os

        free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    if nbytes > free // 2:
        raise ReplayError(
            f"{what}: the replay buffer needs {nbytes / 2**30:.2f} GiB but {device} has "
            f"{free / 2**30:.2f} GiB free (at most half of it is used); lower the buffer size"
        )


def init_replay(rows: int, example: Row, obs_dtype: Any = None) -> ReplayState:
    """An empty buffer of `rows` rows shaped like `example` (one row, `[num_envs, ...]`).

    `obs_dtype` overrides how observations are stored: uint8 for pixels keeps them 4x smaller.
    """
    if obs_dtype is not None:
        example = example._replace(obs=jax.ShapeDtypeStruct(example.obs.shape, obs_dtype))
    storage = jax.tree.map(lambda x: jnp.zeros((rows, *x.shape), x.dtype), example)
    return ReplayState(storage, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))


def add_rows(state: ReplayState, row: Row) -> ReplayState:
    """Write one row at the head (overwriting the oldest once full)."""
    rows = state.rows.obs.shape[0]
    storage = jax.tree.map(
        lambda buf, x: jax.lax.dynamic_update_index_in_dim(buf, x.astype(buf.dtype), state.head, 0), state.rows, row
    )
    return ReplayState(storage, jnp.minimum(state.count + 1, 2**30), (state.head + 1) % rows)


def add_many(state: ReplayState, rows: Row) -> ReplayState:
    """Write `[T, num_envs, ...]` rows in time order.

    A loop over the ring positions head..head+T-1, whose trip count XLA cannot know at compile
    time, so even a one-row write stays a loop of its own. Unrolled (as a length-1 scan is), the
    write fuses into the sampling gathers that follow it in the same program; those then read the
    old column while it is updated in place, and XLA copies whole columns every iteration.
    """
    start = state.head

    def body(i: jax.Array, state: ReplayState) -> ReplayState:
        return add_rows(state, jax.tree.map(lambda x: jax.lax.dynamic_index_in_dim(x, i - start, keepdims=False), rows))

    return jax.lax.fori_loop(start, start + rows.obs.shape[0], body, state)


def agent_columns(state: ReplayState, index: int, num_agents: int) -> ReplayState:
    """Agent `index`'s own streams of a buffer its --num-seeds siblings share (each owns an equal
    block of columns), as the buffer of a single run over them."""
    width = state.rows.obs.shape[1] // num_agents
    return state._replace(rows=jax.tree.map(lambda x: x[:, index * width:(index + 1) * width], state.rows))


def join_columns(parts: list[ReplayState]) -> ReplayState:
    """The shared buffer from its agents' own (the inverse of `agent_columns`)."""
    return parts[0]._replace(rows=jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=1), *[part.rows for part in parts]))


def num_sampleable(state: ReplayState, n_step: int) -> jax.Array:
    """Rows whose n following rows are written too (their bootstrap observation exists)."""
    filled = jnp.minimum(state.count, state.rows.obs.shape[0])
    return jnp.maximum(filled - n_step, 0)


def sample_batch(state: ReplayState, key: jax.Array, batch_size: int, n_step: int, gamma: float,
                 envs: tuple[Any, int] | None = None) -> Batch:
    """Uniform n-step transitions. Requires `num_sampleable(state, n_step) > 0`.

    `envs = (first, count)` samples the streams `first .. first + count - 1` only (an agent's own
    envs in a buffer its --num-seeds siblings share), drawing the numbers a buffer of `count`
    streams would.

    For a start row t the return runs over steps t..t+m-1, m <= n, stopping after the first
    step that ends the episode:
        reward   = sum_{k<m} gamma^k r_{t+k}
        discount = gamma^m * (1 - terminated_{t+m-1})    (a truncated end bootstraps)
        next_obs = obs_{t+m}
    """
    rows, num_envs = state.rows.obs.shape[:2]
    filled = jnp.minimum(state.count, rows)
    oldest = (state.head - filled) % rows
    time_key, env_key = jax.random.split(key)
    offset = jax.random.randint(time_key, (batch_size,), 0, jnp.maximum(filled - n_step, 1))
    env = jax.random.randint(env_key, (batch_size,), 0, num_envs if envs is None else envs[1])
    if envs is not None:
        env = env + envs[0]
    at = lambda field, k: field[(oldest + offset + k) % rows, env]  # noqa: E731

    reward = jnp.zeros((batch_size,), jnp.float32)
    alive = jnp.ones((batch_size,), bool)  # no episode end yet inside the window
    discount = jnp.ones((batch_size,), jnp.float32)
    steps = jnp.zeros((batch_size,), jnp.int32)
    terminal = jnp.zeros((batch_size,), bool)
    for k in range(n_step):  # n is small and static: unrolled
        reward = reward + jnp.where(alive, discount * at(state.rows.reward, k), 0.0)
        discount = jnp.where(alive, discount * gamma, discount)
        steps = steps + alive
        ended = at(state.rows.terminated, k) | at(state.rows.truncated, k)
        terminal = jnp.where(alive, at(state.rows.terminated, k), terminal)
        alive = alive & ~ended
    as_float = lambda x: x.astype(jnp.float32)  # noqa: E731  (uint8 pixels are stored, floats are learned)
    batch = Batch(
        obs=as_float(at(state.rows.obs, 0)),
        action=at(state.rows.action, 0),
        reward=reward,
        discount=discount * (1.0 - terminal.astype(jnp.float32)),
        next_obs=as_float(state.rows.obs[(oldest + offset + steps) % rows, env]),
        weight=at(state.rows.valid, 0).astype(jnp.float32),
    )
    # what every update may rely on (checked at trace time)
    chex.assert_equal_shape([batch.obs, batch.next_obs])
    chex.assert_shape([batch.reward, batch.discount, batch.weight], (batch_size,))
    chex.assert_type([batch.obs, batch.reward, batch.discount, batch.weight], jnp.float32)
    return batch
