"""The `async` schedule's actors with and without EnvPool's async mode (`--env-batch-size`).

    python experiments/bench_async_actors.py            # table printed and written to experiments/results/
    python experiments/bench_async_actors.py --quick    # fewer sizes, shorter runs

Part 1, acting alone (no learner): env steps/s of one actor with the algorithm's real policy,
  * batch = num_envs: the jitted program around EnvPool's XLA step (`lax.scan` over a chunk);
  * batch < num_envs: the async-mode host loop (recv the first `batch` envs, jitted policy, send,
    rows staged per env), as `--env-batch-size batch` runs it;
next to EnvPool alone with random actions at the same sizes; each the median of 3 measurements.
Part 2, training: `python -m jaxrl_fast.train --schedule async` in a fresh process per row, with
env steps/s over the training time and the timing breakdown from metrics.jsonl (busy seconds
per phase summed over the run: env, inference, transfer, update, and the controller's waits).
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
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_fast.algos import make_algorithm
from jaxrl_fast.calibration.measure import envpool_sps, timed_calls
from jaxrl_fast.config.plan import off_policy_plan
from jaxrl_fast.config.presets import resolve_defaults
from jaxrl_fast.engine.acting import EnvOptions, init_env_carry
from jaxrl_fast.engine.async_mode import AsyncModeActor
from jaxrl_fast.engine.offpolicy_steps import make_pieces
from jaxrl_fast.engine.placement import host_device
from jaxrl_fast.engine.timing import PhaseClock
from jaxrl_fast.env.envpool import make_xla_env
from jaxrl_fast.env.ids import env_family

RESULTS = Path(__file__).parent / "results"
CHUNK = 64  # env steps per env per chunk, as a chunk of --dispatch-steps 64 x num_envs would hold
REPEATS = 3  # acting-alone figures are the median of this many measurements (shared cores are noisy)


def acting_alone(algo_name: str, env_id: str, num_envs: int, batch: int, threads: int) -> float:
    config = dataclasses.replace(resolve_defaults(env_id, algo_name, env_family(env_id)), num_envs=num_envs)
    env = make_xla_env(env_id, num_envs, threads, 0)
    algo = make_algorithm(config, env.spec)
    device = host_device()
    params = jax.device_put(algo.acting_params(*jax.jit(algo.init)(jax.random.key(0))), device)
    if batch == num_envs:
        plan = off_policy_plan(getattr(config, algo_name), num_envs)._replace(rollout_length=CHUNK, replay_rows=2)
        options = EnvOptions(False, False, 0.99)
        program = jax.jit(make_pieces(algo, env, options, plan).act_rows, static_argnums=4, donate_argnums=0)
        carry = jax.jit(lambda h, o: init_env_carry(env, options, h, o))(env.handle, env.reset())
        # Committed to the device as the params are (and as a run's carry is): an uncommitted carry
        # compiles the program again on the second call, inside the timed window.
        carry = jax.device_put(carry, device)
        seconds, _ = timed_calls(lambda c: program(c, params, jax.random.key(1), jnp.int32(0), False)[0], carry,
                                 min_s=1.0)
    else:
        actor = AsyncModeActor(algo, env.spec, num_envs, batch, threads, 0, CHUNK, device)
        seconds, _ = timed_calls(lambda _: actor.act_chunk(params, 0, False, jax.random.key(1), 0, PhaseClock()), None,
                                 min_s=1.0)
        actor.close()
    env.pool.close()
    return CHUNK * num_envs / seconds


def train_row(algo_name: str, env_id: str, num_envs: int, batch: int, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "jaxrl_fast.train", "--algo", algo_name, "--env", env_id, "--schedule", "async",
               "--num-envs", str(num_envs), "--env-batch-size", str(batch), "--total-steps", str(steps),
               "--eval-interval", "0", "--run-dir", str(run_dir), "--progress", "off"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
        summary = json.loads((run_dir / "summary.json").read_text())
        lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    phases = ("env", "inference", "transfer", "update", "actor_wait", "learner_wait")
    return dict(algo=algo_name, env=env_id, num_envs=num_envs, env_batch=batch or num_envs, steps=summary["steps"],
                sps=summary["sps"], final_eval=summary["final_eval_return_mean"],
                **{f"{p}_s": sum(line.get(f"timing/{p}_s", 0.0) for line in lines if "sps" in line) for p in phases})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_async_actors.json")
    args = parser.parse_args()
    threads = min(os.cpu_count() or 1, 8)
    sizes = (8,) if args.quick else (8, 16)
    acting = []
    for algo_name, env_id in (("dqn", "CartPole-v1"), ("sac", "HalfCheetah-v4")):
        spec = make_xla_env(env_id, 1, 1, 0).spec
        for n in sizes:
            for batch in (n, n // 2, n // 4):
                alone = [envpool_sps(env_id, spec, n, threads, batch) for _ in range(REPEATS)]
                acted = [acting_alone(algo_name, env_id, n, batch, threads) for _ in range(REPEATS)]
                row = dict(algo=algo_name, env=env_id, num_envs=n, env_batch=batch, threads=threads,
                           envpool_alone_sps=float(np.median(alone)), acting_sps=float(np.median(acted)),
                           acting_sps_range=[min(acted), max(acted)])
                acting.append(row)
                print(json.dumps(row), flush=True)
    steps = 10_000 if args.quick else 30_000
    training = []
    for batch in (0, 4):
        row = train_row("dqn", "CartPole-v1", 8, batch, steps)
        training.append(row)
        print(json.dumps(row), flush=True)

    print(f"\nacting alone, one actor, {threads} EnvPool threads (env steps/s):")
    print("| env (policy) | num_envs | env batch | EnvPool alone, random | acting (policy + EnvPool) | acting, range |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in acting:
        mode = "XLA step" if r["env_batch"] == r["num_envs"] else "async mode"
        low, high = r["acting_sps_range"]
        print(f"| {r['env']} ({r['algo']}) | {r['num_envs']} | {r['env_batch']} ({mode}) | "
              f"{r['envpool_alone_sps']:,.0f} | {r['acting_sps']:,.0f} | {low:,.0f}-{high:,.0f} |")
    print("\nasync training (busy seconds per phase, summed over the run):")
    print("| run | env batch | env steps/s | env | inference | transfer | update | actor wait | learner wait | final eval |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in training:
        print(f"| {r['algo']} {r['env']}, {r['num_envs']} envs, {r['steps']:,d} steps | {r['env_batch']} | "
              f"{r['sps']:,.0f} | {r['env_s']:.1f} | {r['inference_s']:.1f} | {r['transfer_s']:.1f} | "
              f"{r['update_s']:.1f} | {r['actor_wait_s']:.1f} | {r['learner_wait_s']:.1f} | {r['final_eval']:.1f} |")
    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                           "devices": [str(d) for d in jax.devices()], "jax": jax.__version__},
                               "acting": acting, "training": training}, indent=1))
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
