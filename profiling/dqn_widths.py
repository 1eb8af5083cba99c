"""DQN CartPole-v1's speed by network width: env steps/s of the fused `sync` loop (the preset: 8
envs, four updates of batch 64 every eight env steps) and milliseconds per gradient update alone
(the same updates scanned over the loop's filled buffer, no environment), one width after another
in one process.

    python profiling/dqn_widths.py                      # 256x256 (the preset), 128x128, 64x64
    python profiling/dqn_widths.py --widths 256 32

DQN's time to 475 is mostly training (docs/results.md): this says how much of it the network's
width costs. What a width does to learning is `experiments/learning_margins.py --cases
dqn_cartpole --extra "--dqn.hidden-sizes W W"`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import jax
import jax.numpy as jnp

from jaxrl_fast.algos import make_algorithm
from jaxrl_fast.config.plan import off_policy_plan
from jaxrl_fast.config.presets import resolve_defaults
from jaxrl_fast.engine.acting import EnvOptions
from jaxrl_fast.engine.offpolicy_steps import make_pieces
from jaxrl_fast.engine.placement import resolve_placement
from jaxrl_fast.engine.schedules.base import EvalRequests
from jaxrl_fast.engine.schedules.offpolicy import fused_loop
from jaxrl_fast.env.envpool import make_xla_env

CALL = 64  # iterations per call of the loop


def measure(width: int, calls: int, updates: int) -> dict:
    config = resolve_defaults("CartPole-v1", "dqn", "classic_control")
    hyper = dataclasses.replace(config.dqn, hidden_sizes=(width, width))
    config = dataclasses.replace(config, dqn=hyper)
    env = make_xla_env("CartPole-v1", config.num_envs, 1, seed=0)
    algo, plan, options = make_algorithm(config, env.spec), off_policy_plan(hyper, config.num_envs), EnvOptions(False, False, hyper.gamma)
    loop = fused_loop(algo, env, options, plan, resolve_placement("single", env), CALL, EvalRequests(None, 0))
    state, _ = loop.warmup(loop.init(jax.random.key(0), env.handle, env.reset()))
    state, metrics, _ = loop.run(state, CALL)  # compiles
    jax.block_until_ready(state)
    start = time.perf_counter()
    for _ in range(calls):
        state, metrics, _ = loop.run(state, CALL)
    jax.block_until_ready((state, metrics))
    sps = calls * CALL * loop.steps_per_iteration / (time.perf_counter() - start)

    pieces = make_pieces(algo, env, options, plan)
    program = jax.jit(lambda carry, replay, keys: pieces.run_updates(*carry, replay, keys, jnp.int32(0))[:2])
    keys, carry = jax.random.split(jax.random.key(1), updates), (state.actor, state.critic)
    jax.block_until_ready(program(carry, state.replay, keys))  # compiles
    start = time.perf_counter()
    jax.block_until_ready(program(carry, state.replay, keys))
    update_ms = (time.perf_counter() - start) / updates * 1e3
    env.pool.close()
    return {"hidden_sizes": [width, width], "env_steps_per_s": round(sps), "update_ms": round(update_ms, 3),
            "updates_per_iteration": plan.updates_per_iteration, "env_steps_per_iteration": loop.steps_per_iteration}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[256, 128, 64])
    parser.add_argument("--calls", type=int, default=12, help=f"timed calls of {CALL} loop iterations")
    parser.add_argument("--updates", type=int, default=512, help="updates timed alone")
    args = parser.parse_args()
    for width in args.widths:
        print(json.dumps(measure(width, args.calls, args.updates)), flush=True)


if __name__ == "__main__":
    main()
