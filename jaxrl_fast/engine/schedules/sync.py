"""The `sync` schedule for on-policy algorithms: collect a rollout, then update, in one program.

EnvPool's XLA step runs inside `lax.scan`, so a call of `run` performs many whole iterations
(rollout + update) without returning to Python. The schedule's calls end where an evaluation is
due and the host hands the policy to the evaluator, which only enqueues: the loop never waits for
an evaluation. The program holds no host callback, so JAX's persistent cache can keep it (a
program with an `io_callback` is never cached); inside `shard_map` (data-parallel), where the
host cannot cut calls per shard, requests leave the program through `io_callback`.
"""

from __future__ import annotations

import concurrent.futures
import functools
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_fast.engine import phases
from jaxrl_fast.engine.acting import (
    EnvCarry,
    EnvOptions,
    EvalPayload,
    agent_keys,
    agents_map,
    eval_payload,
    init_env_carry,
    make_collect,
    observe,
)
from jaxrl_fast.engine.program_store import ProgramStore, placed_shapes
from jaxrl_fast.engine.run_once import jit_once
from jaxrl_fast.engine.schedules.base import (
    CallResult,
    Context,
    EvalRequests,
    ScheduleBase,
    Snapshot,
    across_shards,
    compiling_beside,
    run_in_calls,
    scan_iterations,
    shard_key,
    total_episodes,
)
from jaxrl_fast.env.episodes import EpisodeStats
from jaxrl_fast.types import Algorithm, BatchedEnv, Rollout

__all__ = ["LoopState", "OnPolicySync", "SyncLoop", "checkpointed", "make_sync_loop", "with_checkpointed"]


class LoopState(NamedTuple):
    """Everything the fused loop carries; all of it is run state."""

    algo: Any
    env: EnvCarry
    key: jax.Array
    iteration: jax.Array  # int32 []: iterations completed


class CallMetrics(NamedTuple):
    """Reduced over one `run` call: means of update metrics, sums of finished episodes."""

    train: dict[str, jax.Array]
    episodes: EpisodeStats
    iterations: jax.Array  # int32 []: iterations run by this call


class Batch(NamedTuple):
    """What one iteration's rollout hands its update."""

    rollout: Rollout
    finished: EpisodeStats  # the episodes that ended in the rollout
    update_key: jax.Array


class Learner(NamedTuple):
    """The loop state an update reads and writes (no env carry: the update program never steps)."""

    algo: Any
    iteration: jax.Array


class SyncLoop(NamedTuple):
    init: Callable[[jax.Array, Any, jax.Array], LoopState]
    run: Callable[[LoopState, jax.Array], tuple[LoopState, CallMetrics]]
    steps_per_iteration: int
    iterations_per_call: int
    # The same iteration as two programs, for envs stepped through a host handle (`split_call`):
    collect_batch: Callable[[Any, EnvCarry, jax.Array], tuple[EnvCarry, jax.Array, Batch]]  # (algo, env, key)
    learn_batch: Callable[[Learner, Batch], tuple[Learner, dict[str, jax.Array]]]


