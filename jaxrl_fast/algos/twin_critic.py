"""Twin critics (clipped double Q-learning, Fujimoto et al. 2018), as SAC and TD3 both train them:
the target from the smaller of two target critics, the regression of both online critics on it,
and the gradient step that applies it."""

from __future__ import annotations

from typing import Any

import chex
import jax
import optax

from jaxrl_fast.networks.heads import Network
from jaxrl_fast.ops.losses import weighted_mean
from jaxrl_fast.types import Batch


def clipped_double_q_target(reward: jax.Array, discount: jax.Array, next_q: jax.Array,
                            next_log_prob: jax.Array | None = None, alpha: jax.Array | float = 0.0) -> jax.Array:
    """The bootstrapped target `[N]` of a batch of `[N]` rewards and discounts (gamma^m (1 - terminal),
    the n-step discount), from the twin target critics' values `next_q` `[2, N]` at the next
    observation and the next action:

        target = reward + discount (min_i Q_i(s', a') - alpha log pi(a'|s'))

    with the entropy term when `next_log_prob` `[N]` is given (SAC), without it (TD3). No gradient
    flows through it."""
    chex.assert_rank([reward, discount, next_q], [1, 1, 2])
    chex.assert_equal_shape([reward, discount, next_q[0]])
    soft_q = next_q.min(axis=0)
    if next_log_prob is not None:
        chex.assert_equal_shape([reward, next_log_prob])
        soft_q = soft_q - alpha * next_log_prob
    return jax.lax.stop_gradient(reward + discount * soft_q)


def twin_q_loss(q: jax.Array, target: jax.Array, weight: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Both critics' squared errors on one target: `q` `[2, N]`, `target` and `weight` `[N]`.

        loss = sum_i mean((Q_i(s, a) - target)^2),  over the weighted samples

    Returns `(loss, mean of q)`."""
    chex.assert_rank([q, target, weight], [2, 1, 1])
    chex.assert_equal_shape([q[0], target, weight])
    return sum(weighted_mean((qi - target) ** 2, weight) for qi in q), q.mean()


def twin_critic_step(q_net: Network, optimizer: optax.GradientTransformation, q_params: Any, opt_state: Any, batch: Batch,
                     target: jax.Array) -> tuple[Any, Any, dict[str, jax.Array]]:
    """One gradient step of the twin critics on `batch` towards `target` `[N]`: `(q_params, opt_state,
    metrics)`. The caller moves its target critics (each algorithm on its own beat)."""

    def loss_fn(params: Any) -> tuple[jax.Array, jax.Array]:
        return twin_q_loss(q_net.apply(params, batch.obs, batch.action), target, batch.weight)

    (loss, q_mean), grads = jax.value_and_grad(loss_fn, has_aux=True)(q_params)
    updates, opt_state = optimizer.update(grads, opt_state, q_params)
    return optax.apply_updates(q_params, updates), opt_state, {"train/critic_loss": loss, "train/q_mean": q_mean}
