"""The `sync` schedule for off-policy algorithms, under either placement.

One iteration: act `rollout_length` steps per env, append the rows to the replay stream, then run
`updates_per_iteration` gradient updates. One update is a critic step (sample a batch, update the
critic with the actor's exchange) followed, every `actor_update_period` updates, by an actor step
(update the actor on the batch's observations with the critic's exchange).

* fused (everything on the acting device): iterations, acting and updates are one jitted
  program, many iterations per call.
* roles on their own devices (`split`, or accelerators while EnvPool steps on the CPU): the host
  dispatches the programs; JAX's asynchronous dispatch lets the actor's and the critic's programs
  run at the same time on their devices, and only the small exchanged pytrees are copied.
  `exchange="fresh"` gives the actor step the critic just updated (results equal the fused
  program's); `"lagged"` gives it the critic of one update earlier, so the two steps of an update
  overlap. A role with several devices is data-parallel: batch sharded, parameters replicated.

Both arrangements call the same `critic_step` and `actor_step` with the same keys.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import io_callback
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxrl_fast import phases
from jaxrl_fast.data import OffPolicyAlgorithm, Transition
from jaxrl_fast.env import EpisodeStats, XlaEnv, add_stats
from jaxrl_fast.placement import Placement, transfer
from jaxrl_fast.replay import ReplayState, Row, add_many, capacity_rows, init_replay, sample_batch
from jaxrl_fast.schedules.acting import EnvCarry, EnvOptions, EvalPayload, init_env_carry, make_collect, scan_iterations
from jaxrl_fast.schedules.timing import PhaseClock


class OffPolicyPlan(NamedTuple):
    rollout_length: int  # env steps per env per iteration
    updates_per_iteration: int
    warmup_iterations: int  # iterations of uniform random actions, no updates (learning_starts)
    batch_size: int
    n_step: int
    gamma: float
    replay_rows: int


DEFAULT_DISPATCH_STEPS = 64  # concurrent/async: env steps per host dispatch when --dispatch-steps is 0


def dispatch_steps(config: Any) -> int:
    """Fewest env steps an iteration holds. The host-driven concurrent and async schedules pay a
    dispatch (milliseconds on an accelerator) per iteration, so they act and update in batches of
    at least this many steps; `sync` keeps the algorithm's own iteration (it runs fused)."""
    if config.schedule == "sync":
        return 1
    return config.dispatch_steps or DEFAULT_DISPATCH_STEPS


def off_policy_plan(hyper: Any, num_envs: int, min_steps: int = 1) -> OffPolicyPlan:
    """Whole numbers that hold the update-to-data ratio: U updates per T x num_envs steps, with
    T x num_envs at least `min_steps`."""
    rollout_length = max(1, math.ceil(1.0 / (hyper.utd_ratio * num_envs)), math.ceil(min_steps / num_envs))
    steps = rollout_length * num_envs
    return OffPolicyPlan(
        rollout_length=rollout_length,
        updates_per_iteration=max(1, round(hyper.utd_ratio * steps)),
        warmup_iterations=max(1, math.ceil(hyper.learning_starts / steps)),
        batch_size=hyper.batch_size,
        n_step=hyper.n_step,
        gamma=hyper.gamma,
        replay_rows=capacity_rows(hyper.buffer_size, num_envs),
    )


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


ACTOR_METRICS = ("train/actor_loss", "train/alpha", "train/entropy")


def reduce_update_metrics(metrics: dict) -> dict:
    """Means over the updates of `[U]` metrics; actor metrics over the updates that had an actor step."""
    actor_updates = metrics["train/actor_updates"].sum()
    out = {}
    for name, values in metrics.items():
        if name == "train/actor_updates":
            out[name] = actor_updates
        elif name in ACTOR_METRICS:
            out[name] = values.sum() / jnp.maximum(actor_updates, 1.0)  # skipped steps report zeros
        else:
            out[name] = values.mean()
    return out


class Pieces(NamedTuple):
    """The pure functions both arrangements are assembled from."""

    init: Callable
    act_rows: Callable  # (env_carry, params, key, env_step, random) -> (env_carry, rows [T, B], finished)
    critic_step: Callable  # (critic, replay, actor_exchange, key) -> (critic, obs, weight, metrics)
    actor_step: Callable  # (actor, critic_exchange, obs, weight, key) -> (actor, metrics)
    run_updates: Callable  # (actor, critic, replay, keys [U], first update index) -> (actor, critic, metrics [U])
    iteration_keys: Callable  # key -> (next key, collect key, [U] update keys)


