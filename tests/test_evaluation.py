import json
import threading

import jax
import numpy as np
import pytest

from jaxrl_fast.env.envpool import probe_spec
from jaxrl_fast.env.spaces import random_actions_np
from jaxrl_fast.run.evaluation import Evaluator, epsilon_greedy
from support import make_config, train


def constant_policy(payload, obs, seed):
    return np.zeros(obs.shape[0], np.int32)


def test_epsilon_greedy_replaces_actions_with_probability_epsilon():
    breakout, pendulum = probe_spec("Breakout-v5"), probe_spec("Pendulum-v1")
    obs = np.zeros((20_000, 1), np.float32)

    def act(spec, seed, epsilon=0.2):
        policy = lambda o: np.zeros((o.shape[0], *spec.action_shape), np.int32 if spec.discrete else np.float32)  # noqa: E731
        return epsilon_greedy(policy, epsilon, lambda rng, n: random_actions_np(spec, rng, n), np.random.default_rng(seed))(obs)

    actions = act(breakout, 0)
    assert actions.dtype == np.int32 and set(np.unique(actions)) == {0, 1, 2, 3}
    assert abs((actions != 0).mean() - 0.2 * 3 / 4) < 0.01  # a random action is the policy's 1 time in 4
    np.testing.assert_array_equal(actions, act(breakout, 0))  # the stream is the seed's
    assert (actions != act(breakout, 1)).any()
    assert not act(breakout, 0, epsilon=0.0).any()
    actions = act(pendulum, 0)
    assert actions.shape == (20_000, 1) and actions.dtype == np.float32 and (np.abs(actions) <= 2.0).all()
    assert abs((actions != 0).mean() - 0.2) < 0.01


def test_evaluator_runs_one_episode_per_env_and_reports():
    results = []
    done = threading.Event()
    evaluator = Evaluator("CartPole-v1", 5, 0, constant_policy, lambda r, _: (results.append(r), done.set()), 500)
    try:
        evaluator.request(None, step=123)
        assert done.wait(60)
    finally:
        evaluator.close()
    (result,) = results
    assert result.step == 123 and result.returns.shape == (5,)
    assert (result.returns == result.lengths).all() and (result.lengths < 50).all()  # always pushing left falls fast


def test_slow_evaluation_never_blocks_requests_and_newest_request_wins():
    started, release = threading.Event(), threading.Event()
    steps = []

    def blocking_policy(payload, obs, seed):
        started.set()
        release.wait(60)
        return constant_policy(payload, obs, seed)

    evaluator = Evaluator("CartPole-v1", 2, 0, blocking_policy, lambda r, _: steps.append(r.step), 500)
    try:
        evaluator.request(None, 1)
        assert started.wait(60)  # the first evaluation is now stuck in the policy
        for step in (2, 3, 4):  # these return at once although the evaluator is busy
            evaluator.request(None, step)
        assert evaluator.skipped == 2
        release.set()
        assert evaluator.wait_idle(60)
    finally:
        evaluator.close()
    assert steps == [1, 4]


def test_failing_evaluation_is_logged_and_counted_and_the_thread_survives(caplog):
    calls = []

    def flaky_policy(payload, obs, seed):
        calls.append(payload)
        if payload == "bad":
            raise RuntimeError("boom")
        return constant_policy(payload, obs, seed)

    results = []
    evaluator = Evaluator("CartPole-v1", 2, 0, flaky_policy, lambda r, _: results.append(r), 500)
    try:
        evaluator.request("bad", 1)
        assert evaluator.wait_idle(60)
        evaluator.request("good", 2)
        assert evaluator.wait_idle(60)
    finally:
        evaluator.close(timeout=30)
    assert evaluator.failures == 1 and "boom" in evaluator.last_error
    assert [r.step for r in results] == [2]
    assert "evaluation at step 1 failed" in caplog.text
    assert not evaluator._thread.is_alive()  # shutdown joined


