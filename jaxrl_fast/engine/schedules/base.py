"""The one interface every way of running implements, and the pieces they share.

A schedule is built from a `Context` (the run's config, env, algorithm, placement and sizes) and
then driven by the trainer:

    schedule.on_initialized = hook            # optional: `start` calls it once the state exists
    compile_s = schedule.start(restored)      # init (or restore), warm up, compile
    result = schedule.run(n)                  # n iterations -> CallResult(metrics, episodes)
    state, meta = schedule.snapshot()         # what a checkpoint holds
    payload = schedule.eval_payload()         # what the evaluator acts with
    schedule.describe(), schedule.summary(train_s), schedule.close()
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from typing import Any, Callable, Iterator, NamedTuple, Protocol

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import io_callback

from jaxrl_fast.config.plan import Plan
from jaxrl_fast.engine.acting import EnvOptions, EvalPayload
from jaxrl_fast.engine.placement import Placement
from jaxrl_fast.env.episodes import EpisodeStats, add_stats, init_episode_stats
from jaxrl_fast.types import BatchedEnv


class Context(NamedTuple):
    """What every schedule is built from."""

    config: Any  # TrainConfig
    env: BatchedEnv
    algo: Any  # the algorithm's bundle (`Algorithm` or `OffPolicyAlgorithm`)
    options: EnvOptions
    placement: Placement
    plan: Plan
    on_eval: Callable[[EvalPayload, int], None] | None  # (payload, learning iterations done)


class CallResult(NamedTuple):
    """One training call on the host: mean metrics of its iterations and the episodes that ended."""

    metrics: dict[str, float]
    episodes: EpisodeStats


class Snapshot(NamedTuple):
    state: dict[str, Any]  # pytrees a checkpoint holds
    meta: dict[str, Any]  # host counters the schedule needs back on resume


class Schedule(Protocol):
    on_initialized: Callable[[], None] | None  # called by `start` once the state exists (`initialized`)

    def start(self, restored: Any | None) -> float:
        """Initialise (or put back `restored`, a `checkpoint.Restored`), warm up and compile;
        returns the seconds it took. Runs `plan.warm_iterations` learning iterations."""

    def initialized(self) -> None: ...

    def run(self, n: int) -> CallResult: ...

    def snapshot(self) -> Snapshot: ...

    def eval_payload(self) -> EvalPayload: ...

    def describe(self) -> dict[str, Any]:
        """The placement record for `config.json` (devices, and what the schedule adds)."""

    def summary(self, train_s: float) -> dict[str, Any]:
        """Schedule-specific figures for `summary.json`."""

    def close(self) -> None: ...


class ScheduleBase:
    """What most schedules do alike: the placement record as resolved, nothing to add to the
    summary, nothing to stop. Subclasses set `self.ctx` and override what differs."""

    ctx: Context
    on_initialized: Callable[[], None] | None = None  # set by the run before `start`

    def initialized(self) -> None:
        """A schedule's `start` may call it once the state exists, before it waits for the loop's
        compile: what needs only the first policy (the evaluator compiling its program) then runs
        beside that compile. Once; the run calls it after `start` where `start` did not.

        The on-policy `sync` loop calls it: on a JAX-native env it trains faster than the evaluator
        compiles its whole-episode program, so evaluations fell due and were skipped meanwhile.
        The off-policy loops do not: their first evaluation falls due later, and the compile beside
        theirs lengthened the time to a threshold (docs/profiling.md)."""
        hook, self.on_initialized = self.on_initialized, None
        if hook is not None:
            hook()

    def describe(self) -> dict[str, Any]:
        return self.ctx.placement.describe()

    def summary(self, train_s: float) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


def eval_due(iteration: Any, every: int) -> Any:
    """After every `every` learning iterations (0: never); works on ints and on traced int32."""
    return iteration % every == 0


class EvalRequests(NamedTuple):
    """Hands the policy to the evaluator every `every` iterations, from the host or from inside jit
    (data-parallel, inside `shard_map` over `axis_name`: from the first shard only, in process 0)."""

    on_eval: Callable[[EvalPayload, Any], None] | None
    every: int
    axis_name: str | None = None

    @property
    def active(self) -> bool:
        return self.on_eval is not None and self.every > 0

    def split(self, done: int, n: int) -> list[int]:
        """`n` iterations after `done` as the calls of a fused program: cut after each iteration an
        evaluation is due at, where the host hands the evaluator the policy (`from_host`)."""
        return eval_chunks(done, n, self.every if self.active else 0)

    def from_host(self, iteration: int, payload: Callable[[], EvalPayload]) -> None:
        if self.active and eval_due(iteration, self.every):
            self.on_eval(payload(), iteration)

    def from_program(self, iteration: jax.Array, payload: EvalPayload) -> None:
        """Inside jit: `io_callback` only enqueues, so the program never waits for an evaluation."""
        if self.active:
            due = eval_due(iteration, self.every)
            if self.axis_name is not None:
                due &= lax.axis_index(self.axis_name) == 0
            lax.cond(due,
                     lambda: io_callback(self.on_eval, None, payload, iteration, ordered=False), lambda: None)


def eval_chunks(done: int, n: int, every: int) -> list[int]:
    """`n` iterations after `done` in runs that end after each multiple of `every` (0: one run)."""
    if every <= 0 or n <= 0:
        return [n]
    chunks, at, end = [], done, done + n
    while at < end:
        stop = min(end, (at // every + 1) * every)
        chunks.append(stop - at)
        at = stop
    return chunks


def merge_calls(parts: list[tuple[int, dict[str, Any], EpisodeStats]]) -> CallResult:
    """The calls of one `run` as one: (iterations, mean metrics, episodes) each, fetched to the
    host; metrics weighted by their iterations, episodes summed. One part is returned as it is."""
    parts = jax.device_get(parts)
    if len(parts) == 1:
        return CallResult(parts[0][1], parts[0][2])
    total = max(sum(k for k, _, _ in parts), 1)
    metrics = jax.tree.map(lambda *values: sum(k * v for (k, _, _), v in zip(parts, values)) / total,
                           *[m for _, m, _ in parts])
    episodes = parts[0][2]
    for _, _, more in parts[1:]:
        episodes = add_stats(episodes, more)
    return CallResult(metrics, episodes)


def run_in_calls(requests: EvalRequests, done: int, n: int, call: Callable[[int], tuple[Any, EpisodeStats]],
                 payload: Callable[[], EvalPayload]) -> CallResult:
    """`n` iterations after `done` as calls of a fused program, `call(k) -> (mean metrics,
    episodes)` running k of them; the policy goes to the evaluator between calls where one is due."""
    parts = []
    for k in requests.split(done, n):
        metrics, episodes = call(k)
        done += k
        parts.append((k, metrics, episodes))
        requests.from_host(done, payload)
    return merge_calls(parts)


@contextlib.contextmanager
def compiling_beside() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    """Two threads that compile programs while `init` runs on the caller's. An error on the caller's
    side (a failing `init`, a checkpoint that does not fit) leaves at once: a compile cannot
    be stopped, so its thread is left to finish and its program dropped, instead of the error
    waiting for it."""
    pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="compile-loop")
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def trace_once(iteration, state: Any):
    """`iteration` traced to a jaxpr once, as a function that replays it, and the shapes of its
    metrics and episode statistics.

    The loop needs the metrics' shapes before it traces its body; tracing `iteration` a second time
    for them (flax modules, optimizers, nested scans in Python) cost 0.5-0.7 s of start-up on a
    2-core CPU, on the critical path to the first training call. Replaying the jaxpr binds its
    equations without running that Python again.
    """
    closed, out_shapes = jax.make_jaxpr(iteration, return_shape=True)(state)
    replay = jax.extend.core.jaxpr_as_fun(closed)
    out_tree = jax.tree.structure(out_shapes)
    return (lambda s: jax.tree.unflatten(out_tree, replay(*jax.tree.leaves(s)))), out_shapes[1:]


def scan_iterations(iteration, state: Any, num_iterations: jax.Array, iterations_per_call: int):
    """Run `iteration(state) -> (state, metrics, finished)` min(num_iterations, iterations_per_call) times.

    The count is a traced value, so a run's last, shorter call reuses the same compiled program.
    A loop with a dynamic trip count rather than a scan whose steps `cond` on the count: XLA copies
    the operands of a `cond`, which for an off-policy state is the whole replay buffer, every
    iteration. Returns (state, mean metrics over the iterations run, summed episode stats).
    """
    iteration, (metric_shapes, stats_shapes) = trace_once(iteration, state)
    zeros = lambda shapes: jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)  # noqa: E731

    def body(_, carry):
        state, sums, stats = carry
        state, metrics, finished = iteration(state)
        return state, jax.tree.map(jnp.add, sums, metrics), add_stats(stats, finished)

    count = jnp.clip(num_iterations, 0, iterations_per_call)
    state, sums, stats = lax.fori_loop(0, count, body, (state, zeros(metric_shapes), zeros(stats_shapes)))
    return state, jax.tree.map(lambda x: x / jnp.maximum(count, 1), sums), stats


def across_shards(axis_name: str | None, metrics: Any, stats: Any) -> tuple[Any, Any]:
    """A call's metrics averaged and its episode statistics summed over the data-parallel shards
    of `axis_name` (None: as they are), so that every shard returns the run's."""
    if axis_name is None:
        return metrics, stats
    return lax.pmean(metrics, axis_name), lax.psum(stats, axis_name)


