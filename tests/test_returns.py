import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_fast.ops.returns import generalized_advantage_estimation as gae
from jaxrl_fast.ops.returns import q_lambda_returns

GAMMA, LAMBDA = 0.9, 0.5
REWARD = np.array([1.0, 2.0, 3.0], np.float32)
VALUE = np.array([0.5, 1.0, 1.5], np.float32)
NEXT_VALUE = np.array([1.0, 1.5, 2.0], np.float32)
NONE = np.zeros(3, bool)
AT_1 = np.array([False, True, False])

# Worked by hand: delta = r + 0.9 * (1 - term) * V' - V ; A_t = delta_t + 0.45 * (1 - done_t) * A_{t+1}
CASES = {
    # deltas 1.4, 2.35, 3.3
    "no episode end": (NONE, NONE, [1.4 + 0.45 * (2.35 + 0.45 * 3.3), 2.35 + 0.45 * 3.3, 3.3]),
    # step 1 terminates: delta_1 = 2 - 1 = 1, and the trace stops there
    "terminated": (AT_1, NONE, [1.4 + 0.45 * 1.0, 1.0, 3.3]),
    # step 1 is truncated: it bootstraps (delta_1 = 2.35) but the trace still stops
    "truncated": (NONE, AT_1, [1.4 + 0.45 * 2.35, 2.35, 3.3]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_gae_matches_hand_computed_values_under_jit(name):
    terminated, truncated, expected = CASES[name]
    fn = jax.jit(gae, static_argnums=(5, 6))
    out = fn(REWARD, VALUE, NEXT_VALUE, terminated, truncated, GAMMA, LAMBDA)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_gae_vmaps_over_streams():
    terminated = np.stack([c[0] for c in CASES.values()], axis=1)  # [T, 3 streams]
    truncated = np.stack([c[1] for c in CASES.values()], axis=1)
    expected = np.stack([c[2] for c in CASES.values()], axis=1)
    tile = lambda x: np.repeat(x[:, None], 3, axis=1)  # noqa: E731
    batched = jax.jit(jax.vmap(gae, in_axes=(1, 1, 1, 1, 1, None, None), out_axes=1), static_argnums=(5, 6))
    out = batched(tile(REWARD), tile(VALUE), tile(NEXT_VALUE), terminated, truncated, GAMMA, LAMBDA)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_gae_scan_matches_plain_loop_on_random_streams():
    rng = np.random.default_rng(0)
    T = 64
    r, v, nv = (rng.normal(size=T).astype(np.float32) for _ in range(3))
    term, trunc = rng.random(T) < 0.1, rng.random(T) < 0.05
    expected, adv = np.zeros(T), 0.0
    for t in reversed(range(T)):
        delta = r[t] + 0.99 * (1 - term[t]) * nv[t] - v[t]
        adv = delta + 0.99 * 0.95 * (1 - (term[t] | trunc[t])) * adv
        expected[t] = adv
    np.testing.assert_allclose(gae(r, v, nv, term, trunc, 0.99, 0.95), expected, rtol=1e-4, atol=1e-5)
    assert gae(jnp.asarray(r), v, nv, term, trunc, 0.99, 0.95).dtype == jnp.float32


# Q(lambda), worked by hand with the same rewards and max_a Q(s_{t+1}) = [1.0, 1.5, 2.0]:
#   G_t = r_t + 0.9 * (1 - term_t) * ((1 - 0.5 c_t) maxQ'_t + 0.5 c_t G_{t+1}),  G_3 = maxQ'_2
NEXT_MAX_Q = NEXT_VALUE
Q_LAMBDA_CASES = {
    # G_2 = 3 + 0.9 * 2 = 4.8; G_1 = 2 + 0.9 * (0.75 + 2.4) = 4.835; G_0 = 1 + 0.9 * (0.5 + 2.4175)
    "no episode end": (NONE, NONE, [3.62575, 4.835, 4.8]),
    # step 1 terminates: G_1 = 2, no bootstrap, and step 0 mixes its one-step target with it
    "terminated": (AT_1, NONE, [1 + 0.9 * (0.5 + 1.0), 2.0, 4.8]),
    # step 1 is truncated: G_1 bootstraps from its final observation, and the trace stops there
    "truncated": (NONE, AT_1, [1 + 0.9 * (0.5 + 0.5 * 3.35), 3.35, 4.8]),
}


@pytest.mark.parametrize("name", list(Q_LAMBDA_CASES))
def test_q_lambda_returns_match_hand_computed_values_under_jit(name):
    terminated, truncated, expected = Q_LAMBDA_CASES[name]
    fn = jax.jit(q_lambda_returns, static_argnums=(4, 5))
    np.testing.assert_allclose(fn(REWARD, NEXT_MAX_Q, terminated, truncated, GAMMA, LAMBDA), expected, rtol=1e-6)


def test_q_lambda_returns_at_lambda_0_and_1_are_one_step_and_monte_carlo():
    one_step = q_lambda_returns(REWARD, NEXT_MAX_Q, NONE, NONE, GAMMA, 0.0)
    np.testing.assert_allclose(one_step, REWARD + GAMMA * NEXT_MAX_Q, rtol=1e-6)
    monte_carlo = q_lambda_returns(REWARD, NEXT_MAX_Q, NONE, NONE, GAMMA, 1.0)
    g2 = 3 + 0.9 * 2.0
    np.testing.assert_allclose(monte_carlo, [1 + 0.9 * (2 + 0.9 * g2), 2 + 0.9 * g2, g2], rtol=1e-6)


def test_q_lambda_scan_matches_plain_loop_on_random_streams():
    rng = np.random.default_rng(1)
    T = 64
    r, q = (rng.normal(size=T).astype(np.float32) for _ in range(2))
    term, trunc = rng.random(T) < 0.1, rng.random(T) < 0.05
    expected, g = np.zeros(T), q[-1]
    for t in reversed(range(T)):
        cont = 0.0 if (term[t] or trunc[t]) else 1.0
        g = r[t] + 0.99 * (1 - term[t]) * ((1 - 0.95 * cont) * q[t] + 0.95 * cont * g)
        expected[t] = g
    np.testing.assert_allclose(q_lambda_returns(r, q, term, trunc, 0.99, 0.95), expected, rtol=1e-4, atol=1e-5)


def test_q_lambda_returns_vmap_over_streams_and_an_end_at_the_last_step_stops_the_bootstrap():
    at_end = np.array([False, False, True])
    cases = [(NONE, NONE), (AT_1, NONE), (NONE, AT_1), (at_end, NONE), (NONE, at_end)]
    terminated = np.stack([c[0] for c in cases], axis=1)  # [T, 5 streams]
    truncated = np.stack([c[1] for c in cases], axis=1)
    tile = lambda x: np.repeat(x[:, None], len(cases), axis=1)  # noqa: E731
    batched = jax.jit(jax.vmap(q_lambda_returns, in_axes=(1, 1, 1, 1, None, None), out_axes=1), static_argnums=(4, 5))
    out = np.asarray(batched(tile(REWARD), tile(NEXT_MAX_Q), terminated, truncated, GAMMA, LAMBDA))
    for k, name in enumerate(Q_LAMBDA_CASES):
        np.testing.assert_allclose(out[:, k], Q_LAMBDA_CASES[name][2], rtol=1e-6)
    # the last step terminates: G_2 = r_2 = 3, and the steps before mix it as in "no episode end"
    np.testing.assert_allclose(out[:, 3], [1 + 0.9 * (0.5 + 0.5 * (2 + 0.9 * (0.75 + 1.5))), 2 + 0.9 * (0.75 + 1.5), 3.0],
                               rtol=1e-6)
    # truncated there: it bootstraps from its final observation, as when the rollout simply ends
    np.testing.assert_allclose(out[:, 4], Q_LAMBDA_CASES["no episode end"][2], rtol=1e-6)
