"""The off-policy family's schedules (`sync` and `concurrent`), under either placement.

One iteration: act `rollout_length` steps per env, append the rows to the replay stream, then run
`updates_per_iteration` gradient updates. One update is a critic step (sample a batch, update the
critic with the actor's exchange) followed, every `actor_update_period` updates, by an actor step
(update the actor on the batch's observations with the critic's exchange).

* fused (`OffPolicyFused`, everything on the acting device): iterations, acting and updates are
  one jitted program, many iterations per call.
* roles on their own devices (`OffPolicyHostDriven`: `split`, accelerators while EnvPool steps on
  the CPU, or the `concurrent` schedule): the host dispatches the programs; JAX's asynchronous
  dispatch lets the actor's and the critic's programs run at the same time on their devices, and
  only the small exchanged pytrees are copied. `exchange="fresh"` gives the actor step the critic
  just updated (results equal the fused program's); `"lagged"` gives it the critic of one update
  earlier, so the two steps of an update overlap. A role with several devices is data-parallel:
  batch sharded, parameters replicated. `concurrent=True` is the HTS-RL order: the rows of
  iteration k+1 are collected with the policy of iteration k while the updates of iteration k run.

Both arrangements call the same `critic_step` and `actor_step` with the same keys.
"""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxrl_fast.engine import phases
from jaxrl_fast.engine.acting import (EnvCarry, EnvOptions, EvalPayload, agent_keys, agents_map, eval_payload,
    init_env_carry, make_collect)
from jaxrl_fast.types import OffPolicyAlgorithm, Transition
from jaxrl_fast.env.episodes import EpisodeStats
from jaxrl_fast.env.envpool import XlaEnv
from jaxrl_fast.engine.placement import Placement, transfer
from jaxrl_fast.config.plan import OffPolicyPlan, dispatch_steps, off_policy_plan, run_off_policy_plan
from jaxrl_fast.engine.replay import ReplayState, Row, add_many, init_replay, sample_batch
from jaxrl_fast.engine.schedules.base import (CallResult, Context, EvalRequests, ScheduleBase, Snapshot,
    across_shards, mean_metrics, scan_iterations, shard_key, summed_over_shards, total_episodes)
from jaxrl_fast.engine.timing import PhaseClock

__all__ = ["OffPolicyFused", "OffPolicyHostDriven", "OffPolicyPlan", "dispatch_steps", "make_off_policy_loop",
           "make_pieces", "off_policy_plan"]


class OffPolicyState(NamedTuple):
    actor: Any
    critic: Any
    replay: ReplayState
    env: EnvCarry
    key: jax.Array
    iteration: jax.Array  # int32 []: learning iterations completed (warm-up excluded)
    updates: jax.Array  # int32 []: gradient updates so far


class OffPolicyLoop(NamedTuple):
    init: Callable[[jax.Array, Any, jax.Array], OffPolicyState]
    warmup: Callable[[OffPolicyState], tuple[OffPolicyState, EpisodeStats]]
    run: Callable[[OffPolicyState, int], tuple[OffPolicyState, dict, EpisodeStats]]
    acting_params: Callable[[OffPolicyState], Any]
    steps_per_iteration: int
    warmup_steps: int


def rows_of(transitions: Transition) -> Row:
    return Row(transitions.obs, transitions.action, transitions.reward, transitions.terminated,
               transitions.truncated, transitions.valid)


class UpdateMetrics(NamedTuple):
    """Per-update metrics `[U]` of a run of updates, kept apart by role."""

    critic: dict[str, jax.Array]
    actor: dict[str, jax.Array]  # zeros where an update had no actor step
    actor_updates: jax.Array  # float32 [U]: 1 where an update had an actor step


def reduce_update_metrics(metrics: UpdateMetrics) -> dict:
    """Means over the updates; actor metrics over the updates that had an actor step."""
    actor_updates = metrics.actor_updates.sum()
    out = {name: values.mean() for name, values in metrics.critic.items()}
    out.update({name: values.sum() / jnp.maximum(actor_updates, 1.0) for name, values in metrics.actor.items()})
    out["train/actor_updates"] = actor_updates
    return out


