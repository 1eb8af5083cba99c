"""An off-policy preset's fused `sync` loop on EnvPool's XLA step, built as a run builds it, for
the scripts that time the loop and its updates (`bench_offpolicy.py`, `bench_dqn_widths.py`)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import jax.numpy as jnp

from jaxrl_fast.algos import make_algorithm
from jaxrl_fast.config.plan import off_policy_plan
from jaxrl_fast.config.presets import resolve_defaults
from jaxrl_fast.engine.acting import EnvOptions
from jaxrl_fast.engine.offpolicy_steps import make_pieces
from jaxrl_fast.engine.placement import resolve_placement
from jaxrl_fast.engine.schedules.base import EvalRequests
from jaxrl_fast.engine.schedules.offpolicy import fused_loop, host_driven_loop
from jaxrl_fast.env.envpool import make_xla_env

CALL = 64  # loop iterations per call


@dataclasses.dataclass
class Loop:
    algo: Any
    env: Any
    plan: Any
    options: EnvOptions
    loop: Any
    state: Any

    def steps_per_s(self, calls: int) -> float:
        """Env steps/s over `calls` calls of the loop (the first call, which compiles, is not timed
        when `warm` has run)."""
        start = time.perf_counter()
        for _ in range(calls):
            self.state, metrics, _ = self.loop.run(self.state, CALL)
        jax.block_until_ready((self.state, metrics))
        return calls * CALL * self.loop.steps_per_iteration / (time.perf_counter() - start)

    def warm(self) -> Loop:
        """One untimed call: it compiles the loop."""
        self.state, _, _ = self.loop.run(self.state, CALL)
        jax.block_until_ready(self.state)
        return self

    def seconds_per_update(self, updates: int) -> float:
        """The gradient updates alone, scanned over the loop's filled buffer with no environment:
        seconds per update (compiled by an untimed first call)."""
        pieces = make_pieces(self.algo, self.env, self.options, self.plan)
        program = jax.jit(lambda carry, replay, keys: pieces.run_updates(*carry, replay, keys, jnp.int32(0))[:2],
                          donate_argnums=0)
        keys = jax.random.split(jax.random.key(1), updates)
        carry = jax.tree.map(jnp.copy, (self.state.actor, self.state.critic))  # donated: the loop's own stay
        carry = jax.block_until_ready(program(carry, self.state.replay, keys))
        start = time.perf_counter()
        jax.block_until_ready(program(carry, self.state.replay, keys))
        return (time.perf_counter() - start) / updates


def preset_loop(env_id: str, algo_name: str, family: str, *, num_envs: int | None = None, placement: str = "single",
                exchange: str = "fresh", **hyper: Any) -> Loop:
    """The preset of (`env_id`, `algo_name`) with `hyper` replacing its algorithm's fields (and
    `num_envs` the env count), its loop initialised and warmed up (the buffer's first fill)."""
    config = resolve_defaults(env_id, algo_name, family)
    hypers = dataclasses.replace(getattr(config, algo_name), **hyper)
    config = dataclasses.replace(config, **{algo_name: hypers}, num_envs=num_envs or config.num_envs)
    env = make_xla_env(env_id, config.num_envs, 1, seed=0)
    algo, plan = make_algorithm(config, env.spec), off_policy_plan(hypers, config.num_envs)
    options, requests, placed = EnvOptions(False, False, hypers.gamma), EvalRequests(None, 0), resolve_placement(placement, env)
    loop = (fused_loop(algo, env, options, plan, placed, CALL, requests) if placed.fused else
            host_driven_loop(algo, env, options, plan, placed, exchange, requests))
    state, _ = loop.warmup(loop.init(jax.random.key(0), env.handle, env.reset()))
    return Loop(algo, env, plan, options, loop, state)