def make_sync_loop(
    algo: Algorithm,
    env: BatchedEnv,
    options: EnvOptions,
    iterations_per_call: int,
    eval_every_iterations: int,
    on_eval: Callable[[EvalPayload, Any], None] | None,
    num_agents: int = 1,
    batched_updates: bool = False,
    axis_name: str | None = None,
) -> SyncLoop:
    """Build `init(key, handle, first_obs)` and the jitted `run(state, num_iterations)`.

    `run` always scans `iterations_per_call` iterations; those past `num_iterations` are skipped.
    `on_eval(payload, iteration)` is called on the host after every `eval_every_iterations`
    iterations (0 disables it).

    With `num_agents` N > 1 the loop trains N independent agents over one pool (agent j on envs
    `[j E, (j + 1) E)`): `init` takes one key per agent, and the algorithm's state, the env carry
    (but the handle), the keys, metrics, episode statistics and evaluation payloads get a leading
    agents axis. Agent j draws exactly the random numbers a single loop with its key draws, acts
    vmapped, and learns one agent after another: its results are bitwise those of the single loop
    (but for observation statistics, whose vmapped sums XLA may order differently).
    `batched_updates` vmaps the updates too (faster where the update is batch-bound, on an
    accelerator; equal to the single loop only up to floating-point reassociation).

    With `axis_name`, the loop is one data-parallel shard's, to be run inside `shard_map` over that
    axis (`schedules.data_parallel`): `env` steps the shard's envs, keys are folded with the shard's
    index, and a call returns the shards' mean metrics and summed episode statistics; `on_eval` is
    called by the first shard only. The caller builds `algo` with the same axis (it averages
    gradients over the shards) and sets `options.axis_name` (observation and reward statistics
    span the shards): with `shard_map`'s checks off, a loop without them would let the shards drift.
    """
    per_agent = agents_map(num_agents)
    learn = agents_map(num_agents, sequential=not batched_updates)
    collect = make_collect(env, options, algo.rollout_length, num_agents)
    requests = EvalRequests(on_eval, eval_every_iterations, axis_name)

    def init(key: jax.Array, handle: Any, first_obs: jax.Array) -> LoopState:
        algo_key, loop_key = per_agent(lambda k: tuple(jax.random.split(k)))(key)
        return LoopState(learn(algo.init)(algo_key), init_env_carry(env, options, handle, first_obs, num_agents),
                         loop_key, jnp.zeros((), jnp.int32))

    def collect_batch(algo_state: Any, env_carry: EnvCarry, key: jax.Array) -> tuple[EnvCarry, jax.Array, Batch]:
        key, rollout_key, update_key = per_agent(lambda k: tuple(jax.random.split(k, 3)))(key)
        policy = lambda obs, k: per_agent(algo.act)(algo_state, obs, k)  # noqa: E731
        env_carry, transitions, finished = collect(env_carry, policy, shard_key(rollout_key, axis_name))
        last_obs = per_agent(lambda c: observe(options, c.obs_moments, c.obs))(env_carry._replace(handle=None))
        return env_carry, key, Batch(Rollout(transitions, last_obs), finished, update_key)

    def learn_batch(learner: Learner, batch: Batch) -> tuple[Learner, dict[str, jax.Array]]:
        with jax.named_scope(phases.UPDATE):
            update = learn(algo.update, in_axes=(0, Rollout(1, 0), 0))  # transitions are [T, N, E, ...]
            algo_state, metrics = update(learner.algo, batch.rollout, shard_key(batch.update_key, axis_name))
        return Learner(algo_state, learner.iteration + 1), metrics

    def iteration(state: LoopState) -> tuple[LoopState, dict[str, jax.Array], EpisodeStats]:
        env_carry, key, batch = collect_batch(state.algo, state.env, state.key)
        learner, metrics = learn_batch(Learner(state.algo, state.iteration), batch)
        state = LoopState(learner.algo, env_carry, key, learner.iteration)
        requests.from_program(state.iteration, EvalPayload(per_agent(algo.policy_params)(learner.algo), state.env.obs_moments))
        return state, metrics, batch.finished

    def run(state: LoopState, num_iterations: jax.Array) -> tuple[LoopState, CallMetrics]:
        state, metrics, stats = scan_iterations(iteration, state, num_iterations, iterations_per_call)
        metrics, stats = across_shards(axis_name, metrics, stats)
        return state, CallMetrics(metrics, stats, jnp.minimum(num_iterations, iterations_per_call))

    return SyncLoop(
        init=init,
        run=jax.jit(run, donate_argnums=0),
        steps_per_iteration=env.spec.num_envs // num_agents * algo.rollout_length,  # each agent's
        iterations_per_call=iterations_per_call,
        collect_batch=jax.jit(collect_batch, donate_argnums=(1, 2)),
        learn_batch=jax.jit(learn_batch, donate_argnums=0),
    )


def split_call(collect_batch: Callable, learn_batch: Callable, state: LoopState,
               num_iterations: int) -> tuple[LoopState, dict[str, Any], EpisodeStats]:
    """A `SyncLoop`'s `run(state, num_iterations)` as two programs per iteration (its
    `collect_batch` and `learn_batch`, or their compiled forms), dispatched from the host; returns
    the state, the iterations' mean metrics and their episodes, on the host.

    Why: the persistent cache cannot keep a program that steps envs through an `io_callback`
    (Gymnasium's) or EnvPool's handlers called directly (the pool's address is an attribute of the
    call), which is how they are stepped where `env.ffi_forward` cannot be built; so each run would compile the whole
    loop again. Here only the rollout program holds the step; the update, the larger compile, is
    cached. The iterations are the fused loop's, op for op."""
    env_carry, key, learner = state.env, state.key, Learner(state.algo, state.iteration)
    metrics, finished = [], []
    for _ in range(num_iterations):
        env_carry, key, batch = collect_batch(learner.algo, env_carry, key)
        learner, m = learn_batch(learner, batch)
        metrics.append(m)
        finished.append(batch.finished)
    metrics, finished = jax.device_get((metrics, finished))  # one transfer, after the call's last dispatch
    mean = {name: np.mean([m[name] for m in metrics], axis=0) for name in metrics[0]} if metrics else {}  # per agent
    return LoopState(learner.algo, env_carry, key, learner.iteration), mean, total_episodes(finished)


def checkpointed(state: LoopState) -> dict[str, Any]:
    """What a checkpoint holds of the loop's state: the learner, its key and count, and the env
    statistics (EnvPool's simulators cannot be saved: a resumed run starts new episodes)."""
    return {"algo": state.algo, "key": state.key, "iteration": state.iteration,
            "obs_moments": state.env.obs_moments, "reward_scale": state.env.reward_scale}


