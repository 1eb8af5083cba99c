"""`python -m jaxrl_fast.benchmark`: train every (env, algo) task of a suite over N seeds with its
preset, one `--num-seeds` process per task, and report the returns beside published ones.

    python -m jaxrl_fast.benchmark --suite classic              # 4 seeds, into runs/bench-classic-<time>
    python -m jaxrl_fast.benchmark --suite classic --num-seeds 4 --out runs/bench-classic
    python -m jaxrl_fast.benchmark --suite classic --algos ppo --envs CartPole-v1 --budget-scale 0.1 --out /tmp/b

DIR/results.json holds every task's figures, DIR/report.md the table (final return IQM with its
bootstrap 95% interval, time and steps to the threshold, wall-clock, the published reference and
its source), DIR/<task>.png the curve of each (mean evaluation return and its 95% interval over the
seeds against env steps, the reference as a line), and DIR/<task>/ the task's run directory.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Sequence

from jaxrl_fast.suites.report import PROG, BenchmarkError, check_tasks, machine_text, run_suite, select
from jaxrl_fast.suites.tasks import SUITES


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", required=True, help=f"one of {', '.join(SUITES)}")
    parser.add_argument("--algos", type=lambda s: s.split(","), help="comma-separated; default every algorithm of the suite")
    parser.add_argument("--envs", type=lambda s: s.split(","), help="comma-separated; default every env of the suite")
    parser.add_argument("--num-seeds", type=int, default=4)
    parser.add_argument("--budget-scale", type=float, default=1.0, help="fraction of the published budgets (CI, laptops)")
    parser.add_argument("--out", type=Path, help="a new directory; default runs/bench-<suite>-<time>")
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = Path("runs") / f"bench-{args.suite}-{time.strftime('%Y%m%d-%H%M%S')}"
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    try:
        if args.num_seeds < 2:
            raise BenchmarkError(f"--num-seeds must be at least 2 (a task's result is a distribution over seeds), got {args.num_seeds}")
        if not 0 < args.budget_scale <= 1:
            raise BenchmarkError(f"--budget-scale must be in (0, 1], got {args.budget_scale}")
        tasks = select(args.suite, args.algos, args.envs)
        if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
            raise BenchmarkError(f"--out: {args.out} is not an empty directory; choose a new one")
        check_tasks(tasks, args.num_seeds, args.budget_scale, args.out)
        args.out.mkdir(parents=True, exist_ok=True)
    except (BenchmarkError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    header = {"suite": args.suite, "command": " ".join([PROG, *(argv if argv is not None else sys.argv[1:])]),
              "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "num_seeds": args.num_seeds,
              "budget_scale": args.budget_scale, "machine": machine_text()}
    results = run_suite(tasks, args.num_seeds, args.budget_scale, args.out, header)
    return 0 if all(r["returncode"] == 0 for r in results) else 1
