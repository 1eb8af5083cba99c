"""`python -m jaxrl_fast.calibrate`: measure this machine for one env and algorithm, print the
table and the sizes it picks, and cache the result (what `--calibrate` then reuses). It resolves
the run `python -m jaxrl_fast.train --calibrate` would (same checks, same placement) without
making a run directory or training."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Sequence

from jaxrl_fast.algos import ALGORITHMS
from jaxrl_fast.config.run import TrainConfig
from jaxrl_fast.types import ConfigError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jaxrl_fast.calibrate", description=__doc__.splitlines()[0])
    parser.add_argument("--env", default=TrainConfig.env)
    parser.add_argument("--algo", default=TrainConfig.algo, choices=list(ALGORITHMS))
    parser.add_argument("--schedule", default="auto", choices=["auto", "sync", "concurrent", "async"],
                        help="as train's: under auto (the default) an on-policy pass may choose sync or concurrent")
    parser.add_argument("--budget-s", type=float, default=30.0,
                        help="time budget of the measurements (seconds); at most 5%% of the run's lower bound")
    parser.add_argument("--total-steps", type=int, default=None,
                        help="the length of the run to calibrate for (default: the preset's); it caps the budget "
                             "and is part of the cache key, as in `train --calibrate --total-steps N`")
    parser.add_argument("--recalibrate", action="store_true", help="measure again even when a cached result exists")
    args = parser.parse_args(argv)
    from jaxrl_fast.calibration.measure import cache_dir
    from jaxrl_fast.run.api import preset_config
    from jaxrl_fast.run.resolve import check_inputs, on_devices

    try:
        config = dataclasses.replace(preset_config(args.env, args.algo), schedule=args.schedule, calibrate=True,
                                     recalibrate=args.recalibrate, calibration_budget_s=args.budget_s)
        if args.total_steps is not None:
            config = dataclasses.replace(config, total_steps=args.total_steps)
        if args.budget_s <= 0:
            raise ConfigError(f"--budget-s must be positive, got {args.budget_s}")
        on_devices(check_inputs(config, run_dir=False), run_dir=False)  # prints the table as it calibrates
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"cached in {cache_dir()}")
    return 0