def make_pieces(algo: OffPolicyAlgorithm, env: XlaEnv, options: EnvOptions, plan: OffPolicyPlan,
                batch_sharding: Any = None) -> Pieces:
    collect = make_collect(env, options, plan.rollout_length)

    def init(key: jax.Array, handle: Any, first_obs: jax.Array) -> OffPolicyState:
        algo_key, loop_key = jax.random.split(key)
        actor, critic = algo.init(algo_key)
        env_carry = init_env_carry(env, options, handle, first_obs)
        rows = jax.eval_shape(lambda: collect(env_carry, algo.random_act, loop_key)[1])
        example = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), rows_of(rows))
        zero = jnp.zeros((), jnp.int32)
        return OffPolicyState(actor, critic, init_replay(plan.replay_rows, example), env_carry, loop_key, zero, zero)

    def act_rows(env_carry: EnvCarry, params: Any, key: jax.Array, env_step: jax.Array, random: bool):
        policy = algo.random_act if random else (lambda obs, k: algo.act(params, obs, k, env_step))
        env_carry, transitions, finished = collect(env_carry, policy, key)
        return env_carry, rows_of(transitions), finished

    @jax.named_scope(phases.UPDATE)
    def critic_step(critic: Any, replay: ReplayState, actor_exchange: Any, key: jax.Array):
        sample_key, critic_key, _ = jax.random.split(key, 3)
        batch = sample_batch(replay, sample_key, plan.batch_size, plan.n_step, plan.gamma)
        if batch_sharding is not None:  # data parallelism over the role's devices
            batch = lax.with_sharding_constraint(batch, batch_sharding)
        critic, metrics = algo.update_critic(critic, actor_exchange, batch, critic_key)
        return critic, batch.obs, batch.weight, metrics

    @jax.named_scope(phases.UPDATE)
    def actor_step(actor: Any, critic_exchange: Any, obs: jax.Array, weight: jax.Array, key: jax.Array):
        _, _, actor_key = jax.random.split(key, 3)
        return algo.update_actor(actor, critic_exchange, obs, weight, actor_key)

    def update_once(replay: ReplayState, carry, inputs):
        actor, critic = carry
        key, index = inputs
        critic, obs, weight, metrics = critic_step(critic, replay, algo.actor_exchange(actor), key)
        metrics = dict(metrics)
        if algo.actor_update_period:
            due = (index + 1) % algo.actor_update_period == 0
            step = lambda a: actor_step(a, algo.critic_exchange(critic), obs, weight, key)  # noqa: E731
            shapes = jax.eval_shape(lambda a: step(a)[1], actor)
            skip = lambda a: (a, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes))  # noqa: E731
            actor, actor_metrics = lax.cond(due, step, skip, actor)
            metrics.update(actor_metrics)
            metrics["train/actor_updates"] = due.astype(jnp.float32)
        else:
            metrics["train/actor_updates"] = jnp.zeros((), jnp.float32)
        return (actor, critic), metrics

    def run_updates(actor: Any, critic: Any, replay: ReplayState, keys: jax.Array, first_index: jax.Array):
        """`len(keys)` updates in a scan; the buffer is read by every update and changed by none, so
        it is no part of the scan's carry."""
        indices = first_index + jnp.arange(keys.shape[0])
        (actor, critic), metrics = lax.scan(lambda c, x: update_once(replay, c, x), (actor, critic), (keys, indices))
        return actor, critic, metrics

    def iteration_keys(key: jax.Array):
        key, collect_key, update_key = jax.random.split(key, 3)
        return key, collect_key, jax.random.split(update_key, plan.updates_per_iteration)

    return Pieces(init, act_rows, critic_step, actor_step, run_updates, iteration_keys)


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
) -> OffPolicyLoop:
    """`concurrent=True` is the HTS-RL order: the rows of iteration k+1 are collected with the
    policy of iteration k while the updates of iteration k run on the buffer as it was before them,
    so acting never waits for learning and the behaviour policy is exactly one version behind."""
    steps_per_iteration = plan.rollout_length * env.spec.num_envs
    if placement.fused and not concurrent:
        return _fused_loop(algo, env, options, plan, placement, iterations_per_call, eval_every_iterations, on_eval,
                           steps_per_iteration)
    return _host_driven_loop(algo, env, options, plan, placement, exchange, eval_every_iterations, on_eval,
                             steps_per_iteration, concurrent, clock)


def _env_step(plan: OffPolicyPlan, iteration: jax.Array, steps_per_iteration: int) -> jax.Array:
    return (plan.warmup_iterations + iteration) * steps_per_iteration


