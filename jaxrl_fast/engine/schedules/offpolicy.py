"""The off-policy family's schedules (`sync` and `concurrent`), each over the loop its placement calls for.

The pieces (acting into the replay stream, the critic and actor steps) are
`jaxrl_fast.engine.offpolicy_steps`'; this module arranges them:

* fused (`OffPolicyFused`, everything on the acting device): iterations, acting and updates are
  one jitted program, many iterations per call (`fused_loop`).
* roles on their own devices (`OffPolicyHostDriven`: `split`, accelerators while EnvPool steps on
  the CPU; and `OffPolicyConcurrent`): the host dispatches the programs (`host_driven_loop`); JAX's
  asynchronous dispatch lets the actor's and the critic's programs run at the same time on their
  devices, and only the small exchanged pytrees are copied. `exchange="fresh"` gives the actor step
  the critic just updated (results equal the fused program's); `"lagged"` gives it the critic of one
  update earlier, so the two steps of an update overlap. A role with several devices is
  data-parallel: batch sharded, parameters replicated. `concurrent=True` is the HTS-RL order: the
  rows of iteration k+1 are collected with the policy of iteration k while the updates of
  iteration k run.

The schedule table (`jaxrl_fast.engine.schedules.SCHEDULES`) picks the class from the placement;
each class builds its one loop.
"""

from __future__ import annotations

import concurrent.futures
import functools
import time
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jaxrl_fast.config.plan import OffPolicyPlan, run_off_policy_plan
from jaxrl_fast.engine.acting import EnvOptions, EvalPayload, agent_keys, agents_map, eval_payload
from jaxrl_fast.engine.offpolicy_steps import (
    OffPolicyLoop,
    OffPolicyState,
    checkpointed_fields,
    env_step_at,
    make_pieces,
    resumed_fields,
)
from jaxrl_fast.engine.placement import Placement, transfer
from jaxrl_fast.engine.program_store import ProgramStore, placed_shapes
from jaxrl_fast.engine.replay import add_many
from jaxrl_fast.engine.run_once import jit_once, run_once_options
from jaxrl_fast.engine.schedules.base import (
    CallResult,
    Context,
    EvalRequests,
    ScheduleBase,
    Snapshot,
    across_shards,
    compiling_beside,
    mean_metrics,
    run_in_calls,
    scan_iterations,
    shard_key,
    summed_over_shards,
    total_episodes,
)
from jaxrl_fast.engine.timing import PhaseClock
from jaxrl_fast.env.ids import is_jax_env_id
from jaxrl_fast.types import BatchedEnv, EnvSpec, OffPolicyAlgorithm

__all__ = ["OffPolicyConcurrent", "OffPolicyFused", "OffPolicyHostDriven", "fused_loop", "host_driven_loop"]


