"""Time to threshold of jaxrl_fast and its peers, side by side, in one sequence on one machine.

The protocol of `experiments/peers/README.md`: one fresh process per seed, the clock starting at
the process's creation, a deterministic 10-episode evaluation every N env steps, stop at the first
mean at or above the threshold. jaxrl_fast runs twice per task:

- **cold**: every seed gets an empty compilation cache directory, so every program compiles, and
  an empty `XDG_CACHE_HOME`, so the C forwarder's library is built too (from 2026-11-29 evening;
  before, it was built once and reused, 0.09-0.20 s that no cold figure held);
- **warm**: the seeds share one cache directory that an untimed run (seed 1000) filled first.

The peers have no warm arm: our warm column has no peer counterpart. A seed that misses the
threshold counts as slower than any (a median exists while fewer than half miss), and the verdict
names how many seeds of each side reached it. The clock: `metrics.process_start_time` and the
peers' `peers/_clock.py` (to the clock tick; before 2026-11-29 evening both read /proc/stat's
whole-second `btime`, which started every arm's clock early by the same 0-1 s on one boot).

`--lane NAME=PYTHON` (repeatable) times jaxrl_fast under each interpreter in turn, each task's lanes
one after another beside its peers: the CI lanes' stacks (Python 3.11 with JAX 0.10, Python 3.13
with JAX 0.12) in one sequence. Without it, the interpreter running this script is the one lane.

Peers run when their virtual environments exist under `$PEERS_HOME` (set-up: `peers/README.md`);
otherwise their columns say so. Nothing else should run on the machine meanwhile.

    python experiments/ttt_side_by_side.py                     # seeds 0-3, every task
    python experiments/ttt_side_by_side.py --seeds 0,1,2,3,4,5,6,7 --tasks ppo_cartpole
    python experiments/ttt_side_by_side.py --lane py3.11=.venv/bin/python --lane py3.13=.venv313/bin/python

Writes `experiments/results/ttt_side_by_side.json` (`--out`) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from protocol import TASKS as PROTOCOL

HERE = Path(__file__).resolve().parent
PEERS_DIR = HERE / "peers"
WARMUP_SEED = 1000

# Our task (protocol.py, the same as peers/ttt_jaxrl_fast.sh), and each peer's script and venv.
TASKS = {
    "ppo_cartpole": {
        "title": "PPO CartPole-v1, to 475",
        "task": PROTOCOL["ppo_cartpole"],
        "peers": {"sb3": ("venv-peers", "ttt_ppo_cartpole_sb3.py"), "sbx": ("venv-peers", "ttt_ppo_cartpole_sbx.py"),
                  "rejax": ("venv-rejax", "ttt_ppo_cartpole_rejax.py")},
        "goal": 0.5,
    },
    "sac_pendulum": {
        "title": "SAC Pendulum-v1, to -200",
        "task": PROTOCOL["sac_pendulum"],
        "peers": {"sb3": ("venv-peers", "ttt_sac_pendulum_sb3.py"), "sbx": ("venv-peers", "ttt_sac_pendulum_sbx.py"),
                  "rejax": ("venv-rejax", "ttt_sac_pendulum_rejax.py")},
        "goal": 0.5,
    },
    "dqn_cartpole": {
        "title": "DQN CartPole-v1, to 475",
        "task": PROTOCOL["dqn_cartpole"],
        "peers": {"sbx": ("venv-peers", "ttt_dqn_cartpole_sbx.py"), "rejax": ("venv-rejax", "ttt_dqn_cartpole_rejax.py")},
        "goal": 0.3,
        "goal_peer": "sbx",  # issue #32's DQN goal is against sbx; rejax's row is shown beside it
        "every_seed_under_peer_median": True,
    },
    "pqn_cartpole": {
        "title": "PQN CartPole-v1, to 475",
        "task": PROTOCOL["pqn_cartpole"],
        # sbx's value-based agent is DQN; rejax has PQN itself (on gymnax's CartPole)
        "peers": {"sbx": ("venv-peers", "ttt_dqn_cartpole_sbx.py"), "rejax": ("venv-rejax", "ttt_pqn_cartpole_rejax.py")},
        "goal": 0.3,
        "goal_peer": "sbx",
        "every_seed_under_peer_median": True,
    },
    "ppo_gymnax_cartpole": {  # rejax steps gymnax's envs inside its jitted program too
        "title": "PPO gymnax:CartPole-v1, to 475",
        "task": PROTOCOL["ppo_gymnax_cartpole"],
        "peers": {"rejax": ("venv-rejax", "ttt_ppo_cartpole_rejax.py")},
        "goal": 0.5,
    },
    "sac_gymnax_pendulum": {
        "title": "SAC gymnax:Pendulum-v1, to -200",
        "task": PROTOCOL["sac_gymnax_pendulum"],
        "peers": {"rejax": ("venv-rejax", "ttt_sac_pendulum_rejax.py")},
        "goal": 0.5,
    },
    "ppo_gym_cartpole": {  # SB3 and sbx step these same Python envs
        "title": "PPO gym:CartPole-v1, to 475",
        "task": PROTOCOL["ppo_gym_cartpole"],
        "peers": {"sb3": ("venv-peers", "ttt_ppo_cartpole_sb3.py"), "sbx": ("venv-peers", "ttt_ppo_cartpole_sbx.py")},
        "goal": 0.5,
    },
    "sac_gym_pendulum": {
        "title": "SAC gym:Pendulum-v1, to -200",
        "task": PROTOCOL["sac_gym_pendulum"],
        "peers": {"sb3": ("venv-peers", "ttt_sac_pendulum_sb3.py"), "sbx": ("venv-peers", "ttt_sac_pendulum_sbx.py")},
        "goal": 0.5,
    },
}


def train_once(args: list[str], seed: int, run_dir: Path, env: dict, python: str) -> dict:
    """One seed of `python -m jaxrl_fast.train ARGS` in a fresh process; the figures come from its
    summary.json (time to threshold counts from the process's creation)."""
    command = [python, "-m", "jaxrl_fast.train", "--run-dir", str(run_dir), "--seed", str(seed), "--progress", "off",
               *args]
    started = time.time()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env}, cwd=run_dir.parent)
    row = {"seed": seed, "outer_wall_s": round(time.time() - started, 3)}
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {**row, "error": f"exit {done.returncode}: {done.stderr[-800:]}"}
    seconds = summary.get("time_to_target_s")
    return {**row, "reached": seconds is not None, "seconds": seconds, "steps": summary.get("target_step"),
            "compile_s": summary.get("compile_s")}


