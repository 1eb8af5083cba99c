"""Env steps (and seconds) to a return threshold, for a grid of override flags x seeds.

One fresh `python -m jaxrl_fast.train` process per (configuration, seed), run one after another,
under the peers' protocol (experiments/peers/README.md): a deterministic 10-episode evaluation
every N env steps, stopping at the first mean at or above the threshold. `--full` drops the
threshold and runs the preset's whole budget instead, to check final returns.

    python experiments/tune_threshold.py --task ppo --seeds 0-7
    python experiments/tune_threshold.py --task sac --seeds 0-2 \\
        --config base= --config ls500="--sac.learning-starts 500"
    python experiments/tune_threshold.py --task dqn --seeds 0-3 --full

Each configuration is `name=flags` (flags as on the command line, appended to the task's own).
Rows go to experiments/results/tune_<task>_<tag>.json, rewritten after every run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from protocol import TASKS as PROTOCOL

RESULTS = Path(__file__).parent / "results"

# The protocol's tasks (protocol.py), by algorithm: `--task ppo` is PPO CartPole-v1 to 475.
TASKS = {task.algo: task for task in PROTOCOL.values()}


def parse_seeds(text: str) -> list[int]:
    """"0-7" or "0,3,5"."""
    if "-" in text:
        low, high = text.split("-")
        return list(range(int(low), int(high) + 1))
    return [int(s) for s in text.split(",")]


def run_one(task: str, flags: list[str], seed: int, full: bool, workdir: Path) -> dict:
    run_dir = workdir / f"{task}-{seed}-{time.monotonic_ns()}"
    args = TASKS[task].args
    if full:  # the whole budget: no stop at the threshold
        at = args.index("--target-return")
        args = args[:at] + args[at + 2:]
    command = [sys.executable, "-m", "jaxrl_fast.train", *args, "--seed", str(seed), "--progress", "off",
               "--run-dir", str(run_dir), *flags]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=workdir)
    wall = time.perf_counter() - started
    row = {"seed": seed, "returncode": done.returncode, "process_s": round(wall, 2)}
    summary_path = run_dir / "summary.json"
    if done.returncode != 0 or not summary_path.exists():
        row["error"] = done.stderr[-2000:]
        return row
    summary = json.loads(summary_path.read_text())
    for key in ("target_step", "time_to_target_s", "final_eval_return_mean", "steps", "wall_s", "sps", "eval_skipped"):
        row[key] = summary.get(key)
    return row


def describe(rows: list[dict], full: bool) -> dict:
    """Median and max of target_step (None counts as not reached), or the final returns."""
    if full:
        finals = [r.get("final_eval_return_mean") for r in rows]
        return {"final_returns": finals, "min_final": min((f for f in finals if f is not None), default=None)}
    steps = [r.get("target_step") for r in rows]
    reached = [s for s in steps if s is not None]
    times = [r.get("time_to_target_s") for r in rows if r.get("time_to_target_s") is not None]
    return {
        "target_steps": steps,
        "reached": f"{len(reached)}/{len(steps)}",
        "median_step": statistics.median(s if s is not None else float("inf") for s in steps) if steps else None,
        "max_step": max(reached) if len(reached) == len(steps) and steps else None,
        "median_time_s": round(statistics.median(times), 2) if times else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(TASKS), required=True)
    parser.add_argument("--seeds", default="0-2", help='"0-7" or "0,3,5"')
    parser.add_argument("--config", action="append", default=[], metavar="NAME=FLAGS",
                        help="a configuration: name=override flags (repeatable; default: the preset alone)")
    parser.add_argument("--full", action="store_true", help="no --target-return: the whole budget, for final returns")
    parser.add_argument("--stop-after-misses", type=int, default=0,
                        help="prune: skip a configuration's remaining seeds once this many missed (0: never)")
    parser.add_argument("--tag", default=time.strftime("%Y%m%d-%H%M%S"))
    args = parser.parse_args()
    configs = [c.split("=", 1) for c in (args.config or ["preset="])]
    seeds = parse_seeds(args.seeds)
    out = RESULTS / f"tune_{args.task}_{args.tag}.json"
    report = {"task": args.task, "protocol": TASKS[args.task], "full_budget": args.full, "seeds": seeds,
              "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, {platform.system()}",
              "date": time.strftime("%Y-%m-%d"), "configs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in configs:
            rows: list[dict] = []
            for seed in seeds:
                row = run_one(args.task, shlex.split(flags), seed, args.full, Path(tmp))
                rows.append(row)
                print(name, json.dumps(row), flush=True)
                report["configs"][name] = {"flags": flags, "rows": rows, **describe(rows, args.full)}
                out.write_text(json.dumps(report, indent=1) + "\n")
                misses = sum(1 for r in rows if not args.full and r.get("target_step") is None)
                if args.stop_after_misses and misses >= args.stop_after_misses:
                    break
            print(name, json.dumps({k: v for k, v in report["configs"][name].items() if k != "rows"}), flush=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
