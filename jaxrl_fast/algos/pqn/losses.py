"""PQN's loss as a pure function of the Q-network's outputs on a minibatch."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from jaxrl_fast.ops.losses import weighted_mean


def q_regression_loss(q_values: jax.Array, action: jax.Array, target: jax.Array, weight: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Squared regression of Q(s, a) on its Q(lambda) target: `q_values` `[N, A]`, `action` int `[N]`,
    `target` and `weight` `[N]` (0 for reset steps).

        loss = 0.5 mean((Q(s, a) - target)^2),  over the weighted samples

    Returns `(loss, mean Q(s, a))`.
    """
    chex.assert_rank([q_values, action, target, weight], [2, 1, 1, 1])
    chex.assert_equal_shape([action, target, weight])
    q = jnp.take_along_axis(q_values, action[:, None].astype(jnp.int32), axis=-1)[:, 0]
    return 0.5 * weighted_mean((q - target) ** 2, weight), weighted_mean(q, weight)
