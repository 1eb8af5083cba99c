"""Network factories: each returns a `Network` of pure `init(key) -> params` and `apply(params, obs)`."""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl_fast.env import EnvSpec

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "tanh": jnp.tanh,
    "relu": jax.nn.relu,
    "elu": jax.nn.elu,
    "silu": jax.nn.silu,
}


class Network(NamedTuple):
    init: Callable[[jax.Array], Any]
    apply: Callable[..., Any]


class MLP(nn.Module):
    """Orthogonally initialised MLP (the PPO implementation details of Huang et al. 2022)."""

    hidden_sizes: Sequence[int]
    out_size: int
    activation: str = "tanh"
    out_scale: float = 1.0

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        for size in self.hidden_sizes:
            x = act(nn.Dense(size, kernel_init=nn.initializers.orthogonal(math.sqrt(2.0)))(x))
        return nn.Dense(self.out_size, kernel_init=nn.initializers.orthogonal(self.out_scale))(x)


class GaussianPolicy(nn.Module):
    """Mean from an MLP, state-independent log standard deviation."""

    hidden_sizes: Sequence[int]
    action_size: int
    activation: str = "tanh"
    init_log_std: float = 0.0

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        mean = MLP(self.hidden_sizes, self.action_size, self.activation, out_scale=0.01)(x)
        log_std = self.param("log_std", nn.initializers.constant(self.init_log_std), (self.action_size,))
        return mean, jnp.broadcast_to(log_std, mean.shape)


def _network(module: nn.Module, obs_shape: tuple[int, ...]) -> Network:
    dummy = jnp.zeros((1, *obs_shape), jnp.float32)
    return Network(init=lambda key: module.init(key, dummy), apply=module.apply)


def make_policy_network(spec: EnvSpec, hidden_sizes: Sequence[int], activation: str) -> Network:
    """`apply(params, obs [..., *obs_shape])` -> logits `[..., A]`, or `(mean, log_std)` `[..., A]`."""
    if spec.discrete:
        module: nn.Module = MLP(tuple(hidden_sizes), spec.num_actions, activation, out_scale=0.01)
    else:
        module = GaussianPolicy(tuple(hidden_sizes), math.prod(spec.action_shape), activation)
    return _network(module, spec.obs_shape)


def make_value_network(spec: EnvSpec, hidden_sizes: Sequence[int], activation: str) -> Network:
    """`apply(params, obs [..., *obs_shape])` -> values `[...]`."""
    module = MLP(tuple(hidden_sizes), 1, activation, out_scale=1.0)
    net = _network(module, spec.obs_shape)
    return Network(init=net.init, apply=lambda params, obs: net.apply(params, obs)[..., 0])
