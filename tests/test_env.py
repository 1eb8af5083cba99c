import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_fast.env import ids, wire
from jaxrl_fast.env.envpool import make_pool, make_xla_env
from jaxrl_fast.env.ids import EnvError
from support import rollout


@pytest.mark.parametrize(
    "env_id, obs_shape, discrete, action",
    [
        ("CartPole-v1", (4,), True, 2),
        ("Pendulum-v1", (3,), False, (1,)),
        ("HalfCheetah-v4", (17,), False, (6,)),
    ],
)
def test_specs_and_dtypes(env_id, obs_shape, discrete, action):
    xla_env = make_xla_env(env_id, num_envs=3, num_threads=1, seed=0)
    spec = xla_env.spec
    assert spec.obs_shape == obs_shape and spec.discrete == discrete and spec.num_envs == 3
    if discrete:
        assert spec.num_actions == action
        actions = jnp.zeros((5, 3), jnp.int32)
    else:
        assert spec.action_shape == action and len(spec.action_low) == np.prod(action)
        assert all(lo < hi for lo, hi in zip(spec.action_low, spec.action_high))
        actions = jnp.zeros((5, 3, *action), jnp.float32)
    assert xla_env.reset().dtype == np.float32
    steps, _, _ = rollout(xla_env, actions)[0]
    assert steps.obs.shape == (5, 3, *obs_shape) and steps.obs.dtype == np.float32
    assert steps.reward.dtype == np.float32 and steps.terminated.dtype == np.bool_
    assert steps.elapsed_step.dtype == np.int32
    np.testing.assert_array_equal(steps.elapsed_step[:, 0], np.arange(1, 6))


