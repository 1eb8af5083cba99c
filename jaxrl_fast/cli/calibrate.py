"""`python -m jaxrl_fast.calibrate`: measure this machine for one env and algorithm, print the
table and the sizes it picks, and cache the result (what `--calibrate` then reuses)."""

from __future__ import annotations

import dataclasses
import sys
from typing import Sequence

from jaxrl_fast.algos import ALGORITHMS
from jaxrl_fast.calibration.measure import cache_dir, calibrate
from jaxrl_fast.config.run import TrainConfig


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    from jaxrl_fast.env.ids import EnvError, check_env_id
    from jaxrl_fast.config.presets import resolve_defaults

    parser = argparse.ArgumentParser(prog="python -m jaxrl_fast.calibrate", description=__doc__.splitlines()[0])
    parser.add_argument("--env", default=TrainConfig.env)
    parser.add_argument("--algo", default=TrainConfig.algo, choices=list(ALGORITHMS))
    parser.add_argument("--schedule", default="sync", choices=["sync", "concurrent", "async"])
    parser.add_argument("--budget-s", type=float, default=30.0, help="time budget of the measurements (seconds)")
    parser.add_argument("--recalibrate", action="store_true", help="measure again even when a cached result exists")
    args = parser.parse_args(argv)
    try:
        family = check_env_id(args.env)
    except EnvError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.budget_s <= 0:
        print(f"error: --budget-s must be positive, got {args.budget_s}", file=sys.stderr)
        return 2
    config = dataclasses.replace(resolve_defaults(args.env, args.algo, family), schedule=args.schedule)
    try:
        result = calibrate(config, args.budget_s, args.recalibrate)
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(result.table())
    print(f"cached in {cache_dir()}")
    return 0

