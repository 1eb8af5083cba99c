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


def tanh_gaussian_sample_and_log_prob(key: jax.Array, mean: jax.Array, log_std: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Sample a = tanh(u), u ~ N(mean, std); log-prob with the change-of-variables correction.

        log pi(a) = log N(u) - sum_i log(1 - tanh(u_i)^2),
        log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))   (stable for large |u|)
    """
    u = gaussian_sample(key, mean, log_std)
    log_det = 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))
    return jnp.tanh(u), gaussian_log_prob(mean, log_std, u) - log_det.sum(-1)
