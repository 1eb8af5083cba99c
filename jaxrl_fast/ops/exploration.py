"""Epsilon-greedy exploration, shared by the Q-learners (DQN, PQN)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl_fast.env.spaces import random_actions
from jaxrl_fast.types import EnvSpec


def linear_epsilon(start: float, end: float, fraction: float, env_steps: jax.Array, total_steps: int) -> jax.Array:
    """Linear decay from `start` to `end` over `fraction` of `total_steps` env steps, then constant."""
    span = max(1.0, fraction * total_steps)
    frac = jnp.clip(env_steps.astype(jnp.float32) / span, 0.0, 1.0)
    return start + frac * (end - start)


def epsilon_greedy(spec: EnvSpec, key: jax.Array, greedy: jax.Array, epsilon: jax.Array) -> jax.Array:
    """`greedy` actions `[B]`, each replaced by a uniform random one with probability `epsilon`."""
    explore_key, random_key = jax.random.split(key)
    explore = jax.random.uniform(explore_key, greedy.shape) < epsilon
    return jnp.where(explore, random_actions(spec, random_key, greedy.shape[0]), greedy)

