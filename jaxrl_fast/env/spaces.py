"""What every backend shares about spaces: uniform random actions of a spec (off-policy warm-up, and
EnvPool measured alone), and dict observations flattened into one float32 vector in key order."""

from __future__ import annotations

from typing import Any, Sequence

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


def observation_keys_of(space: Any) -> tuple[str, ...]:
    """The keys of a dict observation space in the order they are flattened (sorted by name), or ()
    for one array."""
    return tuple(sorted(getattr(space, "spaces", {}) or ()))


def flatten_observations(obs: Any, keys: Sequence[str]) -> Any:
    """A dict of `[N, *shape_k]` arrays (numpy or jax) as one float32 `[N, sum_k prod(shape_k)]`,
    its keys in `keys`' order (each key's array row-major, a scalar one column)."""
    xp = jnp if isinstance(obs[keys[0]], jax.Array) else np
    return xp.concatenate([xp.reshape(obs[k], (obs[k].shape[0], -1)).astype(xp.float32) for k in keys], axis=-1)
