"""The `async` schedule for off-policy algorithms (Spreeze, TianJi): actors and learner at their own pace.

Actor threads each own an EnvPool instance and act with either a jitted program around EnvPool's
XLA step (`--env-batch-size` 0 or `--num-envs`), or, in EnvPool's async mode (`--env-batch-size`
below `--num-envs`), the jitted policy on each batch of envs that finished first, with per-env
streams staged on the host (`jaxrl_fast.schedules.async_mode`). They read the newest
published parameters (newest wins, with a version number), act a chunk of steps, and hand the rows
to the learner tagged with the version that produced them. The learner (the trainer's thread)
writes the rows into the replay buffer, runs its updates and publishes new parameters.

The buffer holds one stream per environment of every actor (`num_actors x num_envs` streams), so
each stream stays one continuous trajectory: the learner writes a *block* made of the next chunk
of every actor at once. A chunk acted by parameters more than `max_policy_lag` versions older
than the learner's when it reaches the buffer is dropped: its rows are still written, to keep the
stream continuous, but marked invalid, so no update ever samples them; drops are counted.

A `Controller` keeps the run's shape fixed whatever the speeds:
* replay ratio = samples consumed by updates / samples accepted after the warm-up. Its target is
  the algorithm's update-to-data ratio x batch size: the learner waits while its next updates
  would push the ratio past it.
* actors wait while they are more than `lead` blocks ahead of what the learner has consumed,
  which also bounds the policy lag.
Any thread's failure stops every thread and is re-raised in the trainer; `close()` joins them.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_fast import phases
from jaxrl_fast.data import OffPolicyAlgorithm
from jaxrl_fast.env import XlaEnv, add_stats, init_episode_stats, make_xla_env
from jaxrl_fast.placement import host_acting_device, transfer
from jaxrl_fast.replay import Row, add_many, init_replay
from jaxrl_fast.schedules.acting import EnvOptions, EvalPayload, init_env_carry
from jaxrl_fast.schedules.async_mode import AsyncModeActor
from jaxrl_fast.schedules.offpolicy import OffPolicyPlan, make_pieces, mean_metrics, reduce_update_metrics
from jaxrl_fast.schedules.timing import PhaseClock

ACTOR_SEED_STRIDE = 1000  # actor i's environments are seeded seed + 1000 i


class Chunk(NamedTuple):
    rows: Row  # [T, num_envs, ...] on the learner's device
    version: int  # parameter version that acted (-1: uniform random warm-up actions)
    finished: Any  # EpisodeStats of the chunk
    actor: int


class ParameterStore:
    """Newest-wins parameters with a version number.

    The learner publishes parameters as soon as their update is dispatched, before the device has
    computed them; `latest_ready` gives an actor the newest version that is already computed, so
    acting never waits for an update in flight (the version it reports is the one it acts with).
    """

    KEEP = 4  # versions kept: the learner publishes at most a few ahead of what is computed

    def __init__(self, params: Any):
        self._lock = threading.Lock()
        self._versions: collections.deque[tuple[Any, int]] = collections.deque([(params, 0)], maxlen=self.KEEP)

    def publish(self, params: Any, version: int) -> None:
        with self._lock:
            self._versions.append((params, version))

    def latest(self) -> tuple[Any, int]:
        with self._lock:
            return self._versions[-1]

    def latest_ready(self) -> tuple[Any, int]:
        with self._lock:
            versions = list(self._versions)
        for params, version in reversed(versions):
            if all(leaf.is_ready() for leaf in jax.tree.leaves(params) if isinstance(leaf, jax.Array)):
                return params, version
        return versions[0]  # none computed yet: the oldest kept (the caller waits for it)


class Controller:
    """Balances production and consumption; records waits, lags and drops. Counts are samples."""

    def __init__(self, target_ratio: float, chunk: int, num_actors: int, max_policy_lag: int, stop: threading.Event,
                 lead: int = 2):
        self.target_ratio, self.chunk, self.num_actors = target_ratio, chunk, num_actors
        self.max_policy_lag, self.lead, self.stop = max_policy_lag, lead, stop
        self.cond = threading.Condition()
        self.started = [0] * num_actors  # chunks each actor began after its warm-up
        self.accepted = 0  # samples written as valid after the warm-up
        self.consumed = 0  # samples drawn by updates
        self.dropped = 0  # samples written invalid: acted by parameters older than the lag bound
        self.lags: list[int] = []  # per accepted chunk
        self.actor_wait_s = 0.0
        self.learner_wait_s = 0.0

    def _blocks_paid(self) -> float:
        """Blocks the learner has used up: consumed at the target ratio, or dropped."""
        return (self.consumed / self.target_ratio + self.dropped) / (self.chunk * self.num_actors)

    def wait_to_start(self, actor: int) -> bool:
        """Block until `actor` may act its next chunk; False when the run is stopping."""
        begin = time.perf_counter()
        with jax.profiler.TraceAnnotation(phases.WAIT), self.cond:
            while not self.stop.is_set() and self.started[actor] >= self._blocks_paid() + self.lead:
                self.cond.wait(0.05)
            self.started[actor] += 1
            self.actor_wait_s += time.perf_counter() - begin
        return not self.stop.is_set()

    def learner_may_consume(self, need: int) -> bool:
        with self.cond:
            return self.consumed + need <= self.target_ratio * self.accepted + 1e-9

    def note(self, **changes: int) -> None:
        with self.cond:
            for name, value in changes.items():
                setattr(self, name, getattr(self, name) + value)
            self.cond.notify_all()

    @property
    def ratio(self) -> float:
        """Samples consumed by updates per sample accepted after the warm-up."""
        return self.consumed / max(self.accepted, 1)


def merge_block(rows: tuple[Row, ...], keep: jax.Array) -> Row:
    """One chunk per actor, side by side on the env axis; a dropped chunk's rows are marked invalid."""
    rows = tuple(r._replace(valid=r.valid & k) for r, k in zip(rows, keep))
    return jax.tree.map(lambda *parts: jnp.concatenate(parts, axis=1), *rows)


