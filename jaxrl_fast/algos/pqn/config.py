"""PQN's hyperparameters, checks and registration."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from jaxrl_fast.algos.base import AlgorithmSpec, RolloutConfig, epsilon_errors, validate_rollout


@dataclasses.dataclass(frozen=True)
class PQNConfig(RolloutConfig):
    """PQN (Gallici et al. 2024): epsilon-greedy Q-learning over many envs with Q(lambda) targets."""

    hidden_sizes: tuple[int, ...] = (256, 256)
    """Hidden layer widths of the Q-network."""
    activation: Literal["tanh", "relu", "elu", "silu"] = "relu"
    """Hidden-layer activation."""
    layer_norm: bool = True
    """LayerNorm after each hidden layer: what keeps PQN stable without a target network."""
    learning_rate: float = 1e-4
    """RAdam step size."""
    num_steps: int = 64
    """Rollout length per environment per iteration; a batch is num_envs x num_steps samples."""
    num_minibatches: int = 16
    """Minibatches per epoch; must divide num_envs x num_steps."""
    max_grad_norm: float = 10.0
    """Gradient-norm clipping."""
    q_lambda: float = 0.95
    """Q(lambda)'s lambda: 0 is one-step Q-learning, 1 is the Monte Carlo return."""
    reward_scale: float = 1.0
    """Constant factor on the rewards in the targets (--scale-rewards instead divides by a running std)."""
    start_epsilon: float = 1.0
    """Exploration rate at the start."""
    end_epsilon: float = 0.05
    """Exploration rate after the decay."""
    exploration_fraction: float = 0.2
    """Fraction of the run over which epsilon decays linearly."""


METRICS = ("train/q_loss", "train/q_mean", "train/epsilon", "train/grad_norm")


def validate(config: PQNConfig, train: Any) -> list[str]:
    errors = validate_rollout("pqn", config, train) + epsilon_errors("--pqn", config.start_epsilon, config.end_epsilon)
    if not 0.0 <= config.q_lambda <= 1.0:
        errors.append(f"--pqn.q-lambda must be in [0, 1], got {config.q_lambda}")
    return errors


ALGORITHM = AlgorithmSpec(name="pqn", family="on_policy", config=PQNConfig, make="jaxrl_fast.algos.pqn.learner:make_pqn",
                          actions="discrete", metrics=METRICS, validate=validate)
