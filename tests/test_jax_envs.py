"""The JAX-native backend: gymnax's envs (`gymnax:<id>`) stepped inside the jitted loop, trained
through the same API and CLI as EnvPool's ids.

gymnax pins jax < 0.12, so the test extra installs it on the 3.11 lane only; the 3.13 lane (JAX
0.12) skips this module."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("gymnax", reason="the jax-envs extra: gymnax pins jax < 0.12 (tested on the 3.11 lane)")

from test_num_seeds import AGENTS, LAST, SEED, run_loop  # noqa: E402

import jaxrl_fast  # noqa: E402
from jaxrl_fast.algos.ppo.config import PPOConfig  # noqa: E402
from jaxrl_fast.algos.ppo.learner import make_ppo  # noqa: E402
from jaxrl_fast.cli.train import main  # noqa: E402
from jaxrl_fast.engine.acting import EnvOptions, agent_part  # noqa: E402
from jaxrl_fast.env.envpool import agent_env_seeds, make_pool, make_xla_env, probe_spec  # noqa: E402
from jaxrl_fast.env.ids import env_suite  # noqa: E402
from jaxrl_fast.outputs.metrics import read_metrics  # noqa: E402
from jaxrl_fast.run.api import preset_config  # noqa: E402
from jaxrl_fast.run.evaluation import run_episodes  # noqa: E402
from support import make_config, rollout, train  # noqa: E402

CARTPOLE, PENDULUM = "gymnax:CartPole-v1", "gymnax:Pendulum-v1"


def test_an_episode_ends_on_its_final_observation_and_the_next_step_is_a_reset_step():
    env = make_xla_env(PENDULUM, num_envs=2, num_threads=1, seed=0)
    assert env.spec.family == "gymnax" and env.spec.max_episode_steps == 200 and env.spec.action_shape == (1,)
    out, _ = rollout(env, jnp.ones((405, 2, 1), jnp.float32))
    step, reset_step, _ = out
    assert list(np.flatnonzero(step.truncated[:, 0])) == [199, 400]  # 200 steps, a reset step, 200 steps
    assert not step.terminated.any() and reset_step[200, 0] and not reset_step[:200, 0].any()
    assert step.reward[200, 0] == 0.0 and step.elapsed_step[200, 0] == 0 and step.elapsed_step[201, 0] == 1
    # the final observation is the stepped state's (cos, sin, velocity), not the next episode's first
    cos, sin = step.obs[199, 0, 0], step.obs[199, 0, 1]
    assert abs(cos**2 + sin**2 - 1.0) < 1e-5 and not np.allclose(step.obs[199, 0], step.obs[200, 0])
    # the evaluator's host pool steps the same envs
    pool = make_pool(PENDULUM, num_envs=2, num_threads=1, seed=0)
    np.testing.assert_array_equal(pool.reset()[0], env.reset())
    host = [pool.step(np.ones((2, 1), np.float32)) for _ in range(405)]
    np.testing.assert_allclose(np.stack([h[0] for h in host]), step.obs, rtol=1e-6)
    np.testing.assert_array_equal(np.stack([h[3] for h in host]), step.truncated)


def test_a_terminal_step_is_terminated_and_the_episode_restarts_from_its_own_seed():
    env = make_xla_env(CARTPOLE, num_envs=3, num_threads=1, seed=5)
    out, _ = rollout(env, jnp.ones((40, 3), jnp.int32))  # always right: the pole falls within ~10 steps
    step, reset_step, _ = out
    ends = step.terminated[:, 0]
    assert ends.sum() >= 2 and not step.truncated.any()
    first_end = int(np.flatnonzero(ends)[0])
    assert reset_step[first_end + 1, 0] and step.reward[first_end + 1, 0] == 0.0
    assert np.abs(step.obs[first_end + 1, 0]).max() <= 0.05  # CartPole's reset draws every state in [-0.05, 0.05]
    assert not np.array_equal(step.obs[:, 0], step.obs[:, 1])  # envs are seeded apart


def test_evaluation_episodes_played_in_one_program_equal_the_host_loops():
    pool = make_pool(CARTPOLE, num_envs=6, num_threads=1, seed=11)

    def policy(weights, obs, seed):  # a fixed linear policy: some episodes fail early, some last longer
        return (obs @ weights > 0).astype(jnp.int32)

    weights = np.array([0.0, 0.3, 1.0, 0.2], np.float32)
    returns, lengths = pool.play(policy, weights)
    host = make_pool(CARTPOLE, num_envs=6, num_threads=1, seed=11)  # its first reset: the same starts
    host_returns, host_lengths = run_episodes(host, lambda obs: np.asarray(policy(weights, obs, 0)), 500)
    np.testing.assert_array_equal(lengths, host_lengths)
    np.testing.assert_allclose(returns, host_returns)
    assert len(set(lengths.tolist())) > 1  # the envs played different episodes


def test_a_pools_start_keys_are_the_seeds_env_streams_then_folded_with_each_reset():
    from jaxrl_fast.env.jax_envs import ENV_STREAM, start_keys

    seeds = np.array([0, 7, 2**32 - 1], np.uint32)
    keys = [jax.random.fold_in(jax.random.key(int(seed)), ENV_STREAM) for seed in seeds]
    # no env draws from the agent's stream: env 0's seed is the agent's, whose key splits into its
    # parameters' key and its loop's (and those split again)
    agent = jax.random.key(0)
    drawn = [agent, *jax.random.split(agent), *jax.random.split(agent, 3), *jax.random.split(jax.random.split(agent)[1])]
    env0 = start_keys(seeds[:1])[0]
    assert not any(np.array_equal(env0, jax.random.key_data(k)) for k in drawn)
    in_program = jax.jit(start_keys)  # the round traced, as the evaluation's program takes it
    first = np.stack([jax.random.key_data(k) for k in keys])
    np.testing.assert_array_equal(start_keys(seeds), first)
    np.testing.assert_array_equal(in_program(seeds, np.uint32(0)), first)
    for round in (1, 2, 1000):
        expected = np.stack([jax.random.key_data(jax.random.fold_in(k, round)) for k in keys])
        np.testing.assert_array_equal(start_keys(seeds, round), expected)
        np.testing.assert_array_equal(in_program(seeds, np.uint32(round)), expected)


def test_an_unknown_resets_choice_is_refused_with_the_choices():
    from jaxrl_fast.env.jax_envs import env_functions

    with pytest.raises(ValueError, match="resets='sometimes': one of 'when_due', 'every_step', 'never'"):
        env_functions(CARTPOLE, resets="sometimes")


def test_skipping_resets_in_steps_that_need_none_changes_no_result_nor_skipping_all_an_episode():
    from jaxrl_fast.env.jax_envs import env_functions, start_keys

    keys = start_keys(np.arange(6, dtype=np.uint32))
    actions = jax.random.randint(jax.random.key(1), (120, 6), 0, 2)  # envs end at different steps
    rollouts = []
    for resets in ("when_due", "every_step", "never"):
        reset, step = env_functions(CARTPOLE, resets=resets)
        _, batch = reset(keys)
        rollouts.append(jax.jit(lambda b, a: jax.lax.scan(step, b, a))(batch, actions)[1])  # noqa: B023
    when_due, always, never = rollouts
    jax.tree.map(np.testing.assert_array_equal, when_due, always)
    resets_per_step = np.asarray(always.terminated | always.truncated)[:-1].sum(axis=1)
    assert (resets_per_step == 0).any() and (resets_per_step > 0).any()  # both branches ran
    # without resets, each env's steps equal up to its first episode's end (what an evaluation reads)
    ended = np.asarray(always.terminated | always.truncated)
    assert ended.any(axis=0).all()  # every env's first episode ends within the rollout
    first_end = np.argmax(ended, axis=0)
    for env, end in enumerate(first_end):
        jax.tree.map(lambda a, b: np.testing.assert_array_equal(a[:end + 1, env], b[:end + 1, env]),  # noqa: B023
                     never, always)


def test_each_evaluation_starts_new_episodes_and_is_reproducible():
    def policy(weights, obs, seed):
        return (obs @ weights > 0).astype(jnp.int32)

    weights = np.array([0.0, 0.3, 1.0, 0.2], np.float32)
    runs = []
    for _ in range(2):
        pool = make_pool(CARTPOLE, num_envs=4, num_threads=1, seed=11)
        pool.play(policy, weights, count=False)  # compiling ahead plays nothing that counts
        runs.append([pool.play(policy, weights)[1] for _ in range(3)])
    np.testing.assert_array_equal(runs[0], runs[1])  # a fresh pool replays the same evaluations
    assert not np.array_equal(runs[0][0], runs[0][1])  # the next evaluation plays other starts


def test_a_sampling_evaluation_plays_in_one_program_from_its_evaluation_seed_and_step():
    from jaxrl_fast.run.evaluation import Evaluator

    def coin(payload, obs, seed):  # each step's seed decides every env's action
        return (seed % 2).astype(jnp.int32) * jnp.ones(obs.shape[0], jnp.int32)

    def on_the_host(payload, obs, seed):
        raise AssertionError("a JAX-native evaluation plays in one program, not step by step")

    def evaluations(*steps):  # a fresh evaluator, as in a rerun of the same run
        evaluator = Evaluator(CARTPOLE, 4, 7, on_the_host, lambda r, _: None, 500, traceable_policy=coin)
        try:
            return [evaluator.evaluate(None, step).lengths for step in steps]
        finally:
            evaluator.close()

    (first,), (again,), (other,) = evaluations(5), evaluations(5), evaluations(6)  # each a first evaluation: the same starts
    np.testing.assert_array_equal(first, again)  # a rerun's evaluation acts the same
    assert not np.array_equal(first, other)  # another step, another stream
    assert first.mean() > 12  # a fair coin each step keeps the pole up longer than always pushing one way (~9)


def test_ppo_sampled_evaluation_policy_plays_in_one_program_drawing_from_its_seed():
    from jaxrl_fast.algos import make_algorithm
    from jaxrl_fast.engine.acting import EvalPayload, evaluation_policy
    from jaxrl_fast.ops.normalization import init_moments

    pool = make_pool(CARTPOLE, num_envs=8, num_threads=1, seed=3)
    algo = make_algorithm(make_config(CARTPOLE, "ppo"), pool.spec)
    payload = EvalPayload(algo.policy_params(algo.init(jax.random.key(0))), init_moments(pool.spec.obs_shape))
    sampled = evaluation_policy(algo, EnvOptions(False, False, 0.99), sampled=True)
    greedy = evaluation_policy(algo, EnvOptions(False, False, 0.99))
    play = lambda policy, seed: pool.play(policy, payload, seed, count=False)[1]  # noqa: E731  the same starts
    np.testing.assert_array_equal(play(sampled, 3), play(sampled, 3))  # the seed's draws
    assert not np.array_equal(play(sampled, 3), play(sampled, 4))
    np.testing.assert_array_equal(play(greedy, 3), play(greedy, 4))  # the greedy policy ignores the seed


def test_agents_envs_are_seeded_as_their_single_runs():
    pool = make_pool(CARTPOLE, AGENTS * 4, 1, agent_env_seeds(SEED, AGENTS, 4))
    obs, _ = pool.reset()
    for k in range(AGENTS):
        single, _ = make_pool(CARTPOLE, 4, 1, SEED + k).reset()
        np.testing.assert_array_equal(obs[k * 4:(k + 1) * 4], single)


def test_agent_k_of_many_is_the_single_run_with_seed_k():
    hyper = PPOConfig(num_steps=16, num_minibatches=2, update_epochs=2)
    options = EnvOptions(True, True, 0.99)
    many, many_metrics = run_loop(make_ppo, hyper, AGENTS, SEED, options, iterations=3, env_id=CARTPOLE)
    single, single_metrics = run_loop(make_ppo, hyper, 1, SEED + LAST, options, iterations=3, env_id=CARTPOLE)
    np.testing.assert_array_equal(agent_part(many.env.obs, LAST), single.env.obs)  # same actions, same envs
    for field in ("count", "length_sum"):
        assert int(getattr(many_metrics.episodes, field)[LAST]) == int(getattr(single_metrics.episodes, field))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                 agent_part(many.algo, LAST), single.algo)


def test_gymnax_tasks_take_the_presets_of_envpools_task_of_the_same_name():
    assert env_suite(CARTPOLE) == "classic_control" and env_suite("gymnax:Breakout-MinAtar") == "minatar"
    assert preset_config(CARTPOLE, "ppo").ppo == preset_config("CartPole-v1", "ppo").ppo
    minatar = preset_config("gymnax:Breakout-MinAtar", "ppo")
    assert minatar.num_envs == 64 and minatar.ppo.gamma == 0.999
    assert probe_spec("gymnax:Breakout-MinAtar").obs_shape == (400,)  # [10, 10, 4] flattened for an MLP


@pytest.mark.slow
def test_ppo_learns_gymnax_cartpole(tmp_path):
    """EnvPool CartPole-v1's preset and budget, seeds 0-2 as three agents: at least two end solved.
    Over seeds 0-23 (`experiments/learning_margins.py`, case ppo_gymnax_cartpole, 2026-11-26) every
    agent ended at 500; the margin is the EnvPool test's (tests/test_ppo.py)."""
    config = make_config(CARTPOLE, "ppo", seed=0, num_seeds=3, run_dir=tmp_path / "run", progress="off")
    summary = train(config)
    finals = summary["final_eval_return_mean"]
    assert sum(final >= 475.0 for final in finals) >= 2, finals
    policy = jaxrl_fast.load_policy(tmp_path / "run" / "seed_0")
    assert policy(np.zeros((3, 4), np.float32)).shape == (3,)


