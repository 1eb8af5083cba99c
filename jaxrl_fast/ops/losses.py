"""Small pure pieces shared by losses: weighted means and target-network averaging."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def weighted_mean(x: jax.Array, weight: jax.Array) -> jax.Array:
    """Mean of x over samples with weight 1 (reset steps carry weight 0); 0 if there are none."""
    return (x * weight).sum() / jnp.maximum(weight.sum(), 1.0)


def polyak(target: Any, online: Any, tau: float) -> Any:
    """target <- (1 - tau) target + tau online."""
    return jax.tree.map(lambda t, o: t + tau * (o - t), target, online)


def global_norm(tree: Any) -> jax.Array:
    return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in jax.tree.leaves(tree)))