class AsyncLoop:
    def __init__(self, algo: OffPolicyAlgorithm, env: XlaEnv, options: EnvOptions, plan: OffPolicyPlan,
                 learner_device: jax.Device, seed: int, num_actors: int, max_policy_lag: int, on_eval=None,
                 eval_every_iterations: int = 0, env_batch_size: int = 0):
        if options.normalize_observations or options.scale_rewards:
            raise ValueError("--schedule async: observation normalization and reward scaling are on-policy options")
        self.algo, self.plan, self.options = algo, plan, options
        self.device, self.seed = learner_device, seed
        self.on_eval, self.eval_every = on_eval, eval_every_iterations
        threads = env.pool.config["num_threads"]
        self.num_actors = num_actors
        self.async_mode = 0 < env_batch_size < env.spec.num_envs
        if self.async_mode:  # EnvPool's async mode: each actor stages per-env streams on the host
            self.actors = [AsyncModeActor(algo, env.spec, env.spec.num_envs, env_batch_size, threads,
                                          seed + ACTOR_SEED_STRIDE * i, plan.rollout_length, host_acting_device())
                           for i in range(num_actors)]
        else:  # the whole chunk is one jitted program around EnvPool's XLA step
            self.envs = [env] + [make_xla_env(env.spec.env_id, env.spec.num_envs, threads, seed + ACTOR_SEED_STRIDE * i)
                                 for i in range(1, num_actors)]
        self.chunk = plan.rollout_length * env.spec.num_envs  # samples per actor chunk; one learner iteration's worth
        self.pieces = make_pieces(algo, env, options, plan)
        self.stop = threading.Event()
        self.controller = Controller(plan.updates_per_iteration * plan.batch_size / self.chunk, self.chunk, num_actors,
                                     max_policy_lag, self.stop)
        self.queue: queue.Queue[Chunk] = queue.Queue()
        self.pending = [collections.deque() for _ in range(num_actors)]
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []
        self.version = 0
        self.episodes = init_episode_stats()
        self.warmup_written = 0
        # env: EnvPool (with the XLA step, the whole acting program, inference included); inference:
        # the policy on an async-mode batch; transfer: copies between the actors' and learner's devices
        self.clock = PhaseClock()

        def updates(actor, critic, replay, keys, first_index):
            actor, critic, metrics = self.pieces.run_updates(actor, critic, replay, keys, first_index)
            return actor, critic, reduce_update_metrics(metrics)

        self._updates = jax.jit(updates, donate_argnums=(0, 1))
        def add_block(replay, episodes, rows, finished, keep):
            for stats in finished:
                episodes = add_stats(episodes, stats)
            return add_many(replay, merge_block(rows, keep)), episodes

        self._add_block = jax.jit(add_block, donate_argnums=0)

    # -- actors ----------------------------------------------------------------------------
    def _actor(self, index: int, warmup_chunks: int) -> None:
        try:
            act = self._async_mode_acting(index) if self.async_mode else self._xla_acting(index)
            key = jax.random.key(self.seed + 7919 * (index + 1))
            chunks = 0
            while not self.stop.is_set():
                random = chunks < warmup_chunks
                if not random and not self.controller.wait_to_start(index):
                    return
                params, version = self.store.latest_ready()
                key, sub = jax.random.split(key)
                env_step = chunks * self.chunk * self.num_actors  # the run's steps so far (DQN's epsilon)
                rows, acted_by, finished = act(params, version, random, sub, env_step)
                begin = time.perf_counter()
                rows = jax.block_until_ready(transfer(rows, self.device))
                self.clock.interval("transfer", begin, time.perf_counter())
                self.queue.put(Chunk(rows, acted_by, finished, index))
                chunks += 1
        except BaseException as error:  # reported by the learner; every thread stops
            self.errors.append(error)
            self.stop.set()

    def _xla_acting(self, index: int):
        """Acting as one jitted program per chunk: EnvPool's XLA step and the policy inside `lax.scan`."""
        env = self.envs[index]
        pieces = make_pieces(self.algo, env, self.options, self.plan)
        program = jax.jit(pieces.act_rows, static_argnums=4, donate_argnums=0)
        carry = jax.jit(lambda h, o: init_env_carry(env, self.options, h, o))(env.handle, env.reset())

        def act(params, version, random, key, env_step):
            nonlocal carry
            begin = time.perf_counter()
            carry, rows, finished = program(carry, params, key, jnp.int32(env_step), random)
            jax.block_until_ready(rows)
            self.clock.interval("env", begin, time.perf_counter())
            return rows, -1 if random else version, finished

        return act

    def _async_mode_acting(self, index: int):
        """Acting on EnvPool's async-mode batches from the host, rows staged per env stream."""
        actor = self.actors[index]

        def act(params, version, random, key, env_step):
            begin = time.perf_counter()
            params = jax.block_until_ready(transfer(params, actor.device))
            self.clock.interval("transfer", begin, time.perf_counter())
            staged = actor.act_chunk(params, version, random, key, env_step, self.clock)
            return staged.rows, staged.version, staged.finished

        return act

    # -- learner ---------------------------------------------------------------------------
    def init(self, key: jax.Array, handle: Any, first_obs: Any, resume: tuple | None = None):
        """`resume`: (put the checkpointed state into a fresh one, the saved `counters()`, whether the
        checkpoint holds the replay buffer); a restored buffer needs no warm-up."""
        with jax.default_device(self.device):
            state = jax.jit(self.pieces.init)(key, handle, first_obs)
        streams = self.chunk // self.plan.rollout_length * self.num_actors
        example = jax.tree.map(lambda x: jax.ShapeDtypeStruct((streams, *x.shape[2:]), x.dtype), state.replay.rows)
        rows = max(2, -(-self.plan.replay_rows // self.num_actors))  # the same total capacity over more streams
        replay = init_replay(rows, example)
        self.state = jax.device_put(state._replace(replay=replay), self.device)
        warmup_chunks = max(1, -(-self.plan.warmup_iterations // self.num_actors))
        if resume is not None:
            put, counters, has_replay = resume
            self.state = put(self.state)
            self.version = counters["version"]
            for name in ("accepted", "consumed", "dropped"):
                setattr(self.controller, name, counters[name])
            self.controller.started = [(counters["accepted"] + counters["dropped"]) // (self.chunk * self.num_actors)] * self.num_actors
            warmup_chunks = 0 if has_replay else warmup_chunks
        # a copy, like every version published: the first update donates the learner's own buffers
        self.store = ParameterStore(transfer(self.algo.acting_params(self.state.actor, self.state.critic),
                                             self.device, may_alias=False))
        self.store.publish(self.store.latest()[0], self.version)
        for i in range(self.num_actors):
            thread = threading.Thread(target=self._actor, args=(i, warmup_chunks), name=f"jaxrl_fast-actor-{i}",
                                      daemon=True)
            thread.start()
            self.threads.append(thread)
        self.warmup_samples = warmup_chunks * self.num_actors * self.chunk
        return self.state

    def _drain(self, block: bool) -> None:
        """Move arrived chunks into the buffer, a block (one chunk per actor) at a time."""
        while True:
            try:
                chunk = self._wait_for_chunk() if block else self.queue.get_nowait()
            except queue.Empty:
                return
            block = False
            self.pending[chunk.actor].append(chunk)
            while all(self.pending):
                self._write_block([p.popleft() for p in self.pending])

    def _wait_for_chunk(self) -> Chunk:
        with jax.profiler.TraceAnnotation(phases.WAIT):
            return self.queue.get(timeout=0.05)

    def _write_block(self, chunks: list[Chunk]) -> None:
        ctrl = self.controller
        warmup = [c.version < 0 for c in chunks]
        lags = [self.version - c.version for c in chunks]
        keep = [w or lag <= ctrl.max_policy_lag for w, lag in zip(warmup, lags)]
        replay, self.episodes = self._add_block(self.state.replay, self.episodes, tuple(c.rows for c in chunks),
                                                tuple(c.finished for c in chunks), jnp.asarray(keep))
        self.state = self.state._replace(replay=replay)
        self.warmup_written += self.chunk * sum(warmup)
        with ctrl.cond:
            ctrl.lags.extend(lag for w, k, lag in zip(warmup, keep, lags) if k and not w)
        ctrl.note(accepted=self.chunk * sum(k and not w for w, k in zip(warmup, keep)),
                  dropped=self.chunk * sum(not k for k in keep))

    def _check(self) -> None:
        if self.errors:
            self.close()
            raise RuntimeError(f"an actor thread failed: {type(self.errors[0]).__name__}: {self.errors[0]}") from self.errors[0]

    def warmup(self) -> None:
        while self.warmup_written < self.warmup_samples:
            self._check()
            self._drain(block=True)

    def run(self, n: int):
        collected = []
        need = self.plan.updates_per_iteration * self.plan.batch_size
        for _ in range(n):
            start = time.perf_counter()
            while True:  # the learner waits while its next updates would push the ratio past its target
                self._check()
                self._drain(block=False)
                if self.controller.learner_may_consume(need):
                    break
                self._drain(block=True)
            self.controller.learner_wait_s += time.perf_counter() - start
            state = self.state
            key, update_key = jax.random.split(state.key)
            keys = jax.random.split(update_key, self.plan.updates_per_iteration)
            dispatched = time.perf_counter()
            actor, critic, metrics = self._updates(state.actor, state.critic, state.replay, keys, state.updates)
            self.clock.watch("update", dispatched, metrics)
            self.version += 1
            self.state = state._replace(actor=actor, critic=critic, key=key, iteration=state.iteration + 1,
                                        updates=state.updates + self.plan.updates_per_iteration)
            # a copy: the next updates donate (overwrite) the learner's buffers while actors read these
            self.store.publish(transfer(self.algo.acting_params(actor, critic), self.device, may_alias=False),
                               self.version)
            self.controller.note(consumed=need)
            collected.append(metrics)
            if self.on_eval is not None and self.eval_every and self.version % self.eval_every == 0:
                self.on_eval(self.eval_payload(), self.version)
        metrics = mean_metrics(collected)
        metrics.update(self.stats())
        metrics.update(self.clock.summary())
        episodes, self.episodes = jax.device_get(self.episodes), init_episode_stats()
        return metrics, episodes

    def counters(self) -> dict[str, int]:
        """What a checkpoint keeps of the schedule: the parameter version and the controller's counts."""
        ctrl = self.controller
        return {"version": self.version, "accepted": ctrl.accepted, "consumed": ctrl.consumed, "dropped": ctrl.dropped}

    def stats(self) -> dict[str, float]:
        ctrl = self.controller
        lags = ctrl.lags or [0]
        return {
            "async/replay_ratio": ctrl.ratio,
            "async/target_ratio": ctrl.target_ratio,
            "async/policy_lag_max": float(max(lags)),
            "async/policy_lag_mean": float(np.mean(lags)),
            "async/dropped_samples": float(ctrl.dropped),
            "timing/actor_wait_s": ctrl.actor_wait_s,
            "timing/learner_wait_s": ctrl.learner_wait_s,
        }

    def eval_payload(self) -> EvalPayload:
        return jax.device_get(EvalPayload(self.algo.acting_params(self.state.actor, self.state.critic),
                                          self.state.env.obs_moments))

    def close(self, timeout: float = 30.0) -> None:
        self.stop.set()
        with self.controller.cond:
            self.controller.cond.notify_all()
        for thread in self.threads:
            thread.join(timeout)
        if self.async_mode and not any(thread.is_alive() for thread in self.threads):
            for actor in self.actors:
                actor.close()
            self.actors = []
