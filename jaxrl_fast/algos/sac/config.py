"""SAC's hyperparameters, checks and registration."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from jaxrl_fast.algos.base import AlgorithmSpec, ReplayConfig, rate_errors, validate_replay


@dataclasses.dataclass(frozen=True)
class SACConfig(ReplayConfig):
    """Soft Actor-Critic (Haarnoja et al. 2018): twin critics, automatic entropy tuning."""

    tau: float = 0.005
    """Polyak rate of the target critics."""
    actor_lr: float = 3e-4
    """Adam step size of the policy."""
    critic_lr: float = 1e-3
    """Adam step size of the twin critics."""
    alpha_lr: float = 1e-3
    """Adam step size of the entropy temperature."""
    init_alpha: float = 1.0
    """Initial entropy temperature."""
    autotune: bool = True
    """Tune the entropy temperature towards the target entropy."""
    target_entropy_per_action: float = -1.0
    """Target entropy per action dimension, of actions at the env's scale as CleanRL's (SB3's: of the [-1, 1] action); -1 as both, jaxrl on dm_control -0.5."""
    use_sde: bool = False
    """gSDE exploration (docs/algorithms.md)."""
    sde_sample_freq: int = 32
    """use_sde: env steps per env per exploration matrix."""
    log_std_init: float = -3.0
    """use_sde: initial log std of the matrix's entries."""


METRICS = ("train/critic_loss", "train/q_mean", "train/actor_loss", "train/alpha", "train/entropy", "train/actor_updates")


def validate(config: SACConfig, train: Any) -> list[str]:
    checks = [
        (0.0 < config.tau <= 1.0, f"--sac.tau must be in (0, 1], got {config.tau}"),
        (math.isfinite(config.target_entropy_per_action),
         f"--sac.target-entropy-per-action must be a finite number, got {config.target_entropy_per_action}"),
        (config.sde_sample_freq >= 1, f"--sac.sde-sample-freq must be positive, got {config.sde_sample_freq}"),
        (not config.use_sde or train.env_batch_size in (0, train.num_envs),
         f"--sac.use-sde holds a matrix per env, but --env-batch-size {train.env_batch_size} acts on other envs each "
         "step: leave --env-batch-size at 0"),
    ]
    return (validate_replay("sac", config, train) + rate_errors("sac", config, ("actor_lr", "critic_lr", "alpha_lr", "init_alpha"))
            + [message for ok, message in checks if not ok])


ALGORITHM = AlgorithmSpec(name="sac", family="off_policy", config=SACConfig, make="jaxrl_fast.algos.sac.learner:make_sac",
                          actions="continuous", metrics=METRICS, validate=validate,
                          stochastic_policy=True)
