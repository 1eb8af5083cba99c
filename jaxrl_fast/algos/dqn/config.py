"""DQN's hyperparameters, checks and registration."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl_fast.algos.base import AlgorithmSpec, ReplayConfig, epsilon_errors, rate_errors, validate_replay


@dataclasses.dataclass(frozen=True)
class DQNConfig(ReplayConfig):
    """DQN (Mnih et al. 2015) with double-DQN targets (van Hasselt et al. 2016)."""

    hidden_sizes: tuple[int, ...] = (120, 84)
    """Hidden layer widths of the Q-network."""
    buffer_size: int = 100_000
    """Replay capacity in transitions."""
    batch_size: int = 128
    """Transitions per gradient update."""
    learning_starts: int = 1_000
    """Environment steps of uniform random actions before the first update."""
    utd_ratio: float = 0.25
    """Gradient updates per environment step (fractions allowed: 0.25 is one update per 4 steps)."""
    learning_rate: float = 2.5e-4
    """Adam step size."""
    target_update_interval: int = 500
    """Gradient updates between hard target-network copies."""
    start_epsilon: float = 1.0
    """Exploration rate at the start."""
    end_epsilon: float = 0.05
    """Exploration rate after the decay."""
    exploration_fraction: float = 0.5
    """Fraction of the run over which epsilon decays linearly."""
    max_grad_norm: float = 10.0
    """Gradient-norm clipping."""


METRICS = ("train/q_loss", "train/q_mean", "train/actor_updates")


def validate(config: DQNConfig, train: Any) -> list[str]:
    checks = [
        (config.target_update_interval >= 1,
         f"--dqn.target-update-interval must be at least 1, got {config.target_update_interval}"),
    ]
    return (validate_replay("dqn", config, train) + rate_errors("dqn", config, ("learning_rate", "max_grad_norm"))
            + [message for ok, message in checks if not ok] + epsilon_errors("--dqn", config.start_epsilon, config.end_epsilon))


ALGORITHM = AlgorithmSpec(name="dqn", family="off_policy", config=DQNConfig, make="jaxrl_fast.algos.dqn.learner:make_dqn",
                          actions="discrete", metrics=METRICS, validate=validate)
