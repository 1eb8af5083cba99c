"""Many agents in one program: agent k of an N-agent loop is the single run with seed `seed + k`."""

import dataclasses
import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_fast
from jaxrl_fast.algos import make_algorithm
from jaxrl_fast.algos.ppo.config import PPOConfig
from jaxrl_fast.algos.ppo.learner import make_ppo
from jaxrl_fast.algos.pqn.config import PQNConfig
from jaxrl_fast.algos.pqn.learner import make_pqn
from jaxrl_fast.cli.train import main
from jaxrl_fast.config.plan import run_off_policy_plan
from jaxrl_fast.engine.acting import EnvOptions, agent_keys, agent_part, env_options
from jaxrl_fast.engine.placement import resolve
from jaxrl_fast.engine.replay import ReplayState, Row, agent_columns
from jaxrl_fast.engine.run_once import jit_once
from jaxrl_fast.engine.schedules.base import EvalRequests
from jaxrl_fast.engine.schedules.offpolicy import fused_loop
from jaxrl_fast.engine.schedules.sync import make_sync_loop
from jaxrl_fast.env.envpool import agent_env_seeds, make_pool, make_xla_env
from jaxrl_fast.outputs.checkpoint import (
    Checkpointer,
    NonFiniteError,
    StackedRestored,
    agent_state,
    agents_out_of_step,
    check_finite,
    latest_step,
    load_policy,
)
from jaxrl_fast.outputs.metrics import read_metrics
from jaxrl_fast.outputs.run_dir import seed_run_dir
from support import make_config, train

SEED, AGENTS, ENVS = 3, 2, 4
LAST = AGENTS - 1  # the agent compared with its single run: neither its envs nor its key come first


def test_one_pool_seeds_each_agents_envs_as_a_single_run_with_its_seed():
    pool = make_pool("CartPole-v1", AGENTS * ENVS, 1, agent_env_seeds(SEED, AGENTS, ENVS))
    obs, _ = pool.reset()
    for k in range(AGENTS):
        single, _ = make_pool("CartPole-v1", ENVS, 1, SEED + k).reset()
        np.testing.assert_array_equal(obs[k * ENVS:(k + 1) * ENVS], single)


def run_loop(make, hyper, num_agents, seed, options, iterations=2, batched_updates=False, env_id="CartPole-v1",
             **env_kwargs):
    seeds = agent_env_seeds(seed, num_agents, ENVS) if num_agents > 1 else seed
    env = make_xla_env(env_id, num_envs=num_agents * ENVS, num_threads=1, seed=seeds, **env_kwargs)
    algo = make(hyper, dataclasses.replace(env.spec, num_envs=ENVS), 10_000)  # each agent's own envs
    loop = make_sync_loop(algo, env, options, iterations, eval_every_iterations=0, on_eval=None, num_agents=num_agents,
                          batched_updates=batched_updates)
    state = jit_once(loop.init)(agent_keys(seed, num_agents), env.handle, env.reset())  # as the sync schedule does
    state, metrics = loop.run(state, jnp.int32(iterations))
    return jax.block_until_ready((state, metrics))  # before the pool is freed with `env`


CASES = {
    "ppo": (make_ppo, PPOConfig(num_steps=16, num_minibatches=2, update_epochs=2)),
    "pqn": (make_pqn, PQNConfig(num_steps=16, num_minibatches=2, update_epochs=2, hidden_sizes=(32, 32))),
}


def test_agent_k_of_many_is_bitwise_the_single_run_with_seed_k():
    """The agents act vmapped and learn one after another: nothing is summed in another order."""
    make, hyper = CASES["pqn"]
    options = EnvOptions(False, True, 0.99)  # the reward scales are each agent's own
    many, many_metrics = run_loop(make, hyper, AGENTS, SEED, options, iterations=3)
    single, single_metrics = run_loop(make, hyper, 1, SEED + LAST, options, iterations=3)
    chex.assert_trees_all_equal(agent_part(many.algo, LAST), single.algo)
    chex.assert_trees_all_equal(agent_part(many.env.reward_scale, LAST), single.env.reward_scale)
    chex.assert_trees_all_equal(agent_part(many_metrics.episodes, LAST), single_metrics.episodes)
    # reductions whose results only leave the program (the logged means) may round differently
    chex.assert_trees_all_close(agent_part(many_metrics.train, LAST), single_metrics.train, rtol=1e-6)


