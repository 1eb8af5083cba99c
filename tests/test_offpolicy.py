import math
import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_fast.algos import make_algorithm
from jaxrl_fast.config.plan import off_policy_plan
from jaxrl_fast.config.run import TrainConfig
from jaxrl_fast.engine.acting import EnvOptions
from jaxrl_fast.engine.placement import Placement, PlacementError, resolve_placement
from jaxrl_fast.engine.schedules.base import EvalRequests
from jaxrl_fast.engine.schedules.offpolicy import fused_loop, host_driven_loop
from jaxrl_fast.env.envpool import make_xla_env, probe_spec
from support import make_config, train

CPU = jax.devices("cpu")


def test_wrong_action_space_is_refused():
    with pytest.raises(ValueError, match="discrete actions"):
        make_algorithm(TrainConfig(algo="sac"), probe_spec("CartPole-v1"))
    with pytest.raises(ValueError, match="continuous actions"):
        make_algorithm(TrainConfig(algo="dqn"), probe_spec("Pendulum-v1"))


def test_sac_temperature_moves_towards_the_target_entropy_per_action_dimension():
    """One actor update from the same state and batch: a target above the policy's entropy raises
    the temperature, one below lowers it (the field reaches the temperature's loss)."""
    spec = probe_spec("Pendulum-v1")
    obs, weight = jnp.zeros((8, *spec.obs_shape)), jnp.ones(8)

    def alpha_after_one_update(per_action):
        algo = make_algorithm(make_config("Pendulum-v1", "sac", sac=dict(target_entropy_per_action=per_action)), spec)
        actor, critic = algo.init(jax.random.key(0))
        moved, _ = algo.update_actor(actor, algo.critic_exchange(critic), obs, weight, jax.random.key(1))
        return float(jnp.exp(moved.log_alpha)), float(jnp.exp(actor.log_alpha))

    (high, start), (low, _) = alpha_after_one_update(50.0), alpha_after_one_update(-50.0)
    assert low < start < high


def build(algo_name, env_id, placement, exchange="fresh", num_envs=2, seed=0):
    config = make_config(env_id, algo_name, num_envs=num_envs, **{algo_name: dict(learning_starts=64, batch_size=32)})
    hyper = getattr(config, algo_name)
    env = make_xla_env(env_id, num_envs, 1, seed)
    algo = make_algorithm(config, env.spec)
    plan = off_policy_plan(hyper, num_envs)
    options, requests = EnvOptions(False, False, 0.99), EvalRequests(None, 0)
    loop = (fused_loop(algo, env, options, plan, placement, 4, requests) if placement.fused else
            host_driven_loop(algo, env, options, plan, placement, exchange, requests))
    state = loop.init(jax.random.key(seed), env.handle, env.reset())
    state, _ = loop.warmup(state)
    return loop, state, plan


def devices_of(tree):
    return {d for leaf in jax.tree.leaves(tree) for d in leaf.devices()}


def test_split_placement_keeps_each_role_on_its_device():
    placement = resolve_placement("split")
    assert placement.actor == (CPU[0],) and placement.critic == (CPU[1],)
    loop, state, _ = build("sac", "Pendulum-v1", placement)
    assert devices_of(state.actor) == {CPU[0]} and devices_of(state.critic) == {CPU[1]}
    assert devices_of(state.replay) == {CPU[1]}
    state, metrics, _ = loop.run(state, 3)
    assert devices_of(state.actor) == {CPU[0]} and devices_of(state.critic) == {CPU[1]}
    assert float(metrics["train/actor_updates"]) > 0 and np.isfinite(float(metrics["train/critic_loss"]))


