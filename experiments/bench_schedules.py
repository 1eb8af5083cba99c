"""Schedules compared: sync, concurrent and async, with and without calibration, in one run.

    python experiments/bench_schedules.py              # table printed and written to experiments/results/
    python experiments/bench_schedules.py --quick      # smaller step budgets
    python experiments/bench_schedules.py --setups sac-halfcheetah --calibrated no   # the preset's sizes only

Each row is `python -m jaxrl_fast.train` in a fresh process (PPO on CartPole-v1 to 475, SAC on
HalfCheetah-v4 for a fixed step budget; with `--setups`, MuJoCo with 16 envs and Atari with 32-128
for fixed budgets), read back from its summary.json and metrics.jsonl:
  * env steps/s and update frames/s over the training time (compilation excluded);
  * time to 475 from process start (CartPole), imports, calibration and compilation included;
  * where the time went: seconds the env (acting programs) and the update programs were busy, and
    how long they ran at the same time (`timing/*` in the metrics; the fused `sync` loop is one
    program, so it has no host-side split).
Calibration runs use a fresh cache directory, so they measure (and their time counts).

The reference rates are measured here too, by calibration's phase measurements at each setup's
sizes: acting alone (EnvPool + policy, jitted) and learner alone (the update program, expressed as
env steps/s at the algorithm's ratio). Overlapped schedules aim at min(acting, learner); running
one after the other gives at best 1 / (1/acting + 1/learner).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import jax

RESULTS = Path(__file__).parent / "results"

SETUPS = {
    "ppo-cartpole": dict(algo="ppo", env="CartPole-v1", schedules=("sync", "concurrent"),
                         flags=["--target-return", "475", "--eval-interval", "5000"]),
    "sac-halfcheetah": dict(algo="sac", env="HalfCheetah-v4", schedules=("sync", "concurrent", "async"),
                            flags=["--total-steps", "15000", "--eval-interval", "0", "--log-interval", "1000"]),
    # where decoupling should pay if anywhere (issue #32 item 3): MuJoCo with 16 envs, Atari with 128
    "ppo-halfcheetah-16": dict(algo="ppo", env="HalfCheetah-v4", schedules=("sync", "concurrent"),
                               flags=["--num-envs", "16", "--ppo.num-steps", "128", "--total-steps", "65536",
                                      "--eval-interval", "0", "--log-interval", "8192"]),
    "sac-halfcheetah-16": dict(algo="sac", env="HalfCheetah-v4", schedules=("sync", "concurrent", "async"),
                               flags=["--num-envs", "16", "--total-steps", "12000", "--eval-interval", "0",
                                      "--log-interval", "1000"]),
    "ppo-pong-32": dict(algo="ppo", env="Pong-v5", schedules=("sync", "concurrent"),
                        flags=["--num-envs", "32", "--total-steps", "32768", "--eval-interval", "0",
                               "--log-interval", "4096"]),
    "pqn-pong-128": dict(algo="pqn", env="Pong-v5", schedules=("sync", "concurrent"),
                         flags=["--total-steps", "32768", "--eval-interval", "0", "--log-interval", "4096"]),
}


def run(setup: dict, schedule: str, calibrate: bool, cache: Path, quick: bool) -> dict:
    flags = list(setup["flags"])
    if quick and setup["algo"] == "sac":
        flags[flags.index("--total-steps") + 1] = "7000"
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "jaxrl_fast.train", "--algo", setup["algo"], "--env", setup["env"],
               "--schedule", schedule, "--run-dir", str(run_dir), "--progress", "off", *flags]
        if calibrate:
            cmd.append("--calibrate")
        proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ | {"XDG_CACHE_HOME": str(cache)})
        if proc.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
        summary = json.loads((run_dir / "summary.json").read_text())
        recorded = json.loads((run_dir / "config.json").read_text())
        config = recorded | recorded["train_config"]  # the resolved extras and the flags
        lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    timing = {k: sum(line.get(k, 0.0) for line in lines) for k in ("timing/env_s", "timing/update_s", "timing/overlap_s")}
    row = {
        "setup": f"{setup['algo']} {setup['env']}",
        "schedule": schedule,
        "calibrated": calibrate,
        "num_envs": config["num_envs"],
        "batch": config.get(setup["algo"], {}).get("batch_size"),
        # off-policy: env steps acted per iteration (one host dispatch for concurrent and async)
        "steps_per_iteration": config["plan"]["steps_per_iteration"],
        "sps": summary["sps"],
        "update_frames_per_s": summary["update_frames_per_s"],
        "time_to_target_s": summary.get("time_to_target_s"),
        "final_eval": summary["final_eval_return_mean"],
        "train_s": summary["train_s"],
        **{k.split("/")[1]: v for k, v in timing.items()},
    }
    if schedule == "async":
        row |= {k: summary[k] for k in ("replay_ratio", "target_ratio", "policy_lag_max", "policy_lag_mean")}
    if calibrate:
        row["calibration"] = config["calibration"]["choice"]
    return row


def reference(setup: dict) -> dict:
    """Acting alone and learner alone at the preset's sizes (calibration's phase measurements)."""
    from jaxrl_fast.calibration.measure import measure_phases
    from jaxrl_fast.cli.train import parse_args
    from jaxrl_fast.config.run import algo_config
    from jaxrl_fast.run.resolve import check_inputs, on_devices

    config = parse_args(["--algo", setup["algo"], "--env", setup["env"], *setup["flags"]])  # the setup's sizes
    resolved = on_devices(check_inputs(config, run_dir=False), run_dir=False)
    phases = measure_phases(resolved.config, resolved.placement)
    acting = phases["acting"][0]["rollout_sps"]
    update_s = max(row["update_s"] for row in phases["learning"])  # split placement: the slower role sets the pace
    hyper = algo_config(config)
    if setup["algo"] in ("ppo", "pqn"):  # on-policy: one update per batch of num_envs x num_steps
        learner = config.num_envs * hyper.num_steps / update_s
    else:
        learner = 1.0 / (hyper.utd_ratio * update_s)
    return {"acting_alone_sps": acting, "learner_alone_sps": learner, "overlap_bound_sps": min(acting, learner),
            "serial_bound_sps": 1.0 / (1.0 / acting + 1.0 / learner)}


def main() -> None:
    import faulthandler

    faulthandler.dump_traceback_later(1800, exit=True)  # a hung measurement reports where it hung
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setups", nargs="+", default=["ppo-cartpole", "sac-halfcheetah"], choices=list(SETUPS),
                        help="default: the first two; the others are the many-env setups of docs/results.md")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--schedules", nargs="+", choices=("sync", "concurrent", "async"),
                        help="only these schedules (default: every schedule of each setup)")
    parser.add_argument("--calibrated", choices=("both", "no", "yes"), default="both",
                        help="the preset's sizes (no), calibrated ones (yes), or each schedule both ways")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_schedules.json")
    args = parser.parse_args()

    machine = f"{platform.machine()}, {os.cpu_count()} cores, devices {[str(d) for d in jax.devices()]}"
    print(f"machine: {machine}")
    rows, refs = [], {}
    with tempfile.TemporaryDirectory() as cache:
        for name in args.setups:
            setup = SETUPS[name]
            refs[name] = reference(setup)
            r = refs[name]
            print(f"{name}: acting alone {r['acting_alone_sps']:,.0f} steps/s, learner alone {r['learner_alone_sps']:,.0f} "
                  f"steps/s -> overlapped bound {r['overlap_bound_sps']:,.0f}, serial bound {r['serial_bound_sps']:,.0f}",
                  flush=True)
            for calibrate in {"both": (False, True), "no": (False,), "yes": (True,)}[args.calibrated]:
                for schedule in [s for s in setup["schedules"] if args.schedules is None or s in args.schedules]:
                    row = run(setup, schedule, calibrate, Path(cache), args.quick)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    print()
    print("| setup | schedule | calibrated | envs / batch | env steps/s | update frames/s | time to 475 (s) | "
          "env busy (s) | update busy (s) | overlap (s) | final eval |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ttt = f"{r['time_to_target_s']:.1f}" if r["time_to_target_s"] is not None else "-"
        sizes = f"{r['num_envs']}" + (f" / {r['batch']}" if r["batch"] else "")
        print(f"| {r['setup']} | {r['schedule']} | {'yes' if r['calibrated'] else 'no'} | {sizes} | {r['sps']:,.0f} | "
              f"{r['update_frames_per_s']:,.0f} | {ttt} | {r['env_s']:.1f} | {r['update_s']:.1f} | {r['overlap_s']:.1f} | "
              f"{r['final_eval']:.1f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine, "reference": refs, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
