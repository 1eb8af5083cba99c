"""`python -m jaxrl_fast.calibrate`: measure this machine for one run, print the table and the
sizes it picks, and cache the result (what `train --calibrate` then reuses). It takes the flags
`python -m jaxrl_fast.train` takes (the env, the algorithm and its flags, --num-envs,
--num-threads, --env-kwargs, --schedule, --total-steps, ...: each one that the cache key holds
makes an entry of its own) and resolves the run `train --calibrate` would (same checks, same
placement), without making a run directory or training."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Sequence

from jaxrl_fast.types import ConfigError

PROG = "python -m jaxrl_fast.calibrate"
EPILOG = ("Every other flag is `python -m jaxrl_fast.train`'s (see its --help): --env, --algo and the algorithm's "
          "flags, --num-envs, --num-threads, --env-kwargs, --schedule, --total-steps (the run's length sets the "
          "budget's cap and is part of the cache key), ...")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0], epilog=EPILOG,
                                     allow_abbrev=False)
    parser.add_argument("--budget-s", type=float, default=None,
                        help="time budget of the measurements (seconds; train's --calibration-budget-s, default 30); "
                             "at most 5%% of the run's lower bound")
    parser.add_argument("--recalibrate", action="store_true", help="measure again even when a cached result exists")
    args, rest = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    from jaxrl_fast.cli.train import parse_args
    from jaxrl_fast.run.resolve import check_inputs, on_devices

    try:
        if any(flag.split("=")[0] == "--resume" for flag in rest):
            raise ConfigError("--resume: a resumed run is never calibrated again; calibrate a new run's flags")
        config = parse_args(rest)
        budget_s = config.calibration_budget_s if args.budget_s is None else args.budget_s
        if budget_s <= 0:
            raise ConfigError(f"--budget-s must be positive, got {budget_s}")
        config = dataclasses.replace(config, calibrate=True, recalibrate=args.recalibrate or config.recalibrate,
                                     calibration_budget_s=budget_s)
        resolved = on_devices(check_inputs(config, run_dir=False), run_dir=False)  # prints the table as it calibrates
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    stored = resolved.calibration.cache_file
    print(f"cached in {stored}" if stored else "not cached (see the line above); a run with --calibrate measures again")
    return 0