def test_mujoco_jitted_steps_match_envpool_numpy_api_in_32_bit_mode():
    """The 64-bit hazard: float64 MuJoCo specs under JAX's default 32-bit mode."""
    assert not jax.config.jax_enable_x64
    n, horizon = 4, 30
    actions = np.random.default_rng(0).uniform(-1, 1, size=(horizon, n, 6)).astype(np.float32)
    xla_env = make_xla_env("HalfCheetah-v4", num_envs=n, num_threads=1, seed=3)
    steps = rollout(xla_env, jnp.asarray(actions))[0][0]

    reference = make_pool("HalfCheetah-v4", num_envs=n, num_threads=1, seed=3)
    reference.reset()
    for t in range(horizon):
        obs, reward, terminated, truncated, _ = reference.step(actions[t].astype(np.float64))
        assert obs.dtype == np.float64
        np.testing.assert_allclose(steps.obs[t], obs.astype(np.float32), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(steps.reward[t], reward, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(steps.terminated[t], terminated & ~truncated)


def test_float64_wire_conversion_matches_numpy_casts():
    values = np.array(
        [0.0, -0.0, 1.0, -2.5, 1e-3, np.pi, 1e30, -1e-30, 3.5e38, 1e-45, np.inf, -np.inf, 123456.789], np.float64
    )
    words = jnp.asarray(values.view(np.uint32).reshape(-1, 2))
    out = np.asarray(jax.jit(wire.float64_words_to_float32)(words))
    with np.errstate(over="ignore"):  # 3.5e38 overflows to inf on purpose, as the wire's cast does
        expected = values.astype(np.float32)
    expected[np.abs(expected) < np.finfo(np.float32).tiny] = 0.0  # subnormals flush to zero
    np.testing.assert_array_equal(out, expected)
    assert np.isnan(wire.float64_words_to_float32(jnp.asarray(np.array([np.nan]).view(np.uint32).reshape(1, 2))))

    floats = np.array([0.0, 1.0, -0.75, 3.3e38, 1e-20, np.inf], np.float32)
    round_trip = np.asarray(wire.float32_to_float64_words(jnp.asarray(floats))).reshape(-1).view(np.float64)
    np.testing.assert_array_equal(round_trip, floats.astype(np.float64))


def test_wire_buffers_always_have_the_spec_byte_size():
    for dtype, shape in [(np.float64, [4, 17]), (np.int64, [4]), (np.float32, [4, 3]), (np.uint8, [8]), (np.bool_, [2])]:
        struct = wire.wire_struct(dtype, shape)
        assert np.prod(struct.shape) * np.dtype(struct.dtype).itemsize == np.prod(shape) * np.dtype(dtype).itemsize
    with pytest.raises(EnvError):
        wire.wire_struct(np.complex128, [2])


def test_auto_reset_steps_are_masked_and_episode_statistics_are_exact():
    n, horizon = 4, 400
    xla_env = make_xla_env("CartPole-v1", num_envs=n, num_threads=1, seed=0)
    actions = jax.random.randint(jax.random.key(0), (horizon, n), 0, 2)
    (steps, reset_step, finished), episodes = rollout(xla_env, actions)
    done = steps.terminated | steps.truncated
    assert done.sum() > 10  # random play ends many CartPole episodes
    # the step after every episode end is EnvPool's reset step: flagged, elapsed 0, reward 0, no end
    after = np.zeros_like(done)
    after[1:] = done[:-1]
    np.testing.assert_array_equal(reset_step, after)
    assert (steps.elapsed_step[after] == 0).all() and (steps.reward[after] == 0).all() and not done[after].any()
    # CartPole pays 1 per step: every finished episode's return equals its length and its clock
    assert finished.count.sum() == done.sum()
    np.testing.assert_allclose(finished.return_sum.sum(), steps.elapsed_step[done].sum())
    np.testing.assert_array_equal(finished.length_sum.sum(), steps.elapsed_step[done].sum())
    # running statistics cover the valid steps since each env's last episode end
    valid_steps = (~reset_step).sum(0)
    per_env_finished = np.array([steps.elapsed_step[done[:, i], i].sum() for i in range(n)])
    np.testing.assert_array_equal(per_env_finished + episodes.episode_length, valid_steps)


def test_time_limit_is_truncation_not_termination():
    n = 2
    xla_env = make_xla_env("Pendulum-v1", num_envs=n, num_threads=1, seed=0)
    (steps, _, finished), _ = rollout(xla_env, jnp.zeros((410, n, 1), jnp.float32))
    assert not steps.terminated.any()
    ends = np.argwhere(steps.truncated)
    np.testing.assert_array_equal(sorted(set(ends[:, 0])), [199, 400])  # 200 steps, a reset step, 200 steps
    assert (finished.length_sum[[199, 400]] == 200 * n).all()



def test_an_id_with_no_registered_time_limit_ends_episodes_as_its_env_says():
    """EnvPool registers BabyAI's ids with max_episode_steps 0 and ends each task at its own limit:
    a success is a termination (the clock must not make it a truncation), and an evaluation plays
    the whole episode (not 0 + 1 steps)."""
    from jaxrl_fast.run.evaluation import Evaluator

    n, horizon = 8, 300
    xla_env = make_xla_env("BabyAI-GoToRedBallGrey-v0", num_envs=n, num_threads=1, seed=0)
    assert xla_env.spec.max_episode_steps == 0
    actions = jax.random.randint(jax.random.key(0), (horizon, n), 0, 3)  # turn left, right, forward
    (steps, _, _), _ = rollout(xla_env, actions)
    success = steps.reward > 0
    assert success.any() and steps.terminated[success].all() and not steps.truncated[success].any()
    assert steps.truncated.any() and (steps.reward[steps.truncated] == 0).all()  # the task's own limit: a time-out
    xla_env.pool.close()
    rng = np.random.default_rng(0)
    evaluator = Evaluator("BabyAI-GoToRedBallGrey-v0", 4, 0, lambda payload, obs, seed: rng.integers(0, 3, len(obs)),
                          lambda result, _: None, xla_env.spec.max_episode_steps)
    try:
        result = evaluator.evaluate(None, 0)
    finally:
        evaluator.close()
    assert min(result.lengths) > 1

def test_unknown_env_id_suggests_close_matches():
    with pytest.raises(EnvError, match="CartPole-v1"):
        ids.check_env_id("CartPole-v2")
    with pytest.raises(EnvError, match="HalfCheetah"):
        ids.check_env_id("halfcheetah-v4")


@pytest.mark.parametrize("env_id, says", [("FrozenLake-v1", "observes one integer"), ("Catch-v0", r"an array \[10, 5\]")])
def test_observations_that_are_not_vectors_are_refused_in_one_line(env_id, says):
    from jaxrl_fast.types import ConfigError
    from support import make_config, resolved

    with pytest.raises(ConfigError, match=says):
        resolved(make_config(env=env_id, algo="ppo"))


@pytest.mark.parametrize("option, says", [("noop_max=0", "noop_max=1 gives no no-op starts"),
                                          ("zero_discount_on_life_loss=true", "does not read")])
def test_atari_options_that_crash_envpool_or_are_ignored_are_refused(option, says):
    with pytest.raises(EnvError, match=says):
        ids.check_env_kwargs("Breakout-v5", ids.parse_env_kwargs([option]))
    ids.check_env_kwargs("Breakout-v5", ids.parse_env_kwargs(["noop_max=1", "zero_discount_on_life_loss=false"]))


def test_other_families_are_refused_with_reason():
    with pytest.raises(EnvError, match="vector observations .* and images"):
        ids.check_env_id("D1Basic-v1")  # ViZDoom: a family not carried


@pytest.mark.slow
def test_every_envpool_id_is_trained_or_refused_by_validation_never_crashes():
    """Every id EnvPool lists passes the id check or gets our one-line error (a family or a kind of
    observation not carried); of those that pass, the first id of each (family, observation rank,
    action kind) goes through the whole validation a run makes, with every algorithm, and gets a run
    or our error: no id reaches a traceback."""
    import envpool
    import envpool.entry  # noqa: F401  every family's ids

    from jaxrl_fast.config.run import ALGOS
    from jaxrl_fast.types import ConfigError
    from support import make_config, resolved

    kinds = {}
    for env_id in envpool.list_all_envs():
        try:
            family = ids.check_env_id(env_id)
        except EnvError:
            continue
        spec = envpool.make_spec(env_id)  # about 20 ms an id: once each
        space = spec.observation_space
        rank = "dict" if hasattr(space, "spaces") else len(space.shape)  # dicts train flattened
        kinds.setdefault((family, rank, type(spec.action_space).__name__), env_id)
    assert {("classic_control", 1, "Discrete"), ("mujoco", 1, "Box"), ("mujoco", "dict", "Box"),
            ("atari", 3, "Discrete")} <= set(kinds)
    trained = set()
    for env_id in kinds.values():
        for algo in ALGOS:
            try:
                resolved(make_config(env=env_id, algo=algo))
                trained.add(env_id)
            except ConfigError:
                pass
    images = {env_id for (family, rank, _), env_id in kinds.items() if rank == 3 and family not in ids.PIXEL_FAMILIES}
    not_vectors = {env_id for (_, rank, _), env_id in kinds.items() if rank in (0, 2)}  # toy_text's ints and grids
    assert not_vectors  # FrozenLake's state number and Catch's grid: refused, not a traceback at the first step
    assert trained == set(kinds.values()) - images - not_vectors  # every other class trains


ATARI_TRAINING = dict(episodic_life=True, reward_clip=True)


def test_atari_frames_stay_uint8_inside_jit():
    xla_env = make_xla_env("Breakout-v5", num_envs=2, num_threads=1, seed=0, **ATARI_TRAINING)
    spec = xla_env.spec
    assert spec.pixels and spec.obs_dtype == "uint8" and spec.obs_shape == (4, 84, 84)
    assert spec.discrete and spec.num_actions == 4
    assert xla_env.reset().dtype == np.uint8
    out, _ = rollout(xla_env, jnp.ones((30, 2), jnp.int32))  # FIRE, then the ball moves
    assert out[0].obs.dtype == np.uint8 and out[0].obs.shape == (30, 2, 4, 84, 84)
    assert out[0].obs.max() > 0
    xla_env.pool.close()


def test_game_scores_count_every_life_unclipped_as_envpool_info_does():
    """The learner sees clipped rewards and an episode per life; statistics count whole games with
    EnvPool's unclipped `info["reward"]` until `info["terminated"]`, as published scores do."""
    n, steps = 2, 900
    actions = np.random.default_rng(0).integers(0, 6, size=(steps, n)).astype(np.int32)
    xla_env = make_xla_env("SpaceInvaders-v5", num_envs=n, num_threads=1, seed=5, **ATARI_TRAINING)
    (step, reset_step, finished), _ = rollout(xla_env, jnp.asarray(actions))
    xla_env.pool.close()

    reference = make_pool("SpaceInvaders-v5", num_envs=n, num_threads=1, seed=5, **ATARI_TRAINING)
    reference.reset()
    running, games, lives_lost = np.zeros(n), [], 0
    for t in range(steps):
        _, reward, terminated, truncated, info = reference.step(actions[t])
        np.testing.assert_array_equal(step.reward[t], reward)  # the same trajectory, clipped rewards
        running += info["reward"]
        over = info["terminated"].astype(bool) | truncated
        lives_lost += int((terminated & ~over).sum())
        games += list(running[over])
        running[over] = 0.0
    reference.close()
    assert lives_lost > 0 and len(games) > 0  # episodes per life happened, and whole games ended
    assert int(finished.count.sum()) == len(games)
    np.testing.assert_allclose(finished.return_sum.sum(), sum(games), rtol=1e-6)
    assert (np.abs(step.reward) <= 1).all() and (step.score > 1).any()  # invaders score 5 to 30 points


def test_dm_control_dict_observations_are_flattened_in_key_order_inside_jit_and_on_the_host():
    import envpool

    xla_env = make_xla_env("WalkerWalk-v1", num_envs=2, num_threads=1, seed=3)
    spec = xla_env.spec
    # orientations [14], height [] (a scalar: one column), velocity [9], alphabetically
    assert spec.obs_keys == ("height", "orientations", "velocity") and spec.obs_shape == (24,)
    assert spec.obs_dtype == "float32" and not spec.pixels
    raw = envpool.make("WalkerWalk-v1", env_type="gymnasium", num_envs=2, seed=3)  # EnvPool's own dicts
    flat = lambda obs: np.concatenate([np.reshape(obs[k], (2, -1)) for k in spec.obs_keys], axis=1)  # noqa: E731
    np.testing.assert_allclose(xla_env.reset(), flat(raw.reset()[0]), rtol=1e-6)
    actions = np.random.default_rng(0).uniform(-1, 1, (5, 2, 6)).astype(np.float32)
    out, _ = rollout(xla_env, jnp.asarray(actions))  # which resets the pool a second time
    raw.reset()
    expected = [flat(raw.step(action)[0]) for action in actions]
    assert out[0].obs.dtype == np.float32 and out[0].obs.shape == (5, 2, 24)
    np.testing.assert_allclose(out[0].obs, np.stack(expected), rtol=1e-5, atol=1e-6)
    host = make_pool("WalkerWalk-v1", num_envs=2, num_threads=1, seed=3)  # the evaluator's pool
    np.testing.assert_allclose(host.reset()[0], flat(envpool.make("WalkerWalk-v1", env_type="gymnasium", num_envs=2,
                                                                   seed=3).reset()[0]), rtol=1e-6)
    assert host.observation_space.shape == (24,)