def run_ours(task: str, seed: int, cache_dir: Path, out: Path, python: str, extra: list[str]) -> dict:
    """One seed of jaxrl_fast on `task` (its flags, then `extra`), compiling into (or reading) `cache_dir`."""
    # XDG_CACHE_HOME too: the C forwarder's library (jaxrl_fast/env/ffi_forward.py) is built into it once
    return train_once([*TASKS[task]["task"].args, *extra], seed, out / f"{task}-{seed}-{cache_dir.name}",
                      {"JAXRL_FAST_COMPILE_CACHE_DIR": str(cache_dir), "XDG_CACHE_HOME": str(cache_dir / "xdg")}, python)


def ours(task: str, seeds: list[int], cache: str, out: Path, python: str, extra: list[str]) -> dict:
    """All seeds of one task with a cold (empty per seed) or warm (shared, pre-filled) cache."""
    shared = Path(tempfile.mkdtemp(prefix="cache-warm-", dir=out))
    if cache == "warm":
        run_ours(task, WARMUP_SEED, shared, out, python, extra)  # fills the cache; not reported
    runs = []
    for seed in seeds:
        cache_dir = shared if cache == "warm" else Path(tempfile.mkdtemp(prefix=f"cache-cold-{seed}-", dir=out))
        runs.append(run_ours(task, seed, cache_dir, out, python, extra))
        print(f"  jaxrl_fast {cache} seed {seed}: {runs[-1]}", flush=True)
    return summarise(runs)


