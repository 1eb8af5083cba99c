"""The env side of every schedule: a policy steps the EnvPool batch inside jit.

The carry holds what the environment side owns: EnvPool's handle, the latest observations, the
episode bookkeeping, and the observation/reward statistics (run state, checkpointed with it).
`EvalPayload` is what leaves the learner for evaluation: the policy and those statistics.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxrl_fast.engine import phases
from jaxrl_fast.env.episodes import EpisodeState, EpisodeStats, init_episode_state, track_rollout_episodes
from jaxrl_fast.ops.normalization import (
    RewardScale,
    RunningMoments,
    init_moments,
    init_reward_scale,
    normalize,
    scale_rewards,
    update_moments,
)
from jaxrl_fast.types import Act, BatchedEnv, Rollout, Transition


class EnvOptions(NamedTuple):
    normalize_observations: bool
    scale_rewards: bool
    gamma: float  # discount of the return whose std scales rewards
    axis_name: str | None = None  # data parallelism: the shard_map axis the envs are split over (statistics span it)
    scaled_reward_clip: float = 0.0  # clip scaled rewards to ±this (0: no clip)


def env_options(config: Any) -> EnvOptions:
    """The adapter's options of a run (`TrainConfig`); the algorithm's discount scales rewards."""
    hyper = getattr(config, config.algo)
    return EnvOptions(config.normalize_observations, config.scale_rewards, getattr(hyper, "gamma", 0.99),
                      scaled_reward_clip=config.scaled_reward_clip)


class EvalPayload(NamedTuple):
    """What the evaluator needs to act like the learner's policy."""

    policy: Any
    obs_moments: RunningMoments


class EnvCarry(NamedTuple):
    handle: Any  # EnvPool's handle (or the JAX-native envs' state), threaded through every step
    obs: jax.Array  # [B, *obs_shape] latest raw observations
    episodes: EpisodeState
    obs_moments: RunningMoments
    reward_scale: RewardScale


def eval_payload(policy: Any, carry: EnvCarry) -> EvalPayload:
    """The payload for the evaluator, fetched to the host: it must not hold buffers the learner donates."""
    return jax.device_get(EvalPayload(policy, carry.obs_moments))


def observe(options: EnvOptions, moments: RunningMoments, obs: jax.Array) -> jax.Array:
    """What the policy sees: raw observations, or normalized ones."""
    return normalize(moments, obs) if options.normalize_observations else obs


def evaluation_policy(algo: Any, options: EnvOptions, sampled: bool = False
                      ) -> Callable[[EvalPayload, jax.Array, jax.Array], jax.Array]:
    """The evaluation policy (the evaluator's and `load_policy`'s): `(payload, obs [B, ...], seed
    uint32) -> env actions [B, ...]` on observations normalised as in training. The algorithm's
    deterministic action, `seed` unused; with `sampled` (`--eval-policy sampled`), an action drawn
    from its policy's distribution with the key of `seed` (the evaluator draws one per step from
    its evaluation's seed)."""

    def act(payload: EvalPayload, obs: jax.Array, seed: jax.Array) -> jax.Array:
        obs = observe(options, payload.obs_moments, obs)
        if sampled:
            return algo.act_sampled(payload.policy, obs, jax.random.key(seed))
        return algo.act_deterministic(payload.policy, obs)

    return act


def draw_seed(rng: np.random.Generator) -> np.uint32:
    """An evaluation policy's seed for one step (or one in-program evaluation) from a host stream."""
    return rng.integers(2**32, dtype=np.uint32)


