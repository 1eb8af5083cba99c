"""DQN's target and loss as pure functions of the Q-networks' outputs on a batch."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import optax

from jaxrl_fast.ops.losses import weighted_mean


def double_q_target(reward: jax.Array, discount: jax.Array, next_q_online: jax.Array, next_q_target: jax.Array) -> jax.Array:
    """Double DQN's target `[N]` (van Hasselt et al. 2016): the online network picks the next action,
    the target network values it. `reward`, `discount` `[N]`; Q-values at the next observation `[N, A]`.

        target = reward + discount Q_target(s', argmax_a Q_online(s', a))

    No gradient flows through it."""
    chex.assert_rank([reward, discount, next_q_online, next_q_target], [1, 1, 2, 2])
    chex.assert_equal_shape([next_q_online, next_q_target])
    next_action = jnp.argmax(next_q_online, axis=-1)
    next_q = jnp.take_along_axis(next_q_target, next_action[:, None], axis=-1)[:, 0]
    return jax.lax.stop_gradient(reward + discount * next_q)


def huber_q_loss(q_values: jax.Array, action: jax.Array, target: jax.Array, weight: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The Huber loss (delta 1) of Q(s, a) against its target: `q_values` `[N, A]`, `action` int `[N]`,
    `target` and `weight` `[N]`; the mean is over the weighted samples. Returns `(loss, mean Q(s, a))`."""
    chex.assert_rank([q_values, action, target, weight], [2, 1, 1, 1])
    chex.assert_equal_shape([action, target, weight])
    q = jnp.take_along_axis(q_values, action[:, None].astype(jnp.int32), axis=-1)[:, 0]
    return weighted_mean(optax.huber_loss(q, target), weight), q.mean()