def stack(python: str) -> dict:
    """The versions a lane's interpreter runs."""
    code = ("import json, platform, jax, envpool, flax; print(json.dumps({'python': platform.python_version(), "
            "'jax': jax.__version__, 'envpool': envpool.__version__, 'flax': flax.__version__}))")
    done = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr[-400:]}


def peer(venv: Path, script: str, seeds: list[int]) -> dict:
    """One peer's script over all seeds (it starts one process per seed itself)."""
    command = [str(venv / "bin" / "python"), str(PEERS_DIR / script), "--seeds", ",".join(map(str, seeds))]
    done = subprocess.run(command, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": f"exit {done.returncode}: {done.stderr[-800:]}"}
    result = json.loads(lines[-1])
    runs = [{"seed": r.get("seed"), "reached": r.get("reached"), "seconds": r.get("seconds"),
             "steps": r.get("steps"), "outer_wall_s": r.get("outer_wall_s")} for r in result.get("runs", [])]
    return {**summarise(runs), "versions": result.get("versions")}


def summarise(runs: list[dict]) -> dict:
    """The seeds' median time and steps to the threshold, a seed that missed it counted as slower
    than any (so a median exists while fewer than half missed); the slowest where none missed."""
    reached = [r for r in runs if r.get("reached")]
    summary = {"runs": runs, "reached": f"{len(reached)}/{len(runs)}"}
    if runs and 2 * (len(runs) - len(reached)) < len(runs):
        summary["median_s"] = statistics.median(r["seconds"] if r.get("reached") else math.inf for r in runs)
        summary["median_steps"] = statistics.median(r["steps"] if r.get("reached") else math.inf for r in runs)
        if len(reached) == len(runs):
            summary["max_s"] = max(r["seconds"] for r in reached)
    return summary


def verdict(task: str, rows: dict, lane: str) -> str:
    """Whether a lane's cold median meets the issue's goal against the fastest peer that ran (or the
    task's `goal_peer`, the one its goal names)."""
    # a peer whose median exists (fewer than half its seeds missed, each counted as slower than any)
    peers = {name: row["median_s"] for name, row in rows["peers"].items() if "median_s" in row}
    cold = rows["jaxrl_fast"][lane]["cold"].get("median_s")
    if not peers or cold is None:
        return "no comparison"
    named = TASKS[task].get("goal_peer")
    if named is not None and named not in peers:
        return f"no comparison ({named} has no median)"
    name, fastest = (named, peers[named]) if named else min(peers.items(), key=lambda item: item[1])
    ratio = cold / fastest
    goal = TASKS[task]["goal"]
    met = ratio <= goal
    if TASKS[task].get("every_seed_under_peer_median"):
        slowest = rows["jaxrl_fast"][lane]["cold"].get("max_s")  # None: a seed missed
        met = met and slowest is not None and slowest < fastest
    reached = f"; reached: ours {rows['jaxrl_fast'][lane]['cold']['reached']}, {name} {rows['peers'][name]['reached']}"
    return f"{ratio:.2f}x {name} (goal {goal}x): {'met' if met else 'not met'}{reached}"


def table(results: dict) -> str:
    peers = sorted({name for task in results["tasks"].values() for name in task["peers"]})
    lanes = list(results["lanes"])
    ours_heads = [f"jaxrl_fast {lane} {mode}" for lane in lanes for mode in ("cold", "warm")]
    lines = ["| task | " + " | ".join(ours_heads + peers) + " | cold vs the goal's peer (the fastest, or the one it names) |",
             "| --- | " + " | ".join("---" for _ in ours_heads + peers) + " | --- |"]

    def cell(row: dict | None) -> str:
        if row is None:
            return "-"
        if "median_s" in row:
            missed = "" if "max_s" in row else f", reached {row['reached']}"
            return f"{row['median_s']:.2f} s ({row['median_steps']:,.0f} steps{missed})"
        return row.get("skipped") or f"reached {row.get('reached', '?')}"

    for task, rows in results["tasks"].items():
        ours_cells = [cell(rows["jaxrl_fast"][lane].get(mode)) for lane in lanes for mode in ("cold", "warm")]
        peer_cells = [cell(rows["peers"].get(name)) for name in peers]
        verdicts = "; ".join(f"{lane}: {text}" for lane, text in rows["verdict"].items())
        lines.append(f"| {TASKS[task]['title']} | " + " | ".join(ours_cells + peer_cells) + f" | {verdicts} |")
    return "\n".join(lines)


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "loadavg_before": os.getloadavg()}


