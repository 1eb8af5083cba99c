"""Network factories: each returns a `Network` of pure `init(key) -> params` and `apply(params, obs)`.

Every factory takes the env's spec and a `NetworkConfig` (hidden sizes, activation, an optional
LayerNorm after each hidden layer, and the encoder of image observations); each algorithm's config
is one. Image observations (uint8 frames) pass through a convolutional encoder, which scales them to
[0, 1] in its first layer, and the MLP heads take its features; vector observations go to the MLPs
as they are.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Literal, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl_fast.env import PIXEL_FAMILIES, EnvSpec, env_family

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
    encoder: Literal["auto", "none", "nature", "impala"] = "auto"
    """Image encoder: 'nature' (Mnih et al. 2015) or 'impala' (Espeholt et al. 2018); 'auto': nature for images, none for vectors."""


ENCODERS = ("nature", "impala")


def encoder_name(spec: EnvSpec, net: NetworkConfig) -> str:
    """The encoder a network of `spec` gets: 'none' for vector observations."""
    if net.encoder == "auto":
        return "nature" if spec.pixels else "none"
    return net.encoder


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
    with_features: bool = False  # also return the last hidden layer's output

    @nn.compact
    def __call__(self, x: jax.Array) -> Any:
        act = ACTIVATIONS[self.activation]
        for size in self.hidden_sizes:
            x = nn.Dense(size, kernel_init=orthogonal(math.sqrt(2.0)))(x)
            x = act(nn.LayerNorm()(x) if self.layer_norm else x)
        out = nn.Dense(self.out_size, kernel_init=orthogonal(self.out_scale))(x)
        return (out, x) if self.with_features else out


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


def frames_to_nhwc(x: jax.Array, channels_first: bool) -> tuple[jax.Array, tuple[int, ...]]:
    """Images `[..., C, H, W]` (EnvPool's Atari stacks) or `[..., H, W, C]` as float32 `[N, H, W, C]`
    in [0, 1], and the leading shape to restore."""
    lead = x.shape[:-3]
    x = x.reshape((-1, *x.shape[-3:])).astype(jnp.float32) / 255.0
    return (jnp.transpose(x, (0, 2, 3, 1)) if channels_first else x), lead


def patches_conv(x: jax.Array, kernel: jax.Array, stride: int, padding: str) -> jax.Array:
    """A convolution (`NHWC` images, `HWIO` kernel) as one matrix product over image patches, cut
    with strided slices. XLA:CPU leaves the gradients of a convolution whose weights are a loop's
    carry in a layout it computes about 10x slower than outside the loop (a Nature CNN SGD step on
    64 Atari frames: 0.70 s inside `lax.scan`, 0.07 s outside; JAX 0.10.2, 2-core x86), and every
    update loop carries its weights; slices and products are fast either way."""
    k = kernel.shape[0]
    if padding == "SAME":
        pads = []
        for n in x.shape[1:3]:
            total = max((-(-n // stride) - 1) * stride + k - n, 0)
            pads.append((total // 2, total - total // 2))
        x = jnp.pad(x, ((0, 0), *pads, (0, 0)))
    oh, ow = (x.shape[1] - k) // stride + 1, (x.shape[2] - k) // stride + 1
    cols = [x[:, dy: dy + stride * (oh - 1) + 1: stride, dx: dx + stride * (ow - 1) + 1: stride, :]
            for dy in range(k) for dx in range(k)]
    return jnp.concatenate(cols, axis=-1) @ kernel.reshape(-1, kernel.shape[-1])


class Conv(nn.Module):
    """A square 2-D convolution with bias, `NHWC`: XLA's own convolution on accelerators, and
    `patches_conv` on CPU (`lax.platform_dependent` picks per device the program is compiled for)."""

    features: int
    size: int
    stride: int = 1
    padding: str = "VALID"
    kernel_init: Callable = nn.initializers.lecun_normal()

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.param("kernel", self.kernel_init, (self.size, self.size, x.shape[-1], self.features))
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        strides, padding = (self.stride, self.stride), self.padding

        def xla(x: jax.Array, kernel: jax.Array) -> jax.Array:
            return jax.lax.conv_general_dilated(x, kernel, strides, padding, dimension_numbers=("NHWC", "HWIO", "NHWC"))

        def patches(x: jax.Array, kernel: jax.Array) -> jax.Array:
            return patches_conv(x, kernel, self.stride, padding)

        return jax.lax.platform_dependent(x, kernel, cpu=patches, default=xla) + bias


def normed(x: jax.Array, layer_norm: bool) -> jax.Array:
    return nn.LayerNorm()(x) if layer_norm else x


class NatureCNN(nn.Module):
    """The DQN encoder of Mnih et al. (2015): 32 8x8/4, 64 4x4/2 and 64 3x3/1 convolutions, then 512
    ReLU features; orthogonal init with gain sqrt(2), as CleanRL's Atari agents. With `layer_norm`,
    a LayerNorm before each ReLU (PQN's network, which has no target network to keep it stable)."""

    channels_first: bool
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x, lead = frames_to_nhwc(x, self.channels_first)
        for features, size, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
            x = Conv(features, size, stride, kernel_init=orthogonal(math.sqrt(2.0)))(x)
            x = nn.relu(normed(x, self.layer_norm))
        x = nn.Dense(512, kernel_init=orthogonal(math.sqrt(2.0)))(x.reshape((x.shape[0], -1)))
        return nn.relu(normed(x, self.layer_norm)).reshape((*lead, 512))


class ImpalaCNN(nn.Module):
    """The IMPALA encoder (Espeholt et al. 2018): three stacks of a 3x3 convolution, a 3x3/2 max-pool
    and two residual blocks (16, 32, 32 channels), then 256 ReLU features (`layer_norm`: a LayerNorm
    before the last ReLU)."""

    channels_first: bool
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x, lead = frames_to_nhwc(x, self.channels_first)
        for channels in (16, 32, 32):
            x = Conv(channels, 3, padding="SAME")(x)
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
            for _ in range(2):
                y = Conv(channels, 3, padding="SAME")(nn.relu(x))
                x = x + Conv(channels, 3, padding="SAME")(nn.relu(y))
        x = nn.Dense(256)(nn.relu(x).reshape((x.shape[0], -1)))
        return nn.relu(normed(x, self.layer_norm)).reshape((*lead, 256))


class ConcatHead(nn.Module):
    """A continuous critic's head: the MLP of the features and the action together."""

    mlp: nn.Module

    def __call__(self, features: jax.Array, action: jax.Array) -> jax.Array:
        return self.mlp(jnp.concatenate([features, action], axis=-1))


class Encoded(nn.Module):
    """`head(encoder(obs), *rest)`: an image encoder in front of an MLP head."""

    encoder: nn.Module
    head: nn.Module

    def __call__(self, obs: jax.Array, *rest: jax.Array) -> Any:
        return self.head(self.encoder(obs), *rest)


def encoded(module: nn.Module, spec: EnvSpec, net: NetworkConfig) -> nn.Module:
    """`module` behind the encoder `net` asks for; itself for vector observations (its parameters,
    and so every seeded initialisation, are then exactly what they were before encoders existed)."""
    name = encoder_name(spec, net)
    if name == "none":
        return module
    channels_first = env_family(spec.env_id) in PIXEL_FAMILIES  # Atari's [4, 84, 84] stacks; other images [H, W, C]
    encoder = {"nature": NatureCNN, "impala": ImpalaCNN}[name](channels_first, net.layer_norm)
    return Encoded(encoder, module)


def _network(module: nn.Module, spec: EnvSpec) -> Network:
    dummy = jnp.zeros((1, *spec.obs_shape), spec.obs_dtype)
    return Network(init=lambda key: module.init(key, dummy), apply=module.apply)


def mlp(net: NetworkConfig, out_size: int, out_scale: float) -> MLP:
    return MLP(tuple(net.hidden_sizes), out_size, net.activation, out_scale, net.layer_norm)


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
        example = (jnp.zeros((1, *spec.obs_shape), spec.obs_dtype), jnp.zeros((1, math.prod(spec.action_shape))))
        return Network(lambda key: jax.vmap(lambda k: head.init(k, *example))(jax.random.split(key, num_critics)),
                       lambda params, obs, action: jax.vmap(lambda p: head.apply(p, obs, action)[..., 0])(params))
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
