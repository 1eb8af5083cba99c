"""PPO's hyperparameters, checks and registration."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from jaxrl_fast.algos.base import AlgorithmSpec, RolloutConfig, validate_rollout


@dataclasses.dataclass(frozen=True)
class PPOConfig(RolloutConfig):
    """Proximal Policy Optimization (Schulman et al. 2017) with the usual implementation details."""

    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the policy and value MLPs."""
    activation: Literal["tanh", "relu", "elu", "silu"] = "tanh"
    """Hidden-layer activation."""
    learning_rate: float = 3e-4
    """Adam step size (per role: the policy and the value function have one optimizer each)."""
    max_grad_norm: float = 0.5
    """Gradient-norm clipping, applied to each role's gradient."""
    gae_lambda: float = 0.95
    """GAE's lambda: 0 is one-step TD, 1 is Monte Carlo."""
    clip_coef: float = 0.2
    """Policy ratio clipping."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    clip_value_loss: bool = False
    """Also clip the value's move to +-clip_coef, taking the larger error (CleanRL's clip_vloss)."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus."""
    normalize_advantages: bool = True
    """Standardise advantages per minibatch."""
    log_std_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy (continuous actions)."""
    use_sde: bool = False
    """gSDE exploration, one matrix per env per rollout (docs/algorithms.md)."""


METRICS = ("train/policy_loss", "train/value_loss", "train/entropy", "train/approx_kl", "train/clip_fraction",
           "train/grad_norm", "train/explained_variance")


def validate(config: PPOConfig, train: Any) -> list[str]:
    errors = validate_rollout("ppo", config, train)
    if not 0.0 <= config.gae_lambda <= 1.0:
        errors.append(f"--ppo.gae-lambda must be in [0, 1], got {config.gae_lambda}")
    return errors


ALGORITHM = AlgorithmSpec(name="ppo", family="on_policy", config=PPOConfig, make="jaxrl_fast.algos.ppo.learner:make_ppo",
                          actions="any", metrics=METRICS, validate=validate,
                          stochastic_policy=True)