def fused_loop(algo, env, options, plan, placement, iterations_per_call, requests: EvalRequests,
               num_agents: int = 1, batched_updates: bool = False, axis_name: str | None = None,
               programs: ProgramStore = ProgramStore(None, None)) -> OffPolicyLoop:
    """The fused program; with `axis_name`, one data-parallel shard's (as `sync.make_sync_loop`'s):
    its own envs and replay buffer, keys folded with the shard's index, gradients averaged.
    `programs` compiles `init`, the warm-up and the loop at their first calls (loading them where stored)."""
    pieces = make_pieces(algo, env, options, plan, num_agents=num_agents, batched_updates=batched_updates)
    steps_per_iteration = plan.rollout_length * env.spec.num_envs // num_agents  # each agent's

    def acting_params(state: OffPolicyState) -> Any:
        return agents_map(num_agents)(algo.acting_params)(state.actor, state.critic)

    def store(state: OffPolicyState, collect_key: jax.Array, random: bool):
        env_step = env_step_at(plan, state.iteration, steps_per_iteration)
        env_carry, rows, finished = pieces.act_rows(state.env, acting_params(state), collect_key, env_step, random)
        return state._replace(env=env_carry, replay=add_many(state.replay, rows)), finished

    def warmup(state: OffPolicyState):
        def body(state, _):
            key, collect_key, _ = pieces.iteration_keys(state.key)
            return store(state._replace(key=key), shard_key(collect_key, axis_name), random=True)

        state, finished = lax.scan(body, state, None, length=plan.warmup_iterations)
        return state, summed_over_shards(axis_name, jax.tree.map(lambda x: x.sum(0), finished))

    def iteration(state: OffPolicyState):
        key, collect_key, update_keys = pieces.iteration_keys(state.key)
        state, finished = store(state._replace(key=key), shard_key(collect_key, axis_name), random=False)
        actor, critic, metrics = pieces.run_updates(state.actor, state.critic, state.replay, shard_key(update_keys, axis_name),
                                                    state.updates)
        state = state._replace(actor=actor, critic=critic, iteration=state.iteration + 1,
                               updates=state.updates + plan.updates_per_iteration)
        requests.from_program(state.iteration, EvalPayload(acting_params(state), state.env.obs_moments))
        return state, metrics, finished

    def run(state: OffPolicyState, n: jax.Array):
        state, metrics, stats = scan_iterations(iteration, state, n, iterations_per_call)
        return (state, *across_shards(axis_name, metrics, stats))

    run_program = programs.lazy("offpolicy-run", jax.jit(run, donate_argnums=0))
    init_program = programs.lazy("offpolicy-init", jit_once(pieces.init))
    compile_options = None if axis_name else warmup_options(env.spec)  # a data-parallel run's shard_map jits it
    warmup_program = programs.lazy("offpolicy-warmup", jax.jit(warmup, donate_argnums=0, compiler_options=compile_options))

    def compile_ahead(executor: concurrent.futures.Executor, init_args: tuple, warm_up: bool) -> None:
        # Each is lowered alone, the loop first; XLA releases the GIL, so the loop's compile (most of a
        # cold start) overlaps the warm-up's and init's tracing and compiles
        shapes = placed_shapes(jax.eval_shape(pieces.init, *init_args), placement.acting)
        run_program.ahead(executor, shapes, jax.ShapeDtypeStruct((), jnp.int32))
        if warm_up:
            warmup_program.ahead(executor, shapes)

    return OffPolicyLoop(
        init=pieces.init if axis_name else lambda *args: init_program(*jax.device_put(args, placement.acting)),
        warmup=warmup_program,
        run=lambda state, n: run_program(state, jnp.int32(n)),
        acting_params=acting_params,
        steps_per_iteration=steps_per_iteration,
        warmup_steps=plan.warmup_iterations * steps_per_iteration,
        compile_ahead=None if axis_name else compile_ahead,
    )


