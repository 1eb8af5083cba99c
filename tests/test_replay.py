import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_fast.engine.replay import (
    ReplayState,
    Row,
    add_many,
    add_rows,
    end_streams,
    init_replay,
    num_sampleable,
    observations_at,
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


@pytest.mark.parametrize("written, n_step", [(1, 1), (2, 3), (3, 3)])
def test_samples_drawn_before_a_window_is_written_weigh_nothing(written, n_step):
    # an update as early as --learning-starts 0 allows: a window's rows (and its bootstrap
    # observation) are not all written yet, and the zeros in their place must not train
    state = add_many(init_replay(16, example()), stream(written))
    assert int(num_sampleable(state, n_step)) == 0
    assert not sample_all(state, n_step, 0.9, size=64).weight.any()
    state = add_many(state, stream(1))  # one row more: the first window is whole
    batch = sample_all(state, n_step, 0.9, size=64)
    whole = int(num_sampleable(state, n_step))
    assert whole == max(written + 1 - n_step, 0)
    assert batch.weight.all() if whole else not batch.weight.any()


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


@pytest.mark.parametrize("written", [10, 17])  # 17 rows on a ring of 16: the last one wraps to slot 0
def test_a_resumed_runs_new_episodes_are_never_read_as_the_saved_rows_continuation(written):
    # a resume restores the buffer, and its envs start new episodes: the stream's next row is a
    # new episode's first observation, not the next one of the last saved row
    state = end_streams(add_many(init_replay(16, example()), stream(written)))
    new = stream(6)
    state = add_many(state, new._replace(obs=new.obs + 1000))
    batch = sample_all(state, 3, 0.5)
    kept, renewed = batch.weight > 0, batch.obs[:, 0] >= 1000
    assert (renewed[kept] == (batch.next_obs[kept, 0] >= 1000)).all()  # no transition spans the seam
    obs, next_obs = batch.obs[:, 0] % 100, batch.next_obs[:, 0] % 100  # time indices
    old, last = kept & ~renewed, written - 1
    assert not old[obs == last].any()  # its next observation was never written
    before = old & (obs == last - 1)  # ends there, bootstrapping from the last saved observation
    assert before.any() and (next_obs[before] == last).all()
    np.testing.assert_allclose(batch.reward[before], last - 1)
    np.testing.assert_allclose(batch.discount[before], 0.5)
    earlier = old & (obs < last - 1)  # windows that reach the seam stop at it
    np.testing.assert_array_equal(next_obs[earlier], np.minimum(obs[earlier] + 3, last))
    assert kept[renewed].any()  # the new episodes' rows are transitions as any


def test_uint8_frames_stay_uint8_in_batches():
    ex = Row(jax.ShapeDtypeStruct((B, 4, 4), jnp.uint8), *example()[1:])
    state = init_replay(8, ex)
    row = jax.tree.map(lambda x: x[0], stream(1))._replace(obs=np.full((B, 4, 4), 200, np.uint8))
    state = add_rows(add_rows(state, row), row)
    batch = sample_batch(state, jax.random.key(0), 8, 1, 0.99)
    assert batch.obs.dtype == batch.next_obs.dtype == jnp.uint8 and int(batch.obs.max()) == 200


def atari_stream(steps: int, num_envs: int = 2):
    """Rows as the engine writes them from EnvPool's Breakout (small frames, episodic life, a short
    time limit), random actions; and which rows begin a new game and which a new life only."""
    from jaxrl_fast.env.envpool import make_pool  # registers Atari's ids, whichever test ran first

    pool = make_pool("Breakout-v5", num_envs, num_threads=1, seed=3, episodic_life=True, max_episode_steps=150,
                     img_height=12, img_width=10)
    rng = np.random.default_rng(0)
    obs, _ = pool.reset()
    rows, new_game, new_life = [], [], []
    ended, game_over = np.zeros(num_envs, bool), np.zeros(num_envs, bool)
    for _ in range(steps):
        action = rng.integers(0, pool.action_space.n, num_envs).astype(np.int32)
        nxt, reward, term, trunc, info = pool.step(action)
        new_game.append(ended & game_over)
        new_life.append(ended & ~game_over)
        rows.append(Row(obs, action, reward.astype(np.float32), term, trunc, ~ended))
        obs, ended = nxt, term | trunc
        game_over = info["terminated"].astype(bool) | trunc
    pool.close()
    return rows, np.array(new_game), np.array(new_life)


def test_stored_frames_rebuild_envpool_stacks_across_life_losses_new_games_and_wraparound():
    """Each row keeps one 12x10 frame, and every held row's stack rebuilds to EnvPool's own stacked
    observation: after life-loss resets (the stack carries on across them), after new games (every
    slot is the first frame) and after the ring has wrapped."""
    rows, new_game, new_life = atari_stream(700)
    assert new_game[1:].any() and new_life[1:].any()  # both kinds of reset are in the stream
    capacity, stack = 96, 4
    example = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype), rows[0])
    state = init_replay(capacity, example, frame_stack=stack)
    assert state.rows.obs.shape == (capacity, B, 1, 12, 10) and state.rows.obs.dtype == jnp.uint8
    add, rebuild = jax.jit(add_rows), jax.jit(observations_at, static_argnums=3)
    checked_resets = 0
    for t, row in enumerate(rows):
        state = add(state, row)
        if (t + 1) % 50:
            continue
        held = list(range(max(0, t + 1 - capacity + stack - 1), t + 1))  # rows whose history is still held
        index = np.repeat(np.array(held) % capacity, B)
        env = np.tile(np.arange(B), len(held))
        want = np.stack([rows[u].obs[e] for u in held for e in range(B)])
        np.testing.assert_array_equal(np.asarray(rebuild(state, index, env, stack)), want)
        checked_resets += int(new_game[held].sum() + new_life[held].sum())
    assert checked_resets > 10
    assert 0 < int(num_sampleable(state, 1, stack)) == capacity - 1 - (stack - 1)


