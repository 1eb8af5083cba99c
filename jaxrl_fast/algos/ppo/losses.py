"""PPO's loss as a pure function of the networks' outputs on a minibatch (rlax's habit: the maths
apart from the networks, so that a test gives it numbers and checks the numbers it returns)."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from jaxrl_fast.ops.losses import weighted_mean


def ppo_loss(log_prob: jax.Array, old_log_prob: jax.Array, advantage: jax.Array, entropy: jax.Array, value: jax.Array,
             target: jax.Array, weight: jax.Array, clip_coef: float, vf_coef: float, ent_coef: float,
             normalize_advantages: bool, old_value: jax.Array | None = None) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The clipped surrogate (Schulman et al. 2017, eq. 7), the value regression and the entropy bonus.

    Every input is `[N]` over a minibatch: `log_prob` log pi(a|s) under the parameters being
    trained, `old_log_prob` under the behaviour policy, `advantage` its GAE, `entropy` H(pi(.|s)),
    `value` V(s), `target` the value target, `weight` 1 for transitions and 0 for reset steps
    (every mean is over the weighted samples). With `normalize_advantages` the advantages are
    standardised over the minibatch first. With `old_value` `[N]` (V(s) before this update), the
    value loss is clipped as the PPO of OpenAI's baselines, Cobbe et al. (2020) and CleanRL's
    `clip_vloss` clip it: the larger of the two errors, the second with V's move from `old_value`
    clipped to +-eps.

        ratio = exp(log_prob - old_log_prob)
        policy_loss = -mean(min(ratio A, clip(ratio, 1 - eps, 1 + eps) A))
        value_loss = 0.5 mean((value - target)^2)
                     or 0.5 mean(max((value - target)^2, (old_value + clip(value - old_value, -eps, eps) - target)^2))
        loss = policy_loss - ent_coef mean(entropy) + vf_coef value_loss

    Returns `(loss, metrics)`, metrics with `approx_kl` (Schulman's k3 estimator, mean((r - 1) - log r))
    and `clip_fraction` (of samples with |r - 1| > eps).
    """
    inputs = [log_prob, old_log_prob, advantage, entropy, value, target, weight]
    if old_value is not None:
        inputs.append(old_value)
    chex.assert_rank(inputs, 1)
    chex.assert_equal_shape(inputs)
    log_ratio = log_prob - old_log_prob
    ratio = jnp.exp(log_ratio)
    if normalize_advantages:
        mean = weighted_mean(advantage, weight)
        std = jnp.sqrt(weighted_mean((advantage - mean) ** 2, weight))
        advantage = (advantage - mean) / (std + 1e-8)
    surrogate = jnp.minimum(ratio * advantage, jnp.clip(ratio, 1 - clip_coef, 1 + clip_coef) * advantage)
    policy_loss = -weighted_mean(surrogate, weight)
    value_error = (value - target) ** 2
    if old_value is not None:
        clipped = old_value + jnp.clip(value - old_value, -clip_coef, clip_coef)
        value_error = jnp.maximum(value_error, (clipped - target) ** 2)
    value_loss = 0.5 * weighted_mean(value_error, weight)
    entropy = weighted_mean(entropy, weight)
    loss = policy_loss - ent_coef * entropy + vf_coef * value_loss
    metrics = {
        "train/policy_loss": policy_loss,
        "train/value_loss": value_loss,
        "train/entropy": entropy,
        "train/approx_kl": weighted_mean((ratio - 1) - log_ratio, weight),
        "train/clip_fraction": weighted_mean((jnp.abs(ratio - 1) > clip_coef).astype(jnp.float32), weight),
    }
    return loss, metrics


def explained_variance(prediction: jax.Array, target: jax.Array, weight: jax.Array) -> jax.Array:
    """1 - mean((target - prediction)^2) / Var(target) over the weighted samples `[N]` (1: the values
    predict the targets exactly; 0: no better than the targets' mean)."""
    chex.assert_rank([prediction, target, weight], 1)
    chex.assert_equal_shape([prediction, target, weight])
    spread = weighted_mean((target - weighted_mean(target, weight)) ** 2, weight)
    return 1.0 - weighted_mean((target - prediction) ** 2, weight) / jnp.maximum(spread, 1e-8)