class Pieces(NamedTuple):
    """The pure functions both arrangements are assembled from."""

    init: Callable
    act_rows: Callable  # (env_carry, params, key, env_step, random) -> (env_carry, rows [T, B], finished)
    critic_step: Callable  # (critic, replay, actor_exchange, key) -> (critic, obs, weight, metrics)
    actor_step: Callable  # (actor, critic_exchange, obs, weight, key) -> (actor, metrics)
    run_updates: Callable  # (actor, critic, replay, keys [U], first update index) -> (actor, critic, mean metrics)
    iteration_keys: Callable  # key -> (next key, collect key, [U] update keys)


def pool_columns(rows: Row) -> Row:
    """Agents' rows `[T, N, E, ...]` as the shared buffer's `[T, N x E, ...]`: agent j's envs are its
    columns j E .. (j + 1) E - 1."""
    return jax.tree.map(lambda x: x.reshape((x.shape[0], -1, *x.shape[3:])), rows)


def make_pieces(algo: OffPolicyAlgorithm, env: XlaEnv, options: EnvOptions, plan: OffPolicyPlan,
                batch_sharding: Any = None, num_agents: int = 1, batched_updates: bool = False) -> Pieces:
    """With `num_agents` N > 1, N independent agents share the pool (agent j on envs `[j E, (j + 1) E)`)
    and one buffer whose env columns are those envs (one in-place write for all). The actors',
    critics', keys' and env carries' leaves get a leading agents axis; the counters are shared.
    Agent j samples its own columns, drawing the numbers a single run's buffer of E envs would;
    agents act vmapped and learn one after another (`batched_updates`: vmapped): agent j's rows are
    bitwise the single run's, its parameters to the last bits (XLA fuses an update inside the loop
    over agents differently)."""
    collect = make_collect(env, options, plan.rollout_length, num_agents)
    per_agent, learn = agents_map(num_agents), agents_map(num_agents, sequential=not batched_updates)
    agent_envs = env.spec.num_envs // num_agents
    pooled = pool_columns if num_agents > 1 else (lambda rows: rows)

    def init(key: jax.Array, handle: Any, first_obs: jax.Array) -> OffPolicyState:
        algo_key, loop_key = per_agent(lambda k: tuple(jax.random.split(k)))(key)
        actor, critic = learn(algo.init)(algo_key)
        env_carry = init_env_carry(env, options, handle, first_obs, num_agents)
        rows = jax.eval_shape(lambda: pooled(rows_of(collect(env_carry, per_agent(algo.random_act), loop_key)[1])))
        example = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), rows)
        zero = jnp.zeros((), jnp.int32)
        replay = init_replay(plan.replay_rows, example, env.spec.frame_stack)
        return OffPolicyState(actor, critic, replay, env_carry, loop_key, zero, zero)

    def act_rows(env_carry: EnvCarry, params: Any, key: jax.Array, env_step: jax.Array, random: bool):
        if random:
            policy = per_agent(algo.random_act)
        else:
            policy = lambda obs, k: per_agent(lambda p, o, kk: algo.act(p, o, kk, env_step))(params, obs, k)  # noqa: E731
        env_carry, transitions, finished = collect(env_carry, policy, key)
        return env_carry, pooled(rows_of(transitions)), finished

    @jax.named_scope(phases.UPDATE)
    def critic_step(critic: Any, replay: ReplayState, actor_exchange: Any, key: jax.Array, agent: Any = None):
        sample_key, critic_key, _ = jax.random.split(key, 3)
        envs = None if agent is None else (agent * agent_envs, agent_envs)
        batch = sample_batch(replay, sample_key, plan.batch_size, plan.n_step, plan.gamma, envs, env.spec.frame_stack)
        if batch_sharding is not None:  # data parallelism over the role's devices
            batch = lax.with_sharding_constraint(batch, batch_sharding)
        critic, metrics = algo.update_critic(critic, actor_exchange, batch, critic_key)
        return critic, batch.obs, batch.weight, metrics

    @jax.named_scope(phases.UPDATE)
    def actor_step(actor: Any, critic_exchange: Any, obs: jax.Array, weight: jax.Array, key: jax.Array):
        _, _, actor_key = jax.random.split(key, 3)
        return algo.update_actor(actor, critic_exchange, obs, weight, actor_key)

    def update_once(replay: ReplayState, agent: Any, carry, inputs):
        actor, critic = carry
        key, index = inputs
        critic, obs, weight, critic_metrics = critic_step(critic, replay, algo.actor_exchange(actor), key, agent)
        if not algo.actor_update_period:  # no actor to train (DQN)
            return (actor, critic), UpdateMetrics(critic_metrics, {}, jnp.zeros((), jnp.float32))
        due = (index + 1) % algo.actor_update_period == 0
        step = lambda a: actor_step(a, algo.critic_exchange(critic), obs, weight, key)  # noqa: E731
        shapes = jax.eval_shape(lambda a: step(a)[1], actor)
        skip = lambda a: (a, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes))  # noqa: E731
        actor, actor_metrics = lax.cond(due, step, skip, actor)
        return (actor, critic), UpdateMetrics(critic_metrics, actor_metrics, due.astype(jnp.float32))

    def agent_updates(actor: Any, critic: Any, replay: ReplayState, keys: jax.Array, first_index: jax.Array,
                      agent: Any = None):
        """`len(keys)` updates in a scan, metrics reduced over them; the buffer is read by every
        update and changed by none, so it is no part of the scan's carry."""
        indices = first_index + jnp.arange(keys.shape[0])
        (actor, critic), metrics = lax.scan(lambda c, x: update_once(replay, agent, c, x), (actor, critic), (keys, indices))
        return actor, critic, reduce_update_metrics(metrics)

    def run_updates(actor: Any, critic: Any, replay: ReplayState, keys: jax.Array, first_index: jax.Array):
        """Every agent's updates (keys `[N, U]`); the shared buffer is closed over, never sliced."""
        if num_agents == 1:
            return agent_updates(actor, critic, replay, keys, first_index)
        one = lambda a, c, k, j: agent_updates(a, c, replay, k, first_index, j)  # noqa: E731
        return learn(one)(actor, critic, keys, jnp.arange(num_agents))

    def iteration_keys(key: jax.Array):
        key, collect_key, update_key = jax.random.split(key, 3)
        return key, collect_key, jax.random.split(update_key, plan.updates_per_iteration)

    return Pieces(init, act_rows, critic_step, actor_step, run_updates, per_agent(iteration_keys))


