"""The on-policy `sync` loop fused (one program per call) against split (a rollout and an update
program per iteration, dispatched from the host: what EnvPool runs use, so that the persistent
cache serves the update), in env steps/s of training.

    python experiments/bench_split.py                       # PPO and PQN presets, written to experiments/results/
    python experiments/bench_split.py --rounds 9 --iterations 40

Each case builds one loop over one pool of its preset's size, compiles and warms both forms, then
times them in alternation on the same training state, `--rounds` times `--iterations` iterations
each, so load from other processes falls on both; the table gives the medians and split / fused.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import date
from pathlib import Path

import jax
import jax.numpy as jnp
from record import machine, print_table, write_record

from jaxrl_fast.algos import make_algorithm
from jaxrl_fast.config.presets import resolve_defaults
from jaxrl_fast.config.run import TrainConfig
from jaxrl_fast.engine.acting import env_options
from jaxrl_fast.engine.schedules.sync import make_sync_loop, split_call
from jaxrl_fast.env.envpool import make_xla_env
from jaxrl_fast.env.ids import env_family

RESULTS = Path(__file__).parent / "results"
CASES = [("ppo", "CartPole-v1"), ("pqn", "CartPole-v1"), ("ppo", "HalfCheetah-v4"), ("ppo", "LunarLander-v2")]


def build(config: TrainConfig, iterations: int):
    env = make_xla_env(config.env, config.num_envs, config.num_threads or 2, seed=config.seed)
    algo = make_algorithm(config, env.spec)
    loop = make_sync_loop(algo, env, env_options(config), iterations, eval_every_iterations=0, on_eval=None)
    state = jax.jit(loop.init)(jax.random.key(config.seed), env.handle, env.reset())
    return env, loop, state


def case(algo: str, env_id: str, iterations: int, rounds: int) -> dict:
    config = resolve_defaults(env_id, algo, env_family(env_id))
    env, loop, state = build(config, iterations)

    def fused(state):
        return jax.block_until_ready(loop.run(state, jnp.int32(iterations))[0])

    def split(state):
        return jax.block_until_ready(split_call(loop.collect_batch, loop.learn_batch, state, iterations)[0])

    state = split(fused(state))  # compile and warm up
    steps = iterations * loop.steps_per_iteration
    samples = {"fused": [], "split": []}
    for _ in range(rounds):
        for name, run in (("fused", fused), ("split", split)):
            start = time.perf_counter()
            state = run(state)
            samples[name].append(steps / (time.perf_counter() - start))
    env.pool.close()
    row = {"algo": algo, "env": env_id, "num_envs": config.num_envs, "steps_per_iteration": loop.steps_per_iteration,
           "iterations_per_round": iterations, **{f"{k}_sps": statistics.median(v) for k, v in samples.items()},
           **{f"{k}_sps_rounds": v for k, v in samples.items()}}
    row["split_vs_fused"] = row["split_sps"] / row["fused_sps"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20, help="iterations per timed round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_split.json")
    args = parser.parse_args()
    rows = [case(algo, env_id, args.iterations, args.rounds) for algo, env_id in CASES]
    print(f"machine: {machine()}, jax {jax.__version__}, {date.today()}")
    print_table(["algo", "env", "envs x steps", "fused (steps/s)", "split (steps/s)", "split / fused"],
                ([r["algo"], r["env"], f"{r['steps_per_iteration']:,}", f"{r['fused_sps']:,.0f}", f"{r['split_sps']:,.0f}",
                  f"{r['split_vs_fused']:.2f}"] for r in rows))
    write_record(args.out, {"rows": rows})


if __name__ == "__main__":
    main()
