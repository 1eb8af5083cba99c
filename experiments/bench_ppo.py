"""PPO throughput against EnvPool alone, and time to 475 on CartPole-v1.

    python experiments/bench_ppo.py                    # both tables, written to experiments/results/
    python experiments/bench_ppo.py --skip-time-to-target

Throughput, env steps/s (the same num_envs and EnvPool threads in every column, one process):
  * EnvPool alone: EnvPool's XLA step in a jitted `lax.scan`, random actions drawn before the loop;
  * PPO rollout: `acting.make_collect` as training runs it, in the same kind of scan: the policy acts
    (inference + sampling), the env steps, the transitions are stored and returned, episodes counted;
  * PPO training: rollout + PPO update, the `sync` schedule as `python -m jaxrl_fast.train` runs it.
EnvPool alone and the rollout are timed in alternation (`--rounds` each, medians reported), so that
load from other processes falls on both; rollout / alone is the ratio of the medians.
SPS efficiency = PPO training SPS / EnvPool-alone SPS.

Time to target: wall-clock from process start (imports and compilation included) to the first
evaluation (10 deterministic episodes, every 5,000 steps, the protocol of experiments/peers/)
whose mean reaches 475, for `python -m jaxrl_fast.train` in a fresh process per seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from record import machine, print_table, print_time_to_target, write_record

from jaxrl_fast.algos import make_algorithm
from jaxrl_fast.config.presets import resolve_defaults
from jaxrl_fast.engine.acting import EnvOptions, init_env_carry, make_collect
from jaxrl_fast.engine.schedules.sync import make_sync_loop
from jaxrl_fast.env.envpool import XlaEnv, make_xla_env
from jaxrl_fast.env.ids import env_family
from jaxrl_fast.env.spaces import random_actions

RESULTS = Path(__file__).parent / "results"


def timed(fn, carry, calls: int) -> tuple[float, object]:
    """Seconds for `calls` calls of `fn(carry) -> (carry, outputs)`, all outputs awaited."""
    out = None
    start = time.perf_counter()
    for _ in range(calls):
        carry, out = fn(carry)
    jax.block_until_ready((carry, out))
    return time.perf_counter() - start, carry


def envpool_alone(env: XlaEnv, horizon: int):
    """EnvPool's XLA step alone in the same `lax.scan`: uniform random actions for the whole horizon
    are drawn before the loop, so each iteration is the step and nothing else."""

    def step(handle, action):
        handle, out = env.step(handle, action)
        return handle, out.reward

    def run(carry):
        handle, key = carry
        key, sub = jax.random.split(key)
        actions = jax.vmap(lambda k: random_actions(env.spec, k, env.spec.num_envs))(jax.random.split(sub, horizon))
        handle, rewards = jax.lax.scan(step, handle, actions)
        return (handle, key), rewards

    return jax.jit(run, donate_argnums=0), (jnp.asarray(env.handle), jax.random.key(0))


def ppo_rollout(env: XlaEnv, algo, options: EnvOptions, horizon: int):
    """PPO's rollout as training runs it (`acting.make_collect`): act (inference + sampling), step,
    store the transitions (returned, as the update consumes them) and count finished episodes."""
    collect = make_collect(env, options, horizon)

    def run(carry):
        algo_state, env_carry, key = carry
        key, sub = jax.random.split(key)
        env_carry, transitions, finished = collect(env_carry, lambda obs, k: algo.act(algo_state, obs, k), sub)
        return (algo_state, env_carry, key), (transitions, finished)

    algo_state = algo.init(jax.random.key(0))
    carry = (algo_state, init_env_carry(env, options, env.handle, env.reset()), jax.random.key(1))
    return jax.jit(run, donate_argnums=0), carry


def throughput(env_id: str, num_envs: int, num_threads: int, steps: int, rounds: int) -> dict:
    """EnvPool alone and the PPO rollout timed in alternation (ABAB..., `rounds` each, medians
    reported) so that load on the machine falls on both alike; then PPO training."""
    config = resolve_defaults(env_id, "ppo", env_family(env_id))
    config = dataclasses.replace(config, num_envs=num_envs, num_threads=num_threads, total_steps=10 * steps)
    row = {"env": env_id, "num_envs": num_envs, "num_threads": num_threads, "rounds": rounds}
    horizon = config.ppo.num_steps
    calls = max(1, steps // (num_envs * horizon))

    alone_env, ppo_env = (make_xla_env(env_id, num_envs, num_threads, seed=0) for _ in range(2))
    alone_env.reset()
    algo = make_algorithm(config, ppo_env.spec)
    options = EnvOptions(config.normalize_observations, config.scale_rewards, config.ppo.gamma)
    programs = {"envpool_alone_sps": envpool_alone(alone_env, horizon), "ppo_rollout_sps": ppo_rollout(ppo_env, algo, options, horizon)}
    carries, samples = {}, {name: [] for name in programs}
    for name, (fn, carry) in programs.items():  # compile and warm up
        carries[name] = jax.block_until_ready(fn(carry)[0])
    for _ in range(rounds):
        for name, (fn, _) in programs.items():
            elapsed, carries[name] = timed(fn, carries[name], calls)
            samples[name].append(calls * horizon * num_envs / elapsed)
    for name, values in samples.items():
        row[name] = statistics.median(values)
        row[name.replace("_sps", "_sps_rounds")] = values
    row["rollout_vs_envpool"] = row["ppo_rollout_sps"] / row["envpool_alone_sps"]
    alone_env.pool.close()

    loop = make_sync_loop(algo, ppo_env, options, iterations_per_call=calls, eval_every_iterations=0, on_eval=None)
    state = jax.jit(loop.init)(jax.random.key(0), ppo_env.handle, ppo_env.reset())
    state = jax.block_until_ready(loop.run(state, jnp.int32(calls))[0])  # compile and warm up
    elapsed, state = timed(lambda s: loop.run(s, jnp.int32(calls)), state, 2)
    row["ppo_training_sps"] = 2 * calls * horizon * num_envs / elapsed
    row["sps_efficiency"] = row["ppo_training_sps"] / row["envpool_alone_sps"]
    row["ppo"] = {"num_steps": horizon, "update_epochs": config.ppo.update_epochs, "num_minibatches": config.ppo.num_minibatches}
    ppo_env.pool.close()
    return row


def time_to_target(seed: int, target: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "jaxrl_fast.train", "--seed", str(seed), "--target-return", str(target),
               "--eval-interval", "5000", "--run-dir", str(run_dir), "--progress", "off"]
        start = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        total = time.time() - start
        if proc.returncode:
            raise RuntimeError(proc.stderr)
        summary = json.loads((run_dir / "summary.json").read_text())
    return {"seed": seed, "time_to_target_s": summary.get("time_to_target_s"), "target_step": summary.get("target_step"),
            "process_s": total, "compile_s": summary["compile_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000, help="env steps per timed measurement")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5, help="alternating timings of EnvPool alone and the rollout")
    parser.add_argument("--skip-time-to-target", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_ppo.json")
    args = parser.parse_args()

    rows = [
        throughput("CartPole-v1", 8, 2, args.steps, args.rounds),
        throughput("CartPole-v1", 64, 2, args.steps * 2, args.rounds),
        throughput("HalfCheetah-v4", 8, 2, args.steps // 4, args.rounds),
    ]
    print(f"machine: {machine()}")
    print_table(["env", "num_envs", "threads", "EnvPool alone (steps/s)", "PPO rollout (steps/s)", "rollout / alone",
                 "PPO training (steps/s)", "SPS efficiency"],
                ([r["env"], r["num_envs"], r["num_threads"], f"{r['envpool_alone_sps']:,.0f}", f"{r['ppo_rollout_sps']:,.0f}",
                  f"{r['rollout_vs_envpool']:.2f}", f"{r['ppo_training_sps']:,.0f}", f"{r['sps_efficiency']:.2f}"]
                 for r in rows))
    targets = []
    if not args.skip_time_to_target:
        targets = [time_to_target(seed, 475.0) for seed in range(args.seeds)]
        print_time_to_target(targets, 475.0)
    write_record(args.out, {"throughput": rows, "time_to_target": targets})


if __name__ == "__main__":
    main()