def make_off_policy_loop(
    algo: OffPolicyAlgorithm,
    env: XlaEnv,
    options: EnvOptions,
    plan: OffPolicyPlan,
    placement: Placement,
    exchange: str,
    iterations_per_call: int,
    eval_every_iterations: int,
    on_eval: Callable[[EvalPayload, Any], None] | None,
    concurrent: bool = False,
    clock: PhaseClock | None = None,
    num_agents: int = 1,
    batched_updates: bool = False,
) -> OffPolicyLoop:
    """The fused program when everything is on the acting device (and not `concurrent`), else the
    host-driven loop over the roles' devices."""
    requests = EvalRequests(on_eval, eval_every_iterations)
    if placement.fused and not concurrent:
        return fused_loop(algo, env, options, plan, placement, iterations_per_call, requests, num_agents, batched_updates)
    if num_agents > 1:
        raise ValueError("--num-seeds trains its agents in the fused sync program, with both roles on the acting device; "
                         f"this placement ({placement.mode}, acting on {placement.acting}) puts them on their own devices")
    return HostDrivenLoop(algo, env, options, plan, placement, exchange, requests, concurrent,
                          clock or PhaseClock()).as_loop()


def env_step_at(plan: OffPolicyPlan, iteration: Any, steps_per_iteration: int) -> Any:
    """Environment steps before learning iteration `iteration` (DQN's epsilon schedule reads it), as
    float32: an int32 count would wrap after 2**31 steps, and epsilon needs no exact count."""
    return (plan.warmup_iterations + iteration) * np.float32(steps_per_iteration)