def init_env_carry(env: BatchedEnv, options: EnvOptions, handle: Any, first_obs: jax.Array, num_agents: int = 1) -> EnvCarry:
    """The carry at the pool's first observations; with `num_agents` > 1, one per agent (each over
    its slice of the pool's envs, stacked on a leading axis) around the shared handle."""

    def own(obs: jax.Array) -> EnvCarry:
        moments = init_moments(env.spec.obs_shape)
        if options.normalize_observations:
            moments = update_moments(moments, obs, axis_name=options.axis_name)
        return EnvCarry(None, obs, init_episode_state(obs.shape[0]), moments, init_reward_scale(obs.shape[0]))

    obs = jnp.asarray(first_obs, env.spec.obs_dtype)
    carry = jax.vmap(own)(obs.reshape((num_agents, -1, *obs.shape[1:]))) if num_agents > 1 else own(obs)
    return carry._replace(handle=jax.tree.map(jnp.asarray, handle))  # EnvPool's bytes, or JAX envs' state


Policy = Callable[[jax.Array, jax.Array], Act]  # (observed obs [B, ...], key) -> Act


class Score(NamedTuple):
    """What episode statistics count of one step, `[B]` each: the game's score and end (`env.Step`)."""

    score: jax.Array
    game_over: jax.Array


def step_keys(key: jax.Array, length: int) -> jax.Array:
    """`length` per-step threefry keys. XLA's RngBitGenerator ('rbg' keys) would make each draw one
    fused op instead of a small rolled loop on XLA:CPU, but it changed the random stream, and with it
    DQN's CartPole-v1 test seed no longer learned (reproduced 2026-11-23): not worth the risk yet."""
    return jax.random.split(key, length)


def agents_map(num_agents: int, sequential: bool = False) -> Callable[..., Callable]:
    """`jax.vmap` over the agents axis when there is one, or `map_agents` when `sequential`; with a
    single agent, the function itself (a single run's program has no batching in it)."""
    if num_agents == 1:
        return lambda f, *args, **kwargs: f
    return map_agents if sequential else jax.vmap


def map_agents(f: Callable, in_axes: Any = 0) -> Callable:
    """Like `jax.vmap(f, in_axes)` (outputs on axis 0), but one agent after another (`lax.map`).

    Each agent then runs the single run's program op for op, and its results are bitwise those of
    the single run where XLA compiles the body as it compiles a lone call (JAX 0.10 does; JAX 0.12
    compiles PPO's advantage recursion differently inside the loop); vmapped, XLA batches the matmuls and reductions and may sum them in another
    order (relative differences of 1e-6 after one PPO update, which Adam's many steps amplify until
    trajectories part after a few dozen updates)."""

    def mapped(*args: Any) -> Any:
        axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
        to_front = lambda axis, part: jax.tree.map(lambda x: jnp.moveaxis(x, axis, 0), part)  # noqa: E731
        leading = tuple(jax.tree.map(to_front, axis, arg) for axis, arg in zip(axes, args))
        return lax.map(lambda xs: f(*xs), leading)

    return mapped


def agent_keys(seed: int, num_agents: int) -> jax.Array:
    """A run's PRNG key, or one per agent (agent k's is the key of the single run with seed + k)."""
    return jax.random.key(seed) if num_agents == 1 else jax.vmap(jax.random.key)(seed + jnp.arange(num_agents))


def agent_part(tree: Any, index: int) -> Any:
    """Agent `index`'s part of a pytree with a leading agents axis; scalars (iteration and update
    counters) are the agents' shared ones."""
    return jax.tree.map(lambda x: x if jnp.ndim(x) == 0 else x[index], tree)


