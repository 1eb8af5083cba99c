"""The `async` schedule for off-policy algorithms (Spreeze, TianJi): actors and learner at their own pace.

Actor threads each own an EnvPool instance and act with either a jitted program around EnvPool's
XLA step (`--env-batch-size` 0 or `--num-envs`), or, in EnvPool's async mode (`--env-batch-size`
below `--num-envs`), the jitted policy on each batch of envs that finished first, with per-env
streams staged on the host (`jaxrl_fast.engine.async_mode`). They act chunks of steps with
published parameters and hand the rows to the learner tagged with the version that acted them.
The learner (the trainer's thread) writes the rows into the replay buffer, runs its updates and
publishes new parameters.

The buffer holds one stream per environment of every actor (`num_actors x num_envs` streams), so
each stream stays one continuous trajectory: the learner writes a *block* made of the next chunk
of every actor at once. What a run learns does not depend on the threads' timing:
* the learner writes block `b` (counted after the warm-up) just before its update `b x num_actors
  + 1`, never earlier, so every update samples the same buffer: `num_actors` updates per block,
  the algorithm's update-to-data ratio;
* every actor acts block `b` with exactly version `b x num_actors - policy_lag`, the parameters
  `policy_lag` versions older than the learner's when the block reaches the buffer, waiting for
  that version if the learner has not published it yet (so actors run at most `policy_lag`
  versions ahead, and the lag is `policy_lag` from block `policy_lag / num_actors` on).
So a run is deterministic for a seed, as `sync` and `concurrent` are, except in EnvPool's async
mode, where which envs share a batch is the C++ threads' timing.

A chunk acted by parameters more than `max_policy_lag` versions older than the learner's when it
reaches the buffer is dropped: its rows are still written, to keep the stream continuous, but
marked invalid, so no update ever samples them; drops are counted. Only EnvPool's async mode
drops (the first rows of envs that ran ahead into the next chunk were acted by an older version),
and then the replay ratio (samples consumed by updates / samples accepted after the warm-up)
runs above its target, the algorithm's update-to-data ratio x batch size, which it is otherwise.
Any thread's failure stops every thread and is re-raised in the trainer; `close()` joins them.
"""

from __future__ import annotations

import collections
import functools
import queue
import threading
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_fast.config.plan import run_off_policy_plan
from jaxrl_fast.config.run import uses_async_mode
from jaxrl_fast.engine import phases
from jaxrl_fast.engine.acting import EvalPayload, eval_payload, init_env_carry
from jaxrl_fast.engine.async_mode import AsyncModeActor
from jaxrl_fast.engine.offpolicy_steps import checkpointed_fields, make_pieces, resumed_fields
from jaxrl_fast.engine.placement import describe, transfer
from jaxrl_fast.engine.program_store import ProgramStore
from jaxrl_fast.engine.replay import Row, add_many, empty_like
from jaxrl_fast.engine.run_once import jit_once
from jaxrl_fast.engine.schedules.base import CallResult, Context, EvalRequests, ScheduleBase, Snapshot, mean_metrics
from jaxrl_fast.engine.timing import PhaseClock
from jaxrl_fast.env.envpool import make_xla_env
from jaxrl_fast.env.episodes import add_stats, init_episode_stats

ACTOR_SEED_STRIDE = 1000  # actor i's envs are seeded from seed + 1000 i (each env j at + j): apart for up to 1,000 envs


def actor_seed(seed: int, actor: int, num_envs: int) -> int:
    """The first env seed of actor `actor`'s pool: strides of `ACTOR_SEED_STRIDE`, or of the pool's
    size where that is larger, so that no two actors' envs share a seed."""
    return seed + max(ACTOR_SEED_STRIDE, num_envs) * actor


class Chunk(NamedTuple):
    rows: Row  # [T, num_envs, ...] on the learner's device
    version: int  # oldest parameter version that acted its rows (-1: uniform random actions only)
    finished: Any  # EpisodeStats of the chunk
    actor: int
    warmup: bool  # one of the actor's warm-up chunks