def test_sampled_stacks_are_envpool_stacks():
    rows, _, _ = atari_stream(200)
    example = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype), rows[0])
    state = add_many(init_replay(256, example, frame_stack=4), jax.tree.map(lambda *xs: np.stack(xs), *rows))
    key = jax.random.key(1)
    batch = jax.jit(sample_batch, static_argnums=(2, 3, 4, 5, 6))(state, key, 64, 3, 0.99, None, 4)
    assert batch.obs.shape == (64, 4, 12, 10) and batch.obs.dtype == jnp.uint8
    # the rows the sample drew (the ring holds all 200 from row 0): each stack is EnvPool's own at that step
    time_key, env_key = jax.random.split(key)
    start = np.asarray(jax.random.randint(time_key, (64,), 3, 200 - 3))
    env = np.asarray(jax.random.randint(env_key, (64,), 0, B))
    for i, (t, e) in enumerate(zip(start, env)):
        np.testing.assert_array_equal(batch.obs[i], rows[t].obs[e])
        assert int(batch.action[i]) == int(rows[t].action[e])
        ends = [u for u in range(t, t + 3) if rows[u].terminated[e] or rows[u].truncated[e]]
        later = (ends[0] if ends else t + 2) + 1  # n-step stops after the first step that ends the episode
        np.testing.assert_array_equal(batch.next_obs[i], rows[later].obs[e])


def test_the_buffer_size_is_computed_before_anything_is_allocated():
    nbytes = replay_nbytes(1_000_000, 8, (17,), np.float32, (6,), np.float32)
    assert nbytes == 125_000 * 8 * (17 * 4 + 6 * 4 + 7)
    # Atari's stacks of 4 84x84 frames are stored one frame per step: about 4x less
    stacked = replay_nbytes(1_000_000, 8, (4, 84, 84), np.uint8, (), np.int32)
    frames = replay_nbytes(1_000_000, 8, (4, 84, 84), np.uint8, (), np.int32, frame_stack=4)
    assert frames == 1_000_000 * (84 * 84 + 4 + 4 + 4) and 3.9 < stacked / frames < 4


def test_a_data_parallel_runs_buffers_end_each_at_its_own_last_row():
    """A data-parallel checkpoint holds one buffer per shard along a leading axis, restored as numpy:
    each shard's streams end where that shard's did, and its frames never go through the vmap."""
    rng = np.random.default_rng(0)

    def shard(count, head):
        rows = Row(np.zeros((6, 3, 2), np.float32), np.zeros((6, 3), np.int32), np.zeros((6, 3), np.float32),
                   np.zeros((6, 3), bool), rng.random((6, 3)) < 0.2, rng.random((6, 3)) < 0.8)
        return ReplayState(rows, np.int32(count), np.int32(head))

    shards = [shard(9, 3), shard(1, 1)]  # one wrapped, one with a single row written
    ended = end_streams(jax.tree.map(lambda *x: np.stack(x), *shards), stacked=True)
    assert isinstance(ended.rows.obs, np.ndarray)
    for i, one in enumerate(shards):
        alone = end_streams(jax.tree.map(jnp.asarray, one))
        for stacked_leaf, leaf in zip(jax.tree.leaves(ended), jax.tree.leaves(alone), strict=True):
            np.testing.assert_array_equal(np.asarray(stacked_leaf)[i], np.asarray(leaf))
