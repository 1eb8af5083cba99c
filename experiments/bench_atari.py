"""Agent steps/s of PPO and PQN on an Atari id against EnvPool alone with the same envs and threads.

    python experiments/bench_atari.py                                  # Pong-v5, both presets
    python experiments/bench_atari.py --env Breakout-v5 --algos ppo --num-envs 16

Each algorithm runs with its Atari preset (`envs/defaults.toml`: PPO 8 envs x 128 steps, PQN 128
envs x 32 steps, Nature CNN) and the preset's EnvPool options (episodic life, clipped rewards):
  * EnvPool alone: EnvPool's XLA step in a jitted `lax.scan` over the algorithm's rollout length,
    uniform random actions drawn before the loop, on a pool made with the same options, envs and
    threads;
  * training: the `sync` schedule's jitted loop as `python -m jaxrl_fast.train` runs it (act,
    step, store, update), no evaluation.
The two are timed in alternation (`--rounds` each, medians reported), so that load from other
processes falls on both; efficiency = training / EnvPool alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path

import jax
import jax.numpy as jnp
from bench_ppo import envpool_alone, timed
from record import machine, print_table, write_record

from jaxrl_fast.algos import make_algorithm
from jaxrl_fast.config.plan import env_threads
from jaxrl_fast.config.presets import resolve_defaults
from jaxrl_fast.engine.acting import env_options
from jaxrl_fast.engine.schedules.sync import make_sync_loop
from jaxrl_fast.env.envpool import make_xla_env
from jaxrl_fast.env.ids import env_family, parse_env_kwargs

RESULTS = Path(__file__).parent / "results"


def training_program(config, iterations: int):
    """The sync loop of `config`'s run, `iterations` iterations per call, as (fn, carry)."""
    env = make_xla_env(config.env, config.num_envs, env_threads(config), 0, **parse_env_kwargs(config.env_kwargs))
    algo = make_algorithm(config, env.spec)
    loop = make_sync_loop(algo, env, env_options(config), iterations_per_call=iterations, eval_every_iterations=0,
                          on_eval=None)
    state = jax.jit(loop.init)(jax.random.key(0), env.handle, env.reset())
    return (lambda s: loop.run(s, jnp.int32(iterations))), state, env


def throughput(env_id: str, algo: str, num_envs: int | None, steps: int, rounds: int) -> dict:
    config = resolve_defaults(env_id, algo, env_family(env_id))
    if num_envs:
        config = dataclasses.replace(config, num_envs=num_envs)
    hyper = getattr(config, algo)
    horizon = hyper.num_steps
    iterations = max(1, steps // (config.num_envs * horizon))
    threads = env_threads(config)
    alone_env = make_xla_env(env_id, config.num_envs, threads, 1, **parse_env_kwargs(config.env_kwargs))
    alone_env.reset()
    alone_fn, alone_carry = envpool_alone(alone_env, horizon)
    train_fn, train_carry, train_env = training_program(config, iterations)
    programs = {"envpool_alone_sps": [alone_fn, alone_carry, iterations], "training_sps": [train_fn, train_carry, 1]}
    samples = {name: [] for name in programs}
    for entry in programs.values():  # compile and warm up
        entry[1] = jax.block_until_ready(entry[0](entry[1])[0])
    for _ in range(rounds):
        for name, entry in programs.items():
            elapsed, entry[1] = timed(entry[0], entry[1], entry[2])
            samples[name].append(iterations * horizon * config.num_envs / elapsed)
    row = {"env": env_id, "algo": algo, "num_envs": config.num_envs, "num_threads": threads, "rollout_length": horizon,
           "steps_per_round": iterations * horizon * config.num_envs, "rounds": rounds}
    for name, values in samples.items():
        row[name] = statistics.median(values)
        row[name.replace("_sps", "_sps_rounds")] = values
    row["efficiency"] = row["training_sps"] / row["envpool_alone_sps"]
    alone_env.pool.close()
    train_env.pool.close()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Pong-v5")
    parser.add_argument("--algos", nargs="+", default=["ppo", "pqn"])
    parser.add_argument("--num-envs", type=int, default=None, help="override the presets' env counts")
    parser.add_argument("--steps", type=int, default=16_384, help="agent steps per timed round (whole iterations)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_atari.json")
    args = parser.parse_args()

    rows = [throughput(args.env, algo, args.num_envs, args.steps, args.rounds) for algo in args.algos]
    print(f"machine: {machine()}")
    print_table(["env", "algo", "num_envs", "threads", "EnvPool alone (steps/s)", "training (steps/s)", "training / alone"],
                ([r["env"], r["algo"], r["num_envs"], r["num_threads"], f"{r['envpool_alone_sps']:,.0f}",
                  f"{r['training_sps']:,.0f}", f"{r['efficiency']:.2f}"] for r in rows))
    write_record(args.out, {"rows": rows})


if __name__ == "__main__":
    main()
