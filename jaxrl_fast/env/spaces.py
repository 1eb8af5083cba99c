"""What every backend shares about spaces and seeds: the action fields of a spec, each env's seed,
uniform random actions of a spec (off-policy warm-up, and EnvPool measured alone), and dict
observations flattened into one float32 vector in key order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_fast.types import EnvSpec


def action_fields(space: Any) -> dict[str, Any]:
    """An action space's `EnvSpec` fields: a Discrete's count, or a Box's shape and bounds as float
    tuples (a scalar bound broadcast over the shape, as gymnax's Box may give one). Gymnasium's,
    EnvPool's and gymnax's spaces all answer to `n`, or to `shape`, `low` and `high`."""
    if hasattr(space, "n"):
        return dict(discrete=True, num_actions=int(space.n), action_shape=(), action_low=(), action_high=())
    shape = tuple(space.shape)
    bound = lambda x: tuple(float(v) for v in np.broadcast_to(np.asarray(x, np.float64), shape).reshape(-1))  # noqa: E731
    return dict(discrete=False, num_actions=0, action_shape=shape, action_low=bound(space.low), action_high=bound(space.high))


def seeds_of_envs(seed: int | Sequence[int], num_envs: int) -> list[int]:
    """Env i's seed: `seed + i`, or `seed[i]` when `seed` is a sequence (one per env). EnvPool's
    rule, which the Gymnasium and JAX-native backends follow, so one seed starts the same envs on each."""
    if isinstance(seed, (Sequence, np.ndarray)):
        return [int(s) for s in seed]
    return [int(seed) + i for i in range(num_envs)]


def random_actions(spec: EnvSpec, key: jax.Array, n: int) -> jax.Array:
    """Uniform random actions for `n` envs: int32 indices, or floats within the action bounds,
    `[n, A]` as the networks give them (A: the Box's size; a scalar Box's is 1; the backends
    reshape an action to the Box's own shape)."""
    if spec.discrete:
        return jax.random.randint(key, (n,), 0, spec.num_actions)
    low, high = jnp.asarray(spec.action_low, jnp.float32), jnp.asarray(spec.action_high, jnp.float32)
    return jax.random.uniform(key, (n, len(spec.action_low)), minval=low, maxval=high)


def random_actions_np(spec: EnvSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """`random_actions` on the host, for EnvPool's Python API."""
    if spec.discrete:
        return rng.integers(0, spec.num_actions, size=n)
    return rng.uniform(spec.action_low, spec.action_high, size=(n, len(spec.action_low))).astype(np.float32)


def observation_keys_of(space: Any) -> tuple[str, ...]:
    """The keys of a dict observation space in the order they are flattened (sorted by name), or ()
    for one array (or a space of another kind, a Tuple's, which the backends then refuse)."""
    spaces = getattr(space, "spaces", None)
    return tuple(sorted(spaces)) if isinstance(spaces, Mapping) else ()


def flatten_observations(obs: Any, keys: Sequence[str]) -> Any:
    """A dict of `[N, *shape_k]` arrays (numpy or jax) as one float32 `[N, sum_k prod(shape_k)]`,
    its keys in `keys`' order (each key's array row-major, a scalar one column)."""
    xp = jnp if isinstance(obs[keys[0]], jax.Array) else np
    return xp.concatenate([xp.reshape(obs[k], (obs[k].shape[0], -1)).astype(xp.float32) for k in keys], axis=-1)
