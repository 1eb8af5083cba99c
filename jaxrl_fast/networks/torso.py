"""The bodies networks share: the MLP, the convolutional image encoders (Nature CNN, IMPALA ResNet)
and the orthogonal initializer. Image observations (uint8 frames) pass through an encoder, which
scales them to [0, 1] in its first layer; vector observations go to the MLPs as they are."""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl_fast.env.ids import PIXEL_FAMILIES, env_family
from jaxrl_fast.networks.config import NetworkConfig
from jaxrl_fast.types import EnvSpec

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "tanh": jnp.tanh,
    "relu": jax.nn.relu,
    "elu": jax.nn.elu,
    "silu": jax.nn.silu,
}


def encoder_name(spec: EnvSpec, net: NetworkConfig) -> str:
    """The encoder a network of `spec` gets: 'none' for vector observations."""
    if net.encoder == "auto":
        return "nature" if spec.pixels else "none"
    return net.encoder


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


def orthonormal_columns(a: jax.Array, block: int = 64) -> jax.Array:
    """Q of a = QR with R's diagonal positive, by block classical Gram-Schmidt: each panel of
    `block` columns is projected off the earlier panels twice in matrix-matrix products, then
    orthonormalised column by column (each column projected twice, CGS2), then projected once
    more; accurate to rounding in float32. A layer of up to `block` outputs is one panel."""
    panels: list[jax.Array] = []
    for start in range(0, a.shape[1], block):
        panel = a[:, start:start + block]
        earlier = jnp.concatenate(panels, axis=1) if panels else None
        if earlier is not None:
            for _ in range(2):
                panel = panel - earlier @ (earlier.T @ panel)
        panel = orthonormal_panel(panel)
        if earlier is not None:
            panel = panel - earlier @ (earlier.T @ panel)
            panel = panel / jnp.linalg.norm(panel, axis=0)
        panels.append(panel)
    return jnp.concatenate(panels, axis=1)


def orthonormal_panel(a: jax.Array) -> jax.Array:
    """Classical Gram-Schmidt over the columns of one panel, each projected twice (CGS2)."""
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


def mlp(net: NetworkConfig, out_size: int, out_scale: float) -> MLP:
    return MLP(tuple(net.hidden_sizes), out_size, net.activation, out_scale, net.layer_norm)