def _fused_loop(algo, env, options, plan, placement, iterations_per_call, eval_every_iterations, on_eval,
                steps_per_iteration) -> OffPolicyLoop:
    pieces = make_pieces(algo, env, options, plan)

    def acting_params(state: OffPolicyState) -> Any:
        return algo.acting_params(state.actor, state.critic)

    def store(state: OffPolicyState, collect_key: jax.Array, random: bool):
        env_step = _env_step(plan, state.iteration, steps_per_iteration)
        env_carry, rows, finished = pieces.act_rows(state.env, acting_params(state), collect_key, env_step, random)
        return state._replace(env=env_carry, replay=add_many(state.replay, rows)), finished

    def warmup(state: OffPolicyState):
        def body(state, _):
            key, collect_key, _ = pieces.iteration_keys(state.key)
            return store(state._replace(key=key), collect_key, random=True)

        state, finished = lax.scan(body, state, None, length=plan.warmup_iterations)
        return state, jax.tree.map(lambda x: x.sum(0), finished)

    def iteration(state: OffPolicyState):
        key, collect_key, update_keys = pieces.iteration_keys(state.key)
        state, finished = store(state._replace(key=key), collect_key, random=False)
        actor, critic, metrics = pieces.run_updates(state.actor, state.critic, state.replay, update_keys, state.updates)
        state = state._replace(actor=actor, critic=critic, iteration=state.iteration + 1,
                               updates=state.updates + plan.updates_per_iteration)
        if on_eval is not None and eval_every_iterations > 0:
            payload = EvalPayload(acting_params(state), state.env.obs_moments)
            lax.cond(state.iteration % eval_every_iterations == 0,
                     lambda: io_callback(on_eval, None, payload, state.iteration, ordered=False), lambda: None)
        return state, reduce_update_metrics(metrics), finished

    run_program = jax.jit(lambda s, n: scan_iterations(iteration, s, n, iterations_per_call), donate_argnums=0)
    init_program = jax.jit(pieces.init)
    return OffPolicyLoop(
        init=lambda key, handle, obs: jax.device_put(init_program(key, handle, obs), placement.acting),
        warmup=jax.jit(warmup, donate_argnums=0),
        run=lambda state, n: run_program(state, jnp.int32(n)),
        acting_params=acting_params,
        steps_per_iteration=steps_per_iteration,
        warmup_steps=plan.warmup_iterations * steps_per_iteration,
    )


def mean_metrics(collected: list[dict]) -> dict:
    """Means over per-update metric dicts fetched to the host in one transfer; actor updates are summed.

    Dicts may lack actor metrics (updates without an actor step); those are averaged over the
    updates that have them.
    """
    collected = jax.device_get(collected)
    out = {}
    for name in sorted({name for metrics in collected for name in metrics}):
        values = np.asarray([m[name] for m in collected if name in m], np.float64)
        out[name] = values.sum() if name == "train/actor_updates" else values.mean()
    return out


