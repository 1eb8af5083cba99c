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

Stacked frames (Atari's `[stack x channels, H, W]` observations, `frame_stack` > 1) are stored
once: a row keeps only its newest frame and a `fresh` flag, and a sample rebuilds its stack from
the rows before it. EnvPool's stack of step t is the newest frames of steps t-S+1..t, across a
life-loss reset too (the stack carries on); a new game fills every slot with its first frame.
`fresh` marks a row whose older slots all equal its newest frame, so the rebuild repeats that
frame into the slots before it: exact for a new game and for any stack that happens to be flat.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_fast.config.plan import capacity_rows
from jaxrl_fast.types import Batch, ConfigError


class ReplayError(ConfigError):
    pass


class Row(NamedTuple):
    """One batched environment step, `[num_envs, ...]`."""

    obs: jax.Array
    action: jax.Array
    reward: jax.Array  # float32
    terminated: jax.Array  # bool
    truncated: jax.Array  # bool
    valid: jax.Array  # bool: False on EnvPool's reset steps
    fresh: jax.Array | None = None  # stored frames only, bool: the stack is this frame repeated (a new game)


class ReplayState(NamedTuple):
    rows: Row  # each field [capacity_rows, num_envs, ...]
    count: jax.Array  # int32 []: rows written so far, capped at 2**30 (only `count % rows` and the fill matter)
    head: jax.Array  # int32 []: next row to write


def replay_nbytes(buffer_size: int, num_envs: int, obs_shape: tuple[int, ...], obs_dtype: Any,
                  action_shape: tuple[int, ...], action_dtype: Any, frame_stack: int = 1) -> int:
    """Bytes the buffer will take, computed before anything is allocated (stacked frames: one
    frame and a flag per step)."""
    per_step = (
        int(np.prod(obs_shape)) // frame_stack * np.dtype(obs_dtype).itemsize
        + int(np.prod(action_shape)) * np.dtype(action_dtype).itemsize
        + 4 + 3 + (frame_stack > 1)  # reward, three flags (four with `fresh`)
    )
    return capacity_rows(buffer_size, num_envs) * num_envs * per_step


def init_replay(rows: int, example: Row, frame_stack: int = 1) -> ReplayState:
    """An empty buffer of `rows` rows shaped like `example` (one row, `[num_envs, ...]`), storing
    one frame per row when observations are stacks of `frame_stack` frames."""
    if frame_stack > 1:
        num_envs, stacked, *frame = example.obs.shape
        if stacked % frame_stack:
            raise ReplayError(f"observations {example.obs.shape[1:]} are not stacks of {frame_stack} frames")
        example = example._replace(obs=jax.ShapeDtypeStruct((num_envs, stacked // frame_stack, *frame), example.obs.dtype),
                                   fresh=jax.ShapeDtypeStruct((num_envs,), jnp.bool_))
    storage = jax.tree.map(lambda x: jnp.zeros((rows, *x.shape), x.dtype), example)
    return ReplayState(storage, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))


def empty_like(state: ReplayState, rows: int, num_envs: int) -> ReplayState:
    """An empty buffer stored as `state` is, with `rows` rows of `num_envs` streams."""
    storage = jax.tree.map(lambda x: jnp.zeros((rows, num_envs, *x.shape[2:]), x.dtype), state.rows)
    return ReplayState(storage, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))


def stored_row(storage: Row, row: Row) -> Row:
    """`row` as the buffer keeps it: with stored frames, the newest frame of each stack and
    whether the stack is that frame repeated."""
    if storage.fresh is None:
        return row
    channels = storage.obs.shape[2]
    frames = row.obs.reshape((row.obs.shape[0], -1, channels, *row.obs.shape[2:]))  # [envs, S, c, H, W]
    newest = frames[:, -1]
    fresh = jnp.all(frames == newest[:, None], axis=tuple(range(1, frames.ndim)))
    return row._replace(obs=newest, fresh=fresh)


def add_rows(state: ReplayState, row: Row) -> ReplayState:
    """Write one row at the head (overwriting the oldest once full)."""
    rows = state.rows.obs.shape[0]
    row = stored_row(state.rows, row)
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


def end_streams(state: ReplayState, stacked: bool = False) -> ReplayState:
    """The buffer of a resumed run, whose envs start new episodes: each stream's next row will be a
    new episode's first, not the next observation of its last row. So the last row becomes a reset
    step (no transition: its next observation was never written) and the row before it ends its
    episode by truncation: it bootstraps from the last row's observation, its true next one, and no
    n-step window reads past it into the new episode's rows. `stacked`: one buffer per data-parallel
    shard along a leading axis (only the two flag columns go through the vmap, never the frames)."""
    flags = jax.vmap(ended_flags) if stacked else ended_flags
    valid, truncated = flags(state.rows.valid, state.rows.truncated, state.count, state.head)
    return state._replace(rows=state.rows._replace(valid=valid, truncated=truncated))


def ended_flags(valid: jax.Array, truncated: jax.Array, count: jax.Array, head: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`end_streams` on the two columns it changes (`[rows, num_envs]`), which alone need to travel."""
    rows = valid.shape[0]
    filled = jnp.minimum(count, rows)
    last, before = (head - 1) % rows, (head - 2) % rows
    return valid.at[last].set(valid[last] & (filled < 1)), truncated.at[before].set(truncated[before] | (filled >= 2))


def agent_columns(state: ReplayState, index: int, num_agents: int) -> ReplayState:
    """Agent `index`'s own streams of a buffer its --num-seeds siblings share (each owns an equal
    block of columns), as the buffer of a single run over them."""
    width = state.rows.obs.shape[1] // num_agents
    return state._replace(rows=jax.tree.map(lambda x: x[:, index * width:(index + 1) * width], state.rows))


def num_sampleable(state: ReplayState, n_step: int, frame_stack: int = 1) -> jax.Array:
    """Rows whose n following rows are written too (their bootstrap observation exists), and with
    stored frames, whose frame_stack - 1 rows before are still held (their stack can be rebuilt)."""
    filled = jnp.minimum(state.count, state.rows.obs.shape[0])
    return jnp.maximum(filled - n_step - (frame_stack - 1), 0)


def observations_at(state: ReplayState, row: jax.Array, env: jax.Array, frame_stack: int = 1) -> jax.Array:
    """The observations of ring rows `row` of streams `env` (both `[batch]`), stacks rebuilt from
    stored frames: slot k back is row `row - k`, unless a fresh row lies between, whose frame
    fills the slots before it."""
    obs = state.rows.obs
    if state.rows.fresh is None:
        return obs[row, env]
    rows = obs.shape[0]
    source, blocked = row, state.rows.fresh[row, env]
    frames = [obs[row, env]]
    for back in range(1, frame_stack):  # the stack is small and static: unrolled
        source = jnp.where(blocked, source, (row - back) % rows)
        frames.append(obs[source, env])
        blocked = blocked | state.rows.fresh[source, env]
    return jnp.concatenate(frames[::-1], axis=1)  # oldest first, as EnvPool stacks them


def sample_batch(state: ReplayState, key: jax.Array, batch_size: int, n_step: int, gamma: float,
                 envs: tuple[Any, int] | None = None, frame_stack: int = 1) -> Batch:
    """Uniform n-step transitions. While no row is sampleable yet (`num_sampleable`: an update
    before n_step + frame_stack - 1 rows are written, as a small --learning-starts allows), the
    samples, whose rows were never written, weigh nothing.

    `envs = (first, count)` samples the streams `first .. first + count - 1` only (an agent's own
    envs in a buffer its --num-seeds siblings share), drawing the numbers a buffer of `count`
    streams would. Stored frames are rebuilt into stacks of `frame_stack` (start rows leave the
    oldest frame_stack - 1 rows as history).

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
    history = frame_stack - 1
    offset = jax.random.randint(time_key, (batch_size,), history, jnp.maximum(filled - n_step, history + 1))
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
    start = (oldest + offset) % rows
    batch = Batch(
        obs=observations_at(state, start, env, frame_stack),
        action=at(state.rows.action, 0),
        reward=reward,
        discount=discount * (1.0 - terminal.astype(jnp.float32)),
        next_obs=observations_at(state, (start + steps) % rows, env, frame_stack),
        weight=(at(state.rows.valid, 0) & (offset < filled - n_step)).astype(jnp.float32),
    )
    # what every update may rely on (checked at trace time)
    chex.assert_equal_shape([batch.obs, batch.next_obs])
    chex.assert_shape([batch.reward, batch.discount, batch.weight], (batch_size,))
    chex.assert_type([batch.reward, batch.discount, batch.weight], jnp.float32)
    chex.assert_type(batch.next_obs, state.rows.obs.dtype)
    return batch