@pytest.mark.slow
def test_agents_on_atari_frame_stacks_are_bitwise_their_single_runs():
    """Each agent's envs keep their own frame stacks and no-op starts inside the shared pool."""
    hyper = PQNConfig(num_steps=8, num_minibatches=2, update_epochs=1, encoder="nature", hidden_sizes=())
    atari = dict(episodic_life=True, reward_clip=True, stack_num=2, img_height=42, img_width=42)  # small frames: cheap CNN
    options = EnvOptions(False, False, 0.99)
    many, many_metrics = run_loop(make_pqn, hyper, AGENTS, SEED, options, env_id="Pong-v5", **atari)
    single, single_metrics = run_loop(make_pqn, hyper, 1, SEED + LAST, options, env_id="Pong-v5", **atari)
    assert many.env.obs.shape[-3:] == (2, 42, 42) and many.env.obs.dtype == jnp.uint8
    np.testing.assert_array_equal(many.env.obs[LAST], single.env.obs)
    chex.assert_trees_all_equal(agent_part(many.algo, LAST), single.algo)
    chex.assert_trees_all_equal(agent_part(many_metrics.episodes, LAST), single_metrics.episodes)
    assert not np.array_equal(many.env.obs[0], many.env.obs[LAST])  # the agents did not play one game


def test_agents_exploring_with_gsde_are_bitwise_their_single_runs():
    """Each agent's exploration matrices are its own state, drawn from its own keys."""
    hyper = PPOConfig(num_steps=16, num_minibatches=2, update_epochs=2, use_sde=True)
    options = EnvOptions(False, False, 0.99)
    many, _ = run_loop(make_ppo, hyper, AGENTS, SEED, options, env_id="Pendulum-v1")
    single, _ = run_loop(make_ppo, hyper, 1, SEED + LAST, options, env_id="Pendulum-v1")
    chex.assert_trees_all_equal(agent_part(many.algo, LAST), single.algo)
    np.testing.assert_array_equal(many.env.obs[LAST], single.env.obs)
    assert not np.array_equal(many.algo.sde_matrix[0], many.algo.sde_matrix[LAST])


def test_batched_updates_match_the_single_runs_up_to_reassociation():
    make, hyper = CASES["ppo"]
    options = EnvOptions(True, False, 0.99)  # the observation statistics are each agent's own
    many, many_metrics = run_loop(make, hyper, AGENTS, SEED, options, batched_updates=True)
    single, single_metrics = run_loop(make, hyper, 1, SEED + LAST, options)
    # batched matmuls may sum in another order: equal up to floating-point reassociation
    chex.assert_trees_all_close(agent_part(many.algo, LAST), single.algo, rtol=2e-4, atol=2e-5)
    np.testing.assert_array_equal(many.env.obs[LAST], single.env.obs)  # same actions, same trajectories
    for field in ("count", "length_sum"):
        assert int(getattr(many_metrics.episodes, field)[LAST]) == int(getattr(single_metrics.episodes, field))
    chex.assert_trees_all_close(agent_part(many.env.obs_moments, LAST), single.env.obs_moments, rtol=1e-5)


