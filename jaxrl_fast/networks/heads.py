"""Network factories: each returns a `Network` of pure `init(key) -> params` and `apply(params, obs)`.

Every factory takes the env's spec and a `NetworkConfig` (hidden sizes, activation, an optional
LayerNorm after each hidden layer, and the encoder of image observations); each algorithm's config
is one. The heads (policies, values, Q-values) sit on the torsos of `jaxrl_fast.networks.torso`.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_fast.networks.config import NetworkConfig
from jaxrl_fast.networks.torso import MLP, encoded, encoder_name, mlp
from jaxrl_fast.types import EnvSpec


class Network(NamedTuple):
    init: Callable[[jax.Array], Any]
    apply: Callable[..., Any]


class GaussianPolicy(nn.Module):
    """Mean from an MLP, state-independent log standard deviation."""

    hidden_sizes: Sequence[int]
    action_size: int
    activation: str = "tanh"
    log_std_init: float = 0.0
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        mean = MLP(self.hidden_sizes, self.action_size, self.activation, 0.01, self.layer_norm)(x)
        log_std = self.param("log_std", nn.initializers.constant(self.log_std_init), (self.action_size,))
        return mean, jnp.broadcast_to(log_std, mean.shape)


class StateDependentGaussianPolicy(nn.Module):
    """Mean from an MLP, and gSDE's exploration (Raffin et al. 2022): the noise is the MLP's last
    hidden features times a matrix whose entries have a learned log standard deviation each.

    Returns `(mean [..., A], features [..., F], log_std [F, A])`; the features carry no gradient
    (the noise trains only its scale), as in SB3's default.
    """

    hidden_sizes: Sequence[int]
    action_size: int
    activation: str = "tanh"
    log_std_init: float = 0.0
    layer_norm: bool = False
    mean_scale: float = 0.01  # orthogonal gain of the mean's layer

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        mean, features = MLP(self.hidden_sizes, self.action_size, self.activation, self.mean_scale, self.layer_norm,
                             with_features=True)(x)
        log_std = self.param("log_std", nn.initializers.constant(self.log_std_init), (features.shape[-1], self.action_size))
        return mean, jax.lax.stop_gradient(features), log_std


class ConcatHead(nn.Module):
    """A continuous critic's head: the MLP of the features and the action together."""

    mlp: nn.Module

    def __call__(self, features: jax.Array, action: jax.Array) -> jax.Array:
        return self.mlp(jnp.concatenate([features, action], axis=-1))


def _network(module: nn.Module, spec: EnvSpec) -> Network:
    dummy = np.zeros((1, *spec.obs_shape), spec.obs_dtype)  # numpy: a jnp array here compiles a program at build
    return Network(init=lambda key: module.init(key, dummy), apply=module.apply)


def make_policy_network(spec: EnvSpec, net: NetworkConfig, log_std_init: float = 0.0, sde: bool = False) -> Network:
    """`apply(params, obs [..., *obs_shape])` -> logits `[..., A]`, or `(mean, log_std)` `[..., A]`
    with the log standard deviation starting at `log_std_init`; with `sde` (continuous actions),
    `StateDependentGaussianPolicy`'s `(mean, features, log_std [F, A])`."""
    if spec.discrete:
        module: nn.Module = mlp(net, spec.num_actions, 0.01)
    elif sde:
        module = StateDependentGaussianPolicy(tuple(net.hidden_sizes), math.prod(spec.action_shape), net.activation,
                                              log_std_init, net.layer_norm)
    else:
        module = GaussianPolicy(tuple(net.hidden_sizes), math.prod(spec.action_shape), net.activation,
                                log_std_init, net.layer_norm)
    return _network(encoded(module, spec, net), spec)


def make_value_network(spec: EnvSpec, net: NetworkConfig) -> Network:
    """`apply(params, obs [..., *obs_shape])` -> values `[...]`."""
    network = _network(encoded(mlp(net, 1, 1.0), spec, net), spec)
    return Network(init=network.init, apply=lambda params, obs: network.apply(params, obs)[..., 0])


def make_q_network(spec: EnvSpec, net: NetworkConfig, num_critics: int) -> Network:
    """Continuous actions: `apply(params, obs [..., O], action [..., A])` -> `[num_critics, ...]`.

    The critics are one module vmapped over stacked parameters, so twin critics cost one matmul chain.
    With images, each critic has its own encoder and its head takes the features and the action.
    """
    if encoder_name(spec, net) != "none":
        head = encoded(ConcatHead(mlp(net, 1, 1.0)), spec, net)
        example = (np.zeros((1, *spec.obs_shape), spec.obs_dtype), np.zeros((1, math.prod(spec.action_shape)), np.float32))
        return Network(lambda key: jax.vmap(lambda k: head.init(k, *example))(jax.random.split(key, num_critics)),
                       lambda params, obs, action: jax.vmap(lambda p: head.apply(p, obs, action)[..., 0])(params))
    module = mlp(net, 1, 1.0)
    in_size = math.prod(spec.obs_shape) + math.prod(spec.action_shape)
    dummy = np.zeros((1, in_size), np.float32)

    def init(key: jax.Array) -> Any:
        return jax.vmap(lambda k: module.init(k, dummy))(jax.random.split(key, num_critics))

    def apply(params: Any, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([obs, action], axis=-1)
        return jax.vmap(lambda p: module.apply(p, x)[..., 0])(params)

    return Network(init, apply)


def make_discrete_q_network(spec: EnvSpec, net: NetworkConfig) -> Network:
    """Discrete actions: `apply(params, obs [..., O])` -> Q-values `[..., num_actions]`."""
    return _network(encoded(mlp(net, spec.num_actions, 1.0), spec, net), spec)


def make_deterministic_policy(spec: EnvSpec, net: NetworkConfig) -> Network:
    """`apply(params, obs)` -> actions in [-1, 1] `[..., A]` (tanh), to be scaled to the bounds."""
    network = _network(encoded(mlp(net, math.prod(spec.action_shape), 1.0), spec, net), spec)
    return Network(network.init, lambda params, obs: jnp.tanh(network.apply(params, obs)))


def make_squashed_gaussian_policy(spec: EnvSpec, net: NetworkConfig, sde_log_std_init: float | None = None) -> Network:
    """`apply(params, obs)` -> `(mean, log_std)` of the pre-tanh Gaussian, log_std in [-5, 2]; with
    `sde_log_std_init`, `StateDependentGaussianPolicy`'s `(mean, features, log_std [F, A])`, the mean
    clipped to [-2, 2] (as SB3's gSDE SAC: tanh saturates past it)."""
    size = math.prod(spec.action_shape)
    if sde_log_std_init is not None:
        module = StateDependentGaussianPolicy(tuple(net.hidden_sizes), size, net.activation, sde_log_std_init,
                                              net.layer_norm, mean_scale=1.0)
        sde = _network(encoded(module, spec, net), spec)

        def apply_sde(params: Any, obs: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
            mean, features, log_std = sde.apply(params, obs)
            return jnp.clip(mean, -2.0, 2.0), features, log_std

        return Network(sde.init, apply_sde)
    network = _network(encoded(mlp(net, 2 * size, 1.0), spec, net), spec)

    def apply(params: Any, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        mean, raw = jnp.split(network.apply(params, obs), 2, axis=-1)
        log_std = -5.0 + 3.5 * (jnp.tanh(raw) + 1.0)  # smooth clip to [-5, 2]
        return mean, log_std

    return Network(network.init, apply)