def make_collect(env: BatchedEnv, options: EnvOptions, length: int, num_agents: int = 1):
    """`collect(carry, policy, key) -> (carry, transitions [length, B, ...], finished episodes)`.

    Only acting, stepping and storing run in each step; the episode statistics are computed from
    the stored game scores and ends after the loop (`track_rollout_episodes`).

    With `num_agents` N > 1, independent agents share the pool: agent j owns envs
    `[j E, (j + 1) E)`. Every field of the carry but the handle has a leading agents axis, `key` is
    one key per agent, `policy(obs [N, E, ...], keys [N])` acts for all of them, transitions are
    `[length, N, E, ...]` and episode statistics `[N]`. Each agent's bookkeeping is its own (vmapped);
    EnvPool steps every env in one call.
    """
    agents = num_agents > 1
    per_agent = agents_map(num_agents)
    pool_batch = (lambda x: x.reshape((-1, *x.shape[2:]))) if agents else (lambda x: x)
    agent_batch = (lambda x: x.reshape((num_agents, -1, *x.shape[1:]))) if agents else (lambda x: x)

    def record(carry: EnvCarry, obs: jax.Array, act: Act, step: Any) -> tuple[EnvCarry, tuple[Transition, Score]]:
        """One agent's bookkeeping of a step it acted in (its carry without the pool's handle)."""
        valid = ~carry.episodes.reset_step
        done = step.terminated | step.truncated
        reward, reward_scale = step.reward, carry.reward_scale
        if options.scale_rewards:
            reward_scale, reward = scale_rewards(reward_scale, step.reward, done, valid, options.gamma, options.axis_name,
                                                 options.scaled_reward_clip or None)
        moments = carry.obs_moments
        if options.normalize_observations:
            moments = update_moments(moments, step.obs, axis_name=options.axis_name)
        transition = Transition(obs, act.action, reward, step.terminated, step.truncated, valid, act.extras)
        episodes = carry.episodes._replace(reset_step=valid & done)
        return EnvCarry(None, step.obs, episodes, moments, reward_scale), (transition, Score(step.score, step.game_over))

    def env_step(policy: Policy, carry: EnvCarry, key: jax.Array) -> tuple[EnvCarry, tuple[Transition, Score]]:
        own = carry._replace(handle=None)
        with jax.named_scope(phases.INFERENCE):
            obs = per_agent(lambda c: observe(options, c.obs_moments, c.obs))(own)
            act = policy(obs, key)
        with jax.named_scope(phases.ENV):
            handle, step = env.step(carry.handle, pool_batch(act.env_action))
            own, out = per_agent(record)(own, obs, act, jax.tree.map(agent_batch, step))
        return own._replace(handle=handle), out

    def track(episodes: EpisodeState, score: Score, valid: jax.Array, reset_step: jax.Array) -> tuple[EpisodeState, EpisodeStats]:
        return track_rollout_episodes(episodes, score.score, score.game_over, valid, reset_step)

    def collect(carry: EnvCarry, policy: Policy, key: jax.Array) -> tuple[EnvCarry, Transition, EpisodeStats]:
        episodes = carry.episodes
        keys = jnp.swapaxes(jax.vmap(step_keys, (0, None))(key, length), 0, 1) if agents else step_keys(key, length)
        carry, (tr, score) = lax.scan(lambda c, k: env_step(policy, c, k), carry, keys)
        with jax.named_scope(phases.ENV):
            time_major = 1 if agents else None  # [T, N, E]: the agents axis is the second
            episodes, finished = per_agent(track, in_axes=(0, time_major, time_major, 0))(
                episodes, score, tr.valid, carry.episodes.reset_step)
        return carry._replace(episodes=episodes), tr, finished

    return collect


def make_rollout(env: BatchedEnv, options: EnvOptions, act: Callable[[Any, jax.Array, jax.Array], Act], length: int):
    """`rollout(carry, algo_state, key) -> (carry, Rollout, finished episodes)`: `length` steps acting
    with `act(algo_state, obs, key)`, and the observation the update bootstraps from. What the
    on-policy `concurrent` schedule dispatches each iteration, and calibration times as it."""
    collect = make_collect(env, options, length)

    def rollout(carry: EnvCarry, algo_state: Any, key: jax.Array) -> tuple[EnvCarry, Rollout, EpisodeStats]:
        carry, transitions, finished = collect(carry, lambda obs, k: act(algo_state, obs, k), key)
        return carry, Rollout(transitions, observe(options, carry.obs_moments, carry.obs)), finished

    return rollout