class HostDrivenLoop:
    """The host dispatches acting, buffer writes and the roles' updates as separate programs, each
    on the devices placement gives it. Counters stay on the host: reading them from a device
    would wait for it."""

    def __init__(self, algo: OffPolicyAlgorithm, env: BatchedEnv, options: EnvOptions, plan: OffPolicyPlan,
                 placement: Placement, exchange: str, requests: EvalRequests, concurrent: bool, clock: PhaseClock,
                 programs: ProgramStore):
        self.algo, self.plan, self.exchange, self.requests = algo, plan, exchange, requests
        self.concurrent, self.clock, self.acting = concurrent, clock, placement.acting
        self.on_actor, self.on_critic = placement.replicated("actor"), placement.replicated("critic")
        self.shared = placement.actor == placement.critic
        self.steps_per_iteration = plan.rollout_length * env.spec.num_envs
        self.pieces = pieces = make_pieces(algo, env, options, plan, batch_sharding=placement.data_parallel("critic"))
        actor_batch = placement.data_parallel("actor")

        def actor_step(actor, critic_x, obs, weight, key):
            obs, weight = lax.with_sharding_constraint((obs, weight), actor_batch)
            return pieces.actor_step(actor, critic_x, obs, weight, key)

        # each compiled at its first call, or loaded where an earlier run of this configuration stored it
        self.init_program = programs.lazy("host-init", jit_once(pieces.init))
        self.act_programs = {random: programs.lazy(f"host-act-{'random' if random else 'policy'}", jax.jit(
            functools.partial(pieces.act_rows, random=random), donate_argnums=0)) for random in (True, False)}
        self.add_program = programs.lazy("host-add", jax.jit(add_many, donate_argnums=0, out_shardings=self.on_critic))
        self.critic_program = programs.lazy("host-critic", jax.jit(pieces.critic_step, donate_argnums=0,
                                                                   out_shardings=self.on_critic))
        self.actor_program = programs.lazy("host-actor", jax.jit(actor_step, donate_argnums=0,
                                                                 out_shardings=self.on_actor))
        self.shared_program = programs.lazy("host-updates", jax.jit(
            pieces.run_updates, donate_argnums=(0, 1), out_shardings=(self.on_actor, self.on_critic, self.on_critic)))

    def as_loop(self) -> OffPolicyLoop:
        return OffPolicyLoop(self.init, self.warmup, self.run, self.acting_params, self.steps_per_iteration,
                             self.plan.warmup_iterations * self.steps_per_iteration)

    def acting_params(self, state: OffPolicyState) -> Any:
        return self.algo.acting_params(state.actor, state.critic)

    def init(self, key, handle, first_obs) -> OffPolicyState:
        state = self.init_program(*jax.device_put((key, handle, first_obs), self.acting))
        return state._replace(
            actor=jax.device_put(state.actor, self.on_actor),
            critic=jax.device_put(state.critic, self.on_critic),
            replay=jax.device_put(state.replay, self.on_critic),
            env=jax.device_put(state.env, self.acting),
            key=jax.device_put(state.key, self.acting),
        )

    def act(self, state: OffPolicyState, params: Any, collect_key: jax.Array, iteration: int, random: bool):
        """EnvPool's program (timed: it runs when called), then the rows' copy to the buffer's devices."""
        env_step = env_step_at(self.plan, iteration, self.steps_per_iteration)
        env_carry, rows, finished = self.clock.timed("env", self.act_programs[random], state.env, params, collect_key,
                                                     env_step)
        return env_carry, transfer(rows, self.on_critic), finished

    def warmup(self, state: OffPolicyState):
        finished = []
        for _ in range(self.plan.warmup_iterations):
            key, collect_key, _ = self.pieces.iteration_keys(state.key)
            env_carry, rows, episodes = self.act(state, None, collect_key, 0, random=True)
            state = state._replace(env=env_carry, replay=self.add_program(state.replay, rows), key=key)
            finished.append(episodes)
        return state, total_episodes(finished)

    def split_updates(self, actor, critic, replay, update_keys, first_index: int, collected: list):
        algo, on_actor, on_critic = self.algo, self.on_actor, self.on_critic
        actor_x = transfer(algo.actor_exchange(actor), on_critic)
        critic_x = transfer(algo.critic_exchange(critic), on_actor)  # "lagged": one update old
        for k, key in enumerate(update_keys):
            critic, obs, weight, metrics = self.critic_program(critic, replay, actor_x, transfer(key, on_critic))
            metrics = dict(metrics, **{"train/actor_updates": 0.0})
            if algo.actor_update_period and (first_index + k + 1) % algo.actor_update_period == 0:
                if self.exchange == "fresh":
                    critic_x = transfer(algo.critic_exchange(critic), on_actor)
                actor, actor_metrics = self.actor_program(actor, critic_x, *transfer((obs, weight, key), on_actor))
                metrics.update(actor_metrics, **{"train/actor_updates": 1.0})
                actor_x = transfer(algo.actor_exchange(actor), on_critic)
            if self.exchange == "lagged":
                critic_x = transfer(algo.critic_exchange(critic), on_actor)
            collected.append(metrics)
        return actor, critic

    def learn(self, state: OffPolicyState, update_keys, updates: int, collected: list):
        """The iteration's updates on the buffer as `state` holds it; dispatched, not waited for."""
        dispatched = time.perf_counter()
        if self.shared:
            actor, critic, metrics = self.shared_program(state.actor, state.critic, state.replay,
                                                         transfer(update_keys, self.on_critic), jnp.int32(updates))
            collected.append(metrics)
        else:
            actor, critic = self.split_updates(state.actor, state.critic, state.replay, list(update_keys), updates,
                                               collected)
        self.clock.watch("update", dispatched, collected[-1])  # the one output the next iteration does not donate
        return actor, critic

    def iterate(self, state: OffPolicyState, iteration: int, updates: int, collected: list):
        key, collect_key, update_keys = self.pieces.iteration_keys(state.key)
        if self.concurrent:  # act with theta_k while learning on the buffer as it was before this act
            behaviour = transfer(self.acting_params(state), self.acting, may_alias=False)  # updates donate theirs
            # learner first: it is dispatched asynchronously and runs while EnvPool's program,
            # synchronous on the CPU, steps the environments
            actor, critic = self.learn(state, update_keys, updates, collected)
            env_carry, rows, finished = self.act(state, behaviour, collect_key, iteration, random=False)
            replay = self.add_program(state.replay, rows)  # runs after the updates' reads
        else:
            params = transfer(self.acting_params(state), self.acting)
            env_carry, rows, finished = self.act(state, params, collect_key, iteration, random=False)
            replay = self.add_program(state.replay, rows)
            actor, critic = self.learn(state._replace(replay=replay), update_keys, updates, collected)
        return state._replace(actor=actor, critic=critic, replay=replay, env=env_carry, key=key), finished

    def run(self, state: OffPolicyState, n: int):
        collected, finished = [], []
        iteration, updates = int(state.iteration), int(state.updates)
        for _ in range(n):
            state, episodes = self.iterate(state, iteration, updates, collected)
            finished.append(episodes)
            iteration, updates = iteration + 1, updates + self.plan.updates_per_iteration
            self.requests.from_host(iteration, lambda: eval_payload(self.acting_params(state), state.env))
        state = state._replace(iteration=jnp.int32(iteration), updates=jnp.int32(updates))
        metrics = mean_metrics(collected)
        metrics.update(self.clock.summary())
        return state, metrics, total_episodes(finished)


