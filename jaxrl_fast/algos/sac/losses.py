"""SAC's policy and temperature losses as pure functions of the networks' outputs on a batch (the
critics' loss is `jaxrl_fast.algos.twin_critic.twin_q_loss`)."""

from __future__ import annotations

import chex
import jax

from jaxrl_fast.ops.losses import weighted_mean


def sac_policy_loss(log_prob: jax.Array, q: jax.Array, alpha: jax.Array, weight: jax.Array) -> jax.Array:
    """The policy's loss on fresh actions a ~ pi(.|s) of a batch: `log_prob` log pi(a|s) `[N]`, the
    twin critics' `q` `[2, N]` at (s, a), the temperature `alpha`, `weight` `[N]`.

        loss = mean(alpha log pi(a|s) - min_i Q_i(s, a)),  over the weighted samples
    """
    chex.assert_rank([log_prob, q, weight], [1, 2, 1])
    chex.assert_equal_shape([log_prob, q[0], weight])
    return weighted_mean(alpha * log_prob - q.min(axis=0), weight)


def temperature_loss(log_alpha: jax.Array, log_prob: jax.Array, target_entropy: float, weight: jax.Array) -> jax.Array:
    """The temperature's loss (Haarnoja et al. 2018b, eq. 18, in log alpha): it lowers alpha while the
    policy's entropy -log pi(a|s) is above `target_entropy`, raises it while below.

        loss = mean(-log_alpha (log pi(a|s) + target_entropy)),  over the weighted samples `[N]`
    """
    chex.assert_rank([log_alpha, log_prob, weight], [0, 1, 1])
    return weighted_mean(-log_alpha * jax.lax.stop_gradient(log_prob + target_entropy), weight)
