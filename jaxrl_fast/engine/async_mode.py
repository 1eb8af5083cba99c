"""Acting with EnvPool's async mode (`batch_size < num_envs`) for the `async` schedule's actors.

In async mode `recv` hands back the first `batch_size` envs to finish their step, so the policy
acts on those while the others are still stepping. Each `recv` holds a different subset of envs,
while the replay buffer keeps one continuous, time-major stream per env and writes all streams
at one cursor. `StreamStager` bridges the two on the host: it completes each env's row when that
env's result arrives and hands out a chunk `[T, num_envs]` once every env has `T` new rows. Envs
that ran ahead keep their extra rows for the next chunk, so nothing is lost or reordered.

A row has the meaning it has everywhere (see `jaxrl_fast.engine.replay`): the observation an action was
chosen for, the action, and what the step returned; `valid` is False on EnvPool's reset steps
(the step after an episode ended: its action is ignored and it is no transition).

`AsyncModeActor` is the acting loop of one actor: recv (timed as `env`), the jitted policy on the
batch (`inference`), send (`env`), and the chunk's copy to the learner's device (`transfer`).
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_fast.engine import phases
from jaxrl_fast.engine.replay import Row
from jaxrl_fast.env.envpool import HostSteps, make_pool, recv_steps
from jaxrl_fast.env.episodes import EpisodeStats, HostEpisodes

MAX_LEAD_CHUNKS = 64  # an env this many chunks ahead of the slowest means one env stopped returning


class StagedChunk(NamedTuple):
    rows: Row  # numpy, [T, num_envs, ...]
    version: int  # oldest parameter version among its rows; -1 when every row was a random action
    finished: EpisodeStats  # episodes that ended inside the chunk


class StreamStager:
    """Per-env streams of rows, filled out of order, taken out `T` rows of every env at a time.

    Args:
      num_envs, chunk_length: streams, and rows per stream in a chunk (T).
      obs_shape: one observation's shape (float32).
      action: one stored action's shape and dtype, as a `jax.ShapeDtypeStruct`.
    """

    def __init__(self, num_envs: int, chunk_length: int, obs_shape: tuple[int, ...], action: Any):
        self.length, n = chunk_length, num_envs
        # what each env's next row starts with: the obs its pending action was chosen for
        self.pending_obs = np.zeros((n, *obs_shape), np.float32)
        self.pending_action = np.zeros((n, *action.shape), action.dtype)
        self.pending_version = np.full(n, -1, np.int64)
        self.has_pending = np.zeros(n, bool)
        self.episodes = HostEpisodes(n)
        self.filled = np.zeros(n, np.int64)  # rows staged per env
        self.version = np.zeros((0, n), np.int64)
        # per row, the return and length of the episode its step ended (0 where none): a chunk
        # counts the episodes that ended in its own rows, not in rows staged ahead for the next
        self.ended_return = np.zeros((0, n), np.float64)
        self.ended_length = np.zeros((0, n), np.int64)
        self.rows = Row(*(np.zeros((0, n, *shape), dtype) for shape, dtype in (
            (obs_shape, np.float32), (action.shape, action.dtype), ((), np.float32), ((), bool), ((), bool), ((), bool))))
        self._grow(2 * chunk_length)

    def _grow(self, capacity: int) -> None:
        extra = capacity - self.version.shape[0]
        pad = lambda x: np.concatenate([x, np.zeros((extra, *x.shape[1:]), x.dtype)])  # noqa: E731
        self.rows = jax.tree.map(pad, self.rows)  # Row's frame-stack field is None here: no leaf
        self.version, self.ended_return, self.ended_length = map(pad, (self.version, self.ended_return, self.ended_length))

    def record(self, steps: HostSteps) -> None:
        """Complete the pending row of each env in `steps` with what its step returned."""
        got = self.has_pending[steps.env_id]  # an env's first result (after reset) completes no row
        ids = steps.env_id[got]
        if ids.size:
            if self.filled[ids].max() >= self.version.shape[0]:
                if self.filled.max() >= self.length * MAX_LEAD_CHUNKS:
                    slow = int(np.argmin(self.filled))
                    raise RuntimeError(f"EnvPool async mode: env {slow} returned no step while others ran "
                                       f"{MAX_LEAD_CHUNKS} chunks ahead")
                self._grow(2 * self.version.shape[0])
            terminated, truncated = steps.terminated[got], steps.truncated[got]
            valid, ended_return, ended_length = self.episodes.track(ids, steps.reward[got], terminated, truncated)
            at = (self.filled[ids], ids)
            for buffer, value in zip(self.rows, (self.pending_obs[ids], self.pending_action[ids], steps.reward[got],
                                                 terminated, truncated, valid)):
                buffer[at] = value
            self.version[at] = self.pending_version[ids]
            self.ended_return[at], self.ended_length[at] = ended_return, ended_length
            self.filled[ids] += 1
        self.pending_obs[steps.env_id] = steps.obs

    def acted(self, env_id: np.ndarray, action: np.ndarray, version: int) -> None:
        """The actions sent for `env_id`, chosen for the observations `record` just stored."""
        self.pending_action[env_id] = action
        self.pending_version[env_id] = version
        self.has_pending[env_id] = True

    def ready(self) -> bool:
        return bool(self.filled.min() >= self.length)

    def take(self) -> StagedChunk:
        """The oldest `T` rows of every stream (call when `ready()`); later rows move up."""
        T = self.length
        rows = jax.tree.map(lambda x: x[:T].copy(), self.rows)
        versions = self.version[:T]
        version = int(versions[versions >= 0].min()) if (versions >= 0).any() else -1
        ended = rows.valid & (rows.terminated | rows.truncated)
        finished = EpisodeStats(np.int32(ended.sum()), np.float32(self.ended_return[:T].sum()),
                                np.int32(self.ended_length[:T].sum()))
        for x in (*jax.tree.leaves(self.rows), self.version, self.ended_return, self.ended_length):
            x[:-T] = x[T:].copy()
        self.filled -= T
        return StagedChunk(rows, version, finished)


class AsyncModeActor:
    """One actor's EnvPool in async mode, acting with the jitted policy on each batch it returns.

    `act_chunk(params, version, random, key, env_step, clock)` acts until every env has `T` new
    rows and returns the `StagedChunk`; `params` must already be on `device` (the acting device).
    """

    def __init__(self, algo: Any, spec: Any, num_envs: int, batch_size: int, num_threads: int, seed: int,
                 chunk_length: int, device: jax.Device, options: dict[str, Any] | None = None):
        self.pool = make_pool(spec.env_id, num_envs, num_threads, seed, batch_size=batch_size, **(options or {}))
        self.max_steps, self.device = spec.max_episode_steps, device

        def act(params, obs, key, cycle, env_step, random: bool):
            key = jax.random.fold_in(key, cycle)  # in the program: a split per batch would be a dispatch of its own
            with jax.named_scope(phases.INFERENCE):
                out = algo.random_act(obs, key) if random else algo.act(params, obs, key, env_step)
            return out.action, out.env_action

        self._act = jax.jit(act, static_argnums=5)
        obs = jax.ShapeDtypeStruct((batch_size, *spec.obs_shape), jnp.float32)
        action = jax.eval_shape(lambda o, k: algo.random_act(o, k).action, obs, jax.random.key(0))
        self.stager = StreamStager(num_envs, chunk_length, spec.obs_shape,
                                   jax.ShapeDtypeStruct(action.shape[1:], action.dtype))
        self.pool.async_reset()

    def act_chunk(self, params: Any, version: int, random: bool, key: jax.Array, env_step: int, clock: Any) -> StagedChunk:
        stager, cycle, env_step = self.stager, 0, np.float32(env_step)
        while not stager.ready():
            begin = time.perf_counter()
            steps = recv_steps(self.pool, self.max_steps)
            stager.record(steps)
            received = time.perf_counter()
            action, env_action = jax.device_get(self._act(params, steps.obs, key, np.int32(cycle), env_step, random))
            cycle += 1
            acted = time.perf_counter()
            stager.acted(steps.env_id, action, -1 if random else version)
            self.pool.send(env_action, steps.env_id)
            clock.interval("env", begin, received)
            clock.interval("inference", received, acted)
            clock.interval("env", acted, time.perf_counter())
        return stager.take()

    def close(self) -> None:
        self.pool.close()