def _host_driven_loop(algo, env, options, plan, placement, exchange, eval_every_iterations, on_eval,
                      steps_per_iteration, concurrent=False, clock=None) -> OffPolicyLoop:
    actor_mesh = Mesh(np.asarray(placement.actor), ("data",))
    critic_mesh = Mesh(np.asarray(placement.critic), ("data",))
    on_actor, on_critic = NamedSharding(actor_mesh, PartitionSpec()), NamedSharding(critic_mesh, PartitionSpec())
    actor_batch = NamedSharding(actor_mesh, PartitionSpec("data"))
    pieces = make_pieces(algo, env, options, plan, batch_sharding=NamedSharding(critic_mesh, PartitionSpec("data")))
    acting = placement.acting
    shared = placement.actor == placement.critic

    def acting_params(state: OffPolicyState) -> Any:
        return algo.acting_params(state.actor, state.critic)

    def actor_step(actor, critic_x, obs, weight, key):
        obs, weight = lax.with_sharding_constraint((obs, weight), actor_batch)
        return pieces.actor_step(actor, critic_x, obs, weight, key)

    def shared_updates(actor, critic, replay, keys, first_index):
        actor, critic, metrics = pieces.run_updates(actor, critic, replay, keys, first_index)
        return actor, critic, reduce_update_metrics(metrics)

    act_program = jax.jit(pieces.act_rows, static_argnums=4, donate_argnums=0)
    add_program = jax.jit(add_many, donate_argnums=0, out_shardings=on_critic)
    critic_program = jax.jit(pieces.critic_step, donate_argnums=0, out_shardings=on_critic)
    actor_program = jax.jit(actor_step, donate_argnums=0, out_shardings=on_actor)
    shared_program = jax.jit(shared_updates, donate_argnums=(0, 1), out_shardings=(on_actor, on_critic, on_critic))

    def init(key, handle, first_obs) -> OffPolicyState:
        state = jax.jit(pieces.init)(key, handle, first_obs)
        return state._replace(
            actor=jax.device_put(state.actor, on_actor),
            critic=jax.device_put(state.critic, on_critic),
            replay=jax.device_put(state.replay, on_critic),
            env=jax.device_put(state.env, acting),
            key=jax.device_put(state.key, acting),
        )

    def store(state: OffPolicyState, random: bool):
        key, collect_key, update_keys = pieces.iteration_keys(state.key)
        params = None if random else transfer(acting_params(state), acting)
        env_step = _env_step(plan, state.iteration, steps_per_iteration)
        start = time.perf_counter()
        env_carry, rows, finished = act_program(state.env, params, collect_key, env_step, random)
        if clock is not None:
            jax.block_until_ready(rows)
            clock.interval("env", start, time.perf_counter())
        replay = add_program(state.replay, transfer(rows, on_critic))
        return state._replace(env=env_carry, replay=replay, key=key), update_keys, finished

    def warmup(state: OffPolicyState):
        total = None
        for _ in range(plan.warmup_iterations):
            state, _, finished = store(state, random=True)
            total = finished if total is None else add_stats(total, finished)
        return state, total

    def split_updates(actor, critic, replay, update_keys, first_index: int, collected: list):
        actor_x = transfer(algo.actor_exchange(actor), on_critic)
        critic_x = transfer(algo.critic_exchange(critic), on_actor)  # "lagged": one update old
        for k, key in enumerate(update_keys):
            critic, obs, weight, metrics = critic_program(critic, replay, actor_x, transfer(key, on_critic))
            metrics = dict(metrics, **{"train/actor_updates": 0.0})
            if algo.actor_update_period and (first_index + k + 1) % algo.actor_update_period == 0:
                if exchange == "fresh":
                    critic_x = transfer(algo.critic_exchange(critic), on_actor)
                actor, actor_metrics = actor_program(actor, critic_x, *transfer((obs, weight, key), on_actor))
                metrics.update(actor_metrics, **{"train/actor_updates": 1.0})
                actor_x = transfer(algo.actor_exchange(actor), on_critic)
            if exchange == "lagged":
                critic_x = transfer(algo.critic_exchange(critic), on_actor)
            collected.append(metrics)
        return actor, critic

    def learn(state: OffPolicyState, replay: ReplayState, update_keys, updates: int, collected: list):
        if shared:
            actor, critic, metrics = shared_program(state.actor, state.critic, replay,
                                                    transfer(update_keys, on_critic), jnp.int32(updates))
            collected.append(metrics)
            return actor, critic
        return split_updates(state.actor, state.critic, replay, list(update_keys), updates, collected)

    def run(state: OffPolicyState, n: int):
        # Counters stay on the host (Python ints): reading them from a device would wait for it.
        collected, total = [], None
        iteration, updates = int(state.iteration), int(state.updates)
        for _ in range(n):
            if concurrent:  # act with theta_k while learning on the buffer as it was before this act
                key, collect_key, update_keys = pieces.iteration_keys(state.key)
                behaviour = transfer(acting_params(state), acting, may_alias=False)  # updates donate theirs
                env_step = _env_step(plan, iteration, steps_per_iteration)
                # learner first: it is dispatched asynchronously and runs while EnvPool's program,
                # synchronous on the CPU, steps the environments
                dispatched = time.perf_counter()
                actor, critic = learn(state, state.replay, update_keys, updates, collected)
                if clock is not None:  # the metrics are the one output the next iteration does not donate
                    clock.watch("update", dispatched, collected[-1])
                start = time.perf_counter()
                env_carry, rows, finished = act_program(state.env, behaviour, collect_key, env_step, False)
                if clock is not None:
                    jax.block_until_ready(rows)
                    clock.interval("env", start, time.perf_counter())
                replay = add_program(state.replay, transfer(rows, on_critic))  # runs after the reads
                state = state._replace(env=env_carry, replay=replay, key=key)
            else:
                state, update_keys, finished = store(state._replace(iteration=iteration), random=False)
                dispatched = time.perf_counter()
                actor, critic = learn(state, state.replay, update_keys, updates, collected)
                if clock is not None:
                    clock.watch("update", dispatched, collected[-1])
            total = finished if total is None else add_stats(total, finished)
            iteration, updates = iteration + 1, updates + plan.updates_per_iteration
            state = state._replace(actor=actor, critic=critic)
            if on_eval is not None and eval_every_iterations > 0 and iteration % eval_every_iterations == 0:
                on_eval(jax.device_get(EvalPayload(acting_params(state), state.env.obs_moments)), iteration)
        state = state._replace(iteration=jnp.int32(iteration), updates=jnp.int32(updates))
        metrics = mean_metrics(collected)
        if clock is not None:
            metrics.update(clock.summary())
        return state, metrics, total

    return OffPolicyLoop(
        init=init,
        warmup=warmup,
        run=run,
        acting_params=acting_params,
        steps_per_iteration=steps_per_iteration,
        warmup_steps=plan.warmup_iterations * steps_per_iteration,
    )
