"""Action distributions as pure functions over their parameters (no distribution objects in jit)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def categorical_sample(key: jax.Array, logits: jax.Array) -> jax.Array:
    """`logits [..., A]` -> int32 actions `[...]`."""
    return jax.random.categorical(key, logits).astype(jnp.int32)


def categorical_log_prob(logits: jax.Array, action: jax.Array) -> jax.Array:
    log_p = jax.nn.log_softmax(logits)
    return jnp.take_along_axis(log_p, action[..., None].astype(jnp.int32), axis=-1)[..., 0]


def categorical_entropy(logits: jax.Array) -> jax.Array:
    log_p = jax.nn.log_softmax(logits)
    return -(jnp.exp(log_p) * log_p).sum(-1)


def categorical_mode(logits: jax.Array) -> jax.Array:
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)


def gaussian_sample(key: jax.Array, mean: jax.Array, log_std: jax.Array) -> jax.Array:
    """Diagonal Gaussian over the last axis."""
    return mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape, mean.dtype)


def gaussian_log_prob(mean: jax.Array, log_std: jax.Array, action: jax.Array) -> jax.Array:
    z = (action - mean) * jnp.exp(-log_std)
    return (-0.5 * z**2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)


def gaussian_entropy(log_std: jax.Array) -> jax.Array:
    return (log_std + 0.5 * math.log(2 * math.pi * math.e)).sum(-1)


def sde_log_std(features: jax.Array, log_std: jax.Array) -> jax.Array:
    """Per-action log standard deviation of gSDE's noise `features @ (E * exp(log_std))`, E standard
    normal: var_a = sum_f features_f^2 exp(2 log_std_fa). `features [..., F]`, `log_std [F, A]` -> `[..., A]`."""
    return 0.5 * jnp.log((features**2) @ jnp.exp(2.0 * log_std) + 1e-12)


def sde_noise(features: jax.Array, unit_matrix: jax.Array, log_std: jax.Array) -> jax.Array:
    """gSDE's exploration noise `features @ (unit_matrix * exp(log_std))`, linear in the features: while
    the matrix is held, the noise is a smooth function of the state. `features [..., F]`,
    `unit_matrix` standard normal `[..., F, A]` (one per env) or `[F, A]` (shared) -> `[..., A]`."""
    return (features[..., :, None] * (unit_matrix * jnp.exp(log_std))).sum(-2)


def tanh_gaussian_sample_and_log_prob(key: jax.Array, mean: jax.Array, log_std: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Sample a = tanh(u), u ~ N(mean, std); log-prob with the change-of-variables correction.

        log pi(a) = log N(u) - sum_i log(1 - tanh(u_i)^2),
        log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))   (stable for large |u|)
    """
    u = gaussian_sample(key, mean, log_std)
    return tanh_squash(u, gaussian_log_prob(mean, log_std, u))


def tanh_squash(u: jax.Array, log_prob: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`a = tanh(u)` `[..., A]` and its log-probability from u's `log_prob` `[...]` (see above)."""
    log_det = 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))
    return jnp.tanh(u), log_prob - log_det.sum(-1)
