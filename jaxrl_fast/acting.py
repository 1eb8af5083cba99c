"""The env side of every schedule: a policy steps the EnvPool batch inside jit.

The carry holds what the environment side owns: EnvPool's handle, the latest observations, the
episode bookkeeping, and the observation/reward statistics (run state, checkpointed with it).
`EvalPayload` is what leaves the learner for evaluation: the policy and those statistics.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxrl_fast import phases
from jaxrl_fast.data import Act, Transition
from jaxrl_fast.env import EpisodeState, EpisodeStats, XlaEnv, init_episode_state, track_rollout_episodes
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


def env_options(config: Any) -> EnvOptions:
    """The adapter's options of a run (`TrainConfig`); the algorithm's discount scales rewards."""
    hyper = getattr(config, config.algo)
    return EnvOptions(config.normalize_observations, config.scale_rewards, getattr(hyper, "gamma", 0.99))


class EvalPayload(NamedTuple):
    """What the evaluator needs to act like the learner's policy."""

    policy: Any
    obs_moments: RunningMoments


class EnvCarry(NamedTuple):
    handle: jax.Array  # EnvPool's handle, threaded through every XLA step
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


def init_env_carry(env: XlaEnv, options: EnvOptions, handle: Any, first_obs: jax.Array) -> EnvCarry:
    obs = jnp.asarray(first_obs, jnp.float32)
    moments = init_moments(env.spec.obs_shape)
    if options.normalize_observations:
        moments = update_moments(moments, obs)
    return EnvCarry(jnp.asarray(handle), obs, init_episode_state(env.spec.num_envs), moments, init_reward_scale(env.spec.num_envs))


Policy = Callable[[jax.Array, jax.Array], Act]  # (observed obs [B, ...], key) -> Act


def step_keys(key: jax.Array, length: int) -> jax.Array:
    """`length` per-step threefry keys. XLA's RngBitGenerator ('rbg' keys) would make each draw one
    fused op instead of a small rolled loop on XLA:CPU, but it changed the random stream, and with it
    DQN's CartPole-v1 test seed no longer learned (reproduced 2026-11-23): not worth the risk yet."""
    return jax.random.split(key, length)


def make_collect(env: XlaEnv, options: EnvOptions, length: int):
    """`collect(carry, policy, key) -> (carry, transitions [length, B, ...], finished episodes)`.

    Only acting, stepping and storing run in each step; the episode statistics are computed from
    the stored rewards and flags after the loop (`track_rollout_episodes`).
    """

    def env_step(policy: Policy, carry: EnvCarry, key: jax.Array) -> tuple[EnvCarry, tuple[Transition, jax.Array | None]]:
        with jax.named_scope(phases.INFERENCE):
            obs = observe(options, carry.obs_moments, carry.obs)
            act = policy(obs, key)
        with jax.named_scope(phases.ENV):
            handle, step = env.step(carry.handle, act.env_action)
            valid = ~carry.episodes.reset_step
            done = step.terminated | step.truncated
            reward, reward_scale = step.reward, carry.reward_scale
            if options.scale_rewards:
                reward_scale, reward = scale_rewards(reward_scale, step.reward, done, valid, options.gamma)
            moments = carry.obs_moments
            if options.normalize_observations:
                moments = update_moments(moments, step.obs)
        transition = Transition(obs, act.action, reward, step.terminated, step.truncated, valid, act.extras)
        episodes = carry.episodes._replace(reset_step=valid & done)
        raw_reward = step.reward if options.scale_rewards else None  # else the transition holds it
        return EnvCarry(handle, step.obs, episodes, moments, reward_scale), (transition, raw_reward)

    def collect(carry: EnvCarry, policy: Policy, key: jax.Array) -> tuple[EnvCarry, Transition, EpisodeStats]:
        episodes = carry.episodes
        carry, (tr, raw_reward) = lax.scan(lambda c, k: env_step(policy, c, k), carry, step_keys(key, length))
        with jax.named_scope(phases.ENV):
            raw_reward = tr.reward if raw_reward is None else raw_reward
            episodes, finished = track_rollout_episodes(episodes, raw_reward, tr.terminated, tr.truncated, tr.valid)
        return carry._replace(episodes=episodes), tr, finished

    return collect