def test_training_survives_an_evaluator_that_always_raises(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("evaluation exploded")

    monkeypatch.setattr(Evaluator, "_evaluate", broken)  # whether it plays from the host or in one program
    config = make_config("CartPole-v1", "ppo", total_steps=8192, eval_interval=1024, log_interval=2048, run_dir=tmp_path / "run", progress="off")
    summary = train(config)
    assert summary["steps"] == 8192 and summary["final_eval_return_mean"] is None
    assert summary["eval_failures"] >= 2  # in-loop ones and the final one
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [2048, 4096, 6144, 8192]


def test_evaluation_draws_one_policy_seed_per_step_from_its_evaluation_seed_and_step():
    seeds = []

    def coin_policy(payload, obs, seed):  # what a sampling `evaluation_policy` receives: one uint32 per step
        seeds.append(seed)
        return np.full(obs.shape[0], seed % 2, np.int32)

    def evaluations(*steps):  # a fresh evaluator, as in a rerun of the same run
        evaluator = Evaluator("CartPole-v1", 3, 7, coin_policy, lambda r, _: None, 500)
        try:
            runs = []
            for step in steps:
                seeds.clear()
                runs.append((evaluator.evaluate(None, step), list(seeds)))
            return runs
        finally:
            evaluator.close()

    (first, first_seeds), = evaluations(5)
    (again, again_seeds), (_, other_seeds) = evaluations(5, 6)
    assert all(isinstance(s, np.uint32) for s in first_seeds) and len(set(first_seeds)) == len(first_seeds)
    assert first_seeds == again_seeds and (first.returns == again.returns).all()  # a rerun acts the same
    assert other_seeds[:5] != first_seeds[:5]  # another step, another stream
    assert (first.returns > 10).any()  # a fair coin keeps the pole up longer than always pushing left


def test_an_evaluation_given_up_by_close_reports_nothing_after_it():
    """`close` waits for an evaluation under way, up to its timeout; one that ends later (the run
    has written its summary by then) must not log a result or replace the best policy."""
    import time

    def slow_policy(payload, obs, seed):
        time.sleep(0.05)  # 10 episodes of CartPole pushed left: about 10 steps, half a second
        return constant_policy(payload, obs, seed)

    reported = []
    evaluator = Evaluator("CartPole-v1", 10, 0, slow_policy, lambda result, _: reported.append(result.step), 500)
    evaluator.request(None, 100)
    deadline = time.monotonic() + 10
    while not evaluator._busy and time.monotonic() < deadline:  # the evaluation is under way
        time.sleep(0.01)
    evaluator.close(timeout=0.05)
    evaluator._thread.join(30)  # it ends meanwhile
    assert not evaluator._thread.is_alive() and reported == []


def test_an_epsilon_greedy_evaluation_draws_from_its_own_stream_of_seed_and_step():
    """The policy's per-step seeds come from a stream of their own: the epsilon draws (Atari's
    evaluations) are those of one generator seeded by (seed, step), as they were before there were seeds."""
    import functools

    from jaxrl_fast.env.envpool import make_pool
    from jaxrl_fast.run.evaluation import run_episodes

    spec = probe_spec("CartPole-v1")
    random_actions = functools.partial(random_actions_np, spec)
    evaluator = Evaluator("CartPole-v1", 4, 7, constant_policy, lambda r, _: None, 500, epsilon=0.5,
                          random_actions=random_actions)
    try:
        result = evaluator.evaluate(None, 5)
    finally:
        evaluator.close()
    alone = make_pool("CartPole-v1", num_envs=4, num_threads=1, seed=7)  # the evaluator's pool: the same starts
    policy = epsilon_greedy(lambda obs: constant_policy(None, obs, None), 0.5, random_actions, np.random.default_rng([7, 5]))
    returns, lengths = run_episodes(alone, policy, 500)
    alone.close()
    np.testing.assert_array_equal(result.lengths, lengths)
    assert (lengths > 12).any()  # half the actions random: longer than always pushing left (~9)


def test_an_envpool_evaluation_plays_in_one_program_the_episodes_the_host_loop_plays():
    """Through the forwarder, an EnvPool evaluation is one program (`EpisodesPool`); compiling it
    ahead plays nothing, and each evaluation plays what `run_episodes` plays from the host."""
    import jax.numpy as jnp

    from jaxrl_fast.env.envpool import EpisodesPool, make_pool
    from jaxrl_fast.run.evaluation import run_episodes

    weights = np.array([0.0, 0.0, 1.0, 1.0], np.float32)

    def lean(payload, obs, seed):  # push towards where the pole falls: long episodes of several lengths
        return (obs @ payload > 0).astype(jnp.int32)

    def on_the_host(payload, obs, seed):
        raise AssertionError("an EnvPool evaluation through the forwarder plays in one program")

    evaluator = Evaluator("CartPole-v1", 6, 7, on_the_host, lambda r, _: None, 500, traceable_policy=lean)
    try:
        assert isinstance(evaluator._pool, EpisodesPool)
        evaluator.prepare(weights, (4,)).join()
        played = [evaluator.evaluate(weights, step) for step in (5, 6)]
    finally:
        evaluator.close()
    alone = make_pool("CartPole-v1", num_envs=6, num_threads=1, seed=7)  # the evaluator's pool: the same starts
    host = [run_episodes(alone, lambda obs: np.asarray(lean(weights, obs, 0)), 500) for _ in played]
    alone.close()
    for result, (returns, lengths) in zip(played, host):
        np.testing.assert_array_equal(result.lengths, lengths)
        np.testing.assert_array_equal(result.returns, returns)
    assert len(set(played[0].lengths)) > 1 and played[0].lengths.max() > 100
    assert not np.array_equal(played[0].lengths, played[1].lengths)  # the next evaluation, the next starts

    # the evaluators of --num-seeds act from the host (each pool's program would be one more to compile)
    evaluator = Evaluator("CartPole-v1", 6, 7, lambda p, obs, seed: np.asarray(lean(p, obs, seed)), lambda r, _: None,
                          500, traceable_policy=lean, program_per_pool=False)
    try:
        assert not isinstance(evaluator._pool, EpisodesPool)
        np.testing.assert_array_equal(evaluator.evaluate(weights, 5).lengths, host[0][1])
    finally:
        evaluator.close()


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartpoleBalance-v1"])  # float rewards; dm_control's dict observations
def test_an_evaluation_in_one_program_and_from_the_host_play_the_same_sampled_episodes(env_id):
    """A sampling policy draws each step's seed of one stream either way (`episodes.step_seeds`),
    and returns are float32 sums either way: the evaluators of --num-seeds (from the host) play their
    single runs' episodes (in one program), continuous actions to the last bits (the policy compiled
    into the episodes' program rounds as XLA fuses it there)."""
    import jax.numpy as jnp

    from jaxrl_fast.env.envpool import EpisodesPool

    spec = probe_spec(env_id)
    weights = np.linspace(-1.0, 1.0, spec.obs_shape[0], dtype=np.float32)

    def sampled(payload, obs, seed):  # the policy's mean plus noise from the step's seed
        noise = jax.random.normal(jax.random.key(seed), (obs.shape[0], *spec.action_shape))
        return jnp.clip(jnp.tanh(obs @ payload)[:, None] + 0.5 * noise, -1.0, 1.0)

    results = []
    for in_program in (True, False):
        evaluator = Evaluator(env_id, 3, 7, lambda p, obs, seed: np.asarray(sampled(p, obs, seed)), lambda r, _: None,
                              spec.max_episode_steps, traceable_policy=sampled, program_per_pool=in_program)
        try:
            assert isinstance(evaluator._pool, EpisodesPool) == in_program
            results.append([evaluator.evaluate(weights, step) for step in (5, 6)])
        finally:
            evaluator.close()
    for in_one, from_host in zip(*results):
        np.testing.assert_array_equal(in_one.lengths, from_host.lengths)
        np.testing.assert_allclose(in_one.returns, from_host.returns, rtol=1e-5)
    assert not np.array_equal(results[0][0].returns, results[0][1].returns)  # another step, other draws and starts


def test_without_the_forwarder_an_envpool_evaluation_acts_from_the_host(monkeypatch):
    from jaxrl_fast.env import ffi_forward
    from jaxrl_fast.env.envpool import EpisodesPool, evaluation_pool

    monkeypatch.setattr(ffi_forward, "forwarder", lambda: None)
    pool = evaluation_pool("CartPole-v1", 2, 0, 500, in_program=True)
    assert not isinstance(pool, EpisodesPool) and not hasattr(pool, "play")  # its program would name the pool's address
    pool.close()


@pytest.mark.parametrize("algo_name, env_id, sde", [
    ("ppo", "CartPole-v1", False), ("ppo", "Pendulum-v1", False), ("ppo", "Pendulum-v1", True),
    ("sac", "Pendulum-v1", False), ("sac", "Pendulum-v1", True),
])
def test_sampled_policies_draw_from_the_algorithms_distributions(algo_name, env_id, sde):
    from jaxrl_fast.algos import make_algorithm
    from jaxrl_fast.engine.acting import EnvOptions, EvalPayload, evaluation_policy
    from jaxrl_fast.networks.heads import make_policy_network
    from jaxrl_fast.ops.normalization import init_moments

    spec = probe_spec(env_id)
    config = make_config(env_id, algo_name, **({algo_name: {"use_sde": True}} if sde else {}))
    algo = make_algorithm(config, spec)
    state = algo.init(jax.random.key(0))
    params = algo.policy_params(state) if algo_name == "ppo" else algo.acting_params(*state)
    if spec.discrete:  # away from the near-uniform first policy, so the frequencies tell
        params = jax.tree.map(lambda x: 30.0 * x, params)
    payload = EvalPayload(params, init_moments(spec.obs_shape))
    act = jax.jit(evaluation_policy(algo, EnvOptions(False, False, 0.99), sampled=True))
    obs = np.tile(np.linspace(-0.5, 0.5, spec.obs_shape[0], dtype=np.float32), (20_000, 1))  # one state
    draws = np.asarray(act(payload, obs, np.uint32(3)))
    np.testing.assert_array_equal(draws, np.asarray(act(payload, obs, np.uint32(3))))  # the seed's draws
    assert (draws != np.asarray(act(payload, obs, np.uint32(4)))).any()
    if spec.discrete:  # the frequencies of the policy's softmax at that state
        probs = np.asarray(jax.nn.softmax(make_policy_network(spec, config.ppo).apply(params, obs[:1])))[0]
        assert 0.05 < probs.min() < 0.45, probs
        np.testing.assert_allclose(np.bincount(draws, minlength=2) / len(draws), probs, atol=0.015)
        return
    greedy = float(np.asarray(algo.act_deterministic(params, obs[:1]))[0, 0])
    assert draws.shape == (20_000, 1) and (np.abs(draws) <= 2.0).all()
    assert abs(float(np.median(draws)) - greedy) < 0.1  # clipping and tanh keep the median: the mean's action
    # each env draws on its own, gSDE's noise too (one matrix shared by the batch made them all equal)
    inside = draws[np.abs(draws) < 2.0]  # PPO's clipping piles draws up at the bounds
    assert draws.std() > 0.01 and len(np.unique(inside)) > 0.9 * len(inside) > 10_000


def test_a_run_evaluated_sampled_records_it_and_its_saved_policy_samples(tmp_path):
    from jaxrl_fast.outputs.checkpoint import load_policy

    run = tmp_path / "run"
    config = make_config("CartPole-v1", "ppo", total_steps=4096, eval_interval=2048, log_interval=2048,
                         eval_policy="sampled", run_dir=run, progress="off")
    summary = train(config)
    assert summary["eval_failures"] == 0 and summary["final_eval_return_mean"] is not None
    evaluations = [line for line in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
                   if "eval_return_mean" in line]
    assert len(evaluations) >= 2  # in the loop and the final one
    assert json.loads((run / "config.json").read_text())["train_config"]["eval_policy"] == "sampled"
    obs = np.zeros((2_000, 4), np.float32)
    sampled, greedy = load_policy(run), load_policy(run, sampled=False)
    assert sampled.sampled and not greedy.sampled
    first, second = sampled(obs), sampled(obs)  # a fresh draw each call
    assert 0 < first.mean() < 1 and (first != second).any()
    assert len(np.unique(greedy(obs))) == 1
    np.testing.assert_array_equal(first, load_policy(run, seed=0)(obs))  # the draws are the seed's
    assert (load_policy(run, seed=1)(obs) != first).any()


def test_the_minigrid_and_procgen_ppo_presets_evaluate_sampled_as_their_references():
    from jaxrl_fast.config.presets import resolve_defaults

    minigrid = resolve_defaults("MiniGrid-Unlock-v0", "ppo", "minigrid")
    assert minigrid.eval_policy == "sampled" and minigrid.scale_rewards and minigrid.normalize_observations  # VecNormalize
    assert resolve_defaults("StarpilotEasy-v0", "ppo", "procgen").eval_policy == "sampled"
    for env_id, family in (("MiniGrid-Unlock-v0", "minigrid"), ("StarpilotEasy-v0", "procgen")):
        assert resolve_defaults(env_id, "pqn", family).eval_policy == "deterministic"  # epsilon-greedy's own


def test_the_best_evaluations_policy_is_kept_and_loaded_as_it_scored(tmp_path):
    """Evaluation runs beside training, so a run stopped at its target ends (and checkpoints) steps
    after the evaluation that reached it, with a later policy (PQN's can fall back fast:
    experiments/results/best_policy_pqn.json). The policy of the best evaluation is kept in
    checkpoints/best_policy.npz, and it plays as it scored: it reached 475 or more over the
    evaluation's 10 episodes, and 20 others must average 400 (it played 500 in the record)."""
    import envpool

    from jaxrl_fast.outputs.checkpoint import CheckpointError, load_policy

    run = tmp_path / "run"
    summary = train(make_config("CartPole-v1", "pqn", target_return=475.0, run_dir=run, progress="off"))
    evaluations = [line for line in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
                   if "eval_return_mean" in line]
    best = max(evaluations, key=lambda line: line["eval_return_mean"])  # the first of the highest
    assert summary["best_eval_return_mean"] == best["eval_return_mean"] >= 475.0
    assert summary["best_eval_step"] == best["step"]
    assert summary["best_eval_return_mean"] >= summary["final_eval_return_mean"]
    policy = load_policy(run, best=True)
    assert (policy.step, policy.eval_return) == (best["step"], best["eval_return_mean"])
    assert load_policy(run).step == summary["steps"]  # the newest checkpoint stays the default
    env = envpool.make_gymnasium("CartPole-v1", num_envs=20, seed=123)  # episodes it was not scored on
    obs, _ = env.reset()
    returns, done = np.zeros(20), np.zeros(20, bool)
    while not done.all():
        obs, reward, terminated, truncated, _ = env.step(policy(obs))
        returns += reward * ~done
        done |= terminated | truncated
    assert returns.mean() >= 400.0, returns
    with pytest.raises(CheckpointError, match="not both"):
        load_policy(run, step=summary["steps"], best=True)
    (run / "checkpoints" / "best_policy.npz").unlink()
    with pytest.raises(CheckpointError, match="no evaluation of the run finished"):
        load_policy(run, best=True)


def test_the_best_policy_is_replaced_only_by_a_higher_evaluation_and_survives_a_resume_from_its_step(tmp_path):
    from jaxrl_fast.outputs.best import BestPolicy, read_best_policy

    def payload(value):
        return {"params": {"w": np.full((3, 2), value, np.float32)}, "moments": np.arange(3.0)}

    best = BestPolicy(tmp_path)
    assert best.offer(100, 10.0, 1.0, 5, payload(1.0))
    assert not best.offer(200, 9.0, 1.0, 5, payload(2.0))
    assert not best.offer(300, 10.0, 1.0, 5, payload(3.0))  # a tie keeps the earlier policy
    assert not best.offer(400, float("nan"), 1.0, 5, payload(4.0))
    assert best.offer(500, 12.5, 0.5, 5, payload(5.0))
    arrays, meta = read_best_policy(best.path)
    assert (meta["step"], meta["eval_return_mean"], meta["eval_episodes"]) == (500, 12.5, 5)
    assert meta["paths"] == ["['moments']", "['params']['w']"]
    np.testing.assert_array_equal(arrays["00001"], np.full((3, 2), 5.0, np.float32))
    resumed = BestPolicy(tmp_path, resumed_from=500)  # a resumed run's process: the earlier best stands
    assert (resumed.step, resumed.mean) == (500, 12.5)
    assert not resumed.offer(600, 12.0, 0.0, 5, payload(6.0))
    redone = BestPolicy(tmp_path, resumed_from=400)  # from past the checkpoint: a trajectory the resume redoes
    assert redone.mean is None and not best.path.exists()  # nothing loads it meanwhile
    assert redone.offer(450, 3.0, 0.0, 5, payload(7.0))
    assert read_best_policy(best.path)[1]["step"] == 450
    assert sorted(p.name for p in best.path.parent.iterdir()) == ["best_policy.npz"]  # no temporary file left
    assert BestPolicy(tmp_path).mean is None and best.path.exists()  # a new run's: its next best replaces it


def test_a_resume_past_a_later_best_gets_the_best_of_its_checkpoint_back(tmp_path):
    import jax.numpy as jnp

    from jaxrl_fast.outputs.best import BestPolicy, read_best_policy
    from jaxrl_fast.outputs.checkpoint import Checkpointer

    def payload(value):
        return {"params": {"w": np.full((3, 2), value, np.float32)}}

    best, checkpointer = BestPolicy(tmp_path), Checkpointer(tmp_path, keep=3)
    assert best.offer(100, 10.0, 1.0, 5, payload(1.0))
    checkpointer.save(200, {"w": jnp.zeros(2)}, {"w": jnp.zeros(2)}, {"iterations": 200})  # links the best of 100
    assert best.offer(300, 12.0, 1.0, 5, payload(3.0))  # then a kill before the checkpoint of 400
    checkpointer.close()
    resumed = BestPolicy(tmp_path, resumed_from=200)  # the 300 is of steps it redoes: the checkpoint's best instead
    assert (resumed.step, resumed.mean) == (100, 10.0)
    arrays, meta = read_best_policy(resumed.path)
    assert meta["step"] == 100 and arrays["00000"][0, 0] == 1.0
    assert not resumed.offer(250, 9.0, 1.0, 5, payload(2.5))  # below the best the log still holds (step 100)



def test_an_evaluation_that_reports_after_its_checkpoint_was_written_is_that_checkpoints_best(tmp_path):
    """An evaluation of step 200 that ends after the checkpoint of 200 was saved (it runs beside
    training) and beats the best: a run resumed from 200 keeps that evaluation's log line, so it
    keeps its policy too, not the best the checkpoint linked when it was saved (or none)."""
    import jax.numpy as jnp

    from jaxrl_fast.outputs.best import BestPolicy, read_best_policy
    from jaxrl_fast.outputs.checkpoint import Checkpointer

    def payload(value):
        return {"params": {"w": np.full((3, 2), value, np.float32)}}

    best, checkpointer = BestPolicy(tmp_path), Checkpointer(tmp_path, keep=3)
    checkpointer.save(200, {"w": jnp.zeros(2)}, {"w": jnp.zeros(2)}, {"iterations": 200})  # no best yet: no link
    assert best.offer(200, 10.0, 1.0, 5, payload(2.0))  # the evaluation of step 200 reports now
    checkpointer.save(400, {"w": jnp.zeros(2)}, {"w": jnp.zeros(2)}, {"iterations": 400})
    assert best.offer(300, 11.0, 1.0, 5, payload(3.0))  # of step 300, reported after the checkpoint of 400
    assert best.offer(500, 12.0, 1.0, 5, payload(5.0))  # then a kill before the checkpoint of 600
    checkpointer.close()
    assert read_best_policy(tmp_path / "checkpoints" / "200" / "best_policy.npz")[1]["step"] == 200
    assert read_best_policy(tmp_path / "checkpoints" / "400" / "best_policy.npz")[1]["step"] == 300
    for checkpoint, kept in ((400, 3.0), (200, 2.0)):
        resumed = BestPolicy(tmp_path, resumed_from=checkpoint)
        arrays, meta = read_best_policy(resumed.path)
        assert resumed.step == meta["step"] < 500 and arrays["00000"][0, 0] == kept

def test_a_best_policy_that_cannot_be_written_is_counted_not_raised(tmp_path):
    from jaxrl_fast.outputs.best import BestPolicy

    (tmp_path / "checkpoints").write_text("a file where the directory would be")
    best = BestPolicy(tmp_path)
    assert not best.offer(100, 10.0, 1.0, 5, {"w": np.zeros(2)})
    assert best.failures == 1 and best.mean is None

    class Unreadable:  # a payload leaf that fails as it is read: counted too, not raised
        def __array__(self, *args, **kwargs):
            raise RuntimeError("device lost")

    other = BestPolicy(tmp_path / "other")
    assert not other.offer(100, 10.0, 1.0, 5, {"w": Unreadable()})
    assert other.failures == 1 and not other.path.exists()
