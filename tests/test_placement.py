"""Every schedule's placement on two XLA CPU devices: what `placement.resolve` decides, and where the
schedule then keeps each piece of state."""


import jax
import numpy as np
import pytest

from jaxrl_fast.engine import placement as placements
from jaxrl_fast.engine.schedules import (
    OffPolicyConcurrent,
    OffPolicyFused,
    OffPolicyHostDriven,
    OnPolicyConcurrent,
    OnPolicySync,
    schedule_class,
)
from jaxrl_fast.engine.schedules.asynchronous import AsyncSchedule
from jaxrl_fast.env.envpool import make_xla_env
from jaxrl_fast.run.build import build_schedule
from support import make_config, resolved

CPU = jax.devices("cpu")


def config_for(algo, env_id, **changes):
    if algo != "ppo":  # a short warm-up and a small buffer: these tests look at devices, not learning
        changes.setdefault(algo, dict(learning_starts=64, buffer_size=4096))
    changes.setdefault("schedule", "sync")  # as resolved from the default, auto, for these EnvPool ids
    return make_config(env_id, algo, total_steps=4096, eval_interval=0, log_interval=256, **changes)


def devices_of(tree):
    return {d for leaf in jax.tree.leaves(tree) if isinstance(leaf, jax.Array) for d in leaf.devices()}


# (algo, env, changes, the schedule class, acting, actor, critic, learner)
CASES = [
    ("ppo", "CartPole-v1", {}, OnPolicySync, 0, (0,), (0,), 0),
    ("ppo", "CartPole-v1", dict(schedule="concurrent"), OnPolicyConcurrent, 0, (0,), (0,), 1),
    ("sac", "Pendulum-v1", dict(placement="single"), OffPolicyFused, 0, (0,), (0,), 0),
    ("sac", "Pendulum-v1", dict(placement="auto"), OffPolicyFused, 0, (0,), (0,), 0),  # fake CPUs: no split
    ("sac", "Pendulum-v1", dict(placement="split"), OffPolicyHostDriven, 0, (0,), (1,), 1),
    ("sac", "Pendulum-v1", dict(placement="split", schedule="concurrent"), OffPolicyConcurrent, 0, (0,), (1,), 1),
    ("dqn", "CartPole-v1", dict(placement="split"), OffPolicyHostDriven, 0, (0,), (1,), 1),
    ("sac", "Pendulum-v1", dict(schedule="concurrent"), OffPolicyConcurrent, 0, (0,), (0,), 0),
    ("sac", "Pendulum-v1", dict(schedule="async"), AsyncSchedule, 0, (0,), (0,), 0),
]


@pytest.mark.parametrize("algo, env_id, changes, cls, acting, actor, critic, learner", CASES)
def test_resolve_gives_each_schedule_its_devices(algo, env_id, changes, cls, acting, actor, critic, learner):
    config = config_for(algo, env_id, **changes)
    where = placements.resolve(config)
    assert where.acting == CPU[acting] and where.learner == CPU[learner]
    assert where.actor == tuple(CPU[i] for i in actor) and where.critic == tuple(CPU[i] for i in critic)
    assert schedule_class(config, where) is cls


def test_split_needs_two_devices():
    config = config_for("sac", "Pendulum-v1", placement="split")
    with pytest.raises(placements.PlacementError, match="two or more devices"):
        placements.resolve(config, devices=CPU[:1])


@pytest.mark.parametrize("case", [CASES[1], CASES[4], CASES[5], CASES[8]], ids=lambda c: f"{c[0]}-{c[3].__name__}")
def test_state_lives_where_placement_says_after_start_and_an_iteration(case):
    algo, env_id, changes, cls, acting, actor, critic, learner = case
    config = config_for(algo, env_id, **changes)
    env = make_xla_env(config.env, config.num_envs, 1, config.seed)
    schedule = build_schedule(resolved(config), env)
    try:
        schedule.start(None)
        schedule.run(1)
        state = schedule.state
        if cls is OnPolicyConcurrent:
            assert devices_of(state.algo) == {CPU[learner]} and devices_of(state.pending) == {CPU[learner]}
            assert devices_of(state.env.obs) == {CPU[acting]}
        else:
            assert devices_of(state.actor) == {CPU[i] for i in actor}
            assert devices_of((state.critic, state.replay)) == {CPU[i] for i in critic}
            if cls is not AsyncSchedule:  # async actors keep their env carries to themselves
                assert devices_of(state.env.obs) == {CPU[acting]}
    finally:
        schedule.close()


def test_async_publishes_parameters_in_buffers_the_next_update_cannot_overwrite():
    """The learner's program donates its parameters to the next iteration while actors still act
    with the published ones: those must be copies in buffers of their own, equal in value."""
    config = config_for("sac", "Pendulum-v1", schedule="async")
    env = make_xla_env(config.env, config.num_envs, 1, config.seed)
    schedule = build_schedule(resolved(config), env)
    try:
        schedule.start(None)
        schedule.run(2)
        published, version = schedule.store.latest()
        state = schedule.state
        assert version == schedule.version == 3  # the iteration that compiled, then two
        held = {leaf.unsafe_buffer_pointer() for leaf in jax.tree.leaves((state.actor, state.critic))}
        assert held.isdisjoint(leaf.unsafe_buffer_pointer() for leaf in jax.tree.leaves(published))
        jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
                     published, schedule.algo.acting_params(state.actor, state.critic))
    finally:
        schedule.close()


@pytest.mark.slow
def test_async_actors_acting_on_one_device_feed_a_learner_on_another(tmp_path, monkeypatch):
    """Where the env's step has no GPU build (Python envs, EnvPool without CUDA) on a GPU machine,
    actors act on the CPU and the learner updates on the GPU: the chunks' programs (compiled
    executables, stricter than `jax.jit` about where their arguments are) take the learner's
    parameters moved to the acting device, and the learner takes the rows and episode statistics
    moved to its own. Two CPU devices stand for the two here; the CLI cannot ask for this placement."""
    import json

    import numpy as np

    import jaxrl_fast
    from jaxrl_fast.run import resolve as resolving

    cpu0, cpu1 = jax.devices("cpu")[:2]
    monkeypatch.setattr(resolving, "place",
                        lambda config: placements.Placement("single", cpu0, (cpu1,), (cpu1,), cpu1, cpu0))
    result = jaxrl_fast.train(env="custom_envs:PointToTarget", algo="sac", schedule="async", total_steps=1_500,
                              sac={"learning_starts": 500}, progress="off", run_dir=tmp_path / "run")
    placed = json.loads((tmp_path / "run" / "config.json").read_text())["placement"]
    assert (placed["acting"], placed["learner"]) == ("cpu:0", "cpu:1"), placed
    assert np.isfinite(result.summary["final_eval_return_mean"])
