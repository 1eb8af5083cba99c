"""How often a uniformly random policy finds a MiniGrid task's reward, in EnvPool's port and in
Gymnasium's MiniGrid: a check that a task our PPO does not learn is not broken in the port.

    python experiments/minigrid_random_policy.py --backend envpool
    python experiments/minigrid_random_policy.py --backend gymnasium   # needs `pip install minigrid`

Prints one JSON line: the success rate (episodes with a positive return), the mean return and the
mean length over `--episodes` episodes of `--env`.
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def envpool_episodes(env_id: str, episodes: int, rng: np.random.Generator) -> tuple[list[float], list[int]]:
    import envpool

    env = envpool.make_gymnasium(env_id, num_envs=1, seed=0)
    env.reset()
    returns, lengths, ret = [], [], 0.0
    while len(returns) < episodes:
        _, reward, terminated, truncated, info = env.step(np.array([rng.integers(env.action_space.n)]))
        if info["elapsed_step"][0] == 0:  # the step after an episode's end only resets the env
            continue
        ret += float(reward[0])
        if terminated[0] or truncated[0]:
            returns.append(ret)
            lengths.append(int(info["elapsed_step"][0]))
            ret = 0.0
    return returns, lengths


def gymnasium_episodes(env_id: str, episodes: int, rng: np.random.Generator) -> tuple[list[float], list[int]]:
    import gymnasium as gym
    import minigrid  # noqa: F401  (registers the MiniGrid ids)

    env = gym.make(env_id)
    returns, lengths = [], []
    for episode in range(episodes):
        env.reset(seed=episode)
        ret, length, done = 0.0, 0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
            ret, length, done = ret + float(reward), length + 1, terminated or truncated
        returns.append(ret)
        lengths.append(length)
    return returns, lengths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("envpool", "gymnasium"), required=True)
    parser.add_argument("--env", default="MiniGrid-KeyCorridorS3R1-v0")
    parser.add_argument("--episodes", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0, help="the random policy's seed")
    args = parser.parse_args()
    if args.episodes < 1:
        parser.error("--episodes must be positive")
    play = envpool_episodes if args.backend == "envpool" else gymnasium_episodes
    returns, lengths = play(args.env, args.episodes, np.random.default_rng(args.seed))
    print(json.dumps({"env": args.env, "backend": args.backend, "episodes": len(returns),
                      "success_rate": float(np.mean(np.asarray(returns) > 0)), "mean_return": float(np.mean(returns)),
                      "mean_length": float(np.mean(lengths))}))


if __name__ == "__main__":
    main()
