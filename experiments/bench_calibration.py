"""`--calibrate` against the preset: time to threshold and env steps to it, seed by seed (issue #32, item 1).

For each task and seed, two fresh processes back to back, the protocol of `protocol.py` (a
deterministic 10-episode evaluation every N env steps, stop at the first mean at or above the
threshold, clock from process creation):

- **preset**: the task's flags as they are;
- **calibrated**: the same with `--calibrate`, and an empty calibration cache for every run, so each
  one measures the machine again (calibration's worst case; a later run on the machine reads the cache).

Both arms of a task share one compilation cache, filled first by an untimed run of each, so what
differs between them is calibration: its measuring and what it changes. Identical env steps to the
threshold on a seed mean the two runs learned the same thing. Nothing else should run on the machine.

    python experiments/bench_calibration.py                                  # seeds 0-7, every task
    python experiments/bench_calibration.py --seeds 0,1 --tasks ppo_cartpole
    python experiments/bench_calibration.py --tasks sac_pendulum --keep   # re-measure one task, keep the others

Writes `experiments/results/bench_calibration.json` (`--out`) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ttt_side_by_side import machine, train_once, write_results

from protocol import TASKS

HERE = Path(__file__).resolve().parent
CALIBRATION_TASKS = ["ppo_cartpole", "pqn_cartpole", "sac_pendulum", "td3_pendulum", "dqn_cartpole", "ppo_lunarlander"]
WARMUP_SEED = 1000


def one_run(task: str, seed: int, calibrated: bool, scratch: Path, compile_cache: Path) -> dict:
    name = f"{task}-{seed}-{'calibrated' if calibrated else 'preset'}"
    env = {"JAXRL_FAST_COMPILE_CACHE_DIR": str(compile_cache),
           "XDG_CACHE_HOME": tempfile.mkdtemp(prefix=f"xdg-{name}-", dir=scratch)}  # an empty calibration cache
    args = TASKS[task].args + (["--calibrate"] if calibrated else [])
    row = train_once(args, seed, scratch / name, env, sys.executable)
    if calibrated and "error" not in row:
        calibration = json.loads((scratch / name / "config.json").read_text())["calibration"]
        row |= {"calibration_s": round(calibration["elapsed_s"], 3), "bound_s": round(calibration["bound_s"], 2),
                "choice": calibration["choice"], "reason": calibration["reason"]}
    return row


def summarise(runs: list[dict]) -> dict:
    reached = [r for r in runs if r.get("reached")]
    out = {"runs": runs, "reached": f"{len(reached)}/{len(runs)}"}
    if reached:
        out["median_s"] = statistics.median(r["seconds"] for r in reached)
        out["median_steps"] = statistics.median(r["steps"] for r in reached)
    return out


def compare(preset: list[dict], calibrated: list[dict]) -> dict:
    """Per seed: the calibrated run's time over the preset's, and whether both took the same env steps."""
    pairs = [(p, c) for p, c in zip(preset, calibrated) if p.get("reached") and c.get("reached")]
    ratios = [c["seconds"] / p["seconds"] for p, c in pairs]
    return {"ratio_median": statistics.median(ratios) if ratios else None,
            "ratio_max": max(ratios) if ratios else None,
            "same_steps": f"{sum(p['steps'] == c['steps'] for p, c in pairs)}/{len(pairs)}",
            "calibration_s_median": statistics.median(c.get("calibration_s", 0.0) for c in calibrated)}


def table(results: dict) -> str:
    lines = ["| task | preset: median s (steps) | calibrated: median s (steps) | calibrated / preset, median [max] "
             "of seeds | same env steps to threshold | calibration pass, median | choice |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for task, rows in results["tasks"].items():
        p, c, r = rows["preset"], rows["calibrated"], rows["compare"]

        def cell(row: dict) -> str:
            if "median_s" not in row:
                return f"reached {row['reached']}"
            return f"{row['median_s']:.2f} ({row['median_steps']:,.0f}), {row['reached']}"

        ratio = "-" if r["ratio_median"] is None else f"{r['ratio_median']:.2f} [{r['ratio_max']:.2f}]"
        choices = sorted({json.dumps(run.get("choice"), sort_keys=True) for run in c["runs"] if run.get("choice")})
        lines.append(f"| {TASKS[task].algo.upper()} {TASKS[task].env} to {TASKS[task].threshold:g} | {cell(p)} | "
                     f"{cell(c)} | {ratio} | {r['same_steps']} | {r['calibration_s_median']:.2f} s | "
                     f"{'; '.join(choices)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2,3,4,5,6,7")
    parser.add_argument("--tasks", default=",".join(CALIBRATION_TASKS))
    parser.add_argument("--out", type=Path, default=HERE / "results" / "bench_calibration.json")
    parser.add_argument("--keep", action="store_true", help="keep the other tasks' rows of --out (each with its date)")
    args = parser.parse_args()
    seeds, tasks = [int(s) for s in args.seeds.split(",")], args.tasks.split(",")
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        parser.error(f"unknown task(s) {unknown}; choose from {', '.join(TASKS)}")
    results = {"machine": machine(), "command": " ".join(["python", *sys.argv]), "seeds": seeds, "tasks": {}}
    if args.keep and args.out.exists():
        results["tasks"] = json.loads(args.out.read_text())["tasks"]
    with tempfile.TemporaryDirectory(prefix="calibration-") as scratch:
        for task in tasks:
            print(f"{task}:", flush=True)
            compile_cache = Path(tempfile.mkdtemp(prefix=f"compile-{task}-", dir=scratch))
            for calibrated in (False, True):  # untimed: fill the compilation cache for both arms
                one_run(task, WARMUP_SEED, calibrated, Path(scratch), compile_cache)
            arms: dict[str, list[dict]] = {"preset": [], "calibrated": []}
            for seed in seeds:  # the arms interleaved, so that the machine's drift falls on both
                for arm in arms:
                    arms[arm].append(one_run(task, seed, arm == "calibrated", Path(scratch), compile_cache))
                    print(f"  {arm} seed {seed}: {arms[arm][-1]}", flush=True)
            results["tasks"][task] = {arm: summarise(runs) for arm, runs in arms.items()}
            results["tasks"][task]["measured"] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                                  "command": results["command"]}
            results["tasks"][task]["compare"] = compare(arms["preset"], arms["calibrated"])
    write_results(results, args.out, table(results))


if __name__ == "__main__":
    main()
