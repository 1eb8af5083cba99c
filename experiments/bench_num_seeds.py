"""`--num-seeds N` against N single-seed processes run one after another: wall-clock, same seeds, same
budgets (the env's preset), on this machine.

    python experiments/bench_num_seeds.py --tasks ppo_cartpole,sac_pendulum --seeds 8

Each arm starts from an empty compilation cache of its own, as a fresh sweep would: the sequential
arm's first process compiles and the next seven load its programs from the cache; the one
`--num-seeds` process compiles once. Also run: `--num-seeds N --batch-seed-updates`. The per-seed
final returns of the arms are written beside the times: for PPO the sequential-updates arm's equal
the single processes' (agent k is bitwise the single run with seed k); off-policy they drift apart
from the last bits.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from protocol import TASKS as PROTOCOL  # the task names the other timing scripts use


def timed_train(args: list[str], cache: Path) -> float:
    env = dict(os.environ, JAXRL_FAST_COMPILE_CACHE_DIR=str(cache), PYTHONWARNINGS="ignore")
    begin = time.perf_counter()
    subprocess.run([sys.executable, "-m", "jaxrl_fast.train", *args, "--progress", "off"], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - begin


def finals(run_dirs: list[Path]) -> list[float]:
    return [json.loads((d / "summary.json").read_text())["final_eval_return_mean"] for d in run_dirs]


def measure(task: str, seeds: int, out: Path) -> dict:
    base = ["--algo", PROTOCOL[task].algo, "--env", PROTOCOL[task].env]  # the preset's budget, no target
    result: dict = {"task": task, "seeds": seeds}
    with tempfile.TemporaryDirectory() as cache:
        dirs = [out / f"{task}_single_{k}" for k in range(seeds)]
        times = [timed_train([*base, "--seed", str(k), "--run-dir", str(d)], Path(cache)) for k, d in enumerate(dirs)]
        result["sequential_processes"] = {"wall_s": sum(times), "per_process_s": times, "finals": finals(dirs)}
    for name, extra in (("num_seeds", []), ("num_seeds_batched", ["--batch-seed-updates"])):
        with tempfile.TemporaryDirectory() as cache:
            root = out / f"{task}_{name}"
            wall = timed_train([*base, "--num-seeds", str(seeds), "--run-dir", str(root), *extra], Path(cache))
            result[name] = {"wall_s": wall, "finals": finals([root / f"seed_{k}" for k in range(seeds)]),
                            "speedup": result["sequential_processes"]["wall_s"] / wall}
        print(json.dumps({k: (v if not isinstance(v, dict) else {kk: vv for kk, vv in v.items() if kk != "per_process_s"})
                          for k, v in result.items()}), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="ppo_cartpole,sac_pendulum")
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path("experiments/results/bench_num_seeds.json"))
    args = parser.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    with tempfile.TemporaryDirectory() as runs:
        results = [measure(task, args.seeds, Path(runs)) for task in args.tasks.split(",")]
    record = {"command": "python " + " ".join(sys.argv), "started": started, "cpu_count": os.cpu_count(),
              "load_average_end": os.getloadavg(), "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
