"""Warm starts after the program store lost its entries while JAX's cache kept the programs (what an
edit of jaxrl_fast or an upgrade does to every configuration): two checkouts, interleaved per seed.

    git worktree add /tmp/before REV
    python profiling/store_refill.py --before /tmp/before --tasks ppo_cartpole,sac_pendulum --seeds 0,1,2

For each task of `experiments/protocol.py`, seed and checkout: a compilation cache of its own filled by
one run (seed 1000), its `programs-*` directory (the store) deleted, then `--runs` timed runs of the
seed, one after the other, under the interpreter running this script, the checkout first on
`PYTHONPATH`. Prints and writes each run's `time_to_target_s`, `compile_s` and `target_step`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "experiments"))
sys.path.insert(0, str(HERE))
from cold_start_ab import WARMUP_SEED, ab_parser, write_ab_record  # noqa: E402

from protocol import TASKS  # noqa: E402


def runs_after_the_loss(checkout: Path, args: list[str], seed: int, runs: int) -> list[dict]:
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as run_root:
        env = dict(os.environ, JAXRL_FAST_COMPILE_CACHE_DIR=cache,
                   PYTHONPATH=os.pathsep.join(filter(None, [str(checkout), os.environ.get("PYTHONPATH")])))

        def train(name: str, run_seed: int) -> dict:
            run_dir = Path(run_root) / name
            subprocess.run([sys.executable, "-m", "jaxrl_fast.train", *args, "--seed", str(run_seed), "--run-dir", str(run_dir),
                            "--progress", "off"], env=env, cwd=run_root, check=True, stdout=subprocess.DEVNULL)
            return json.loads((run_dir / "summary.json").read_text())

        train("fill", WARMUP_SEED)
        for store in Path(cache).glob("programs-*"):
            shutil.rmtree(store)
        summaries = [train(f"run-{k}", seed) for k in range(runs)]
    return [{key: s[key] for key in ("time_to_target_s", "compile_s", "target_step")} for s in summaries]


def main() -> None:
    parser = ab_parser(__doc__, "0,1,2", "store_refill.json")
    parser.add_argument("--runs", type=int, default=3, help="timed runs after the store's loss")
    args = parser.parse_args()
    arms = {"before": args.before.resolve(), "after": args.after.resolve()}
    rows = []
    for task in args.tasks.split(","):
        for seed in map(int, args.seeds.split(",")):
            for arm, checkout in arms.items():
                row = {"task": task, "seed": seed, "arm": arm, "runs": runs_after_the_loss(checkout, TASKS[task].args, seed, args.runs)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    write_ab_record(args.out, arms, rows)


if __name__ == "__main__":
    main()
