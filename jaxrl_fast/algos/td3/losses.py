"""TD3's policy loss as a pure function of the critic's values (the critics' loss is
`jaxrl_fast.algos.twin_critic.twin_q_loss`)."""

from __future__ import annotations

import chex
import jax

from jaxrl_fast.ops.losses import weighted_mean


def deterministic_policy_loss(q: jax.Array, weight: jax.Array) -> jax.Array:
    """The deterministic policy gradient's loss: `q` `[N]` the first critic's Q(s, mu(s)) at the
    policy's own actions, `weight` `[N]`.

        loss = -mean(Q_1(s, mu(s))),  over the weighted samples
    """
    chex.assert_rank([q, weight], 1)
    chex.assert_equal_shape([q, weight])
    return -weighted_mean(q, weight)
