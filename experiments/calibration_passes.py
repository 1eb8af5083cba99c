"""Calibration passes of a few runs, each with an empty calibration cache, their printed tables
kept: what docs/calibration.md's "What it costs" table reads (bound, budget, pass, choice).

    python experiments/calibration_passes.py --out experiments/results/calibration_passes_DATE.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

RUNS = [
    ["--env", "CartPole-v1", "--algo", "ppo"],
    ["--env", "HalfCheetah-v4", "--algo", "sac", "--schedule", "async", "--total-steps", "50000"],
    ["--env", "HalfCheetah-v4", "--algo", "ppo"],
    ["--env", "CartPole-v1", "--algo", "pqn", "--total-steps", "50000000"],
    ["--env", "CartPole-v1", "--algo", "ppo", "--total-steps", "50000000"],
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    runs = []
    for flags in RUNS:
        env = dict(os.environ, XDG_CACHE_HOME=tempfile.mkdtemp(prefix="calibration-cache-"))
        started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        proc = subprocess.run([sys.executable, "-m", "jaxrl_fast.calibrate", *flags], capture_output=True, text=True,
                              env=env)
        runs.append({"command": "python -m jaxrl_fast.calibrate " + " ".join(flags), "started": started,
                     "rc": proc.returncode,
                     "output": [line for line in proc.stdout.splitlines() if not line.startswith("cached in")],
                     "stderr_tail": proc.stderr.splitlines()[-3:] if proc.returncode else []})
        print(runs[-1]["command"], "->", proc.returncode, flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    record = {"command": "python " + " ".join(sys.argv), "commit": commit,
              "cache": "an empty calibration cache per pass (XDG_CACHE_HOME), JAX's compilation cache as configured",
              "runs": runs}
    with open(args.out, "w") as file:
        json.dump(record, file, indent=1)


if __name__ == "__main__":
    main()