def test_off_policy_checkpoints_hold_each_agents_columns_of_the_shared_buffer(tmp_path):
    rows = Row(obs=jnp.arange(4 * 6 * 3, dtype=jnp.float32).reshape(4, 6, 3), action=jnp.arange(24).reshape(4, 6),
               reward=jnp.ones((4, 6)), terminated=jnp.zeros((4, 6), bool), truncated=jnp.zeros((4, 6), bool),
               valid=jnp.ones((4, 6), bool))
    state = {"actor": {"w": jnp.arange(6.0).reshape(3, 2)}, "iteration": jnp.int32(7),
             "replay": ReplayState(rows, jnp.int32(4), jnp.int32(0))}  # 3 agents of 2 envs
    for k in range(3):  # as a --num-seeds run saves: each agent a single run's checkpoint
        saver = Checkpointer(seed_run_dir(tmp_path, k), keep=1)
        saver.save(10, agent_state(state, k, 3), {"w": jnp.zeros(2)}, {"iterations": 1})
        saver.close()
    parts = [Checkpointer(seed_run_dir(tmp_path, k), keep=1).restore() for k in range(3)]
    paths = parts[1].meta["paths"]
    saved = {path: parts[1].state[f"{i:05d}"] for i, path in enumerate(paths)}
    np.testing.assert_array_equal(saved["['replay'].rows.obs"].load(), rows.obs[:, 2:4])  # agent 1's envs 2 and 3
    np.testing.assert_array_equal(saved["['actor']['w']"], [2.0, 3.0])
    assert int(saved["['iteration']"]) == 7 and int(saved["['replay'].count"]) == 4  # shared counters
    template = jax.tree.map(jnp.zeros_like, state)  # a fresh run's state: the buffer is read into it
    chex.assert_trees_all_equal(StackedRestored(parts).into(template), state)


def test_a_non_finite_value_names_the_agents_it_hit():
    with pytest.raises(NonFiniteError, match=r"train/loss became nan at step 64 in seed_1$"):
        check_finite({"train/loss": np.array([0.5, np.nan, 0.2])}, {}, 64, num_agents=3)
    params = {"w": jnp.array([[1.0, 2.0], [np.inf, 0.0], [0.0, np.nan]])}
    with pytest.raises(NonFiniteError, match=r"parameter \['w'\] became non-finite at step 64 in seed_1, seed_2"):
        check_finite({"train/loss": np.zeros(3)}, params, 64, num_agents=3)


def save_steps(run_dir, steps):
    checkpointer = Checkpointer(run_dir, keep=5)
    for step in steps:
        checkpointer.save(step, {"w": jnp.zeros(2)}, {"w": jnp.zeros(2)}, {"iterations": step})
    checkpointer.close()


def test_a_run_stopped_between_agents_saves_resumes_from_the_step_every_agent_saved(tmp_path):
    save_steps(seed_run_dir(tmp_path, 0), [10, 20])
    save_steps(seed_run_dir(tmp_path, 1), [10])  # stopped before agent 1 saved step 20
    assert latest_step(tmp_path) == 10 and agents_out_of_step(tmp_path) == []
    save_steps(seed_run_dir(tmp_path, 0), [30])  # agent 0 trained on alone (--resume RUN_DIR/seed_0)
    assert agents_out_of_step(tmp_path) == ["seed_0"]


def test_an_agent_whose_rotation_dropped_every_shared_step_is_out_of_step_not_a_fresh_start(tmp_path):
    # agent 0 trained on alone until --keep-checkpoints rotated out every step agent 1 holds: the
    # agents share no step, which once read as "no checkpoint yet" and started every agent over
    save_steps(seed_run_dir(tmp_path, 0), [30, 40])
    save_steps(seed_run_dir(tmp_path, 1), [10, 20])
    assert latest_step(tmp_path) is None and agents_out_of_step(tmp_path) == ["seed_0"]
    seed_run_dir(tmp_path, 2).mkdir()  # an agent with no checkpoint at all: the others' are kept too
    assert agents_out_of_step(tmp_path) == ["seed_0", "seed_1"]
    first_save_cut = tmp_path / "cut"
    save_steps(seed_run_dir(first_save_cut, 0), [10])  # stopped in the middle of the run's first save
    seed_run_dir(first_save_cut, 1).mkdir()
    assert agents_out_of_step(first_save_cut) == []  # starts over, as a run with no checkpoint does


