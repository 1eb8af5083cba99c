"""TD3's hyperparameters, checks and registration."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl_fast.algos.base import AlgorithmSpec, ReplayConfig, rate_errors, validate_replay


@dataclasses.dataclass(frozen=True)
class TD3Config(ReplayConfig):
    """Twin Delayed DDPG (Fujimoto et al. 2018): target policy smoothing, delayed actor updates."""

    learning_starts: int = 25_000
    """Environment steps of uniform random actions before the first update."""
    tau: float = 0.005
    """Polyak rate of the target networks."""
    actor_lr: float = 3e-4
    """Adam step size of the policy."""
    critic_lr: float = 3e-4
    """Adam step size of the twin critics."""
    exploration_noise: float = 0.1
    """Std of the Gaussian exploration noise, as a fraction of the action range's half-width."""
    policy_noise: float = 0.2
    """Std of the target policy smoothing noise (fraction of the half-width)."""
    noise_clip: float = 0.5
    """Clip of the target policy smoothing noise."""
    policy_delay: int = 2
    """Critic updates per actor (and target) update."""


METRICS = ("train/critic_loss", "train/q_mean", "train/actor_loss", "train/actor_updates")


def validate(config: TD3Config, train: Any) -> list[str]:
    checks = [
        (0.0 < config.tau <= 1.0, f"--td3.tau must be in (0, 1], got {config.tau}"),
        (config.policy_delay >= 1, f"--td3.policy-delay must be at least 1, got {config.policy_delay}"),
        (config.exploration_noise >= 0, f"--td3.exploration-noise must be 0 or positive, got {config.exploration_noise}"),
        (config.policy_noise >= 0, f"--td3.policy-noise must be 0 or positive, got {config.policy_noise}"),
        (config.noise_clip >= 0, f"--td3.noise-clip must be 0 or positive, got {config.noise_clip}"),
    ]
    return (validate_replay("td3", config, train) + rate_errors("td3", config, ("actor_lr", "critic_lr"))
            + [message for ok, message in checks if not ok])


ALGORITHM = AlgorithmSpec(name="td3", family="off_policy", config=TD3Config, make="jaxrl_fast.algos.td3.learner:make_td3",
                          actions="continuous", metrics=METRICS, validate=validate)
