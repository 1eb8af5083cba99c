"""Frozen configuration dataclasses, one per concern. Nothing mutates a config after parsing.

`python -m jaxrl_fast.train --help` is generated from these by tyro; the defaults it shows are
already resolved from the environment's preset (see `jaxrl_fast.presets`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

ALGOS = ("ppo",)


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """Proximal Policy Optimization (Schulman et al. 2017) with the usual implementation details."""

    learning_rate: float = 3e-4
    """Adam step size (per role: the policy and the value function have one optimizer each)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over the run."""
    num_steps: int = 128
    """Rollout length per environment per iteration; a batch is num_envs x num_steps samples."""
    num_minibatches: int = 4
    """Minibatches per epoch; must divide num_envs x num_steps."""
    update_epochs: int = 4
    """Passes over each batch."""
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_coef: float = 0.2
    """Policy ratio clipping."""
    vf_coef: float = 0.5
    ent_coef: float = 0.0
    max_grad_norm: float = 0.5
    """Gradient-norm clipping, applied to each role's gradient."""
    normalize_advantages: bool = True
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: Literal["tanh", "relu", "elu", "silu"] = "tanh"


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Train an agent on an EnvPool environment. Defaults come from the env's preset in envs/."""

    algo: Literal["ppo"] = "ppo"
    """Algorithm."""
    env: str = "CartPole-v1"
    """EnvPool task id (envpool.list_all_envs() lists them)."""
    seed: int = 0
    total_steps: int = 100_000
    """Environment steps to train for (summed over all envs)."""
    num_envs: int = 8
    """Environments stepped together by EnvPool."""
    num_threads: int = 0
    """EnvPool worker threads; 0 picks min(num_envs, CPU cores)."""
    normalize_observations: bool = False
    """Normalize observations with running statistics (part of the run state)."""
    scale_rewards: bool = False
    """Divide rewards by the running std of the discounted return (part of the run state)."""
    run_dir: Path | None = None
    """Output directory; default runs/<env>__<algo>__<seed>__<time>."""
    target_return: float | None = None
    """Stop at the first evaluation whose mean return reaches this."""
    eval_interval: int = 10_000
    """Environment steps between evaluations (0: only the final one)."""
    eval_episodes: int = 10
    """Deterministic episodes per evaluation."""
    log_interval: int = 10_000
    """Environment steps between training log lines (also the length of one jitted call)."""
    progress: Literal["auto", "bar", "plain", "off"] = "auto"
    """Live progress bar on a terminal, plain periodic lines otherwise."""
    ppo: PPOConfig = dataclasses.field(default_factory=PPOConfig)


def algo_config(config: TrainConfig) -> Any:
    return getattr(config, config.algo)


def to_dict(config: Any) -> dict[str, Any]:
    """JSON-ready dict of a config (paths as strings, tuples as lists)."""

    def plain(value: Any) -> Any:
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return plain(dataclasses.asdict(config))
