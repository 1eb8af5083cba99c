"""Off-policy throughput: SAC update frame rate by placement, env steps/s while learning, time to -200.

    python experiments/bench_offpolicy.py                 # all tables -> experiments/results/
    python experiments/bench_offpolicy.py --batches 256 1024 --skip-time-to-target
    python experiments/bench_offpolicy.py --buffer-sizes 20000 1000000   # buffer size table only

Update frame rate (Spreeze's "network update frame rate") = batch size x gradient updates per
second, for SAC with HalfCheetah-v4 sizes (17-dim observations, 6-dim actions, 256x256 actor and
twin critics), measured three ways in one process:
  * update alone: the jitted SAC update (critic step + actor step) scanned over a filled buffer,
    no environment;
  * single: training with the fused program (acting + updates), one env, one update per step;
  * split: training with the actor and the critic on separate devices (fresh and lagged exchange).
With no accelerator, the devices are two XLA CPU devices sharing the machine's cores.

Buffer size (`--buffer-sizes`): env steps/s of SAC Pendulum-v1 `sync`, fused program, the preset
(one env, one update per step, batch 256), for each buffer size; the sizes are measured in turn
(ABAB...), `--repeats` rounds, and the median is reported, so that a slow spell of a shared machine
hits every size alike. Steps/s that fall as the buffer grows mean the program touches whole columns
per step (it copied them once: see `add_many`).

Time to -200 on Pendulum-v1 is `python -m jaxrl_fast.train --algo sac --env Pendulum-v1` in a
fresh process per seed, from process start to the first evaluation (10 deterministic episodes,
every 1,000 steps, the protocol of experiments/peers/) whose mean reaches -200.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
from offpolicy_loops import CALL, Loop, preset_loop  # noqa: E402
from record import machine, print_table, print_time_to_target, write_record  # noqa: E402

RESULTS = Path(__file__).parent / "results"
ENV = "HalfCheetah-v4"


def sac_loop(batch: int, placement: str, exchange: str = "fresh") -> Loop:
    return preset_loop(ENV, "sac", "mujoco", num_envs=1, placement=placement, exchange=exchange, batch_size=batch,
                       learning_starts=max(2 * batch, 1000), buffer_size=100_000)


def update_alone(batch: int, updates: int) -> float:
    """Update frames/s of the SAC update alone."""
    return batch / sac_loop(batch, "single").seconds_per_update(updates)


def training_rate(batch: int, iterations: int, placement_name: str, exchange: str = "fresh") -> tuple[float, float]:
    """(update frames/s, env steps/s) while training: one env step and one update per iteration."""
    loop = sac_loop(batch, placement_name, exchange).warm()
    sps = loop.steps_per_s(max(1, iterations // CALL))
    return sps / loop.loop.steps_per_iteration * loop.plan.updates_per_iteration * batch, sps


def pendulum_loop(buffer_size: int) -> Loop:
    """SAC Pendulum-v1 `sync` with its preset, fused on one device, after the warm-up, compiled."""
    return preset_loop("Pendulum-v1", "sac", "classic_control", buffer_size=buffer_size).warm()


def buffer_size_rates(sizes: list[int], repeats: int, calls: int) -> list[dict]:
    """Median env steps/s per buffer size over `repeats` interleaved rounds of `calls` calls each."""
    loops = {size: pendulum_loop(size) for size in sizes}
    rates: dict[int, list[float]] = {size: [] for size in sizes}
    for _ in range(repeats):
        for size in sizes:
            rates[size].append(loops[size].steps_per_s(calls))
    return [{"buffer_size": size, "median_sps": sorted(r)[len(r) // 2], "sps": r} for size, r in rates.items()]


def time_to_target(seed: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "jaxrl_fast.train", "--algo", "sac", "--env", "Pendulum-v1", "--seed", str(seed),
               "--target-return", "-200", "--eval-interval", "1000", "--placement", "single", "--run-dir", str(run_dir),
               "--progress", "off"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(proc.stderr)
        summary = json.loads((run_dir / "summary.json").read_text())
    return {"seed": seed, "time_to_target_s": summary.get("time_to_target_s"), "target_step": summary.get("target_step"),
            "compile_s": summary["compile_s"], "sps": summary["sps"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[256, 1024, 4096, 16384])
    parser.add_argument("--frames", type=int, default=400_000, help="update frames per timed measurement")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--skip-time-to-target", action="store_true")
    parser.add_argument("--buffer-sizes", type=int, nargs="+",
                        help="only the buffer size table: SAC Pendulum-v1 sync steps/s at these buffer sizes")
    parser.add_argument("--repeats", type=int, default=7, help="interleaved rounds of the buffer size table")
    parser.add_argument("--calls", type=int, default=4, help=f"calls of {CALL} iterations per round and size")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_offpolicy.json")
    args = parser.parse_args()

    print(f"machine: {machine()}, devices {[str(d) for d in jax.devices()]}")
    if args.buffer_sizes:
        table = buffer_size_rates(args.buffer_sizes, args.repeats, args.calls)
        print_table(["buffer size", "env steps/s (median)", "rounds"],
                    ([f"{row['buffer_size']:,}", f"{row['median_sps']:,.0f}", ", ".join(f"{r:,.0f}" for r in row["sps"])]
                     for row in table))
        out = args.out if args.out != RESULTS / "bench_offpolicy.json" else RESULTS / "bench_offpolicy_buffer_size.json"
        write_record(out, {"devices": [str(d) for d in jax.devices()], "buffer_size": table})
        return
    rows = []
    print_table(["batch", "update alone (frames/s)", "single: frames/s", "single: env steps/s", "split fresh: frames/s",
                 "split lagged: frames/s", "split fresh: env steps/s"], [])
    for batch in args.batches:
        updates = max(4, args.frames // batch)
        row = {"batch": batch, "update_alone": update_alone(batch, updates)}
        row["single_frames"], row["single_sps"] = training_rate(batch, updates, "single")
        row["split_fresh_frames"], row["split_fresh_sps"] = training_rate(batch, updates, "split", "fresh")
        row["split_lagged_frames"], _ = training_rate(batch, updates, "split", "lagged")
        rows.append(row)
        print(f"| {batch} | {row['update_alone']:,.0f} | {row['single_frames']:,.0f} | {row['single_sps']:,.0f} | "
              f"{row['split_fresh_frames']:,.0f} | {row['split_lagged_frames']:,.0f} | {row['split_fresh_sps']:,.0f} |",
              flush=True)
    targets = []
    if not args.skip_time_to_target:
        targets = [time_to_target(seed) for seed in range(args.seeds)]
        print_time_to_target(targets, -200.0)
    write_record(args.out, {"devices": [str(d) for d in jax.devices()], "update_frame_rate": rows, "time_to_target": targets})


if __name__ == "__main__":
    main()
