"""`jit_once`: the programs a run calls once, compiled for a fast compile. Where jaxlib still has
XLA's older CPU fusion emitters it takes them too, and the first state stays the same to the bit."""

import jax
import numpy as np
import pytest

from jaxrl_fast.engine.run_once import OLDER_CPU_EMITTERS, RUN_ONCE_OPTIONS, jit_once, run_once_options


def test_the_older_emitters_are_asked_for_only_where_jaxlib_has_them():
    assert run_once_options((0, 10, 2)) == RUN_ONCE_OPTIONS | OLDER_CPU_EMITTERS
    assert run_once_options((0, 12, 0, 1)) == RUN_ONCE_OPTIONS  # jaxlib 0.12 refuses the option
    assert int(jit_once(lambda x: x + 1)(np.int32(1))) == 2  # this jaxlib compiles what it is given


def bits(tree):
    """Every leaf as a numpy array, PRNG keys as their key data."""
    def as_array(leaf):
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        return np.asarray(leaf)
    return [as_array(leaf) for leaf in jax.tree.leaves(tree)]


def level0_and_jit_once(fn, *args):
    if not OLDER_CPU_EMITTERS.items() <= run_once_options().items():
        pytest.skip(f"jaxlib {jax.lib.__version__} has no older CPU fusion emitters")
    with jax.default_device(jax.devices("cpu")[0]):
        return bits(jax.jit(fn, compiler_options=RUN_ONCE_OPTIONS)(*args)), bits(jit_once(fn)(*args))


@pytest.mark.parametrize("algo,env_id", [("ppo", "CartPole-v1"), ("sac", "Pendulum-v1")])
def test_an_agents_first_parameters_are_those_of_level_0_alone(algo, env_id):
    from jaxrl_fast.algos import make_algorithm
    from jaxrl_fast.config.presets import resolve_defaults
    from jaxrl_fast.env.envpool import probe_spec
    from jaxrl_fast.env.ids import env_family

    agent = make_algorithm(resolve_defaults(env_id, algo, env_family(env_id)), probe_spec(env_id))
    for seed in range(4):
        level0, once = level0_and_jit_once(agent.init, jax.random.key(seed))
        for a, b in zip(level0, once, strict=True):
            np.testing.assert_array_equal(b, a)


def test_a_loops_first_state_with_normalised_observations_is_that_of_level_0_alone():
    """The sync loop's `init`: the agent and the env carry, whose observation statistics start from
    the first observations (Acrobot-v1's preset normalises them)."""
    from jaxrl_fast.algos import make_algorithm
    from jaxrl_fast.config.presets import resolve_defaults
    from jaxrl_fast.engine.acting import env_options
    from jaxrl_fast.engine.schedules.sync import make_sync_loop
    from jaxrl_fast.env.envpool import make_xla_env
    from jaxrl_fast.env.ids import env_family

    config = resolve_defaults("Acrobot-v1", "ppo", env_family("Acrobot-v1"))
    assert config.normalize_observations
    env = make_xla_env(config.env, config.num_envs, 1, seed=3)
    try:
        loop = make_sync_loop(make_algorithm(config, env.spec), env, env_options(config), 1, 0, None)
        level0, once = level0_and_jit_once(loop.init, jax.random.key(3), env.handle, env.reset())
    finally:
        env.pool.close()
    for a, b in zip(level0, once, strict=True):
        np.testing.assert_array_equal(b, a)


@pytest.mark.parametrize("algo,env_id", [("dqn", "CartPole-v1"), ("sac", "Pendulum-v1")])
def test_the_off_policy_warm_up_compiled_to_compile_fast_fills_the_same_buffer(algo, env_id):
    """The fused loop's warm-up (random actions into the buffer) runs once: it is compiled with
    `run_once_options` where the env steps outside XLA, and leaves the state of the default compile."""
    from jaxrl_fast.algos import make_algorithm
    from jaxrl_fast.config.plan import off_policy_plan
    from jaxrl_fast.config.presets import resolve_defaults
    from jaxrl_fast.engine.acting import EnvOptions
    from jaxrl_fast.engine.placement import resolve_placement
    from jaxrl_fast.engine.schedules.base import EvalRequests
    from jaxrl_fast.engine.schedules.offpolicy import fused_loop, warmup_options
    from jaxrl_fast.env.envpool import make_xla_env, probe_spec
    from jaxrl_fast.env.ids import env_family

    assert warmup_options(probe_spec(env_id)) == run_once_options()
    assert warmup_options(probe_spec("Pong-v5")) is None  # frames: compiled for the run
    config = resolve_defaults(env_id, algo, env_family(env_id))
    hyper = getattr(config, algo)
    states = []
    for options in (None, run_once_options()):
        env = make_xla_env(env_id, config.num_envs, 1, seed=5)
        try:
            plan = off_policy_plan(hyper, config.num_envs)
            loop = fused_loop(make_algorithm(config, env.spec), env, EnvOptions(False, False, hyper.gamma), plan,
                              resolve_placement("single", env), 1, EvalRequests(None, 0))
            state = loop.init(jax.random.key(5), env.handle, env.reset())
            warmup = jax.jit(loop.warmup.jitted.__wrapped__, compiler_options=options)
            state, finished = warmup(state)
            states.append(bits((state._replace(env=state.env._replace(handle=None)), finished)))  # the pool's address aside
        finally:
            env.pool.close()
    for a, b in zip(*states, strict=True):
        np.testing.assert_array_equal(b, a)
