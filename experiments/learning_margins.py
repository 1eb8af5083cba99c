"""How often each learning test's run passes, over many seeds: the evidence behind the tests' margins.

A learning test trains a fixed seed for a fixed budget and asserts a return. Another machine, compiler
or JAX release changes the last bits of the floating-point sums, and after a few thousand updates the
run follows another trajectory: to the test, that is another seed. So the chance that a test fails
elsewhere is the chance that a seed fails its assertion, which this script estimates by running the
test's configuration over many seeds (one `--num-seeds` process where the test's schedule allows it,
else one process per seed) and recording, per seed, the final evaluation, the best evaluation and
the step at which the target was first reached.

    python experiments/learning_margins.py                       # every case, seeds 0-15
    python experiments/learning_margins.py --cases ppo_cartpole --seeds 32 --first-seed 16   # adds seeds 16-47

Writes `experiments/results/learning_margins.json` (`--out`; what is there already is kept, and a
seed run again replaces its row) and prints one line per case over all its seeds.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name: (train flags, whether one --num-seeds process runs every seed); each is the test's run
CASES: dict[str, tuple[list[str], bool]] = {
    # tests/test_ppo.py: the CartPole preset's 100,000 steps
    "ppo_cartpole": (["--algo", "ppo", "--env", "CartPole-v1"], True),
    # tests/test_jax_envs.py: gymnax's CartPole-v1 (the JAX-native backend) on EnvPool CartPole-v1's preset
    "ppo_gymnax_cartpole": (["--algo", "ppo", "--env", "gymnax:CartPole-v1"], True),
    # tests/test_brax.py: PPO on Brax's inverted_pendulum (MJX), 16 envs, 61,440 steps
    "ppo_brax_pendulum": (["--algo", "ppo", "--env", "brax:inverted_pendulum", "--num-envs", "16", "--total-steps",
                           "61440", "--eval-interval", "20480", "--ppo.num-steps", "64", "--ppo.num-minibatches", "4",
                           "--ppo.update-epochs", "10", "--ppo.gamma", "0.99", "--ppo.learning-rate", "1e-3"], True),
    # tests/test_pqn.py: the preset, evaluated every 2,500 steps, to 475
    "pqn_cartpole": (["--algo", "pqn", "--env", "CartPole-v1", "--eval-interval", "2500"], True),
    # tests/test_sde.py: PPO with gSDE on MountainCarContinuous-v0, the preset
    "ppo_sde_mcc": (["--algo", "ppo", "--env", "MountainCarContinuous-v0"], True),
    # tests/test_offpolicy.py: SAC and TD3 on Pendulum-v1, DQN on CartPole-v1
    "sac_pendulum": (["--algo", "sac", "--env", "Pendulum-v1", "--total-steps", "10000", "--placement", "single"], True),
    "td3_pendulum": (["--algo", "td3", "--env", "Pendulum-v1", "--total-steps", "12000", "--placement", "single"], True),
    "dqn_cartpole": (["--algo", "dqn", "--env", "CartPole-v1", "--total-steps", "100000", "--eval-interval", "5000",
                      "--log-interval", "5000", "--placement", "single"], True),
    # tests/test_schedules.py: PPO under the concurrent schedule; async SAC (both actor set-ups)
    "ppo_concurrent_cartpole": (["--algo", "ppo", "--env", "CartPole-v1", "--schedule", "concurrent"], False),
    "sac_async_xla_step": (["--algo", "sac", "--env", "Pendulum-v1", "--schedule", "async", "--total-steps", "12000",
                            "--max-policy-lag", "2", "--num-actors", "2"], False),
    "sac_async_async_mode": (["--algo", "sac", "--env", "Pendulum-v1", "--schedule", "async", "--total-steps", "12000",
                              "--max-policy-lag", "3", "--num-actors", "1", "--num-envs", "4", "--env-batch-size", "2"],
                             False),
    # tests/test_checkpoint.py: PPO CartPole stopped at 29,952 steps (its loaded policy is played)
    "ppo_cartpole_30k": (["--algo", "ppo", "--env", "CartPole-v1", "--total-steps", "30000", "--log-interval", "1024",
                          "--eval-interval", "4096"], True),
    # tests/test_distributed.py: the sync program over two shards (what two processes of one device run)
    "ppo_cartpole_data_parallel": (["--algo", "ppo", "--env", "CartPole-v1", "--total-steps", "81920",
                                    "--eval-interval", "10240", "--data-parallel"], False),
    # tests/test_pixels.py: PQN on 42x42 Breakout frames, 32 envs, 65,536 steps
    "pqn_breakout_pixels": (["--algo", "pqn", "--env", "Breakout-v5", "--env-kwargs", "img_height=42", "img_width=42",
                             "--num-envs", "32", "--total-steps", "65536", "--log-interval", "4096", "--eval-interval",
                             "0"], True),
}


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def seed_row(run_dir: Path, seed: int) -> dict:
    """One seed's figures from its run directory."""
    summary = json.loads((run_dir / "summary.json").read_text())
    lines = read_lines(run_dir / "metrics.jsonl")
    evals = [(line["step"], line["eval_return_mean"]) for line in lines if "eval_return_mean" in line]
    games = [line for line in lines if line.get("train/episodes", 0) > 0 and "train/episode_return" in line]
    half = len(games) // 2
    row = {"seed": seed, "final": summary["final_eval_return_mean"], "evals": evals,
           "best": max((value for _, value in evals), default=None)}
    if games:  # the training episodes' returns, first half of the log against the second
        first = sum(line["train/episode_return"] for line in games[:half]) / max(half, 1)
        second = sum(line["train/episode_return"] for line in games[half:]) / max(len(games) - half, 1)
        row["train_return_halves"] = [first, second]
        row["train_returns"] = [[line["step"], line["train/episode_return"], line["train/episodes"]] for line in games]
        losses = [line["train/q_loss"] for line in lines if "train/q_loss" in line]
        if len(losses) >= 8:
            row["q_loss_last4_over_first4"] = (sum(losses[-4:]) / 4) / (sum(losses[:4]) / 4)
        q_means = [[line["step"], line["train/q_mean"]] for line in lines if "train/q_mean" in line]
        if q_means:
            row["q_mean"] = q_means
    return row


