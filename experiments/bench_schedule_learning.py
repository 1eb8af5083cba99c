"""Learning at equal env steps under two schedules: does `concurrent`'s one-iteration-old policy cost returns?

`concurrent` acts iteration k+1 with the parameters of iteration k while the learner updates, so
its data is one iteration staler than `sync`'s. Where it acts faster (Atari on a CPU, see
docs/schedules.md), `auto` may take it only if it learns as well per env step. This runs the same
configuration under each schedule and seed, one fresh `python -m jaxrl_fast.train` process each,
and records the final evaluation and the training returns at each log line.

    python experiments/bench_schedule_learning.py                                    # PQN Breakout-v5, seeds 0-2
    python experiments/bench_schedule_learning.py --seeds 0 1 2 3 --total-steps 393216

Writes `experiments/results/bench_schedule_learning.json` (`--out`) and prints one line per run and
the per-schedule means.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def run(args: argparse.Namespace, schedule: str, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "jaxrl_fast.train", "--algo", args.algo, "--env", args.env,
               "--schedule", schedule, "--seed", str(seed), "--total-steps", str(args.total_steps),
               "--eval-interval", "0", "--eval-episodes", str(args.eval_episodes),
               "--log-interval", str(args.log_interval), "--run-dir", str(run_dir), "--progress", "off"]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
        summary = json.loads((run_dir / "summary.json").read_text())
        lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    curve = [(line["step"], line["train/episode_return"]) for line in lines if "train/episode_return" in line]
    return {"schedule": schedule, "seed": seed, "final_eval": summary["final_eval_return_mean"],
            "last_train_return": curve[-1][1] if curve else None, "train_curve": curve,
            "sps": summary["sps"], "wall_s": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="pqn")
    parser.add_argument("--env", default="Breakout-v5")
    parser.add_argument("--schedules", nargs="+", default=["sync", "concurrent"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--total-steps", type=int, default=294_912)  # 72 iterations of PQN's 128 x 32
    parser.add_argument("--log-interval", type=int, default=32_768)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_schedule_learning.json")
    args = parser.parse_args()

    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"machine: {machine}", flush=True)
    rows = []
    for seed in args.seeds:  # seeds outermost, so an interrupted run still pairs its schedules
        for schedule in args.schedules:
            row = run(args, schedule, seed)
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "train_curve"}), flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"machine": machine, "args": {k: str(v) for k, v in vars(args).items()},
                                            "rows": rows}, indent=2))
    for schedule in args.schedules:
        finals = [r["final_eval"] for r in rows if r["schedule"] == schedule]
        trains = [r["last_train_return"] for r in rows if r["schedule"] == schedule]
        spread = f" ± {statistics.stdev(finals):.1f}" if len(finals) > 1 else ""
        print(f"{schedule}: final evaluation {statistics.mean(finals):.1f}{spread} over seeds {args.seeds}; "
              f"last training return {statistics.mean(trains):.1f}")


if __name__ == "__main__":
    main()
