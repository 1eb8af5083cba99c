"""What every algorithm declares, and the configuration its family shares (no JAX: the command line
reads these to build `--help` and to validate before anything is compiled).

An algorithm is one folder `jaxrl_fast/algos/<name>/` whose `config.py` ends with

    ALGORITHM = AlgorithmSpec(name=..., family=..., config=..., make="jaxrl_fast.algos.<name>.learner:make_<name>",
                              actions=..., metrics=..., validate=...)

The package finds it there (`jaxrl_fast.algos.ALGORITHMS`); `--algo NAME`, the `--NAME.*` flags,
presets, validation and the trainer's choice of schedule all come from that declaration. The
learner module it names (imported only when a run builds it) holds the pure functions.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable, Literal

from jaxrl_fast.networks.config import NetworkConfig
from jaxrl_fast.types import EnvSpec

Family = Literal["on_policy", "off_policy"]
Actions = Literal["discrete", "continuous", "any"]


@dataclasses.dataclass(frozen=True)
class RolloutConfig(NetworkConfig):
    """The rollout and update sizes of the on-policy family (PPO, PQN): a rollout of `num_steps` per
    env, consumed by `update_epochs` passes of `num_minibatches` minibatch steps."""

    learning_rate: float = 3e-4
    """Optimizer step size."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over the run."""
    num_steps: int = 128
    """Rollout length per environment per iteration; a batch is num_envs x num_steps samples."""
    num_minibatches: int = 4
    """Minibatches per epoch; must divide num_envs x num_steps."""
    update_epochs: int = 4
    """Passes over each batch."""
    gamma: float = 0.99
    """Discount factor."""
    max_grad_norm: float = 0.5
    """Gradient-norm clipping."""


@dataclasses.dataclass(frozen=True)
class ReplayConfig(NetworkConfig):
    """The replay and update sizes of the off-policy family (SAC, TD3, DQN)."""

    buffer_size: int = 1_000_000
    """Replay capacity in transitions."""
    batch_size: int = 256
    """Transitions per gradient update."""
    learning_starts: int = 5_000
    """Environment steps of uniform random actions before the first update."""
    utd_ratio: float = 1.0
    """Gradient updates per environment step (fractions allowed: 0.25 is one update per 4 steps)."""
    n_step: int = 1
    """n-step returns, read off the replay stream."""
    gamma: float = 0.99
    """Discount factor."""


@dataclasses.dataclass(frozen=True)
class AlgorithmSpec:
    """An algorithm as the engine sees it.

    name: the `--algo` value and the name of its flag group (`--NAME.*`).
    family: "on_policy" (an `Algorithm` bundle; its config is a `RolloutConfig`) or "off_policy"
      (an `OffPolicyAlgorithm` bundle; its config is a `ReplayConfig`).
    config: its frozen config dataclass.
    make: "module:function" of its constructor, `make(hyper, spec, total_steps, axis_name=None)` ->
      the bundle of pure functions (`jaxrl_fast.types`); with `axis_name` its optimizers average
      gradients over that data-parallel axis, and `spec` and `total_steps` are one shard's.
    actions: the action spaces it can act in.
    metrics: the `train/...` names its updates report.
    validate(hyper, config): messages for values that cannot work, each naming its flag.
    stochastic_policy: its policy is a distribution (the bundle's `act_sampled` draws from it), so
      `--eval-policy sampled` can evaluate it.
    """

    name: str
    family: Family
    config: type
    make: str
    actions: Actions
    metrics: tuple[str, ...]
    validate: Callable[[Any, Any], list[str]] = lambda hyper, config: []
    stochastic_policy: bool = False

    def build(self, hyper: Any, spec: EnvSpec, total_steps: int, axis_name: str | None = None) -> Any:
        """The bundle of pure functions (imports the learner module, and with it JAX)."""
        module, _, function = self.make.partition(":")
        make = getattr(importlib.import_module(module), function)
        return make(hyper, spec, total_steps) if axis_name is None else make(hyper, spec, total_steps, axis_name=axis_name)

    def fits(self, spec: EnvSpec) -> bool:
        """Whether this algorithm can act in `spec`'s action space."""
        return self.actions == "any" or (self.actions == "discrete") == spec.discrete

    def action_space_error(self, spec: EnvSpec, others: tuple[str, ...] = ()) -> str | None:
        """Why this algorithm cannot act in `spec`'s action space, or None; `others` are the ones that can."""
        if self.fits(spec):
            return None
        kind, needs = ("continuous", "discrete") if not spec.discrete else ("discrete", "continuous")
        alternatives = f" (use {', '.join(others)})" if others else ""
        return f"--algo {self.name}: {spec.env_id} has {kind} actions; {self.name} needs {needs} actions{alternatives}"


def positive_sizes(flag: str, sizes: tuple[int, ...]) -> list[str]:
    if any(size <= 0 for size in sizes):  # none at all is a linear head (over an image encoder's features)
        return [f"{flag}.hidden-sizes must be positive sizes, got {sizes}"]
    return []


