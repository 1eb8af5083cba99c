"""What the off-policy schedules are assembled from: the loop's state, acting into the replay stream,
and the update steps of the two roles.

One iteration acts `rollout_length` steps per env, appends the rows to the replay stream, then runs
`updates_per_iteration` gradient updates. One update is a critic step (sample a batch, update the
critic with the actor's exchange) followed, every `actor_update_period` updates, by an actor step
(update the actor on the batch's observations with the critic's exchange). Every arrangement of
these pieces (`jaxrl_fast.engine.schedules.offpolicy`, `.asynchronous`, `.data_parallel`) and the
calibration's measurements call the same functions with the same keys.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxrl_fast.config.plan import OffPolicyPlan
from jaxrl_fast.engine import phases
from jaxrl_fast.engine.acting import EnvCarry, EnvOptions, agents_map, init_env_carry, make_collect
from jaxrl_fast.engine.replay import ReplayState, Row, end_streams, init_replay, sample_batch
from jaxrl_fast.env.episodes import EpisodeStats
from jaxrl_fast.types import BatchedEnv, OffPolicyAlgorithm, Transition


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
    # `(executor, init's args, warm_up)`: starts compiling the loop, and the warm-up where `warm_up`, on
    # `executor`'s threads from the state's shapes, before `init` runs (None: each compiles at its first call)
    compile_ahead: Callable[[Any, tuple, bool], None] | None = None


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


def make_pieces(algo: OffPolicyAlgorithm, env: BatchedEnv, options: EnvOptions, plan: OffPolicyPlan,
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


def env_step_at(plan: OffPolicyPlan, iteration: Any, steps_per_iteration: int) -> Any:
    """Environment steps before learning iteration `iteration` (DQN's epsilon schedule reads it), as
    float32: an int32 count would wrap after 2**31 steps, and epsilon needs no exact count."""
    return (plan.warmup_iterations + iteration) * np.float32(steps_per_iteration)


def resumed_fields(restored: dict[str, Any], stacked: bool = False) -> dict[str, Any]:
    """A checkpoint's fields as a resumed run takes them: its envs start new episodes, so a restored
    buffer's streams end at their last saved row (`replay.end_streams`; `stacked`: one buffer per
    shard along a leading axis)."""
    if "replay" not in restored:
        return restored
    return dict(restored, replay=end_streams(restored["replay"], stacked))


def checkpointed_fields(config: Any) -> tuple[str, ...]:
    """What of an `OffPolicyState` a checkpoint holds: the learner's state, the buffer if asked for."""
    return ("actor", "critic", "key", "iteration", "updates") + (("replay",) if config.checkpoint_replay else ())
