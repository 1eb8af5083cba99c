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


def test_chunks_count_finished_episodes_and_carry_the_oldest_version():
    chunks, _ = staged_chunks(2, chunks=5)
    for index, chunk in enumerate(chunks):
        r = chunk.rows
        ended = r.valid & (r.terminated | r.truncated)
        assert int(chunk.finished.count) == int(ended.sum())
        # rows staged ahead in an earlier chunk's time are labelled with that (older) version
        assert chunk.version <= index


def test_an_env_that_never_returns_is_reported_not_buffered_forever():
    stager = StreamStager(2, 4, (1,), jax.ShapeDtypeStruct((), np.int32))
    from jaxrl_fast.env.envpool import HostSteps

    one = lambda: HostSteps(np.array([0], np.int32), np.zeros((1, 1), np.float32), np.zeros(1, np.float32),  # noqa: E731
                            np.zeros(1, bool), np.zeros(1, bool))
    with pytest.raises(RuntimeError, match="env 1 returned no step"):
        for _ in range(4 * 64 + 2):
            stager.record(one())
            stager.acted(np.array([0]), np.zeros(1, np.int32), 0)