def fused_loop(algo, env, options, plan, placement, iterations_per_call, requests: EvalRequests,
               num_agents: int = 1, batched_updates: bool = False, axis_name: str | None = None) -> OffPolicyLoop:
    """The fused program; with `axis_name`, one data-parallel shard's (as `sync.make_sync_loop`'s):
    its own envs and replay buffer, keys folded with the shard's index, gradients averaged."""
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

    run_program = jax.jit(run, donate_argnums=0)
    init_program = jax.jit(pieces.init)
    return OffPolicyLoop(
        init=pieces.init if axis_name else lambda key, handle, obs: jax.device_put(init_program(key, handle, obs), placement.acting),
        warmup=jax.jit(warmup, donate_argnums=0),
        run=lambda state, n: run_program(state, jnp.int32(n)),
        acting_params=acting_params,
        steps_per_iteration=steps_per_iteration,
        warmup_steps=plan.warmup_iterations * steps_per_iteration,
    )


class HostDrivenLoop:
    """The host dispatches acting, buffer writes and the roles' updates as separate programs, each
    on the devices placement gives it. Counters stay on the host: reading them from a device
    would wait for it."""

    def __init__(self, algo: OffPolicyAlgorithm, env: XlaEnv, options: EnvOptions, plan: OffPolicyPlan,
                 placement: Placement, exchange: str, requests: EvalRequests, concurrent: bool, clock: PhaseClock):
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

        self.act_program = jax.jit(pieces.act_rows, static_argnums=4, donate_argnums=0)
        self.add_program = jax.jit(add_many, donate_argnums=0, out_shardings=self.on_critic)
        self.critic_program = jax.jit(pieces.critic_step, donate_argnums=0, out_shardings=self.on_critic)
        self.actor_program = jax.jit(actor_step, donate_argnums=0, out_shardings=self.on_actor)
        self.shared_program = jax.jit(pieces.run_updates, donate_argnums=(0, 1),
                                      out_shardings=(self.on_actor, self.on_critic, self.on_critic))

    def as_loop(self) -> OffPolicyLoop:
        return OffPolicyLoop(self.init, self.warmup, self.run, self.acting_params, self.steps_per_iteration,
                             self.plan.warmup_iterations * self.steps_per_iteration)

    def acting_params(self, state: OffPolicyState) -> Any:
        return self.algo.acting_params(state.actor, state.critic)

    def init(self, key, handle, first_obs) -> OffPolicyState:
        state = jax.jit(self.pieces.init)(key, handle, first_obs)
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
        env_carry, rows, finished = self.clock.timed("env", self.act_program, state.env, params, collect_key, env_step,
                                                     random)
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


def checkpointed_fields(config: Any) -> tuple[str, ...]:
    """What of an `OffPolicyState` a checkpoint holds: the learner's state, the buffer if asked for."""
    return ("actor", "critic", "key", "iteration", "updates") + (("replay",) if config.checkpoint_replay else ())


class OffPolicySchedule(ScheduleBase):
    """What both off-policy loops share as a schedule: start, snapshot, payload. Subclasses pick the loop."""

    concurrent = False

    def __init__(self, ctx: Context):
        self.ctx, config = ctx, ctx.config
        self.off_policy_plan = run_off_policy_plan(config)
        self.loop = make_off_policy_loop(ctx.algo, ctx.env, ctx.options, self.off_policy_plan, ctx.placement,
                                         config.exchange, ctx.plan.iterations_per_call, ctx.plan.eval_every_iterations,
                                         ctx.on_eval, concurrent=self.concurrent, num_agents=config.num_seeds,
                                         batched_updates=config.batch_seed_updates)
        self.fields = checkpointed_fields(config)

    def start(self, restored: Any | None) -> float:
        env = self.ctx.env
        self.state = self.loop.init(agent_keys(self.ctx.config.seed, self.ctx.config.num_seeds), env.handle, env.reset())
        if restored is not None:
            self.state = self.state._replace(**restored.into(self.snapshot().state))
        begin = time.perf_counter()
        if restored is None or not self.ctx.config.checkpoint_replay:  # an empty buffer: fill it with random actions
            self.state, _ = self.loop.warmup(self.state)  # also compiles the acting program
        self.state, _, _ = self.loop.run(self.state, 0)  # compiles the learning program(s)
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
    """Off-policy `sync` with everything on the acting device: one jitted program per call."""


class OffPolicyHostDriven(OffPolicySchedule):
    """Off-policy `sync` with the roles on their own devices: programs dispatched by the host."""


class OffPolicyConcurrent(OffPolicySchedule):
    """Off-policy `concurrent` (HTS-RL): acting with theta_k while the updates of iteration k run."""

    concurrent = True
