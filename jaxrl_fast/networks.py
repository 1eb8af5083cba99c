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


def make_q_network(spec: EnvSpec, hidden_sizes: Sequence[int], activation: str, num_critics: int) -> Network:
    """Continuous actions: `apply(params, obs [..., O], action [..., A])` -> `[num_critics, ...]`.

    The critics are one module vmapped over stacked parameters, so twin critics cost one matmul chain.
    """
    module = MLP(tuple(hidden_sizes), 1, activation, out_scale=1.0)
    in_size = math.prod(spec.obs_shape) + math.prod(spec.action_shape)
    dummy = jnp.zeros((1, in_size), jnp.float32)

    def init(key: jax.Array) -> Any:
        return jax.vmap(lambda k: module.init(k, dummy))(jax.random.split(key, num_critics))

    def apply(params: Any, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([obs, action], axis=-1)
        return jax.vmap(lambda p: module.apply(p, x)[..., 0])(params)

    return Network(init, apply)


def make_discrete_q_network(spec: EnvSpec, hidden_sizes: Sequence[int], activation: str) -> Network:
    """Discrete actions: `apply(params, obs [..., O])` -> Q-values `[..., num_actions]`."""
    return _network(MLP(tuple(hidden_sizes), spec.num_actions, activation, out_scale=1.0), spec.obs_shape)


def make_deterministic_policy(spec: EnvSpec, hidden_sizes: Sequence[int], activation: str) -> Network:
    """`apply(params, obs)` -> actions in [-1, 1] `[..., A]` (tanh), to be scaled to the bounds."""
    module = MLP(tuple(hidden_sizes), math.prod(spec.action_shape), activation, out_scale=1.0)
    net = _network(module, spec.obs_shape)
    return Network(net.init, lambda params, obs: jnp.tanh(net.apply(params, obs)))


def make_squashed_gaussian_policy(spec: EnvSpec, hidden_sizes: Sequence[int], activation: str) -> Network:
    """`apply(params, obs)` -> `(mean, log_std)` of the pre-tanh Gaussian, log_std in [-5, 2]."""
    size = math.prod(spec.action_shape)
    module = MLP(tuple(hidden_sizes), 2 * size, activation, out_scale=1.0)
    net = _network(module, spec.obs_shape)

    def apply(params: Any, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        mean, raw = jnp.split(net.apply(params, obs), 2, axis=-1)
        log_std = -5.0 + 3.5 * (jnp.tanh(raw) + 1.0)  # smooth clip to [-5, 2]
        return mean, log_std

    return Network(net.init, apply)
