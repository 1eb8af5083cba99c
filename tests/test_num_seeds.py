"""Many agents in one program: agent k of an N-agent loop is the single run with seed `seed + k`."""

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_fast.acting import EnvOptions
from jaxrl_fast.algos.ppo import PPOConfig, make_ppo
from jaxrl_fast.algos.pqn import PQNConfig, make_pqn
from jaxrl_fast.env import agent_env_seeds, make_pool, make_xla_env
from jaxrl_fast.schedules.sync import make_sync_loop

SEED, AGENTS, ENVS = 3, 2, 4


def test_one_pool_seeds_each_agents_envs_as_a_single_run_with_its_seed():
    pool = make_pool("CartPole-v1", AGENTS * ENVS, 1, agent_env_seeds(SEED, AGENTS, ENVS))
    obs, _ = pool.reset()
    for k in range(AGENTS):
        single, _ = make_pool("CartPole-v1", ENVS, 1, SEED + k).reset()
        np.testing.assert_array_equal(obs[k * ENVS:(k + 1) * ENVS], single)


def run_loop(make, hyper, num_agents, seed, options, iterations=2):
    seeds = agent_env_seeds(seed, num_agents, ENVS) if num_agents > 1 else seed
    env = make_xla_env("CartPole-v1", num_envs=num_agents * ENVS, num_threads=1, seed=seeds)
    algo = make(hyper, dataclasses.replace(env.spec, num_envs=ENVS), 10_000)  # each agent's own envs
    loop = make_sync_loop(algo, env, options, iterations, eval_every_iterations=0, on_eval=None, num_agents=num_agents)
    keys = jax.vmap(jax.random.key)(jnp.arange(seed, seed + num_agents)) if num_agents > 1 else jax.random.key(seed)
    state = jax.jit(loop.init)(keys, env.handle, env.reset())
    state, metrics = loop.run(state, jnp.int32(iterations))
    return jax.block_until_ready((state, metrics))  # before the pool is freed with `env`


CASES = {
    "ppo": (make_ppo, PPOConfig(num_steps=16, num_minibatches=2, update_epochs=2)),
    "pqn": (make_pqn, PQNConfig(num_steps=16, num_minibatches=2, update_epochs=2, hidden_sizes=(32, 32))),
}


@pytest.mark.parametrize("name, normalize", [("ppo", False), ("pqn", True)], ids=["ppo", "pqn-normalized"])
def test_agent_k_of_many_trains_like_the_single_run_with_seed_k(name, normalize):
    make, hyper = CASES[name]
    options = EnvOptions(normalize, normalize, 0.99)
    many, many_metrics = run_loop(make, hyper, AGENTS, SEED, options)
    for k in range(AGENTS):
        single, single_metrics = run_loop(make, hyper, 1, SEED + k, options)
        agent = jax.tree.map(lambda x: x[k], many.algo)
        # batched matmuls may sum in another order: equal up to floating-point reassociation
        chex.assert_trees_all_close(agent, single.algo, rtol=2e-4, atol=2e-5)
        np.testing.assert_array_equal(many.env.obs[k], single.env.obs)  # same actions, same trajectories
        for field in ("count", "length_sum"):
            assert int(getattr(many_metrics.episodes, field)[k]) == int(getattr(single_metrics.episodes, field))
        if normalize:
            chex.assert_trees_all_close(jax.tree.map(lambda x: x[k], many.env.obs_moments), single.env.obs_moments,
                                        rtol=1e-5)