class ParameterStore:
    """Published parameter versions, each kept until `keep` newer ones are published.

    The learner publishes a version as soon as its update is dispatched, before the device has
    computed it; `wait_for` hands it to an actor once it is published and computed.
    """

    def __init__(self, params: Any, version: int, keep: int):
        self._cond = threading.Condition()
        self._versions = {version: params}
        self.newest, self.keep = version, keep

    def publish(self, params: Any, version: int) -> None:
        with self._cond:
            self._versions[version], self.newest = params, version
            for old in [v for v in self._versions if v <= version - self.keep]:
                del self._versions[old]
            self._cond.notify_all()

    def latest(self) -> tuple[Any, int]:
        with self._cond:
            return self._versions[self.newest], self.newest

    def wait_for(self, version: int, stop: threading.Event) -> Any | None:
        """The parameters of `version` once the learner has published them and the device has
        computed them; None when `stop` comes first."""
        with jax.profiler.TraceAnnotation(phases.WAIT):
            with self._cond:
                while self.newest < version:
                    if stop.is_set():
                        return None
                    self._cond.wait(0.05)
                if version not in self._versions:
                    raise RuntimeError(f"parameter version {version} is no longer kept (newest {self.newest}, "
                                       f"{self.keep} kept)")
                params = self._versions[version]
            return jax.block_until_ready(params)


class Counts:
    """What the schedule reports: samples accepted, consumed and dropped, lags and waits."""

    def __init__(self, target_ratio: float, max_policy_lag: int):
        self.target_ratio, self.max_policy_lag = target_ratio, max_policy_lag
        self.lock = threading.Lock()
        self.accepted = 0  # samples written as valid after the warm-up
        self.consumed = 0  # samples drawn by updates
        self.dropped = 0  # samples written invalid: acted by parameters older than the lag bound
        self.lags: list[int] = []  # per accepted chunk
        self.actor_wait_s = 0.0
        self.learner_wait_s = 0.0
        self.started_at = (0, 0)  # produced and consumed when the training calls began (`mark_start`)

    def note(self, **changes: float) -> None:
        with self.lock:
            for name, value in changes.items():
                setattr(self, name, getattr(self, name) + value)

    @property
    def ratio(self) -> float:
        """Samples consumed by updates per sample accepted after the warm-up."""
        return self.consumed / max(self.accepted, 1)

    def mark_start(self) -> None:
        """Where the training calls begin: `rates` counts from here (a resumed run's counts are restored)."""
        self.started_at = (self.accepted + self.dropped, self.consumed)

    def rates(self, train_s: float) -> dict[str, float | None]:
        """Samples produced and consumed per second of the training calls (None: none ran)."""
        produced, consumed = self.started_at
        return {"production_sps": (self.accepted + self.dropped - produced) / train_s if train_s else None,
                "consumption_frames_per_s": (self.consumed - consumed) / train_s if train_s else None}


def merge_block(rows: tuple[Row, ...], keep: jax.Array) -> Row:
    """One chunk per actor, side by side on the env axis; a dropped chunk's rows are marked invalid."""
    rows = tuple(r._replace(valid=r.valid & k) for r, k in zip(rows, keep))
    return jax.tree.map(lambda *parts: jnp.concatenate(parts, axis=1), *rows)


def xla_acting(pieces_of: Callable, env: Any, options: Any, device: jax.Device, clock: PhaseClock,
               programs: ProgramStore, key: jax.Array) -> Callable:
    """An actor acting as one jitted program per chunk: EnvPool's XLA step and the policy inside
    `lax.scan`, on `device` (placement's acting device); `programs` (the store of this actor's
    env) loads them where an earlier run stored them. The actor's `key` stays on that device, and
    each chunk's program splits it and hands the rest back."""
    act_rows = pieces_of(env).act_rows

    def act_chunk(env_carry: Any, params: Any, key: jax.Array, env_step: np.float32 | jax.Array, random: bool):
        # the key is split inside the program: one dispatch less per chunk on the actor's thread
        key, chunk_key = jax.random.split(key)
        env_carry, rows, finished = act_rows(env_carry, params, chunk_key, env_step, random=random)
        return env_carry, key, rows, finished

    program = {random: programs.lazy(f"async-act-{'random' if random else 'policy'}",
                                     jax.jit(functools.partial(act_chunk, random=random), donate_argnums=0))
               for random in (True, False)}
    args = jax.device_put((env.handle, env.reset()), device)
    key = jax.device_put(key, device)

    def actor_init(handle: Any, first_obs: jax.Array) -> Any:
        return init_env_carry(env, options, handle, first_obs)

    carry = programs.compile("async-actor-init", jit_once(actor_init), args)(*args)

    def act(params, version, random, env_step):
        nonlocal carry, key
        # the learner publishes on its device; a compiled program takes its arguments where it acts
        params = clock.timed("transfer", transfer, params, device)
        carry, key, rows, finished = clock.timed("env", program[random], carry, params, key, np.float32(env_step))
        return rows, -1 if random else version, finished

    return act