def warmup_options(spec: EnvSpec) -> dict[str, object] | None:
    """The warm-up runs once. Where its program is random actions and buffer writes around EnvPool's
    or Gymnasium's step, it is compiled to compile fast (`run_once_options`: DQN CartPole-v1's alone
    in 0.12 s against 0.35 s, the same state to the bit). Not where it computes much: a JAX-native
    env's own dynamics, or frames, whose stored copies took Pong-v5's 20,000 warm-up steps 13 s at
    level 0 against 7.4 s."""
    if spec.pixels or is_jax_env_id(spec.env_id):
        return None
    return run_once_options()


def host_driven_loop(algo: OffPolicyAlgorithm, env: BatchedEnv, options: EnvOptions, plan: OffPolicyPlan,
                     placement: Placement, exchange: str, requests: EvalRequests, concurrent: bool = False,
                     clock: PhaseClock | None = None,
                     programs: ProgramStore = ProgramStore(None, None)) -> OffPolicyLoop:
    """The loop of programs the host dispatches over the roles' devices (one agent); `programs`
    compiles each at its first call (loading it where stored)."""
    return HostDrivenLoop(algo, env, options, plan, placement, exchange, requests, concurrent, clock or PhaseClock(),
                          programs).as_loop()


class OffPolicySchedule(ScheduleBase):
    """What every off-policy loop shares as a schedule: start, snapshot, payload. Subclasses build the loop."""

    def __init__(self, ctx: Context):
        self.ctx, config = ctx, ctx.config
        self.off_policy_plan = run_off_policy_plan(config)
        self.loop = self.make_loop(ctx, EvalRequests(ctx.on_eval, ctx.plan.eval_every_iterations))
        self.fields = checkpointed_fields(config)

    def make_loop(self, ctx: Context, requests: EvalRequests) -> OffPolicyLoop:
        raise NotImplementedError

    def start(self, restored: Any | None) -> float:
        env = self.ctx.env
        args = (agent_keys(self.ctx.config.seed, self.ctx.config.num_seeds), env.handle, env.reset())
        warm_up = restored is None or not self.ctx.config.checkpoint_replay  # an empty buffer: random actions fill it
        begin = time.perf_counter()
        with compiling_beside() as compiler:
            if self.loop.compile_ahead is not None:
                self.loop.compile_ahead(compiler, args, warm_up)
            self.state = self.loop.init(*args)
            if restored is not None:
                self.state = self.state._replace(**resumed_fields(restored.into(self.snapshot().state)))
            if warm_up:
                self.state, _ = self.loop.warmup(self.state)  # also compiles the acting program
            self.state, _, _ = self.loop.run(self.state, 0)  # the fused loop's program (host-driven: at the first call)
        jax.block_until_ready(self.state)
        return time.perf_counter() - begin

    def run(self, n: int) -> CallResult:
        self.state, metrics, episodes = self.loop.run(self.state, n)
        return CallResult(jax.device_get(metrics), jax.device_get(episodes))

    def snapshot(self) -> Snapshot:
        return Snapshot({name: getattr(self.state, name) for name in self.fields}, {})

    def eval_payload(self) -> EvalPayload:
        return eval_payload(self.loop.acting_params(self.state), self.state.env)

    def describe(self) -> dict[str, Any]:
        return self.ctx.placement.describe() | {"exchange": self.ctx.config.exchange}