def write_results(results: dict, out: Path, markdown: str) -> None:
    """The load after the sequence, the JSON to `out`, and the table to stdout."""
    results["machine"]["loadavg_after"] = os.getloadavg()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(markdown)
    print(f"-> {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2,3")
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, from {', '.join(TASKS)}")
    parser.add_argument("--peers-home", type=Path,
                        default=Path(os.environ.get("PEERS_HOME", Path.home() / ".cache" / "jaxrl-peers")))
    parser.add_argument("--no-peers", action="store_true", help="time jaxrl_fast only")
    parser.add_argument("--peers", default="", help="comma-separated peer names to run (default: every one a task has)")
    parser.add_argument("--lane", action="append", default=[], metavar="NAME=PYTHON",
                        help="time jaxrl_fast under this interpreter (repeatable; default: this one)")
    parser.add_argument("--extra", default="", help="train flags added to every jaxrl_fast run (a variant's figures, e.g. "
                        "'--dqn.hidden-sizes 128 128'); the peers run as they are")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "ttt_side_by_side.json")
    args = parser.parse_args()
    # absolute, not resolved: a venv's python is a symlink whose target is outside the venv
    lanes = {name: os.path.abspath(python) for name, python in (lane.split("=", 1) for lane in args.lane)}
    lanes = lanes or {"jaxrl_fast": sys.executable}
    seeds = [int(s) for s in args.seeds.split(",")]
    extra = args.extra.split()
    tasks = args.tasks.split(",")
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        parser.error(f"unknown task(s) {unknown}; choose from {', '.join(TASKS)}")

    results = {"machine": machine(), "seeds": seeds, "extra": extra, "lanes": {name: {"python": python, **stack(python)}
                                                             for name, python in lanes.items()}, "tasks": {}}
    peer_runs: dict[tuple[str, str], dict] = {}  # DQN's and PQN's rows share sbx's DQN: run it once
    with tempfile.TemporaryDirectory(prefix="ttt-") as scratch:
        for task in tasks:
            print(f"{task}:", flush=True)
            rows = {"jaxrl_fast": {lane: {mode: ours(task, seeds, mode, Path(scratch), python, extra) for mode in ("cold", "warm")}
                                   for lane, python in lanes.items()},
                    "peers": {}}
            for name, (venv, script) in TASKS[task]["peers"].items():
                if args.peers and name not in args.peers.split(","):
                    continue
                if args.no_peers or not (args.peers_home / venv / "bin" / "python").exists():
                    rows["peers"][name] = {"skipped": "not run" if args.no_peers else f"no {venv}"}
                    continue
                if (venv, script) not in peer_runs:
                    peer_runs[venv, script] = peer(args.peers_home / venv, script, seeds)
                rows["peers"][name] = peer_runs[venv, script]
                print(f"  {name}: {rows['peers'][name].get('median_s')} s median", flush=True)
            rows["verdict"] = {lane: verdict(task, rows, lane) for lane in lanes}
            results["tasks"][task] = rows
    write_results(results, args.out, table(results))


if __name__ == "__main__":
    main()
