"""PPO throughput against EnvPool alone, and time to 475 on CartPole-v1.

    python experiments/bench_ppo.py                    # both tables, written to experiments/results/
    python experiments/bench_ppo.py --skip-time-to-target

Throughput, per env (same num_envs and EnvPool threads for every row, one process):
  * EnvPool alone: random actions drawn inside a jitted `lax.scan` over EnvPool's XLA step;
  * PPO rollout: the policy acts (inference + sampling) and the env steps, inside the same scan;
  * PPO training: rollout + PPO update, the `sync` schedule as `python -m jaxrl_fast.train` runs it.
SPS efficiency = PPO training SPS / EnvPool-alone SPS.

Time to target: wall-clock from process start (imports and compilation included) to the first
evaluation (10 deterministic episodes, every 5,000 steps, the protocol of experiments/peers/)
whose mean reaches 475, for `python -m jaxrl_fast.train` in a fresh process per seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from jaxrl_fast.algos import make_algorithm
from jaxrl_fast.env import EnvSpec, env_family, make_xla_env
from jaxrl_fast.presets import resolve_defaults
from jaxrl_fast.acting import EnvOptions
from jaxrl_fast.schedules.sync import make_sync_loop

RESULTS = Path(__file__).parent / "results"


def random_actions(spec: EnvSpec, key: jax.Array) -> jax.Array:
    if spec.discrete:
        return jax.random.randint(key, (spec.num_envs,), 0, spec.num_actions)
    low, high = jnp.asarray(spec.action_low), jnp.asarray(spec.action_high)
    return jax.random.uniform(key, (spec.num_envs, *spec.action_shape), minval=low, maxval=high)


def timed(fn, state, repeats: int) -> tuple[float, object]:
    state = fn(state)  # compile and warm up
    jax.block_until_ready(state)
    start = time.perf_counter()
    for _ in range(repeats):
        state = fn(state)
    jax.block_until_ready(state)
    return time.perf_counter() - start, state


def throughput(env_id: str, num_envs: int, num_threads: int, steps: int) -> dict:
    config = resolve_defaults(env_id, "ppo", env_family(env_id))
    config = dataclasses.replace(config, num_envs=num_envs, num_threads=num_threads, total_steps=10 * steps)
    row = {"env": env_id, "num_envs": num_envs, "num_threads": num_threads}

    env = make_xla_env(env_id, num_envs, num_threads, seed=0)
    horizon = config.ppo.num_steps
    calls = max(1, steps // (num_envs * horizon))

    def random_rollout(carry):
        def body(c, _):
            handle, key = c
            key, sub = jax.random.split(key)
            handle, step = env.step(handle, random_actions(env.spec, sub))
            return (handle, key), step.reward.sum()

        carry, _ = jax.lax.scan(body, carry, None, length=horizon)
        return carry

    env.reset()
    elapsed, _ = timed(jax.jit(random_rollout, donate_argnums=0), (jnp.asarray(env.handle), jax.random.key(0)), calls)
    row["envpool_alone_sps"] = calls * horizon * num_envs / elapsed
    env.pool.close()

    env = make_xla_env(env_id, num_envs, num_threads, seed=0)
    algo = make_algorithm(config, env.spec)
    options = EnvOptions(config.normalize_observations, config.scale_rewards, config.ppo.gamma)
    loop = make_sync_loop(algo, env, options, iterations_per_call=calls, eval_every_iterations=0, on_eval=None)
    state = jax.jit(loop.init)(jax.random.key(0), env.handle, env.reset())
    elapsed, state = timed(loop.collect, state, calls)
    row["ppo_rollout_sps"] = calls * horizon * num_envs / elapsed
    elapsed, state = timed(lambda s: loop.run(s, jnp.int32(calls))[0], state, 2)
    row["ppo_training_sps"] = 2 * calls * horizon * num_envs / elapsed
    row["sps_efficiency"] = row["ppo_training_sps"] / row["envpool_alone_sps"]
    row["ppo"] = {"num_steps": horizon, "update_epochs": config.ppo.update_epochs, "num_minibatches": config.ppo.num_minibatches}
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
    parser.add_argument("--skip-time-to-target", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_ppo.json")
    args = parser.parse_args()

    machine = f"{platform.machine()}, {os.cpu_count()} cores, {jax.devices()[0].device_kind}"
    rows = [
        throughput("CartPole-v1", 8, 2, args.steps),
        throughput("CartPole-v1", 64, 2, args.steps * 2),
        throughput("HalfCheetah-v4", 8, 2, args.steps // 4),
    ]
    print(f"machine: {machine}")
    print("| env | num_envs | threads | EnvPool alone (steps/s) | PPO rollout (steps/s) | PPO training (steps/s) | SPS efficiency |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['env']} | {r['num_envs']} | {r['num_threads']} | {r['envpool_alone_sps']:,.0f} | "
              f"{r['ppo_rollout_sps']:,.0f} | {r['ppo_training_sps']:,.0f} | {r['sps_efficiency']:.2f} |")
    targets = []
    if not args.skip_time_to_target:
        targets = [time_to_target(seed, 475.0) for seed in range(args.seeds)]
        print("| seed | time to 475 (s, from process start) | env steps | compile (s) |")
        print("|---|---|---|---|")
        for t in targets:
            print(f"| {t['seed']} | {t['time_to_target_s']:.1f} | {t['target_step']:,} | {t['compile_s']:.1f} |")
        times = sorted(t["time_to_target_s"] for t in targets)
        print(f"median time to 475: {times[len(times) // 2]:.1f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine, "throughput": rows, "time_to_target": targets}, indent=2))


if __name__ == "__main__":
    main()
