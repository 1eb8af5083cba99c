"""Return and advantage estimators over one time-major stream `[T]`; `vmap` for batches."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def episode_flags(terminated_t: jax.Array, truncated_t: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`terminated` as float32, and `continues = 1 - done`: where a trace may run on into step t+1."""
    terminated = terminated_t.astype(jnp.float32)
    return terminated, 1.0 - jnp.maximum(terminated, truncated_t.astype(jnp.float32))


def generalized_advantage_estimation(
    reward_t: jax.Array,
    value_t: jax.Array,
    next_value_t: jax.Array,
    terminated_t: jax.Array,
    truncated_t: jax.Array,
    gamma: float,
    lambda_: float,
) -> jax.Array:
    """GAE(gamma, lambda) advantages for one stream of T steps (Schulman et al. 2016, eq. 16).

        delta_t = r_t + gamma * (1 - terminated_t) * V(s_{t+1}) - V(s_t)
        A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},   done_t = terminated_t | truncated_t

    A terminated step does not bootstrap; a truncated one (time limit) bootstraps from the value
    of its final observation, and in both cases the trace stops at the episode's end.

    Args:
      reward_t: `[T]` reward received for the action at step t.
      value_t: `[T]` V(s_t).
      next_value_t: `[T]` V(s_{t+1}): the value of the observation the step returned (for a
        truncated step, its final observation).
      terminated_t, truncated_t: `[T]` bool.
    Returns:
      `[T]` float32 advantages.
    """
    terminated, continues = episode_flags(terminated_t, truncated_t)
    delta_t = reward_t + gamma * (1.0 - terminated) * next_value_t - value_t

    def backward(advantage_tp1, inputs):
        delta, cont = inputs
        advantage = delta + gamma * lambda_ * cont * advantage_tp1
        return advantage, advantage

    _, advantage_t = lax.scan(backward, jnp.zeros_like(delta_t[0]), (delta_t, continues), reverse=True)
    return advantage_t


def q_lambda_returns(
    reward_t: jax.Array,
    next_max_q_t: jax.Array,
    terminated_t: jax.Array,
    truncated_t: jax.Array,
    gamma: float,
    lambda_: float,
) -> jax.Array:
    """Peng's Q(lambda) returns for one stream of T steps, the targets of PQN (Gallici et al. 2024):

        G_t = r_t + gamma * (1 - terminated_t) * ((1 - lambda c_t) max_a Q(s_{t+1}, a) + lambda c_t G_{t+1})
        c_t = 1 - done_t,  done_t = terminated_t | truncated_t,  G_T = max_a Q(s_T, a)

    Each return mixes the n-step returns of the stream, bootstrapping from the greedy value where
    the trace stops: at a time limit from the episode's final observation, at the rollout's end from
    the last one. A terminated step does not bootstrap.

    Args:
      reward_t: `[T]` reward received for the action at step t.
      next_max_q_t: `[T]` max_a Q(s_{t+1}, a) of the observation the step returned (for a
        truncated step, its final observation).
      terminated_t, truncated_t: `[T]` bool.
    Returns:
      `[T]` float32 returns.
    """
    terminated, continues = episode_flags(terminated_t, truncated_t)

    def backward(return_tp1, inputs):
        reward, next_max_q, alive, cont = inputs
        mixed = (1.0 - lambda_ * cont) * next_max_q + lambda_ * cont * return_tp1
        g = reward + gamma * alive * mixed
        return g, g

    _, returns = lax.scan(backward, next_max_q_t[-1], (reward_t, next_max_q_t, 1.0 - terminated, continues), reverse=True)
    return returns
