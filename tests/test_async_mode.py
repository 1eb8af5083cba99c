"""EnvPool's async mode in the `async` actors: per-env streams staged on the host."""

import jax
import numpy as np
import pytest

from jaxrl_fast.engine.async_mode import StreamStager
from jaxrl_fast.env.envpool import end_flags, make_pool, recv_steps

ENV_ID, NUM_ENVS, SEED, CHUNK = "CartPole-v1", 6, 3, 8


def staged_chunks(batch_size: int, chunks: int):
    """Random actions through an async-mode pool; the stager's chunks and the most rows any env had staged."""
    pool = make_pool(ENV_ID, NUM_ENVS, 2, SEED, batch_size=batch_size)
    max_steps = pool.config["max_episode_steps"]
    stager = StreamStager(NUM_ENVS, CHUNK, (4,), jax.ShapeDtypeStruct((), np.int32))
    rng = np.random.default_rng(0)
    pool.async_reset()
    out, most_staged = [], 0
    while len(out) < chunks:
        steps = recv_steps(pool, max_steps)
        stager.record(steps)
        action = rng.integers(0, 2, size=steps.env_id.shape[0]).astype(np.int32)
        stager.acted(steps.env_id, action, version=len(out))
        pool.send(action, steps.env_id)
        most_staged = max(most_staged, int(stager.filled.max()))
        if stager.ready():
            out.append(stager.take())
    pool.close()
    return out, most_staged


def replay_alone(env_index: int, actions: np.ndarray):
    """What env `env_index` of the pool does with these actions, stepped alone and synchronously."""
    pool = make_pool(ENV_ID, 1, 1, SEED + env_index)  # EnvPool seeds env i with seed + i
    max_steps = pool.config["max_episode_steps"]
    obs, _ = pool.reset()
    seen = [obs[0]]
    rewards, terminated, truncated = [], [], []
    for action in actions:
        obs, reward, term, trunc, info = pool.step(np.asarray([action], np.int32))
        term, trunc = end_flags(term | trunc, trunc, info["elapsed_step"], max_steps)
        seen.append(obs[0])
        rewards.append(reward[0])
        terminated.append(term[0])
        truncated.append(trunc[0])
    pool.close()
    return np.asarray(seen), np.asarray(rewards), np.asarray(terminated), np.asarray(truncated)


@pytest.mark.parametrize("batch_size", [2, 3])
def test_staged_streams_are_each_envs_own_trajectory(batch_size):
    chunks, _ = staged_chunks(batch_size, chunks=8)
    rows = jax.tree.map(lambda *parts: np.concatenate(parts), *[c.rows for c in chunks])  # [8 x T, N]
    episodes_ended = 0
    for i in range(NUM_ENVS):
        obs, rewards, terminated, truncated = replay_alone(i, rows.action[:, i])
        np.testing.assert_array_equal(rows.obs[:, i], obs[:-1])  # row t holds the obs its action saw
        np.testing.assert_array_equal(rows.reward[:, i], rewards)
        np.testing.assert_array_equal(rows.terminated[:, i], terminated)
        np.testing.assert_array_equal(rows.truncated[:, i], truncated)
        ended = terminated | truncated
        np.testing.assert_array_equal(rows.valid[:, i], ~np.concatenate([[False], ended[:-1]]))  # reset steps
        episodes_ended += int(ended.sum())
    # the check covered EnvPool's auto-resets (which env gets which random action depends on the
    # order envs finish, so one env's first episode may outlast the chunks; all of them cannot)
    assert episodes_ended >= NUM_ENVS // 2


def test_chunks_count_the_episodes_that_end_in_their_own_rows_and_carry_the_oldest_version():
    chunks, _ = staged_chunks(2, chunks=6)
    # each env's episodes walked from its rows alone, each counted in the chunk holding its last step
    expected = np.zeros((len(chunks), 3))  # count, return sum, length sum
    for i in range(NUM_ENVS):
        episode_return, episode_length = 0.0, 0
        for index, chunk in enumerate(chunks):
            r = chunk.rows
            for t in range(CHUNK):
                if not r.valid[t, i]:
                    continue
                episode_return, episode_length = episode_return + r.reward[t, i], episode_length + 1
                if r.terminated[t, i] or r.truncated[t, i]:
                    expected[index] += (1, episode_return, episode_length)
                    episode_return, episode_length = 0.0, 0
    got = np.array([[c.finished.count, c.finished.return_sum, c.finished.length_sum] for c in chunks])
    np.testing.assert_allclose(got, expected)
    assert expected[:, 0].sum() >= NUM_ENVS // 2  # the walk covered episode ends
    for index, chunk in enumerate(chunks):
        # rows staged ahead in an earlier chunk's time are labelled with that (older) version
        assert chunk.version <= index


def test_an_episode_ending_in_a_row_staged_ahead_counts_in_the_next_chunk():
    from jaxrl_fast.env.envpool import HostSteps

    stager = StreamStager(2, 2, (1,), jax.ShapeDtypeStruct((), np.int32))

    def step(env, reward, terminated=False):
        ids = np.array([env], np.int32)
        stager.record(HostSteps(ids, np.zeros((1, 1), np.float32), np.array([reward], np.float32),
                                np.array([terminated]), np.array([False])))
        stager.acted(ids, np.zeros(1, np.int32), 0)

    for env in (0, 1):
        step(env, 0.0)  # the reset results: no rows yet
    step(0, 1.0), step(0, 1.0), step(0, 1.0, terminated=True)  # env 0 runs a row ahead and ends there
    step(1, 5.0), step(1, 5.0)
    assert stager.ready() and stager.filled.tolist() == [3, 2]
    first = stager.take()
    assert int(first.finished.count) == 0 and float(first.finished.return_sum) == 0.0
    step(1, 5.0), step(0, 0.0), step(1, 5.0, terminated=True)  # env 0's reset step; env 1 ends
    second = stager.take()
    assert second.rows.valid[:, 0].tolist() == [True, False]
    assert (int(second.finished.count), float(second.finished.return_sum), int(second.finished.length_sum)) == (2, 23.0, 7)


def test_an_env_that_never_returns_is_reported_not_buffered_forever():
    stager = StreamStager(2, 4, (1,), jax.ShapeDtypeStruct((), np.int32))
    from jaxrl_fast.env.envpool import HostSteps

    one = lambda: HostSteps(np.array([0], np.int32), np.zeros((1, 1), np.float32), np.zeros(1, np.float32),  # noqa: E731
                            np.zeros(1, bool), np.zeros(1, bool))
    with pytest.raises(RuntimeError, match="env 1 returned no step"):
        for _ in range(4 * 64 + 2):
            stager.record(one())
            stager.acted(np.array([0]), np.zeros(1, np.int32), 0)


def test_async_actors_envs_never_share_a_seed_however_many_envs_each_has():
    from jaxrl_fast.engine.schedules.asynchronous import actor_seed

    for num_envs in (8, 1000, 2048):
        seeds = [actor_seed(5, actor, num_envs) + env for actor in range(4) for env in range(num_envs)]
        assert len(set(seeds)) == len(seeds), num_envs
    assert actor_seed(5, 1, 8) == 1005  # small pools keep the seeds they always had