class OffPolicyFused(OffPolicySchedule):
    """Off-policy `sync` with everything on the acting device: one jitted program per call (every
    agent of --num-seeds in it). Its calls end where an evaluation is due, and the host hands the
    evaluator the policy: the program holds no host callback, so the persistent cache keeps it."""

    def make_loop(self, ctx: Context, requests: EvalRequests) -> OffPolicyLoop:
        config = ctx.config
        self.requests = requests
        return fused_loop(ctx.algo, ctx.env, ctx.options, self.off_policy_plan, ctx.placement, ctx.plan.iterations_per_call,
                          EvalRequests(None, 0), config.num_seeds, config.batch_seed_updates,
                          programs=ProgramStore.for_run(config, ctx.env, ctx.plan, ctx.placement))

    def start(self, restored: Any | None) -> float:
        compile_s = super().start(restored)
        self.done = int(self.state.iteration)
        return compile_s

    def run(self, n: int) -> CallResult:
        def call(k: int) -> tuple[Any, Any]:
            self.state, metrics, episodes = self.loop.run(self.state, k)
            return metrics, episodes

        result = run_in_calls(self.requests, self.done, n, call, self.eval_payload)
        self.done += n
        return result


class OffPolicyHostDriven(OffPolicySchedule):
    """Off-policy `sync` with the roles on their own devices: programs dispatched by the host."""

    concurrent = False

    def make_loop(self, ctx: Context, requests: EvalRequests) -> OffPolicyLoop:
        return host_driven_loop(ctx.algo, ctx.env, ctx.options, self.off_policy_plan, ctx.placement, ctx.config.exchange,
                                requests, self.concurrent,
                                programs=ProgramStore.for_run(ctx.config, ctx.env, ctx.plan, ctx.placement))


class OffPolicyConcurrent(OffPolicyHostDriven):
    """Off-policy `concurrent` (HTS-RL): acting with theta_k while the updates of iteration k run."""

    concurrent = True
