"""`sync` against `async` on Python-stepped Gymnasium envs: where acting and learning can overlap.

    python experiments/bench_gym_schedules.py                   # DQN gym:Acrobot-v1, SAC gym:Pendulum-v1, seeds 0-2
    python experiments/bench_gym_schedules.py --seeds 5 --tasks sac_gym_pendulum
    python experiments/bench_gym_schedules.py --tasks dqn_gym_acrobot_50k,dqn_gym_cartpole
    python experiments/bench_gym_schedules.py --variants sync,async,async@256 --seeds 8   # learning at two dispatch sizes

A Gymnasium env steps in Python on the host (one core, under the GIL), while the learner's XLA
programs release the GIL: the `async` schedule's actor thread steps the envs while the learner
updates, where `sync` does one after the other. Each row is `python -m jaxrl_fast.train` in a fresh
process at the task's preset, evaluations off, and reads back env steps/s over training time
(compilation excluded), the final evaluation, and the async run's mean policy lag. For the async
runs it also sums the phase clock's busy seconds from metrics.jsonl (`timing/env_s`: the actor's
programs, the Python envs' steps inside them; `timing/update_s`: the learner's; `timing/overlap_s`;
the controller's waits; the sync runs, one fused program, log none), the inputs of
docs/schedules.md's model. `--variants` names the runs of each seed: a schedule, `async@N` for
async at `--dispatch-steps N`, `async-lagL` at `--policy-lag L`, or both, `async-lagL@N` (rows are
labelled so; `async` is the engine's default). Writes
`experiments/results/bench_gym_schedules.json` (`--out`); `--phases-of RECORD` adds the phases
per step to a record written before they were.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TASKS = {
    "dqn_gym_acrobot": ["--algo", "dqn", "--env", "gym:Acrobot-v1", "--total-steps", "20000"],
    "dqn_gym_acrobot_50k": ["--algo", "dqn", "--env", "gym:Acrobot-v1", "--total-steps", "50000"],
    "dqn_gym_cartpole": ["--algo", "dqn", "--env", "gym:CartPole-v1", "--total-steps", "50000"],
    "sac_gym_pendulum": ["--algo", "sac", "--env", "gym:Pendulum-v1", "--total-steps", "8000"],
    "td3_gym_pendulum": ["--algo", "td3", "--env", "gym:Pendulum-v1", "--total-steps", "10000"],
}


VARIANT = re.compile(r"sync$|async(?:-lag(\d+))?(?:@([1-9]\d*))?$")  # async-lag1@256: --policy-lag 1 at 256 steps


def variant_flags(variant: str) -> list[str]:
    """`sync`, `async`, `async@N` (at --dispatch-steps N), `async-lagL` (at --policy-lag L) or
    `async-lagL@N` as train flags."""
    lag, dispatch = VARIANT.match(variant).groups()
    return (["--schedule", variant.partition("-")[0].partition("@")[0]] + (["--policy-lag", lag] if lag else [])
            + (["--dispatch-steps", dispatch] if dispatch else []))


def valid_variant(variant: str) -> bool:
    return VARIANT.match(variant) is not None


def run(flags: list[str], variant: str, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "jaxrl_fast.train", *flags, *variant_flags(variant), "--seed", str(seed),
               "--eval-interval", "0", "--progress", "off", "--run-dir", str(run_dir)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
        summary = json.loads((run_dir / "summary.json").read_text())
        phases = phase_seconds(run_dir / "metrics.jsonl")
    return {"schedule": variant, "seed": seed, "sps": summary["sps"], "train_s": summary["train_s"],
            "steps": summary["steps"], "final_eval": summary["final_eval_return_mean"],
            "policy_lag_mean": summary.get("policy_lag_mean"), **phases}


PHASES = ("timing/env_s", "timing/update_s", "timing/overlap_s")
WAITS = ("timing/actor_wait_s", "timing/learner_wait_s")  # cumulative in each line: the last one counts


def phase_seconds(metrics_path: Path) -> dict[str, float]:
    """The run's busy seconds per phase (summed over its log lines) and the controller's waits."""
    lines = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    busy = {key.split("/")[1]: sum(line.get(key, 0.0) for line in lines) for key in PHASES}
    waits = {key.split("/")[1]: max((line[key] for line in lines if key in line), default=0.0) for key in WAITS}
    return {name: value for name, value in (busy | waits).items() if value}


def phases_per_step(rows: list[dict], variant: str = "async") -> dict[str, float]:
    """Medians over seeds, in microseconds per trained env step (sps x train_s, warm-up excluded):
    `a` the async actor's busy time, `l` the async learner's, `f` a sync step, `T` an async step
    (docs/schedules.md's model); `variant` names the async rows."""
    def median(schedule, value):
        return statistics.median(value(r) for r in rows if r["schedule"] == schedule)

    def per_step(key):
        return lambda r: 1e6 * r.get(key, 0.0) / (r["sps"] * r["train_s"])

    return {"a": median(variant, per_step("env_s")), "l": median(variant, per_step("update_s")),
            "f": median("sync", lambda r: 1e6 / r["sps"]), "T": median(variant, lambda r: 1e6 / r["sps"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="dqn_gym_acrobot,sac_gym_pendulum", help=f"any of {', '.join(TASKS)}")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds FIRST..FIRST+SEEDS-1")
    parser.add_argument("--variants", default="sync,async",
                        help="runs of each seed: sync, async, async@N (async at --dispatch-steps N), async-lagL "
                             "(at --policy-lag L), async-lagL@N")
    parser.add_argument("--dispatch-steps", type=int, default=0,
                        help="the same as --variants sync,async@N (sync runs fused, whatever it is)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "bench_gym_schedules.json")
    parser.add_argument("--phases-of", type=Path, help="run nothing: add the phases per step to this record's tasks")
    args = parser.parse_args()
    if args.phases_of:
        record = json.loads(args.phases_of.read_text())
        for task, entry in record["tasks"].items():
            if "over_sync_sps" in entry:  # a record with --variants: phases per async variant
                entry["phases_us"] = {v: phases_per_step(entry["rows"], v) for v in entry["over_sync_sps"]}
            else:  # an earlier record: sync and async rows
                entry["phases_us"] = phases_per_step(entry["rows"])
            print(task, entry["phases_us"])
        args.phases_of.write_text(json.dumps(record, indent=1) + "\n")
        return
    import jax

    if args.dispatch_steps and args.variants != parser.get_default("variants"):
        parser.error("give --variants or --dispatch-steps, not both")
    variants = (f"sync,async@{args.dispatch_steps}" if args.dispatch_steps else args.variants).split(",")
    if "sync" not in variants or len(set(variants)) != len(variants) or not all(map(valid_variant, variants)):
        parser.error(f"--variants {','.join(variants)}: sync (the baseline of every ratio), async, async@N, "
                     "async-lagL and async-lagL@N, once each")
    first = f" --first-seed {args.first_seed}" if args.first_seed else ""
    result = {"command": f"python experiments/bench_gym_schedules.py --tasks {args.tasks} --seeds {args.seeds}{first}"
                         + f" --variants {','.join(variants)}",
              "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
                          "jax": jax.__version__, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
              "tasks": {}}
    for task in args.tasks.split(","):
        seeds = range(args.first_seed, args.first_seed + args.seeds)
        rows = [run(TASKS[task], variant, seed) for seed in seeds for variant in variants]
        medians = {v: {k: statistics.median(r[k] for r in rows if r["schedule"] == v) for k in ("sps", "final_eval")}
                   for v in variants}
        finals = {v: [r["final_eval"] for r in rows if r["schedule"] == v] for v in variants}
        others = [v for v in variants if v != "sync"]
        entry = {"flags": TASKS[task], "rows": rows, "medians": medians, "final_evals": finals,
                 "over_sync_sps": {v: medians[v]["sps"] / medians["sync"]["sps"] for v in others},
                 "phases_us": {v: phases_per_step(rows, v) for v in others}}
        result["tasks"][task] = entry
        print(f"{task}: " + ", ".join(f"{v} {medians[v]['sps']:,.0f} steps/s (final {medians[v]['final_eval']:.1f})"
                                      for v in variants)
              + "; over sync: " + ", ".join(f"{v} {r:.2f}x" for v, r in entry["over_sync_sps"].items()), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