def test_an_agent_whose_checkpoint_cannot_be_read_leaves_every_agent_as_it_was(tmp_path):
    # stopped after agent 0 saved step 20 and before agent 1 did, whose step 10 is then damaged: the
    # resume from step 10 fails at agent 1, and must not have cut agent 0's step 20 and log first
    import hashlib
    import shutil

    from jaxrl_fast.run.build import ResumeError, open_seeds

    save_steps(seed_run_dir(tmp_path, 0), [10, 20])
    (seed_run_dir(tmp_path, 0) / "metrics.jsonl").write_text('{"step": 10}\n{"step": 20}\n')
    save_steps(seed_run_dir(tmp_path, 1), [10])
    shutil.rmtree(seed_run_dir(tmp_path, 1) / "checkpoints" / "10" / "state")

    def contents():
        return {str(p.relative_to(tmp_path)): hashlib.md5(p.read_bytes()).hexdigest()
                for p in sorted(tmp_path.rglob("*")) if p.is_file()}

    before = contents()
    config = make_config(num_seeds=2, run_dir=tmp_path, resume=tmp_path)
    with pytest.raises(ResumeError, match="the checkpoint at step 10 in .*seed_1"):
        open_seeds(config, resume=True)
    assert contents() == before


def test_a_start_over_moves_each_agents_outputs_and_says_where(tmp_path):
    from jaxrl_fast.outputs.run_dir import is_seed_run_dir
    from jaxrl_fast.run.build import open_seeds

    for k in range(2):  # killed before any checkpoint: logs only
        seed_run_dir(tmp_path, k).mkdir(parents=True)
        (seed_run_dir(tmp_path, k) / "metrics.jsonl").write_text('{"step": 10}\n')
    _, seeds, moved = open_seeds(make_config(num_seeds=2, run_dir=tmp_path, resume=tmp_path), resume=True)
    for seed in seeds:
        seed.checkpointer.close()
    assert moved == [seed_run_dir(tmp_path, k) / "previous-1" for k in range(2)]
    assert all((path / "metrics.jsonl").exists() for path in moved)
    assert [is_seed_run_dir(tmp_path / name) for name in ("seed_3", "42", "seed_", "seed_\u00b2", "seeds")] == [
        True, False, False, False, False]


def off_policy_loop(num_agents, seed, **sac):
    config = make_config("Pendulum-v1", "sac", seed=seed, num_seeds=num_agents, total_steps=4_000, schedule="sync")
    config = dataclasses.replace(config, sac=dataclasses.replace(config.sac, **sac))
    envs = config.num_envs
    env = make_xla_env("Pendulum-v1", num_agents * envs, 1, agent_env_seeds(seed, num_agents, envs) if num_agents > 1 else seed)
    algo = make_algorithm(config, dataclasses.replace(env.spec, num_envs=envs))
    loop = fused_loop(algo, env, env_options(config), run_off_policy_plan(config), resolve(config), iterations_per_call=4,
                      requests=EvalRequests(None, 0), num_agents=num_agents)
    state, _ = loop.warmup(loop.init(agent_keys(seed, num_agents), env.handle, env.reset()))
    state, _, _ = loop.run(state, 2)
    return jax.block_until_ready(state), env


@pytest.mark.parametrize("sac", [{}, {"use_sde": True, "sde_sample_freq": 8}], ids=["gaussian", "gsde"])
def test_off_policy_agents_share_one_buffer_and_each_learns_as_its_single_run(sac):
    many, _ = off_policy_loop(AGENTS, SEED, **sac)
    single, _ = off_policy_loop(1, SEED + LAST, **sac)
    # the same rows in the agent's own columns of the shared buffer, so the same actions were taken
    chex.assert_trees_all_equal(agent_columns(many.replay, LAST, AGENTS), single.replay)
    # XLA fuses SAC's updates inside the agents' loop differently from a single run's: their last
    # bits may differ (PPO's do not)
    chex.assert_trees_all_close(agent_part(many.actor, LAST), single.actor, rtol=1e-5, atol=1e-6)
    chex.assert_trees_all_close(agent_part(many.critic, LAST), single.critic, rtol=1e-5, atol=1e-6)


def ppo_config(run_dir, **changes):
    return make_config(total_steps=4_096, eval_interval=2_048, log_interval=1_024, run_dir=run_dir, progress="off",
                       checkpoint_interval=2_048, **changes)