@pytest.mark.parametrize("algo_name, env_id", [("sac", "Pendulum-v1"), ("td3", "Pendulum-v1"), ("dqn", "CartPole-v1")])
@pytest.mark.slow
def test_split_with_fresh_exchange_matches_single(algo_name, env_id):
    single = resolve_placement("single")
    assert single.fused and single.actor == (CPU[0],)
    results = []
    for placement in (single, resolve_placement("split")):
        loop, state, _ = build(algo_name, env_id, placement)
        state, _, _ = loop.run(state, 4)
        results.append(jax.device_get((state.actor, state.critic)))
    chex.assert_trees_all_close(results[0], results[1], rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_lagged_exchange_runs_and_differs_from_fresh():
    params = []
    for exchange in ("fresh", "lagged"):
        loop, state, _ = build("sac", "Pendulum-v1", resolve_placement("split"), exchange)
        state, _, _ = loop.run(state, 3)
        params.append(jax.device_get(state.actor.policy))
    diffs = [np.abs(a - b).max() for a, b in zip(jax.tree.leaves(params[0]), jax.tree.leaves(params[1]))]
    assert max(diffs) > 0


@pytest.mark.slow
def test_data_parallel_role_matches_one_device():
    """Both roles sharded over both devices (batch split, parameters replicated) == one device."""
    both = tuple(CPU[:2])
    results = []
    for placement in (resolve_placement("single"), Placement("single", CPU[0], both, both, both[0], CPU[0])):
        loop, state, _ = build("sac", "Pendulum-v1", placement)
        state, _, _ = loop.run(state, 3)
        results.append(jax.device_get(state.critic.q))
    chex.assert_trees_all_close(results[0], results[1], rtol=1e-4, atol=1e-5)


def test_split_needs_two_devices():
    with pytest.raises(PlacementError, match="two or more devices"):
        resolve_placement("split", devices=CPU[:1])


@pytest.mark.parametrize("algo_name, budget", [("sac", 10_000), ("td3", 16_000)])
@pytest.mark.slow
def test_sac_and_td3_reach_minus_200_on_pendulum(tmp_path, algo_name, budget):
    """The preset, a fixed seed: an evaluation reaches -200 within the budget (the run stops there).

    Why the margin holds on any machine (where last bits differ, the run is as another seed's): seeds
    0-15 reached -200 by 4,256 steps with SAC (mean 3,444, standard deviation 655) and by 8,000 with
    TD3 (mean 7,000, deviation 516; `experiments/learning_margins.py`, cases sac_pendulum and
    td3_pendulum): each budget is at least twice the slowest seed's, and 10 deviations beyond the mean.
    With the agent's `init` at optimisation level 0 the slowest were the same (SAC mean 3,381,
    `experiments/results/learning_margins_init_level0.json`)."""
    config = make_config("Pendulum-v1", algo_name, total_steps=budget, target_return=-200.0, run_dir=tmp_path / "run", progress="off", placement="single")
    summary = train(config)
    assert summary.get("target_step") is not None and summary["target_step"] <= budget


@pytest.mark.slow
def test_dqn_reaches_475_on_cartpole(tmp_path):
    """The preset, a fixed seed: an evaluation reaches 475 within the budget (the run stops there).

    Why the margin holds on any machine (where last bits differ, the run is as another seed's): with
    the preset's 64x64 network, seeds 0-15 reached 475 after 47,562 steps on average (standard
    deviation 13,871, the slowest 91,000; `experiments/learning_margins.py --cases dqn_cartpole
    --extra "--dqn.hidden-sizes 64 64"`): the budget lies 3.8 deviations beyond the mean. With the
    agent's `init` at optimisation level 0, seeds 0-15 took 42,875 on average (deviation 7,932, the
    slowest 56,000; `experiments/results/learning_margins_init_level0.json`). (A longer budget would
    stretch the exploration schedule, a fraction of it.) Their final evaluations are no statistic to
    test: 7 of the 16 had fallen below 475 again by 100,000 steps, and 9 of 16 with `init` at level 0."""
    config = make_config("CartPole-v1", "dqn", total_steps=100_000, target_return=475.0, eval_interval=5_000, log_interval=5_000, run_dir=tmp_path / "run", progress="off", placement="single")
    summary = train(config)
    assert summary.get("target_step") is not None and summary["target_step"] <= 100_000


def buffer_sized_copies(hlo: str, min_elements: int) -> list[str]:
    """The `copy` instructions of an optimized HLO module that move `min_elements` or more elements
    (a tuple-shaped copy counts the elements of all its arrays)."""
    found = []
    for line in hlo.splitlines():
        match = re.match(r"\s*(?:ROOT\s+)?%\S+\s*=\s*(.+?)\s+(copy|copy-start)\(", line)
        if match is None:
            continue
        sizes = [math.prod(int(d) for d in dims.split(",") if d) for dims in re.findall(r"\w+\[([\d,]*)\]", match[1])]
        if sum(sizes) >= min_elements:
            found.append(line.strip()[:160])
    return found


def test_hlo_copy_parser_counts_elements():
    hlo = ("  %copy.1 = pred[200000,1]{1,0} copy(%p)\n  %copy.2 = f32[32,4]{1,0} copy(%q)\n"
           "  ROOT %copy.3 = (f32[100000]{0}, s32[100000]{0}) copy(%t)\n  %c = f32[300000]{0} add(%a, %b)\n")
    assert len(buffer_sized_copies(hlo, 200_000)) == 2


@pytest.mark.parametrize("algo_name, env_id", [("sac", "Pendulum-v1"), ("dqn", "CartPole-v1")])
def test_fused_loop_updates_the_buffer_in_place(algo_name, env_id):
    """One env, one update per step: the compiled fused loop copies no buffer-sized array."""
    rows = 200_000
    config = make_config(env_id, algo_name, num_envs=1, **{algo_name: dict(buffer_size=rows, utd_ratio=1.0, learning_starts=64,
                                                                            batch_size=32)})
    hyper = getattr(config, algo_name)
    env = make_xla_env(env_id, 1, 1, 0)
    plan = off_policy_plan(hyper, 1)
    assert (plan.rollout_length, plan.updates_per_iteration, plan.replay_rows) == (1, 1, rows)
    loop = fused_loop(make_algorithm(config, env.spec), env, EnvOptions(False, False, 0.99), plan, resolve_placement("single"),
                      4, EvalRequests(None, 0))
    state = loop.init(jax.random.key(0), env.handle, env.reset())
    for program, args in ((jax.jit(loop.run, donate_argnums=0), (state, jnp.int32(4))), (loop.warmup.jitted, (state,))):
        hlo = program.lower(*args).compile().as_text()
        assert buffer_sized_copies(hlo, rows // 2) == []


@pytest.mark.slow
@pytest.mark.parametrize("algo, changes", [
    ("sac", {"total_steps": 4000, "sac": {"learning_starts": 1000}}),
    ("ppo", {"total_steps": 16384, "num_envs": 8}),
], ids=["sac", "ppo"])
def test_a_dm_control_task_trains_from_its_dict_observations_and_its_policy_takes_them(tmp_path, algo, changes):
    import envpool

    from jaxrl_fast import load_policy
    from jaxrl_fast.outputs.metrics import read_metrics

    config = make_config("CheetahRun-v1", algo, run_dir=tmp_path / "run", progress="off", eval_interval=0,
                         log_interval=changes["total_steps"] // 4, **changes)
    summary = train(config)
    assert summary["steps"] == changes["total_steps"]
    lines = [line for line in read_metrics(tmp_path / "run" / "metrics.jsonl") if "sps" in line]
    loss = "train/critic_loss" if algo == "sac" else "train/value_loss"
    losses = [line[loss] for line in lines if loss in line]
    returns = [line["train/episode_return"] for line in lines if "train/episode_return" in line]
    assert len(losses) >= 2 and np.isfinite(losses).all() and len(set(losses)) > 1  # the learner moved
    assert len(returns) >= 2 and len(set(returns)) > 1 and all(0 <= r <= 1000 for r in returns)  # dm_control's scale
    raw = envpool.make("CheetahRun-v1", env_type="gymnasium", num_envs=3, seed=0)  # EnvPool's own dicts
    obs, _ = raw.reset()
    policy = load_policy(tmp_path / "run")
    assert policy(obs).shape == (3, 6) and policy({k: v[0] for k, v in obs.items()}).shape == (6,)
    assert policy({k: v[:1] for k, v in obs.items()}).shape == (1, 6)  # a batch of one: EnvPool's num_envs=1 loop