def validate_rollout(name: str, hyper: RolloutConfig, config: Any) -> list[str]:
    """The checks every rollout learner (PPO, PQN) makes of its sizes: `num_steps`, `update_epochs`,
    `num_minibatches` dividing the batch, the batch fitting in the run, `gamma` and the learning rate."""
    flag = f"--{name}"
    batch = config.num_envs * hyper.num_steps
    checks = [
        (hyper.num_steps > 0, f"{flag}.num-steps must be positive, got {hyper.num_steps}"),
        (hyper.update_epochs > 0, f"{flag}.update-epochs must be positive, got {hyper.update_epochs}"),
        (hyper.num_minibatches > 0, f"{flag}.num-minibatches must be positive, got {hyper.num_minibatches}"),
        (hyper.num_minibatches <= 0 or batch % hyper.num_minibatches == 0,
         f"{flag}.num-minibatches {hyper.num_minibatches} does not divide the batch "
         f"--num-envs x {flag}.num-steps = {config.num_envs} x {hyper.num_steps} = {batch}"),
        (batch <= config.total_steps, f"--total-steps {config.total_steps} is smaller than one batch ({batch} samples)"),
        (0.0 < hyper.gamma <= 1.0, f"{flag}.gamma must be in (0, 1], got {hyper.gamma}"),
        (hyper.learning_rate > 0, f"{flag}.learning-rate must be positive, got {hyper.learning_rate}"),
        (hyper.max_grad_norm > 0, f"{flag}.max-grad-norm must be positive, got {hyper.max_grad_norm}"),
    ]
    return [message for ok, message in checks if not ok] + positive_sizes(flag, hyper.hidden_sizes)


def rollout_iterations(total_steps: int, num_envs: int, num_steps: int) -> int:
    """Iterations (rollout, then update) of a rollout learner's run."""
    return max(1, total_steps // (num_envs * num_steps))


def rollout_sizes(name: str, hyper: RolloutConfig, num_envs: int, total_steps: int) -> tuple[int, int]:
    """(batch, gradient steps of the whole run) of a rollout learner; the gradient steps are what a
    learning rate annealed to 0 counts. Raises where `num_minibatches` does not split the batch (the
    run's validation says so first; this guards a learner built directly)."""
    batch = num_envs * hyper.num_steps
    if batch % hyper.num_minibatches:
        raise ValueError(f"--{name}.num-minibatches {hyper.num_minibatches} must divide the batch "
                         f"num_envs x num_steps = {num_envs} x {hyper.num_steps} = {batch}")
    return batch, rollout_iterations(total_steps, num_envs, hyper.num_steps) * hyper.update_epochs * hyper.num_minibatches


def validate_replay(name: str, hyper: ReplayConfig, config: Any) -> list[str]:
    """The off-policy family's checks: replay and update sizes, and the options a replay cannot hold."""
    flag = f"--{name}"
    checks = [
        (hyper.batch_size > 0, f"{flag}.batch-size must be positive, got {hyper.batch_size}"),
        (hyper.buffer_size >= hyper.batch_size,
         f"{flag}.buffer-size {hyper.buffer_size} is smaller than one batch ({flag}.batch-size {hyper.batch_size})"),
        (hyper.utd_ratio > 0, f"{flag}.utd-ratio must be positive, got {hyper.utd_ratio}"),
        (hyper.learning_starts >= 0, f"{flag}.learning-starts must be 0 or positive, got {hyper.learning_starts}"),
        (hyper.n_step >= 1, f"{flag}.n-step must be at least 1, got {hyper.n_step}"),
        (0.0 < hyper.gamma <= 1.0, f"{flag}.gamma must be in (0, 1], got {hyper.gamma}"),
        (hyper.buffer_size >= hyper.learning_starts or hyper.learning_starts == 0,
         f"{flag}.buffer-size {hyper.buffer_size} cannot hold the {hyper.learning_starts} warm-up steps ({flag}.learning-starts)"),
        (hyper.learning_starts < config.total_steps,
         f"--total-steps {config.total_steps} leaves no learning after {flag}.learning-starts {hyper.learning_starts}"),
        (not config.normalize_observations and not config.scale_rewards,
         f"--normalize-observations and --scale-rewards are on-policy options; {name} stores raw "
         "observations and rewards in its replay buffer"),
    ]
    return [message for ok, message in checks if not ok] + positive_sizes(flag, hyper.hidden_sizes)


def epsilon_errors(flag: str, start: float, end: float) -> list[str]:
    """The check both Q-learners (DQN, PQN) make of their exploration rates."""
    if 0.0 <= end <= 1.0 and 0.0 <= start <= 1.0:
        return []
    return [f"{flag}.start-epsilon and {flag}.end-epsilon must be in [0, 1], got {start} and {end}"]


def rate_errors(name: str, hyper: Any, fields: tuple[str, ...]) -> list[str]:
    """`--<name>.<field>` must be positive, for each of `fields` (step sizes, temperatures)."""
    return [f"--{name}.{field.replace('_', '-')} must be positive, got {getattr(hyper, field)}"
            for field in fields if not getattr(hyper, field) > 0]