@pytest.mark.slow
def test_sac_learns_gymnax_pendulum_under_the_async_schedule_too(tmp_path):
    for schedule in ("sync", "async"):
        result = jaxrl_fast.train(env=PENDULUM, algo="sac", total_steps=8_000, schedule=schedule, progress="off",
                                  run_dir=tmp_path / schedule)
        assert result.summary["final_eval_return_mean"] > -400.0, (schedule, result.summary)


@pytest.mark.slow
def test_minatar_trains_and_its_score_moves(tmp_path):
    result = jaxrl_fast.train(env="gymnax:Breakout-MinAtar", algo="ppo", total_steps=200_000, eval_interval=50_000,
                              progress="off", run_dir=tmp_path / "run")
    evals = [line["eval_return_mean"] for line in read_metrics(result.run_dir / "metrics.jsonl") if "eval_return_mean" in line]
    assert evals[-1] > evals[0] + 1.0, evals
    # its policy takes MinAtar's own [10, 10, 4] grids (one, or a batch), which the learner saw flattened
    grids, _ = make_pool("gymnax:Breakout-MinAtar", num_envs=3, num_threads=1, seed=0).reset()
    policy = jaxrl_fast.load_policy(result.run_dir)
    raw = np.asarray(grids).reshape(3, 10, 10, 4)
    assert policy(raw).shape == (3,) and policy(raw[0]).shape == () and policy(raw[0]) == policy(raw)[0]


@pytest.mark.parametrize("args, message", [
    (["--env", "gymnax:CartPol-v1"], "not one of gymnax's environments. Did you mean: gymnax:CartPole-v1"),
    (["--env", CARTPOLE, "--env-kwargs", "max_steps=10"], "has no parameter 'max_steps'. Did you mean: max_steps_in_episode"),
    (["--env", CARTPOLE, "--env-kwargs", "max_steps_in_episode=0"], "max_steps_in_episode=0 must be a positive integer"),
    (["--env", CARTPOLE, "--env-kwargs", "max_steps_in_episode=abc"], "max_steps_in_episode='abc' is of type str"),
    (["--env", CARTPOLE, "--env-kwargs", "gravity=heavy"], "gravity='heavy' is of type str"),
    (["--env", CARTPOLE, "--calibrate"], "--calibrate measures EnvPool's pools"),
    (["--env", CARTPOLE, "--env-batch-size", "4"], "--env-batch-size: EnvPool's async mode needs an EnvPool id"),
])
def test_bad_gymnax_input_is_refused_in_one_line(tmp_path, capsys, args, message):
    assert main(["--algo", "ppo", "--run-dir", str(tmp_path / "run"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "run").exists()
