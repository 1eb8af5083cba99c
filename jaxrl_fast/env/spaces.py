"""Uniform random actions of a spec (off-policy warm-up, and EnvPool measured alone)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_fast.types import EnvSpec


def random_actions(spec: EnvSpec, key: jax.Array, n: int) -> jax.Array:
    """Uniform random actions for `n` envs: int32 indices, or floats within the action bounds."""
    if spec.discrete:
        return jax.random.randint(key, (n,), 0, spec.num_actions)
    low, high = jnp.asarray(spec.action_low, jnp.float32), jnp.asarray(spec.action_high, jnp.float32)
    return jax.random.uniform(key, (n, *spec.action_shape), minval=low, maxval=high)


def random_actions_np(spec: EnvSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """`random_actions` on the host, for EnvPool's Python API."""
    if spec.discrete:
        return rng.integers(0, spec.num_actions, size=n)
    return rng.uniform(spec.action_low, spec.action_high, size=(n, *spec.action_shape)).astype(np.float32)
