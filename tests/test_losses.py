"""Each algorithm's loss against hand-computed numbers, called as the pure function it is (no network,
no parameters overwritten), under `jit` and under `vmap` (a batch of minibatches)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_fast.algos.dqn.losses import double_q_target, huber_q_loss
from jaxrl_fast.algos.ppo.losses import explained_variance, ppo_loss
from jaxrl_fast.algos.pqn.losses import q_regression_loss
from jaxrl_fast.algos.sac.losses import sac_policy_loss, temperature_loss
from jaxrl_fast.algos.td3.losses import deterministic_policy_loss
from jaxrl_fast.algos.twin_critic import clipped_double_q_target, twin_q_loss

# A batch of three: the third sample landed on a reset step (weight 0), so no mean may count it.
REWARD = jnp.array([1.0, -2.0, 1000.0])
DISCOUNT = jnp.array([0.99, 0.0, 0.99])
WEIGHT = jnp.array([1.0, 1.0, 0.0])


def both_ways(loss, *args):
    """`loss(*args)` under jit, and the same through vmap over a leading axis of two equal copies."""
    out = jax.jit(loss)(*args)
    stacked = jax.vmap(loss)(*(jnp.stack([a, a]) for a in args))
    jax.tree.map(lambda one, many: np.testing.assert_allclose(many, np.stack([one, one]), rtol=1e-6), out, stacked)
    return out


def test_clipped_double_q_target_takes_the_smaller_twin_and_subtracts_the_entropy_term():
    next_q = jnp.array([[2.0, 2.0, 2.0], [3.0, 3.0, 3.0]])
    np.testing.assert_allclose(both_ways(clipped_double_q_target, REWARD, DISCOUNT, next_q), [2.98, -2.0, 1001.98], rtol=1e-6)
    next_log_prob = jnp.array([-1.0, 0.5, 0.0])
    soft = both_ways(lambda r, d, q, lp: clipped_double_q_target(r, d, q, lp, 0.2), REWARD, DISCOUNT, next_q, next_log_prob)
    np.testing.assert_allclose(soft, [1 + 0.99 * (2.0 + 0.2), -2.0, 1001.98], rtol=1e-6)


def test_twin_q_loss_sums_both_critics_errors_over_the_transitions():
    """SAC's and TD3's critic loss: online twins at 0.5 and 0.7 against y = r + discount * min(2, 3)."""
    y = jnp.array([2.98, -2.0, 7.0])  # the third target is the reset step's: left out
    q = jnp.array([[0.5, 0.5, 0.5], [0.7, 0.7, 0.7]])
    loss, q_mean = both_ways(twin_q_loss, q, y, WEIGHT)
    expected = np.mean((0.5 - y[:2]) ** 2) + np.mean((0.7 - y[:2]) ** 2)
    np.testing.assert_allclose(loss, expected, rtol=1e-6)
    np.testing.assert_allclose(q_mean, 0.6, rtol=1e-6)
    # TD3's smoothed-target twins at 4 and 3: the smaller, 3, is what the target takes
    y = clipped_double_q_target(REWARD, DISCOUNT, jnp.array([[4.0] * 3, [3.0] * 3]))
    np.testing.assert_allclose(twin_q_loss(q, y, WEIGHT)[0], np.mean((0.5 - np.array([1 + 0.99 * 3.0, -2.0])) ** 2)
                               + np.mean((0.7 - np.array([1 + 0.99 * 3.0, -2.0])) ** 2), rtol=1e-6)


def test_sac_policy_loss_is_alpha_log_pi_minus_the_smaller_q():
    log_prob = jnp.array([-1.0, -0.5, 9.0])
    q = jnp.array([[0.5, 0.5, 0.5], [0.7, 0.7, 0.7]])
    loss = both_ways(lambda lp, qq, w: sac_policy_loss(lp, qq, 1.0, w), log_prob, q, WEIGHT)
    entropy = -np.mean([-1.0, -0.5])  # with alpha = 1: mean(log pi - min Q) = -entropy - 0.5
    np.testing.assert_allclose(loss, -entropy - 0.5, rtol=1e-6)


def test_temperature_loss_moves_alpha_towards_the_target_entropy():
    log_prob = jnp.array([-1.0, -0.5, 9.0])
    loss = both_ways(lambda la, lp, w: temperature_loss(la, lp, -1.0, w), jnp.asarray(0.5), log_prob, WEIGHT)
    np.testing.assert_allclose(loss, -0.5 * np.mean([-1.0 - 1.0, -0.5 - 1.0]), rtol=1e-6)
    # the policy's entropy (0.75) is above the target (-1): the gradient step lowers log alpha
    grad = jax.grad(temperature_loss)(jnp.asarray(0.0), log_prob, -1.0, WEIGHT)
    assert float(grad) > 0.0  # the temperature moves


def test_deterministic_policy_loss_is_minus_the_first_critics_value():
    loss = both_ways(deterministic_policy_loss, jnp.array([0.5, 0.5, 99.0]), WEIGHT)
    np.testing.assert_allclose(loss, -0.5, rtol=1e-6)  # -Q1


def test_ppo_loss_matches_the_clipped_surrogate_by_hand():
    old_log_prob = jnp.log(jnp.array([0.5, 0.5, 0.5]))
    log_prob = jnp.log(jnp.array([0.75, 0.25, 0.9]))  # ratios 1.5, 0.5 (clipped to 1.2, 0.8), 1.8 (masked)
    advantage = jnp.array([2.0, -1.0, 5.0])
    entropy = jnp.array([0.6, 0.4, 3.0])
    value, target = jnp.array([1.0, 0.0, 9.0]), jnp.array([2.0, 2.0, -9.0])
    loss, metrics = both_ways(lambda *a: ppo_loss(*a, 0.2, 0.5, 0.01, False), log_prob, old_log_prob, advantage,
                              entropy, value, target, WEIGHT)
    surrogate = [min(1.5 * 2.0, 1.2 * 2.0), min(0.5 * -1.0, 0.8 * -1.0)]  # [2.4, -0.8]
    policy_loss = -np.mean(surrogate)
    value_loss = 0.5 * np.mean([1.0, 4.0])
    np.testing.assert_allclose(metrics["train/policy_loss"], policy_loss, rtol=1e-6)
    np.testing.assert_allclose(metrics["train/value_loss"], value_loss, rtol=1e-6)
    np.testing.assert_allclose(metrics["train/entropy"], 0.5, rtol=1e-6)
    np.testing.assert_allclose(loss, policy_loss - 0.01 * 0.5 + 0.5 * value_loss, rtol=1e-6)
    np.testing.assert_allclose(metrics["train/clip_fraction"], 1.0, rtol=1e-6)
    kl = np.mean([(1.5 - 1) - np.log(1.5), (0.5 - 1) - np.log(0.5)])
    np.testing.assert_allclose(metrics["train/approx_kl"], kl, rtol=1e-5)


def test_ppo_value_loss_clipped_takes_the_larger_error_and_stops_the_clipped_moves_gradient():
    same = jnp.zeros(3)
    value, old_value, target = jnp.array([1.0, 1.9, 9.0]), jnp.array([0.9, 0.5, 0.0]), jnp.array([2.0, 2.0, -9.0])
    clipped_loss = lambda v, ov: ppo_loss(same, same, same, same, v, target, WEIGHT, 0.2, 0.5, 0.0, False,  # noqa: E731
                                          old_value=ov)
    _, metrics = both_ways(clipped_loss, value, old_value)
    # sample 0 moved 0.1 (inside eps): its error 1.0 either way; sample 1 moved 1.4 towards its target:
    # clipped to 0.5 + 0.2 = 0.7, error 1.69 against 0.01 unclipped; sample 2 is a reset step
    np.testing.assert_allclose(metrics["train/value_loss"], 0.5 * np.mean([1.0, 1.69]), rtol=1e-5)
    _, unclipped = ppo_loss(same, same, same, same, value, target, WEIGHT, 0.2, 0.5, 0.0, False)
    np.testing.assert_allclose(unclipped["train/value_loss"], 0.5 * np.mean([1.0, 0.01]), rtol=1e-5)
    grad = jax.grad(lambda v: clipped_loss(v, old_value)[0])(value)
    # vf_coef x 0.5 x the mean over two samples x d(v - t)^2/dv; the clipped branch of sample 1 is flat
    np.testing.assert_allclose(grad, [0.5 * 0.5 * 0.5 * 2 * (1.0 - 2.0), 0.0, 0.0], atol=1e-6)


def test_ppo_loss_standardises_advantages_over_the_weighted_samples():
    same = jnp.zeros(3)
    advantage = jnp.array([3.0, 1.0, 100.0])  # standardised over the two transitions: [1, -1]
    _, metrics = ppo_loss(same, same, advantage, same, same, same, WEIGHT, 0.2, 0.5, 0.0, True)
    np.testing.assert_allclose(metrics["train/policy_loss"], -np.mean([1.0, -1.0]), atol=1e-6)  # ratio 1: -mean(A)


def test_explained_variance_is_one_for_exact_predictions_and_zero_for_the_mean():
    target = jnp.array([1.0, 3.0, 50.0])
    np.testing.assert_allclose(both_ways(explained_variance, target, target, WEIGHT), 1.0, rtol=1e-6)
    np.testing.assert_allclose(explained_variance(jnp.full(3, 2.0), target, WEIGHT), 0.0, atol=1e-6)


def test_q_regression_loss_reads_the_taken_actions_q():
    q_values = jnp.array([[1.0, 2.0], [0.0, -1.0], [5.0, 5.0]])
    action = jnp.array([1, 0, 1])
    loss, q_mean = both_ways(q_regression_loss, q_values, action, jnp.array([3.0, 2.0, 0.0]), WEIGHT)
    np.testing.assert_allclose(loss, 0.5 * np.mean([(2.0 - 3.0) ** 2, (0.0 - 2.0) ** 2]), rtol=1e-6)
    np.testing.assert_allclose(q_mean, 1.0, rtol=1e-6)


def test_double_q_target_lets_the_online_network_pick_and_the_target_network_value():
    online = jnp.array([[1.0, 2.0], [3.0, 0.0], [0.0, 1.0]])  # picks actions 1, 0, 1
    target_q = jnp.array([[10.0, 20.0], [30.0, 40.0], [50.0, 60.0]])
    np.testing.assert_allclose(both_ways(double_q_target, REWARD, DISCOUNT, online, target_q),
                               [1 + 0.99 * 20.0, -2.0, 1000 + 0.99 * 60.0], rtol=1e-6)


def test_huber_q_loss_is_quadratic_near_the_target_and_linear_beyond():
    q_values = jnp.array([[0.5, 0.0], [0.0, 4.0], [9.0, 9.0]])
    loss, _ = both_ways(huber_q_loss, q_values, jnp.array([0, 1, 0]), jnp.array([0.0, 0.0, 0.0]), WEIGHT)
    np.testing.assert_allclose(loss, np.mean([0.5 * 0.5**2, 4.0 - 0.5]), rtol=1e-6)


def test_losses_refuse_mismatched_shapes():
    with pytest.raises(AssertionError):
        twin_q_loss(jnp.zeros((2, 3)), jnp.zeros(4), jnp.zeros(4))
    with pytest.raises(AssertionError):
        ppo_loss(*([jnp.zeros(3)] * 6), jnp.zeros(2), 0.2, 0.5, 0.0, True)
