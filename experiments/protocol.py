"""The time-to-threshold tasks, once, for every script that times them (the peers' protocol of
`peers/README.md`: a deterministic 10-episode evaluation every `eval_interval` env steps, stop at the
first mean at or above `threshold`, clock from process creation)."""

from __future__ import annotations

from typing import NamedTuple


class Task(NamedTuple):
    algo: str
    env: str
    threshold: float
    eval_interval: int

    @property
    def args(self) -> list[str]:
        """`python -m jaxrl_fast.train` flags of the protocol, seed and run directory aside."""
        return ["--algo", self.algo, "--env", self.env, "--target-return", f"{self.threshold:g}",
                "--eval-interval", str(self.eval_interval), "--eval-episodes", "10"]


TASKS = {
    "ppo_cartpole": Task("ppo", "CartPole-v1", 475.0, 5_000),
    "sac_pendulum": Task("sac", "Pendulum-v1", -200.0, 1_000),
    "dqn_cartpole": Task("dqn", "CartPole-v1", 475.0, 2_500),
    "pqn_cartpole": Task("pqn", "CartPole-v1", 475.0, 2_500),  # the discrete value-based row, like DQN's
    # gymnax's envs (the JAX-native backend), the ones rejax trains: the same tasks, stepped in XLA
    "ppo_gymnax_cartpole": Task("ppo", "gymnax:CartPole-v1", 475.0, 5_000),
    "sac_gymnax_pendulum": Task("sac", "gymnax:Pendulum-v1", -200.0, 1_000),
    # Gymnasium's own envs (the Python-stepped backend): the envs SB3 and sbx step
    "ppo_gym_cartpole": Task("ppo", "gym:CartPole-v1", 475.0, 5_000),
    "sac_gym_pendulum": Task("sac", "gym:Pendulum-v1", -200.0, 1_000),
    # the rest of issue #32's calibration tasks (experiments/bench_calibration.py); no peer runs them
    "td3_pendulum": Task("td3", "Pendulum-v1", -200.0, 1_000),
    "ppo_lunarlander": Task("ppo", "LunarLander-v2", 200.0, 16_384),  # an evaluation per PPO batch
}
