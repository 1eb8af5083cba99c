"""Cold (or warm) time to threshold of two checkouts, interleaved per seed: a change's effect on start-up.

    git worktree add /tmp/before REV
    python profiling/cold_start_ab.py --before /tmp/before --tasks sac_pendulum,ppo_cartpole --seeds 0,1,2,3,4
    python profiling/cold_start_ab.py --before /tmp/before --tasks dqn_cartpole --cache warm

For each task of `experiments/protocol.py` and each seed, one training process per checkout, one
after the other (`before` first), each with an empty compilation cache of its own (`--cache warm`:
a cache that one untimed run of the same task, seed 1000, filled first), under the
interpreter running this script; the checkout is put first on `PYTHONPATH` and the process runs
from outside the repository. Reads `time_to_target_s` (from the process's creation), `target_step`
and `compile_s` from each run's `summary.json`, prints them as they come, then each arm's median
and range per task, and writes the rows to `--out`.
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "experiments"))
from protocol import TASKS  # noqa: E402

WARMUP_SEED = 1000  # the run that fills a warm cache: the programs' keys leave the seed out


def timed_run(checkout: Path, args: list[str], seed: int, warm: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as runs:
        env = dict(os.environ, JAXRL_FAST_COMPILE_CACHE_DIR=cache,
                   PYTHONPATH=os.pathsep.join(filter(None, [str(checkout), os.environ.get("PYTHONPATH")])))
        for name, run_seed in [("fill", WARMUP_SEED)] * warm + [("run", seed)]:
            subprocess.run([sys.executable, "-m", "jaxrl_fast.train", *args, "--seed", str(run_seed), "--run-dir",
                            str(Path(runs) / name), "--progress", "off"], env=env, cwd=runs, check=True, stdout=subprocess.DEVNULL)
        summary = json.loads((Path(runs) / "run" / "summary.json").read_text())
    return {"time_to_target_s": summary["time_to_target_s"], "target_step": summary["target_step"],
            "compile_s": summary["compile_s"]}


def revision(checkout: Path) -> str:
    """The checkout's commit, with `+edits` where its tracked files differ from it."""
    git = ["git", "-C", str(checkout)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    edited = subprocess.run([*git, "diff", "--quiet", "HEAD"]).returncode != 0
    return commit + ("+edits" if edited else "")


def ab_parser(doc: str, seeds: str, out: str) -> argparse.ArgumentParser:
    """The arguments every A/B script of two checkouts takes: the arms, the tasks, the seeds, the record."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="the checkout to compare against (a git worktree)")
    parser.add_argument("--after", type=Path, default=HERE.parent, help="default: this checkout")
    parser.add_argument("--tasks", default="ppo_cartpole,sac_pendulum", help=f"comma-separated, from {', '.join(TASKS)}")
    parser.add_argument("--seeds", default=seeds)
    parser.add_argument("--out", type=Path, default=Path(out))
    return parser


def write_ab_record(out: Path, arms: dict[str, Path], rows: list[dict]) -> None:
    """`rows` with the command, the date, the machine and each arm's commit."""
    record = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
              "checkouts": {arm: revision(path) for arm, path in arms.items()}, "rows": rows}
    out.write_text(json.dumps(record, indent=1) + "\n")


def main() -> None:
    parser = ab_parser(__doc__, "0,1,2,3,4", "cold_start_ab.json")
    parser.add_argument("--cache", choices=("cold", "warm"), default="cold")
    args = parser.parse_args()
    arms = {"before": args.before.resolve(), "after": args.after.resolve()}
    rows = []
    for task in args.tasks.split(","):
        for seed in map(int, args.seeds.split(",")):
            for arm, checkout in arms.items():
                row = {"task": task, "seed": seed, "arm": arm, "cache": args.cache,
                       **timed_run(checkout, TASKS[task].args, seed, args.cache == "warm")}
                print(json.dumps(row), flush=True)
                rows.append(row)
    for task in args.tasks.split(","):
        for arm in arms:
            times = [r["time_to_target_s"] for r in rows if r["task"] == task and r["arm"] == arm]
            print(f"{task:14s} {arm:6s} median {statistics.median(times):.2f} s ({min(times):.2f}-{max(times):.2f})")
    write_ab_record(args.out, arms, rows)


if __name__ == "__main__":
    main()
