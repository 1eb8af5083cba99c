"""What the cacheable EnvPool step costs: the fused `sync` loop over EnvPool's handlers called
through `jaxrl_fast.env.ffi_forward`'s C forwarder (the program names a slot, not the pool's
address, so the persistent cache keeps it) against the same loop calling them directly (the
pool's address an attribute of the program), in env steps/s of training.

    python experiments/bench_ffi_forward.py                  # written to experiments/results/
    python experiments/bench_ffi_forward.py --rounds 9 --iterations 400

Each case builds both loops from its preset over two pools of the preset's size with the same
seed, compiles and warms them, then times them in alternation, `--rounds` times `--iterations`
iterations each, so load from other processes falls on both; the table gives the medians and
forwarded / direct.

    python experiments/bench_ffi_forward.py --envs gymnasium  # Python envs: the host target against io_callback

With `--envs gymnasium` the cases are Gymnasium's ids (Python envs on the host): "forwarded" is
the forwarder's host target (a ctypes callback into the pool's Python step, the program names a
slot) and "direct" the `io_callback` the backend falls back to without the forwarder (the program
names a Python function), written to `bench_ffi_forward_gymnasium.json`.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from datetime import date
from pathlib import Path
from unittest import mock

import jax
import jax.numpy as jnp
from record import machine, print_table, write_record

from jaxrl_fast.algos import make_algorithm
from jaxrl_fast.config.plan import run_off_policy_plan
from jaxrl_fast.config.presets import resolve_defaults
from jaxrl_fast.config.run import TrainConfig, family
from jaxrl_fast.engine.acting import env_options
from jaxrl_fast.engine.placement import resolve
from jaxrl_fast.engine.schedules.base import EvalRequests
from jaxrl_fast.engine.schedules.offpolicy import fused_loop
from jaxrl_fast.engine.schedules.sync import make_sync_loop
from jaxrl_fast.env import ffi_forward
from jaxrl_fast.env.envpool import make_xla_env
from jaxrl_fast.env.ids import env_family

RESULTS = Path(__file__).parent / "results"
CASES = [("ppo", "CartPole-v1", 40), ("pqn", "CartPole-v1", 40), ("ppo", "HalfCheetah-v4", 20),
         ("sac", "Pendulum-v1", 400), ("dqn", "CartPole-v1", 400)]
GYMNASIUM_CASES = [("ppo", "gym:CartPole-v1", 40), ("sac", "gym:Pendulum-v1", 400)]


def build(config: TrainConfig, iterations: int, forward: bool):
    """A pool whose step is forwarded (or not), its fused loop, and a `run(state) -> state` of
    `iterations` iterations that waits for them."""
    with mock.patch.object(ffi_forward, "forwarder", ffi_forward.forwarder if forward else lambda: None):
        env = make_xla_env(config.env, config.num_envs, config.num_threads or 2, seed=config.seed)
    assert (env.program_key is not None) == forward
    algo, key = make_algorithm(config, env.spec), jax.random.key(config.seed)
    if family(config) == "on_policy":
        loop = make_sync_loop(algo, env, env_options(config), iterations, eval_every_iterations=0, on_eval=None)
        state = jax.jit(loop.init)(key, env.handle, env.reset())
        return env, state, lambda s: jax.block_until_ready(loop.run(s, jnp.int32(iterations))[0])
    loop = fused_loop(algo, env, env_options(config), run_off_policy_plan(config), resolve(config), iterations,
                      EvalRequests(None, 0))
    state, _ = loop.warmup(loop.init(key, env.handle, env.reset()))
    return env, state, lambda s: jax.block_until_ready(loop.run(s, iterations)[0])


def case(algo: str, env_id: str, iterations: int, rounds: int) -> dict:
    config = dataclasses.replace(resolve_defaults(env_id, algo, env_family(env_id)), schedule="sync")
    arms = {name: build(config, iterations, forward) for name, forward in (("forwarded", True), ("direct", False))}
    states = {name: run(run(state)) for name, (_, state, run) in arms.items()}  # compile and warm up
    steps = iterations * config.num_envs * (config.ppo.num_steps if algo == "ppo" else
                                            config.pqn.num_steps if algo == "pqn" else 1)
    samples = {name: [] for name in arms}
    for _ in range(rounds):
        for name, (_, _, run) in arms.items():
            start = time.perf_counter()
            states[name] = run(states[name])
            samples[name].append(steps / (time.perf_counter() - start))
    for env, _, _ in arms.values():
        env.pool.close()
    row = {"algo": algo, "env": env_id, "num_envs": config.num_envs, "iterations_per_round": iterations,
           "env_steps_per_round": steps, **{f"{k}_sps": statistics.median(v) for k, v in samples.items()},
           **{f"{k}_sps_rounds": v for k, v in samples.items()}}
    row["forwarded_vs_direct"] = row["forwarded_sps"] / row["direct_sps"]
    print(f"{algo} {env_id}: forwarded / direct {row['forwarded_vs_direct']:.3f}", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=float, default=1.0, help="scale of each case's iterations per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--envs", choices=("envpool", "gymnasium"), default="envpool")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cases = GYMNASIUM_CASES if args.envs == "gymnasium" else CASES
    out = args.out or RESULTS / ("bench_ffi_forward_gymnasium.json" if args.envs == "gymnasium" else "bench_ffi_forward.json")
    rows = [case(algo, env_id, max(1, round(n * args.iterations)), args.rounds) for algo, env_id, n in cases]
    print(f"machine: {machine()}, jax {jax.__version__}, {date.today()}")
    print_table(["algo", "env", "env steps per round", "direct (steps/s)", "forwarded (steps/s)", "forwarded / direct"],
                ([r["algo"], r["env"], f"{r['env_steps_per_round']:,}", f"{r['direct_sps']:,.0f}",
                  f"{r['forwarded_sps']:,.0f}", f"{r['forwarded_vs_direct']:.2f}"] for r in rows))
    write_record(out, {"rows": rows})


if __name__ == "__main__":
    main()
