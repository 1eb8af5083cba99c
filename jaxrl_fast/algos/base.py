"""What every algorithm module declares, and the configuration its family shares.

An algorithm is one module in `jaxrl_fast/algos/` that ends with

    ALGORITHM = AlgorithmSpec(name=..., family=..., config=..., make=..., actions=..., metrics=...)

The package finds it there (`jaxrl_fast.algos.ALGORITHMS`); `--algo NAME`, the `--NAME.*` flags,
presets, validation and the trainer's choice of schedule all come from that declaration.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Literal

import optax
from jax import lax
from jax.flatten_util import ravel_pytree

from jaxrl_fast.types import Act
from jaxrl_fast.types import EnvSpec
from jaxrl_fast.env.spaces import random_actions
from jaxrl_fast.networks.config import NetworkConfig

Family = Literal["on_policy", "off_policy"]
Actions = Literal["discrete", "continuous", "any"]


@dataclasses.dataclass(frozen=True)
class ReplayConfig(NetworkConfig):
    """The replay and update sizes of the off-policy family."""

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
    family: "on_policy" (an `Algorithm` bundle; its config has `num_steps`, the rollout length per
      env per iteration) or "off_policy" (an `OffPolicyAlgorithm` bundle; its config is a `ReplayConfig`).
    config: its frozen config dataclass.
    make(hyper, spec, total_steps, axis_name=None): the bundle of pure functions (see
      `jaxrl_fast.types`); with `axis_name` its optimizers average gradients over that data-parallel
      axis (`mean_over_shards`), and `spec` and `total_steps` are one shard's.
    actions: the action spaces it can act in.
    metrics: the `train/...` names its updates report.
    validate(hyper, config): messages for values that cannot work, each naming its flag.
    """

    name: str
    family: Family
    config: type
    make: Callable[[Any, EnvSpec, int], Any]
    actions: Actions
    metrics: tuple[str, ...]
    validate: Callable[[Any, Any], list[str]] = lambda hyper, config: []

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


def random_act(spec: EnvSpec) -> Callable[[Any, Any], Act]:
    """The off-policy warm-up policy: uniform random actions, `random_act(obs [B, ...], key) -> Act`."""

    def act(obs: Any, key: Any) -> Act:
        action = random_actions(spec, key, obs.shape[0])
        return Act(action, action, ())

    return act


def shard_mean(grads: Any, axis_name: str | None) -> Any:
    """Gradients averaged over the data-parallel shards of `axis_name` (inside `shard_map`; None:
    as they are), in one all-reduce: each costs a round trip between processes, whatever its size."""
    if axis_name is None:
        return grads
    flat, unflatten = ravel_pytree(grads)
    return unflatten(lax.pmean(flat, axis_name))


def mean_over_shards(optimizer: optax.GradientTransformation, axis_name: str | None) -> optax.GradientTransformation:
    """`optimizer` on gradients averaged over the data-parallel shards (`shard_mean`). Every shard
    then applies one update to its copy of the parameters, so the copies stay equal."""
    if axis_name is None:
        return optimizer
    return optax.GradientTransformation(
        optimizer.init, lambda grads, state, params=None: optimizer.update(shard_mean(grads, axis_name), state, params))


def positive_sizes(flag: str, sizes: tuple[int, ...]) -> list[str]:
    if any(size <= 0 for size in sizes):  # none at all is a linear head (over an image encoder's features)
        return [f"{flag}.hidden-sizes must be positive sizes, got {sizes}"]
    return []


def validate_rollout(name: str, hyper: Any, config: Any) -> list[str]:
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
    ]
    return [message for ok, message in checks if not ok] + positive_sizes(flag, hyper.hidden_sizes)


def rollout_iterations(total_steps: int, num_envs: int, num_steps: int) -> int:
    """Iterations (rollout, then update) of a rollout learner's run."""
    return max(1, total_steps // (num_envs * num_steps))


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
