"""What the learners share beyond the pure maths of `jaxrl_fast.ops`: the off-policy warm-up policy,
bounded actions as an affine map of [-1, 1] (SAC, TD3), and gradients averaged over data-parallel shards."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.flatten_util import ravel_pytree

from jaxrl_fast.env.spaces import random_actions
from jaxrl_fast.types import Act, EnvSpec


def random_act(spec: EnvSpec) -> Callable[[Any, Any], Act]:
    """The off-policy warm-up policy: uniform random actions, `random_act(obs [B, ...], key) -> Act`."""

    def act(obs: Any, key: Any) -> Act:
        action = random_actions(spec, key, obs.shape[0])
        return Act(action, action, ())

    return act


class ActionScale(NamedTuple):
    """The affine map from [-1, 1] (a tanh's range) onto a box of actions."""

    center: np.ndarray  # [A], numpy: a constant of the programs that use it
    half_width: np.ndarray  # [A]

    def to_env(self, unit_action: jax.Array) -> jax.Array:
        return self.center + self.half_width * unit_action

    @property
    def log_det(self) -> jax.Array:
        """log |det| of the map's Jacobian: what a log-probability of a mapped sample loses."""
        return jnp.log(self.half_width).sum()


def action_scale(spec: EnvSpec) -> ActionScale:
    # numpy constants: jnp arithmetic here would compile a program per operation at build time
    low, high = np.asarray(spec.action_low, np.float32), np.asarray(spec.action_high, np.float32)
    return ActionScale((high + low) / 2, (high - low) / 2)


def shard_mean(grads: Any, axis_name: str | None) -> Any:
    """Gradients averaged over the data-parallel shards of `axis_name` (inside `shard_map`; None:
    as they are), in one all-reduce: each costs a round trip between processes, whatever its size."""
    if axis_name is None:
        return grads
    flat, unflatten = ravel_pytree(grads)
    return unflatten(lax.pmean(flat, axis_name))


def mean_over_shards(optimizer: optax.GradientTransformation, axis_name: str | None) -> optax.GradientTransformation:
    """`optimizer` on gradients averaged over the data-parallel shards (`shard_mean`). Every shard
    then applies one update to its copy of the parameters, so the copies stay equal."""
    if axis_name is None:
        return optimizer
    return optax.GradientTransformation(
        optimizer.init, lambda grads, state, params=None: optimizer.update(shard_mean(grads, axis_name), state, params))
