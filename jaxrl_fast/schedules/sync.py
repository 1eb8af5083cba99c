"""The `sync` schedule: collect a rollout, then update, fused into one jitted program.

EnvPool's XLA step runs inside `lax.scan`, so a call of `run` performs many whole iterations
(rollout + update) without returning to Python. Evaluation requests leave the program through
`io_callback`, which only enqueues: the loop never waits for an evaluation.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import io_callback

from jaxrl_fast.data import Algorithm, Rollout, Transition
from jaxrl_fast.env import EpisodeState, EpisodeStats, XlaEnv, add_stats, init_episode_state, init_episode_stats, track_episodes
from jaxrl_fast.ops.normalization import (
    RewardScale,
    RunningMoments,
    init_moments,
    init_reward_scale,
    normalize,
    scale_rewards,
    update_moments,
)


class EnvOptions(NamedTuple):
    normalize_observations: bool
    scale_rewards: bool
    gamma: float  # discount of the return whose std scales rewards


class LoopState(NamedTuple):
    """Everything the fused loop carries; all of it is run state (checkpointed in full)."""

    algo: Any
    handle: jax.Array  # EnvPool's handle, threaded through every XLA step
    obs: jax.Array  # [B, *obs_shape] latest raw observations
    episodes: EpisodeState
    obs_moments: RunningMoments
    reward_scale: RewardScale
    key: jax.Array
    iteration: jax.Array  # int32 []: iterations completed


class EvalPayload(NamedTuple):
    """What the evaluator needs to act like the learner's policy."""

    policy: Any
    obs_moments: RunningMoments


class CallMetrics(NamedTuple):
    """Reduced over one `run` call: means of update metrics, sums of finished episodes."""

    train: dict[str, jax.Array]
    episodes: EpisodeStats
    iterations: jax.Array  # int32 []: iterations run by this call


class SyncLoop(NamedTuple):
    init: Callable[[jax.Array, Any, jax.Array], LoopState]
    run: Callable[[LoopState, jax.Array], tuple[LoopState, CallMetrics]]
    collect: Callable[[LoopState], LoopState]  # jitted: one rollout, no update (for benchmarks)
    steps_per_iteration: int
    iterations_per_call: int


def observe(options: EnvOptions, moments: RunningMoments, obs: jax.Array) -> jax.Array:
    return normalize(moments, obs) if options.normalize_observations else obs


def make_sync_loop(
    algo: Algorithm,
    env: XlaEnv,
    options: EnvOptions,
    iterations_per_call: int,
    eval_every_iterations: int,
    on_eval: Callable[[EvalPayload, Any], None] | None,
) -> SyncLoop:
    """Build `init(key, handle, first_obs)` and the jitted `run(state, num_iterations)`.

    `run` always scans `iterations_per_call` iterations; those past `num_iterations` are skipped
    (so the last, shorter call of a run reuses the same compiled program). `on_eval(payload,
    iteration)` is called on the host after every `eval_every_iterations` iterations
    (0 disables it).
    """
    num_envs = env.spec.num_envs

    def init(key: jax.Array, handle: Any, first_obs: jax.Array) -> LoopState:
        algo_key, loop_key = jax.random.split(key)
        obs = jnp.asarray(first_obs, jnp.float32)
        moments = init_moments(env.spec.obs_shape)
        if options.normalize_observations:
            moments = update_moments(moments, obs)
        return LoopState(
            algo=algo.init(algo_key),
            handle=jnp.asarray(handle),
            obs=obs,
            episodes=init_episode_state(num_envs),
            obs_moments=moments,
            reward_scale=init_reward_scale(num_envs),
            key=loop_key,
            iteration=jnp.zeros((), jnp.int32),
        )

    def env_step(carry: LoopState, key: jax.Array) -> tuple[LoopState, tuple[Transition, EpisodeStats]]:
        obs = observe(options, carry.obs_moments, carry.obs)
        act = algo.act(carry.algo, obs, key)
        handle, step = env.step(carry.handle, act.env_action)
        valid = ~carry.episodes.reset_step
        episodes, finished = track_episodes(carry.episodes, step)
        reward, reward_scale = step.reward, carry.reward_scale
        if options.scale_rewards:
            done = step.terminated | step.truncated
            reward_scale, reward = scale_rewards(reward_scale, step.reward, done, valid, options.gamma)
        moments = carry.obs_moments
        if options.normalize_observations:
            moments = update_moments(moments, step.obs)
        transition = Transition(obs, act.action, reward, step.terminated, step.truncated, valid, act.extras)
        carry = carry._replace(handle=handle, obs=step.obs, episodes=episodes, obs_moments=moments, reward_scale=reward_scale)
        return carry, (transition, finished)

    def collect(state: LoopState, key: jax.Array) -> tuple[LoopState, Transition, EpisodeStats]:
        """One rollout of `rollout_length` steps per env with the current policy; `[T, B, ...]`."""
        state, (transitions, finished) = lax.scan(env_step, state, jax.random.split(key, algo.rollout_length))
        return state, transitions, finished

    def iteration(state: LoopState) -> tuple[LoopState, dict[str, jax.Array], EpisodeStats]:
        key, rollout_key, update_key = jax.random.split(state.key, 3)
        state, transitions, finished = collect(state, rollout_key)
        rollout = Rollout(transitions, last_obs=observe(options, state.obs_moments, state.obs))
        algo_state, metrics = algo.update(state.algo, rollout, update_key)
        state = state._replace(algo=algo_state, key=key, iteration=state.iteration + 1)
        if on_eval is not None and eval_every_iterations > 0:
            payload = EvalPayload(algo.policy_params(algo_state), state.obs_moments)
            lax.cond(
                state.iteration % eval_every_iterations == 0,
                lambda: io_callback(on_eval, None, payload, state.iteration, ordered=False),
                lambda: None,
            )
        return state, metrics, jax.tree.map(lambda x: x.sum(0), finished)

    def run(state: LoopState, num_iterations: jax.Array) -> tuple[LoopState, CallMetrics]:
        def maybe_iterate(carry, index):
            state, stats = carry
            active = index < num_iterations
            metric_shapes = jax.eval_shape(lambda s: iteration(s)[1], state)

            def skip(s):
                zeros = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), metric_shapes)
                return s, zeros, init_episode_stats()

            state, metrics, finished = lax.cond(active, iteration, skip, state)
            return (state, add_stats(stats, finished)), metrics

        (state, stats), metrics = lax.scan(
            maybe_iterate, (state, init_episode_stats()), jnp.arange(iterations_per_call)
        )
        count = jnp.clip(num_iterations, 1, iterations_per_call)
        mean = jax.tree.map(lambda x: x.sum(0) / count, metrics)  # skipped iterations contribute zeros
        return state, CallMetrics(mean, stats, jnp.minimum(num_iterations, iterations_per_call))

    return SyncLoop(
        init=init,
        run=jax.jit(run, donate_argnums=0),
        collect=jax.jit(lambda state: collect(state, state.key)[0], donate_argnums=0),
        steps_per_iteration=num_envs * algo.rollout_length,
        iterations_per_call=iterations_per_call,
    )
