"""Network factories: each returns a `Network` of pure `init(key) -> params` and `apply(params, obs)`.

Every factory takes the env's spec and a `NetworkConfig` (hidden sizes, activation, and an optional
LayerNorm after each hidden layer); each algorithm's config is one.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Literal, NamedTuple, Sequence

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


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """Fields every algorithm's networks share (each algorithm sets its own defaults)."""

    hidden_sizes: tuple[int, ...] = (256, 256)
    """Hidden layer widths of every MLP."""
    activation: Literal["tanh", "relu", "elu", "silu"] = "relu"
    """Hidden-layer activation."""
    layer_norm: bool = False
    """LayerNorm after each hidden layer, before the activation (stateless: nothing to track)."""


class Network(NamedTuple):
    init: Callable[[jax.Array], Any]
    apply: Callable[..., Any]


def orthogonal(scale: float = 1.0):
    """Flax's orthogonal initializer (same draw, same matrix up to rounding), computed with
    Gram-Schmidt in matrix products instead of LAPACK's QR.

    jaxlib's CPU QR kernel splits its work over XLA's intra-op thread pool and blocks a pool
    thread until the parts finish; when a network's QRs run on every pool thread at once (two
    cores, two XLA CPU devices), nothing is left to run the parts and the program never ends
    (seen in `gdb`: both pool threads waiting in `lapack_sgeqrf_ffi`'s ParallelBatchMap).
    """

    def init(key: jax.Array, shape: Sequence[int], dtype: Any = jnp.float32) -> jax.Array:
        rows, cols = math.prod(shape[:-1]), shape[-1]
        tall = (rows, cols) if rows >= cols else (cols, rows)
        a = jax.random.normal(key, tall, dtype)
        q = orthonormal_columns(a)
        return scale * (q if rows >= cols else q.T).reshape(shape)

    return init


def orthonormal_columns(a: jax.Array) -> jax.Array:
    """Q of a = QR with R's diagonal positive: classical Gram-Schmidt, each column projected
    twice (CGS2, accurate to rounding in float32)."""
    k = a.shape[1]

    def next_column(j: jax.Array, q: jax.Array) -> jax.Array:
        v = jnp.take(a, j, axis=1)
        earlier = jnp.arange(k) < j
        for _ in range(2):
            v = v - q @ jnp.where(earlier, q.T @ v, 0.0)
        return q.at[:, j].set(v / jnp.linalg.norm(v))

    return jax.lax.fori_loop(0, k, next_column, jnp.zeros_like(a))


class MLP(nn.Module):
    """Orthogonally initialised MLP (the PPO implementation details of Huang et al. 2022)."""

    hidden_sizes: Sequence[int]
    out_size: int
    activation: str = "tanh"
    out_scale: float = 1.0
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        for size in self.hidden_sizes:
            x = nn.Dense(size, kernel_init=orthogonal(math.sqrt(2.0)))(x)
            x = act(nn.LayerNorm()(x) if self.layer_norm else x)
        return nn.Dense(self.out_size, kernel_init=orthogonal(self.out_scale))(x)


class GaussianPolicy(nn.Module):
    """Mean from an MLP, state-independent log standard deviation."""

    hidden_sizes: Sequence[int]
    action_size: int
    activation: str = "tanh"
    init_log_std: float = 0.0
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        mean = MLP(self.hidden_sizes, self.action_size, self.activation, 0.01, self.layer_norm)(x)
        log_std = self.param("log_std", nn.initializers.constant(self.init_log_std), (self.action_size,))
        return mean, jnp.broadcast_to(log_std, mean.shape)


def _network(module: nn.Module, obs_shape: tuple[int, ...]) -> Network:
    dummy = jnp.zeros((1, *obs_shape), jnp.float32)
    return Network(init=lambda key: module.init(key, dummy), apply=module.apply)


def mlp(net: NetworkConfig, out_size: int, out_scale: float) -> MLP:
    return MLP(tuple(net.hidden_sizes), out_size, net.activation, out_scale, net.layer_norm)


def make_policy_network(spec: EnvSpec, net: NetworkConfig) -> Network:
    """`apply(params, obs [..., *obs_shape])` -> logits `[..., A]`, or `(mean, log_std)` `[..., A]`."""
    if spec.discrete:
        module: nn.Module = mlp(net, spec.num_actions, 0.01)
    else:
        module = GaussianPolicy(tuple(net.hidden_sizes), math.prod(spec.action_shape), net.activation,
                                layer_norm=net.layer_norm)
    return _network(module, spec.obs_shape)


def make_value_network(spec: EnvSpec, net: NetworkConfig) -> Network:
    """`apply(params, obs [..., *obs_shape])` -> values `[...]`."""
    module = mlp(net, 1, 1.0)
    net = _network(module, spec.obs_shape)
    return Network(init=net.init, apply=lambda params, obs: net.apply(params, obs)[..., 0])


def make_q_network(spec: EnvSpec, net: NetworkConfig, num_critics: int) -> Network:
    """Continuous actions: `apply(params, obs [..., O], action [..., A])` -> `[num_critics, ...]`.

    The critics are one module vmapped over stacked parameters, so twin critics cost one matmul chain.
    """
    module = mlp(net, 1, 1.0)
    in_size = math.prod(spec.obs_shape) + math.prod(spec.action_shape)
    dummy = jnp.zeros((1, in_size), jnp.float32)

    def init(key: jax.Array) -> Any:
        return jax.vmap(lambda k: module.init(k, dummy))(jax.random.split(key, num_critics))

    def apply(params: Any, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([obs, action], axis=-1)
        return jax.vmap(lambda p: module.apply(p, x)[..., 0])(params)

    return Network(init, apply)


def make_discrete_q_network(spec: EnvSpec, net: NetworkConfig) -> Network:
    """Discrete actions: `apply(params, obs [..., O])` -> Q-values `[..., num_actions]`."""
    return _network(mlp(net, spec.num_actions, 1.0), spec.obs_shape)


def make_deterministic_policy(spec: EnvSpec, net: NetworkConfig) -> Network:
    """`apply(params, obs)` -> actions in [-1, 1] `[..., A]` (tanh), to be scaled to the bounds."""
    module = mlp(net, math.prod(spec.action_shape), 1.0)
    net = _network(module, spec.obs_shape)
    return Network(net.init, lambda params, obs: jnp.tanh(net.apply(params, obs)))


def make_squashed_gaussian_policy(spec: EnvSpec, net: NetworkConfig) -> Network:
    """`apply(params, obs)` -> `(mean, log_std)` of the pre-tanh Gaussian, log_std in [-5, 2]."""
    size = math.prod(spec.action_shape)
    module = mlp(net, 2 * size, 1.0)
    net = _network(module, spec.obs_shape)

    def apply(params: Any, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        mean, raw = jnp.split(net.apply(params, obs), 2, axis=-1)
        log_std = -5.0 + 3.5 * (jnp.tanh(raw) + 1.0)  # smooth clip to [-5, 2]
        return mean, log_std

    return Network(net.init, apply)