@pytest.mark.slow
def test_num_seeds_run_writes_a_single_run_directory_per_seed_equal_to_that_seeds_run(tmp_path):
    root = tmp_path / "seeds"
    summary = train(ppo_config(root, seed=SEED, num_seeds=AGENTS))
    train(ppo_config(tmp_path / "single", seed=SEED + 1))
    # agent 1 is the single run with seed + 1: the same log lines, and the first one's figures equal up
    # to rounding. (Bitwise on JAX 0.10; JAX 0.12 compiles PPO's advantage recursion differently inside
    # the loop over agents, and the relative difference of 1e-5 after the first call grows as training
    # goes on, as any rounding's does: docs/seeds.md.)
    ignore = {"wall_s", "sps", "update_frames_per_s", "eval/duration_s"}
    lines = lambda run: [{k: v for k, v in line.items() if k not in ignore} for line in read_metrics(run / "metrics.jsonl")]  # noqa: E731
    agent, single = lines(root / "seed_1"), lines(tmp_path / "single")
    assert len(agent) == len(single) == 6
    assert [(line["step"], sorted(line)) for line in agent] == [(line["step"], sorted(line)) for line in single]
    assert agent[0] == pytest.approx(single[0], rel=1e-4, abs=1e-6)
    for k in range(AGENTS):
        own = json.loads((root / f"seed_{k}" / "config.json").read_text())["train_config"]
        assert own["seed"] == SEED + k and own["num_seeds"] == 1 and own["num_envs"] == 8
        assert json.loads((root / f"seed_{k}" / "summary.json").read_text())["steps"] == 4_096
        assert (root / f"seed_{k}" / "learning_curve.png").exists()
    policy = load_policy(root / "seed_1")
    assert policy(np.zeros((3, 4), np.float32)).shape == (3,)
    assert summary == json.loads((root / "summary.json").read_text())
    assert summary["seeds"] == [SEED, SEED + 1] and summary["steps"] == 4_096
    final = summary["final_eval_return"]
    assert final["per_seed"] == summary["final_eval_return_mean"] and len(final["per_seed"]) == AGENTS
    assert final["iqm_ci95"][0] <= final["iqm"] <= final["iqm_ci95"][1]
    # --resume RUN_DIR continues every agent from its checkpoint
    summary = jaxrl_fast.train(resume=root, total_steps=6_144).summary
    assert summary["steps"] == 6_144 and latest_step(root) == 6_144
    assert [json.loads((root / f"seed_{k}" / "summary.json").read_text())["steps"] for k in range(AGENTS)] == [6_144] * 2


@pytest.mark.parametrize("args, message", [
    (["--num-seeds", "0"], "--num-seeds must be at least 1"),
    (["--num-seeds", "2", "--schedule", "concurrent"], "--num-seeds trains its agents in the sync schedule"),
    (["--num-seeds", "2", "--algo", "sac", "--env", "Pendulum-v1", "--placement", "split"], "--placement split"),
    (["--num-seeds", "2", "--keep-checkpoints", "1"], "--num-seeds needs --keep-checkpoints 2 or more"),
    (["--batch-seed-updates"], "--batch-seed-updates batches the updates of --num-seeds agents"),
])
def test_num_seeds_refuses_what_it_cannot_train(tmp_path, capsys, args, message):
    assert main([*args, "--run-dir", str(tmp_path / "run")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_seeds_past_the_open_files_limit_are_refused_before_anything_is_built(tmp_path, capsys, monkeypatch):
    import resource

    limits, raised = [1024, 1024], []  # the common default, as soft and hard limits: stand-ins, nothing changes
    monkeypatch.setattr(resource, "getrlimit", lambda which: tuple(limits))
    monkeypatch.setattr(resource, "setrlimit", lambda which, value: raised.append(value))
    assert main(["--num-seeds", "400", "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--num-seeds 400 keeps about 1,856 files open" in err and "train at most 192 seeds" in err
    assert not (tmp_path / "run").exists() and raised == []
    from jaxrl_fast.run.resolve import check_open_files

    limits[0] = 256  # a soft limit under what the run needs, a hard one over it: raised, not refused
    check_open_files(100)
    assert raised == [(656, 1024)]