def async_mode_acting(actor: AsyncModeActor, clock: PhaseClock, key: jax.Array) -> Callable:
    """An actor acting on EnvPool's async-mode batches from the host, rows staged per env stream;
    its `key` is split on the actor's device, one chunk at a time."""
    key = jax.device_put(key, actor.device)

    def act(params, version, random, env_step):
        nonlocal key
        key, sub = jax.random.split(key)
        begin = time.perf_counter()
        params = jax.block_until_ready(transfer(params, actor.device))
        clock.interval("transfer", begin, time.perf_counter())
        staged = actor.act_chunk(params, version, random, sub, env_step, clock)
        return staged.rows, staged.version, staged.finished

    return act


class AsyncSchedule(ScheduleBase):
    """Off-policy `async`: actor threads with their own EnvPools, the learner on `placement.learner`."""

    def __init__(self, ctx: Context):
        config, env, options, algo = ctx.config, ctx.env, ctx.options, ctx.algo
        if options.normalize_observations or options.scale_rewards:
            raise ValueError("--schedule async: observation normalization and reward scaling are on-policy options")
        self.ctx, self.algo, self.options = ctx, algo, options
        self.plan = plan = run_off_policy_plan(config)
        self.device, self.seed, self.num_actors = ctx.placement.learner, config.seed, config.num_actors
        self.requests = EvalRequests(ctx.on_eval, ctx.plan.eval_every_iterations)
        threads = env.pool.config["num_threads"]
        self.async_mode = uses_async_mode(config)
        self.clock = PhaseClock()  # env, inference (async mode), transfer, update
        if self.async_mode:  # EnvPool's async mode: each actor stages per-env streams on the host
            self.actors = [AsyncModeActor(algo, env.spec, env.spec.num_envs, config.env_batch_size, threads,
                                          actor_seed(self.seed, i, env.spec.num_envs), plan.rollout_length, ctx.placement.host,
                                          env.options)
                           for i in range(self.num_actors)]
        else:  # the whole chunk is one jitted program around EnvPool's XLA step
            self.envs = [env] + [make_xla_env(env.spec.env_id, env.spec.num_envs, threads,
                                              actor_seed(self.seed, i, env.spec.num_envs), **env.options)
                                 for i in range(1, self.num_actors)]
        self.chunk = plan.rollout_length * env.spec.num_envs  # samples per actor chunk; one learner iteration's worth
        self.pieces = make_pieces(algo, env, options, plan)
        self.stop = threading.Event()
        self.counts = Counts(plan.updates_per_iteration * plan.batch_size / self.chunk, config.max_policy_lag)
        self.policy_lag = config.policy_lag
        self.first_block, self.first_version = 0, 0  # where a resumed run's blocks and versions start
        self.blocks = 0  # blocks written after the warm-up
        self.queue: queue.Queue[Chunk] = queue.Queue()
        self.pending = [collections.deque() for _ in range(self.num_actors)]
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []
        self.version, self.warmup_written = 0, 0
        self.episodes = init_episode_stats()
        # the learner's programs, and each actor env's, loaded where an earlier run of the same
        # configuration stored them (`engine.program_store`; EnvPool's async-mode actors act from the host)
        self.programs = ProgramStore.for_run(config, env, ctx.plan, ctx.placement)
        self._learn_program = self.programs.lazy("async-learn", jax.jit(self._learn_step, donate_argnums=(0, 1)))

        def add_block(replay, episodes, rows, finished, keep):
            for stats in finished:
                episodes = add_stats(episodes, stats)
            return add_many(replay, merge_block(rows, keep)), episodes

        self._add_block = self.programs.lazy("async-add-block", jax.jit(add_block, donate_argnums=0))
        self.fields = checkpointed_fields(config)

    # -- actors ----------------------------------------------------------------------------
    def _actor(self, index: int, warmup_chunks: int) -> None:
        try:
            key = jax.random.key(self.seed + 7919 * (index + 1))
            if self.async_mode:
                act = async_mode_acting(self.actors[index], self.clock, key)
            else:
                pieces_of = lambda env: make_pieces(self.algo, env, self.options, self.plan)  # noqa: E731
                env = self.envs[index]
                programs = ProgramStore.for_run(self.ctx.config, env, self.ctx.plan, self.ctx.placement)
                act = xla_acting(pieces_of, env, self.options, self.ctx.placement.acting, self.clock, programs, key)
            chunks, block = 0, self.first_block
            while not self.stop.is_set():
                random = chunks < warmup_chunks
                if random:  # uniform random actions: the parameters are not read
                    params, version = self.store.latest()
                else:
                    version = max(self.first_version, block * self.num_actors - self.policy_lag)
                    begin = time.perf_counter()
                    params = self.store.wait_for(version, self.stop)
                    self.counts.note(actor_wait_s=time.perf_counter() - begin)
                    if params is None:
                        return
                    block += 1
                # the run's steps so far (DQN's epsilon), counted from the first warm-up after a resume too
                env_step = (chunks if random else self.warmup_chunks + block - 1) * self.chunk * self.num_actors
                rows, acted_by, finished = act(params, version, random, env_step)
                rows, finished = self.clock.timed("transfer", transfer, (rows, finished), self.device)
                self.queue.put(Chunk(rows, acted_by, finished, index, random))
                chunks += 1
        except BaseException as error:  # reported by the learner; every thread stops
            self.errors.append(error)
            self.stop.set()

    # -- learner ---------------------------------------------------------------------------
    def init(self, key: jax.Array, restored: Any | None = None) -> None:
        """Initialise the learner (or put back `restored`: a buffer restored with it needs no
        warm-up) and start the actor threads."""
        env = self.ctx.env
        args = jax.device_put((key, env.handle, env.reset()), self.device)
        state = self.programs.compile("async-init", jit_once(self.pieces.init), args)(*args)
        streams = self.chunk // self.plan.rollout_length * self.num_actors
        rows = max(2, -(-self.plan.replay_rows // self.num_actors))  # the same total capacity over more streams
        self.state = jax.device_put(state._replace(replay=empty_like(state.replay, rows, streams)), self.device)
        warmup_chunks = self.warmup_chunks = self.plan.warmup_iterations // self.num_actors  # whole blocks (the plan's)
        if restored is not None:
            self.state = self.state._replace(**resumed_fields(restored.into(self.snapshot().state)))
            self._restore_counters(restored.meta["schedule"])
            warmup_chunks = 0 if self.ctx.config.checkpoint_replay else warmup_chunks
        # a copy, like every version published: the first update donates the learner's own buffers;
        # actors read versions back to `policy_lag` before the learner's newest
        self.store = ParameterStore(transfer(self.algo.acting_params(self.state.actor, self.state.critic),
                                             self.device, may_alias=False), self.version, keep=self.policy_lag + 2)
        for i in range(self.num_actors):
            thread = threading.Thread(target=self._actor, args=(i, warmup_chunks), name=f"jaxrl_fast-actor-{i}",
                                      daemon=True)
            thread.start()
            self.threads.append(thread)
        self.warmup_samples = warmup_chunks * self.num_actors * self.chunk

    def _restore_counters(self, counters: dict[str, int]) -> None:
        self.version = counters["version"]
        for name in ("accepted", "consumed", "dropped"):
            setattr(self.counts, name, counters[name])
        self.first_block = self.blocks = (counters["accepted"] + counters["dropped"]) // (self.chunk * self.num_actors)
        self.first_version = self.version  # the oldest version actors act with now: no older one was saved

    def start(self, restored: Any | None) -> float:
        begin = time.perf_counter()
        self.init(jax.random.key(self.seed), restored)
        self.warmup()  # actors fill the buffer with random actions (and compile their programs)
        self.run(1)  # compiles the learner's program; counts as the first iteration (plan.warm_iterations)
        self.counts.mark_start()
        return time.perf_counter() - begin

    def _write_next_block(self) -> None:
        """Wait for the next chunk of every actor and write them into the buffer as one block."""
        while not all(self.pending):
            self._check()
            if self.stop.is_set():  # closed from another thread (a second Ctrl-C): no chunk will come
                self._check()  # unless an actor failed (and set it) since the check above: its error, then
                raise RuntimeError("the async schedule was closed while its learner waited for the actors")
            try:
                with jax.profiler.TraceAnnotation(phases.WAIT):
                    chunk = self.queue.get(timeout=0.05)
            except queue.Empty:
                continue
            self.pending[chunk.actor].append(chunk)
        self._write_block([p.popleft() for p in self.pending])

    def _write_block(self, chunks: list[Chunk]) -> None:
        counts = self.counts
        warmup = [c.warmup for c in chunks]
        # EnvPool's async mode, 1-step chunks: an actor's first chunk after its warm-up holds the warm-up's
        # last random actions only (no lag), and is a block of the run all the same (counted as accepted)
        lags = [self.version - c.version if c.version >= 0 else 0 for c in chunks]
        keep = [w or lag <= counts.max_policy_lag for w, lag in zip(warmup, lags)]
        replay, self.episodes = self._add_block(self.state.replay, self.episodes, tuple(c.rows for c in chunks),
                                                tuple(c.finished for c in chunks), np.asarray(keep))
        self.state = self.state._replace(replay=replay)
        self.warmup_written += self.chunk * sum(warmup)
        with counts.lock:
            counts.lags.extend(lag for c, k, lag in zip(chunks, keep, lags) if k and not c.warmup and c.version >= 0)
        counts.note(accepted=self.chunk * sum(k and not w for w, k in zip(warmup, keep)),
                  dropped=self.chunk * sum(not k for k in keep))

    def _check(self) -> None:
        if self.errors:
            self.close()
            raise RuntimeError(f"an actor thread failed: {type(self.errors[0]).__name__}: {self.errors[0]}") from self.errors[0]

    def warmup(self) -> None:
        while self.warmup_written < self.warmup_samples:
            self._write_next_block()

    def run(self, n: int):
        collected = []
        need = self.plan.updates_per_iteration * self.plan.batch_size
        for _ in range(n):
            start = time.perf_counter()
            self._check()
            # a block, one iteration's samples per actor, feeds num_actors updates: the ratio, in integers
            while self.version >= self.num_actors * self.blocks:
                self._write_next_block()
                self.blocks += 1
            self.counts.learner_wait_s += time.perf_counter() - start
            collected.append(self._learn())
            self.counts.note(consumed=need)
            self.requests.from_host(self.version, self.eval_payload)
        metrics = mean_metrics(collected)
        metrics.update(self.stats())
        metrics.update(self.clock.summary())
        episodes, self.episodes = jax.device_get(self.episodes), init_episode_stats()
        return CallResult(metrics, episodes)

    def _learn_step(self, actor: Any, critic: Any, replay: Any, key: jax.Array, iteration: jax.Array,
                    updates: jax.Array):
        """One learner iteration as one program: the keys, the updates, the counters, and the acting
        parameters to publish. Those must be buffers of their own, since the next iteration donates
        (overwrites) the learner's while actors still read them: `jnp.copy` lowers to nothing, and
        XLA's copy insertion gives each output of the program its own buffer (tested). Op by op,
        the same work cost the learner's thread a handful of dispatches and a device copy per
        iteration, under the GIL that the actors' Python envs need."""
        n = self.plan.updates_per_iteration
        key, update_key = jax.random.split(key)
        actor, critic, metrics = self.pieces.run_updates(actor, critic, replay, jax.random.split(update_key, n), updates)
        published = jax.tree.map(jnp.copy, self.algo.acting_params(actor, critic))
        return actor, critic, key, iteration + 1, updates + n, published, metrics

    def _learn(self) -> dict:
        """One learner iteration, dispatched; its parameters are published as a new version."""
        state = self.state
        dispatched = time.perf_counter()
        actor, critic, key, iteration, updates, published, metrics = self._learn_program(
            state.actor, state.critic, state.replay, state.key, state.iteration, state.updates)
        self.clock.watch("update", dispatched, metrics)
        self.version += 1
        self.state = state._replace(actor=actor, critic=critic, key=key, iteration=iteration, updates=updates)
        self.store.publish(published, self.version)
        return metrics

    def snapshot(self) -> Snapshot:
        """The learner's state, and the parameter version and the counts."""
        counts = self.counts
        return Snapshot({name: getattr(self.state, name) for name in self.fields},
                        {"version": self.version, "accepted": counts.accepted, "consumed": counts.consumed,
                         "dropped": counts.dropped})

    def stats(self) -> dict[str, float]:
        counts = self.counts
        lags = counts.lags or [0]
        return {
            "async/replay_ratio": counts.ratio,
            "async/target_ratio": counts.target_ratio,
            "async/policy_lag_max": float(max(lags)),
            "async/policy_lag_mean": float(np.mean(lags)),
            "async/dropped_samples": float(counts.dropped),
            "timing/actor_wait_s": counts.actor_wait_s,
            "timing/learner_wait_s": counts.learner_wait_s,
        }

    def eval_payload(self) -> EvalPayload:
        return eval_payload(self.algo.acting_params(self.state.actor, self.state.critic), self.state.env)

    def describe(self) -> dict[str, Any]:
        placement = self.ctx.placement.describe() | {"actors": self.num_actors}
        if self.async_mode:
            placement["acting"] = describe(self.ctx.placement.host)
        return placement

    def summary(self, train_s: float) -> dict[str, Any]:
        return {k.split("/", 1)[1]: v for k, v in self.stats().items()} | self.counts.rates(train_s)

    def close(self, timeout: float = 30.0) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout)
        if self.async_mode and not any(thread.is_alive() for thread in self.threads):
            for actor in self.actors:
                actor.close()
            self.actors = []