def summed_over_shards(axis_name: str | None, stats: Any) -> Any:
    """Episode statistics summed over the data-parallel shards of `axis_name` (None: as they are)."""
    return stats if axis_name is None else lax.psum(stats, axis_name)


def shard_key(key: jax.Array, axis_name: str | None) -> jax.Array:
    """A data-parallel shard's own stream of `key` (None: `key` itself): shards act and sample apart."""
    if axis_name is None:
        return key
    index = lax.axis_index(axis_name)
    fold = lambda k: jax.random.fold_in(k, index)  # noqa: E731
    return fold(key) if key.ndim == 0 else jax.vmap(fold)(key)


def total_episodes(parts: list[EpisodeStats]) -> EpisodeStats:
    """Episode stats of several iterations, summed on the host."""
    total = jax.device_get(init_episode_stats())
    for part in jax.device_get(parts):
        total = add_stats(total, part)
    return total


def mean_metrics(collected: list[dict]) -> dict[str, float]:
    """Means over per-iteration (or per-update) metric dicts, fetched to the host in one transfer;
    actor updates are summed. A dict may lack actor metrics (an update without an actor step):
    those are averaged over the dicts that have them."""
    collected = jax.device_get(collected)
    out = {}
    for name in sorted({name for metrics in collected for name in metrics}):
        values = np.asarray([m[name] for m in collected if name in m], np.float64)
        out[name] = values.sum() if name == "train/actor_updates" else values.mean()
    return out
