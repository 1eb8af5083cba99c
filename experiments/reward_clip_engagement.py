"""How often scaled rewards pass ±10 (where SB3's `VecNormalize` and CleanRL clip them) early in a run.

A preset that sets `scale_rewards` divides each reward by the running standard deviation of the
discounted return (`jaxrl_fast.ops.normalization.scale_rewards`). Before that deviation has grown (a
run's first steps; a sparse reward's first successes) a reward can be scaled far past ±10. This
script steps the envs of the suites' PPO tasks that scale rewards (the preset's `num_envs` and
discount; PQN's Procgen preset and MuJoCo's other tasks scale rewards too) with uniformly random actions,
scales the rewards exactly as training does (EnvPool's reset steps left out), and counts the scaled
rewards beyond ±10: how many, in which env steps, and the largest. Random actions stand for a
run's first policy, the regime where the deviation is small; a learning policy meets its first
sparse successes later, when the deviation of its failures' returns has long settled.

    python experiments/reward_clip_engagement.py                     # every task below
    python experiments/reward_clip_engagement.py --steps 200000 --envs Acrobot-v1,MountainCar-v0

Writes `experiments/results/reward_clip_engagement.json` (`--out`) and prints one line per env.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CLIP = 10.0

# (algo, env id): the benchmark suites' PPO tasks whose presets turn `scale_rewards` on
PRESETS = [
    ("ppo", "Acrobot-v1"), ("ppo", "MountainCar-v0"), ("ppo", "MountainCarContinuous-v0"),
    ("ppo", "BipedalWalker-v3"),
    ("ppo", "HalfCheetah-v4"), ("ppo", "Hopper-v4"), ("ppo", "Walker2d-v4"), ("ppo", "Ant-v4"), ("ppo", "Swimmer-v4"),
    ("ppo", "MiniGrid-DoorKey-5x5-v0"), ("ppo", "MiniGrid-Empty-Random-5x5-v0"), ("ppo", "MiniGrid-Unlock-v0"),
    ("ppo", "MiniGrid-KeyCorridorS3R1-v0"),
    ("ppo", "StarpilotEasy-v0"), ("ppo", "BossfightEasy-v0"), ("ppo", "BigfishEasy-v0"),
]


def engagement(algo: str, env_id: str, steps: int, seed: int) -> dict:
    import jax

    from jaxrl_fast.env.envpool import make_pool, probe_spec
    from jaxrl_fast.env.ids import parse_env_kwargs
    from jaxrl_fast.env.spaces import random_actions_np
    from jaxrl_fast.ops.normalization import init_reward_scale, scale_rewards
    from jaxrl_fast.run.api import preset_config

    config = preset_config(env_id, algo)
    assert config.scale_rewards, f"{algo} {env_id}: its preset does not scale rewards"
    gamma, n = getattr(config, algo).gamma, config.num_envs
    options = parse_env_kwargs(config.env_kwargs)
    spec = probe_spec(env_id, options)
    pool = make_pool(env_id, num_envs=n, num_threads=1, seed=seed, **options)
    pool.reset()
    rng = np.random.default_rng(seed)
    scale_step = jax.jit(lambda s, r, d, v: scale_rewards(s, r, d, v, gamma))  # unclipped, as the presets scale
    scale, reset_step = init_reward_scale(n), np.zeros(n, bool)
    clipped_at, largest, iterations = [], 0.0, -(-steps // n)
    for i in range(iterations):
        _, reward, terminated, truncated, _ = pool.step(random_actions_np(spec, rng, n))
        valid, done = ~reset_step, terminated | truncated
        scale, scaled = scale_step(scale, np.asarray(reward, np.float32), done, valid)
        scaled = np.where(valid, np.asarray(scaled), 0.0)
        beyond = np.abs(scaled) > CLIP
        clipped_at += [(i + 1) * n] * int(beyond.sum())
        largest = max(largest, float(np.abs(scaled).max()))
        reset_step = valid & done
    pool.close()
    return {"algo": algo, "env": env_id, "num_envs": n, "gamma": gamma, "env_steps": iterations * n,
            "clipped": len(clipped_at), "first_clipped_step": clipped_at[0] if clipped_at else None,
            "last_clipped_step": clipped_at[-1] if clipped_at else None, "largest_abs_scaled": largest}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100_000, help="env steps per preset (summed over its envs)")
    parser.add_argument("--envs", default="", help="comma-separated env ids (default: every preset)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "reward_clip_engagement.json")
    args = parser.parse_args()
    chosen = [p for p in PRESETS if not args.envs or p[1] in args.envs.split(",")]
    rows, started = [], time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for algo, env_id in chosen:
        row = engagement(algo, env_id, args.steps, args.seed)
        rows.append(row)
        print(f"{algo} {env_id}: {row['clipped']} of {row['env_steps']:,} scaled rewards beyond ±{CLIP:g} "
              f"(env steps {row['first_clipped_step']}-{row['last_clipped_step']}), largest |scaled| "
              f"{row['largest_abs_scaled']:.1f}", flush=True)
    import envpool
    import jax

    record = {"command": "python experiments/reward_clip_engagement.py " + " ".join(
                  f"--{k} {v}" for k, v in (("steps", args.steps), ("envs", args.envs), ("seed", args.seed)) if v != ""),
              "started": started, "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores",
              "python": platform.python_version(), "jax": jax.__version__, "envpool": envpool.__version__,
              "policy": "uniformly random actions", "clip": CLIP, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
