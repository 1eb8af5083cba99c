import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_fast.replay import (
    ReplayError,
    Row,
    add_many,
    add_rows,
    check_fits,
    init_replay,
    num_sampleable,
    replay_nbytes,
    sample_batch,
)

B = 2


def stream(T, done_at=(), trunc_at=(), reset_after=True):
    """A hand-made stream for 2 envs: obs = 100 * env + t, reward = t, EnvPool-style reset rows."""
    obs = np.array([[100 * b + t for b in range(B)] for t in range(T)], np.float32)[..., None]
    reward = np.array([[float(t) for _ in range(B)] for t in range(T)], np.float32)
    term = np.zeros((T, B), bool)
    trunc = np.zeros((T, B), bool)
    valid = np.ones((T, B), bool)
    for t in done_at:
        term[t] = True
        valid[t + 1] = False  # the next row is EnvPool's reset step
        reward[t + 1] = 0.0
    for t in trunc_at:
        trunc[t] = True
        valid[t + 1] = False
        reward[t + 1] = 0.0
    action = np.arange(T * B, dtype=np.int32).reshape(T, B)
    return Row(obs, action, reward, term, trunc, valid)


def example():
    row = stream(1)
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), row)


def test_add_wraps_around_and_keeps_the_newest_rows():
    state = init_replay(4, example())
    state = add_many(state, stream(6))
    assert int(state.count) == 6 and int(state.head) == 2
    # rows 4, 5 overwrote slots 0, 1; slots 2, 3 hold rows 2, 3
    np.testing.assert_array_equal(state.rows.obs[:, 0, 0], [4, 5, 2, 3])
    assert int(num_sampleable(state, 1)) == 3


def sample_all(state, n_step, gamma, size=4096):
    batch = jax.jit(sample_batch, static_argnums=(2, 3, 4))(state, jax.random.key(0), size, n_step, gamma)
    return jax.device_get(batch)


def test_one_step_samples_are_exact_transitions_and_reset_rows_weigh_nothing():
    state = add_many(init_replay(16, example()), stream(10, done_at=(3,), trunc_at=(6,)))
    batch = sample_all(state, 1, 0.9)
    t = batch.obs[:, 0] % 100
    assert set(np.unique(t)) == set(range(9))  # rows 0..8 (row 9 has no next observation yet)
    np.testing.assert_array_equal(batch.next_obs[:, 0], batch.obs[:, 0] + 1)
    np.testing.assert_array_equal(batch.weight, np.where(np.isin(t, [4, 7]), 0.0, 1.0))
    np.testing.assert_allclose(batch.reward, np.where(np.isin(t, [4, 7]), 0.0, t))
    # termination stops bootstrapping; truncation bootstraps from the final observation
    np.testing.assert_allclose(batch.discount, np.where(t == 3, 0.0, 0.9))


def test_n_step_returns_stop_at_episode_ends():
    state = add_many(init_replay(32, example()), stream(12, done_at=(4,), trunc_at=(8,)))
    batch = sample_all(state, 3, 0.5)
    t = (batch.obs[:, 0] % 100).astype(int)
    for ti, r, d, nxt, w in zip(t, batch.reward, batch.discount, batch.next_obs[:, 0] % 100, batch.weight):
        if ti in (5, 9):
            assert w == 0.0
            continue
        # steps ti..: rewards are the time index; episode ends at 4 (terminal) and 8 (truncated)
        end = next((e for e in (4, 8) if ti <= e < ti + 3), None)
        m = 3 if end is None else end - ti + 1
        assert r == pytest.approx(sum(0.5**k * (ti + k) for k in range(m)))
        assert nxt == ti + m
        assert d == pytest.approx(0.0 if end == 4 else 0.5**m)


def test_uint8_pixel_storage_and_float_batches():
    ex = Row(jax.ShapeDtypeStruct((B, 4, 4), jnp.float32), *example()[1:])
    state = init_replay(8, ex, obs_dtype=jnp.uint8)
    assert state.rows.obs.dtype == jnp.uint8
    row = jax.tree.map(lambda x: x[0], stream(1))._replace(obs=np.full((B, 4, 4), 200.0, np.float32))
    state = add_rows(add_rows(state, row), row)
    batch = sample_batch(state, jax.random.key(0), 8, 1, 0.99)
    assert batch.obs.dtype == jnp.float32 and float(batch.obs.max()) == 200.0


def test_memory_is_estimated_and_an_oversized_buffer_is_refused():
    nbytes = replay_nbytes(1_000_000, 8, (17,), np.float32, (6,), np.float32)
    assert nbytes == 125_000 * 8 * (17 * 4 + 6 * 4 + 7)
    with pytest.raises(ReplayError, match="GiB"):
        check_fits(replay_nbytes(10**12, 1, (84, 84, 4), np.uint8, (), np.int32), jax.devices()[0])