def run_case(flags: list[str], together: bool, seeds: list[int], scratch: Path) -> list[dict]:
    base = [sys.executable, "-m", "jaxrl_fast.train", "--progress", "off", *flags]
    if together:
        run_dir = scratch / "together"
        done = subprocess.run([*base, "--seed", str(seeds[0]), "--num-seeds", str(len(seeds)), "--run-dir", str(run_dir)],
                              capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(done.stderr[-2000:])
        return [seed_row(run_dir / f"seed_{k}", seed) for k, seed in enumerate(seeds)]
    rows = []
    for seed in seeds:
        run_dir = scratch / f"seed_{seed}"
        done = subprocess.run([*base, "--seed", str(seed), "--run-dir", str(run_dir)], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(done.stderr[-2000:])
        rows.append(seed_row(run_dir, seed))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    parser.add_argument("--seeds", type=int, default=16, help="how many seeds")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--extra", default="", help="flags added to each case's (the case is stored as CASE+FLAGS)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "learning_margins.json")
    args = parser.parse_args()
    results = json.loads(args.out.read_text()) if args.out.exists() else {"cases": {}}
    import envpool
    import jax

    for case_name in args.cases.split(","):
        flags, together = CASES[case_name]
        flags = flags + args.extra.split()
        name = case_name + (f" {args.extra}" if args.extra else "")
        started = time.time()
        with tempfile.TemporaryDirectory(prefix=f"margins-{name}-") as scratch:
            seeds = list(range(args.first_seed, args.first_seed + args.seeds))
            rows = run_case(flags, together, seeds, Path(scratch))
        machine = {"python": platform.python_version(), "jax": jax.__version__, "envpool": envpool.__version__,
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "seeds": f"{seeds[0]}-{seeds[-1]}", "seconds": round(time.time() - started, 1)}
        case = results["cases"].setdefault(name, {"flags": flags, "num_seeds_process": together, "runs": [], "seeds": []})
        case["runs"].append(machine | {"flags": flags})  # the case's flags as this run had them
        rows = sorted({row["seed"]: row for row in case["seeds"] + rows}.values(), key=lambda row: row["seed"])
        case["seeds"] = rows
        finals = sorted(round(r["final"], 1) for r in rows if r["final"] is not None)
        print(f"{name}: finals {finals}; best {sorted(round(r['best'], 1) for r in rows if r['best'] is not None)}",
              flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