def with_checkpointed(state: LoopState, saved: dict[str, Any]) -> LoopState:
    """`state` with `checkpointed`'s fields put back from `saved`."""
    env = state.env._replace(obs_moments=saved["obs_moments"], reward_scale=saved["reward_scale"])
    return state._replace(algo=saved["algo"], key=saved["key"], iteration=saved["iteration"], env=env)


# Split loops run the iterations of short runs. On a 2-core CPU, each iteration's two dispatches
# cost 0.7-1.5 ms more than the fused loop's where iterations are short (experiments/bench_split.py),
# and a warm start saved 0.83 s to 475 on PPO CartPole-v1, the smallest update (docs/profiling.md):
# break-even there is about 570 iterations. The bound leaves room for larger updates, whose compile
# a warm start saves too; it is a judgement, not yet a measurement of each preset.
SPLIT_MAX_ITERATIONS = 2_000


class OnPolicySync(ScheduleBase):
    """On-policy `sync`: rollouts and updates fused into one jitted program on the acting device, or,
    for runs of at most `SPLIT_MAX_ITERATIONS` over envs whose step the cache cannot keep
    (`program_key` None: Gymnasium's and EnvPool's without `env.ffi_forward`), the same iterations
    as a rollout program and an update program (`split_call`), so that a warm start finds the
    update in JAX's persistent cache."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.requests = EvalRequests(ctx.on_eval, ctx.plan.eval_every_iterations)
        self.loop = make_sync_loop(ctx.algo, ctx.env, ctx.options, ctx.plan.iterations_per_call, 0, None,
                                   ctx.config.num_seeds, ctx.config.batch_seed_updates)
        self.split = ctx.env.program_key is None and ctx.plan.total_iterations <= SPLIT_MAX_ITERATIONS

    def start(self, restored: Any | None) -> float:
        env, acting = self.ctx.env, self.ctx.placement.acting
        with jax.default_device(acting):
            args = (agent_keys(self.ctx.config.seed, self.ctx.config.num_seeds), env.handle, env.reset())
            begin = time.perf_counter()
            # The loop compiles from the state's shapes on a second thread while `init` compiles and
            # runs here: XLA releases the GIL, so the two compilations overlap.
            placed = functools.partial(placed_shapes, device=acting)
            shapes = placed(jax.eval_shape(self.loop.init, *args))
            with compiling_beside() as compiler:
                store = ProgramStore.for_run(self.ctx.config, env, self.ctx.plan, self.ctx.placement)
                if self.split:
                    programs = self._compile_split(compiler, shapes, placed)
                else:
                    compiled = compiler.submit(store.compile, "sync-run", self.loop.run, (shapes, np.int32(0)))
                args = jax.device_put(args, acting)
                self.state = store.compile("sync-init", jit_once(self.loop.init), args)(*args)
                if restored is not None:
                    self.state = with_checkpointed(self.state, restored.into(self.snapshot().state))
                self.initialized()  # the evaluators compile beside the loop (`initialized`)
                if self.split:
                    self._collect, self._learn = programs.result()
                else:
                    self._run = compiled.result()
            self.done = int(self.state.iteration)
            return time.perf_counter() - begin

    def _compile_split(self, compiler: concurrent.futures.Executor, shapes: LoopState,
                       placed: Callable) -> concurrent.futures.Future:
        """The rollout and the update program, compiled ahead on the two threads of `compiler`
        (the update is traced from the rollout's output shapes)."""
        loop = self.loop

        def both() -> tuple[Any, Any]:
            collect = loop.collect_batch.trace(shapes.algo, shapes.env, shapes.key)
            learner, batch = Learner(shapes.algo, shapes.iteration), placed(collect.out_info[2])
            learn = compiler.submit(lambda: loop.learn_batch.trace(learner, batch).lower().compile())
            return collect.lower().compile(), learn.result()

        return compiler.submit(both)

    def run(self, n: int) -> CallResult:
        def call(k: int) -> tuple[dict[str, jax.Array], EpisodeStats]:
            if self.split:
                self.state, metrics, episodes = split_call(self._collect, self._learn, self.state, k)
                return metrics, episodes
            self.state, metrics = self._run(self.state, jnp.int32(k))
            return metrics.train, metrics.episodes

        result = run_in_calls(self.requests, self.done, n, call, self.eval_payload)
        self.done += n
        return result

    def summary(self, train_s: float) -> dict[str, Any]:
        return {"loop": "split" if self.split else "fused"}

    def snapshot(self) -> Snapshot:
        return Snapshot(checkpointed(self.state), {})

    def eval_payload(self) -> EvalPayload:
        return eval_payload(agents_map(self.ctx.config.num_seeds)(self.ctx.algo.policy_params)(self.state.algo), self.state.env)
