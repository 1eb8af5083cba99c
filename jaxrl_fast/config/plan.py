"""The sizes of a run, derived from its config before anything is compiled.

An iteration is the unit every schedule repeats: on-policy, a rollout of `num_steps` per env and
one update; off-policy, `rollout_length` steps per env and `updates_per_iteration` gradient
updates (`off_policy_plan`, which holds the update-to-data ratio in whole numbers). A training
call (one `metrics.jsonl` line) runs `iterations_per_call` iterations; `--profile` traces a window
of those calls.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, NamedTuple

from jaxrl_fast.config.run import TrainConfig, algo_config, family
from jaxrl_fast.types import ConfigError

DEFAULT_DISPATCH_STEPS = 64  # concurrent/async: env steps per host dispatch when --dispatch-steps is 0


def capacity_rows(buffer_size: int, num_envs: int) -> int:
    """Rows needed to hold `buffer_size` transitions of `num_envs` streams."""
    return max(2, -(-buffer_size // num_envs))


class OffPolicyPlan(NamedTuple):
    rollout_length: int  # env steps per env per iteration
    updates_per_iteration: int
    warmup_iterations: int  # iterations of uniform random actions, no updates (learning_starts)
    batch_size: int
    n_step: int
    gamma: float
    replay_rows: int


def dispatch_steps(config: Any) -> int:
    """Fewest env steps an iteration holds. The host-driven concurrent and async schedules pay a
    dispatch (milliseconds on an accelerator) per iteration, so they act and update in batches of
    at least this many steps; `sync` keeps the algorithm's own iteration (it runs fused)."""
    if config.schedule == "auto":  # a plan is made from a resolved config
        raise ValueError("--schedule auto is chosen by resolve.check_inputs before the plan is made")
    if config.schedule == "sync":
        return 1
    return config.dispatch_steps or DEFAULT_DISPATCH_STEPS


def off_policy_plan(hyper: Any, num_envs: int, min_steps: int = 1) -> OffPolicyPlan:
    """Whole numbers that hold the update-to-data ratio: U updates per T x num_envs steps, with
    T x num_envs at least `min_steps`."""
    rollout_length = max(1, math.ceil(1.0 / (hyper.utd_ratio * num_envs)), math.ceil(min_steps / num_envs))
    steps = rollout_length * num_envs
    return OffPolicyPlan(
        rollout_length=rollout_length,
        updates_per_iteration=max(1, round(hyper.utd_ratio * steps)),
        warmup_iterations=max(1, math.ceil(hyper.learning_starts / steps)),
        batch_size=hyper.batch_size,
        n_step=hyper.n_step,
        gamma=hyper.gamma,
        replay_rows=capacity_rows(hyper.buffer_size, num_envs),
    )


def run_off_policy_plan(config: TrainConfig) -> OffPolicyPlan:
    plan = off_policy_plan(algo_config(config), config.num_envs, dispatch_steps(config))
    if config.schedule == "async":  # every actor acts as many warm-up chunks: whole blocks, all counted
        plan = plan._replace(warmup_iterations=-(-plan.warmup_iterations // config.num_actors) * config.num_actors)
    return plan


@dataclasses.dataclass(frozen=True)
class Plan:
    """Sizes derived from the config before anything is compiled."""

    num_threads: int
    steps_per_iteration: int
    warmup_steps: int  # off-policy: random-action steps before learning (learning_starts)
    total_iterations: int
    iterations_per_call: int
    eval_every_iterations: int
    update_frames_per_iteration: int
    warm_iterations: int  # learning iterations the schedule runs while it compiles (they are training too)
    profile: ProfileWindow | None  # --profile: the training calls traced

    @property
    def total_steps(self) -> int:
        return self.warmup_steps + self.total_iterations * self.steps_per_iteration

    def step_at(self, iteration: int) -> int:
        """Environment steps after `iteration` learning iterations."""
        return self.warmup_steps + iteration * self.steps_per_iteration

    @property
    def calls(self) -> int:
        """Training calls (one per log interval) of a fresh run that is not stopped early."""
        return -(-max(0, self.total_iterations - self.warm_iterations) // self.iterations_per_call)


def iteration_steps(config: TrainConfig) -> tuple[int, int]:
    """(env steps per iteration, warm-up steps of random actions)."""
    if family(config) == "off_policy":
        plan = run_off_policy_plan(config)
        steps = plan.rollout_length * config.num_envs
        return steps, plan.warmup_iterations * steps
    return config.num_envs * algo_config(config).num_steps, 0  # an on-policy config's rollout length per env


def update_frames_per_iteration(config: TrainConfig) -> int:
    """Samples consumed by gradient updates per iteration (Spreeze's update frame rate, per
    iteration): off-policy, updates x batch; on-policy, every epoch over the rollout (of all the
    data-parallel shards together: each shard's rollout is its share of --num-envs)."""
    hyper = algo_config(config)
    if family(config) == "off_policy":
        plan = run_off_policy_plan(config)
        return plan.updates_per_iteration * plan.batch_size
    return hyper.update_epochs * config.num_envs * hyper.num_steps


def warm_iterations(config: TrainConfig) -> int:
    """Learning iterations a schedule runs while compiling: the on-policy concurrent and the
    async schedules compile their learner by running one."""
    if config.schedule == "async" or (config.schedule == "concurrent" and family(config) == "on_policy"):
        return 1
    return 0


def default_env_threads(num_envs: int, cpus: int | None = None) -> int:
    """EnvPool's worker threads when given none (its `num_threads=0`): one per env, up to the CPU cores."""
    return max(1, min(num_envs, cpus or os.cpu_count() or 1))


def env_threads(config: TrainConfig) -> int:
    """EnvPool worker threads: --num-threads, or EnvPool's default over every seed's envs (one pool holds them)."""
    return config.num_threads or default_env_threads(config.num_envs * config.num_seeds)


DEFAULT_PROFILE_START, DEFAULT_PROFILE_CALLS = 1, 3


class WindowError(ConfigError):
    """A `--profile-start`/`--profile-calls` window that does not fit in the run."""


@dataclasses.dataclass(frozen=True)
class ProfileWindow:
    first_call: int  # training calls run before the trace starts (0-based index of the first traced)
    calls: int  # training calls traced

    @property
    def last_call(self) -> int:
        return self.first_call + self.calls - 1


def profile_window(start: int | None, calls: int | None, planned_calls: int) -> ProfileWindow:
    """The window `--profile-start`/`--profile-calls` ask for in a run of `planned_calls` training
    calls. Left at their defaults, they trace what fits; a window given explicitly that does not
    fit is refused (`WindowError`), since a trace of other calls is not what was asked for."""
    if start is None and calls is None:
        first = min(DEFAULT_PROFILE_START, max(planned_calls - 1, 0))
        return ProfileWindow(first, max(0, min(DEFAULT_PROFILE_CALLS, planned_calls - first)))
    first = DEFAULT_PROFILE_START if start is None else start
    count = DEFAULT_PROFILE_CALLS if calls is None else calls
    if first + count > planned_calls:
        raise WindowError(f"--profile-start {first} + --profile-calls {count} does not fit in the run's "
                          f"{planned_calls} training calls")
    return ProfileWindow(first, count)


def make_plan(config: TrainConfig, num_threads: int) -> Plan:
    """The run's sizes, with `num_threads` EnvPool threads in all; raises WindowError (a ConfigError)
    for a --profile window that does not fit."""
    steps_per_iteration, warmup_steps = iteration_steps(config)
    total_iterations = max(1, (config.total_steps - warmup_steps) // steps_per_iteration)
    plan = Plan(
        num_threads=num_threads,
        steps_per_iteration=steps_per_iteration,
        warmup_steps=warmup_steps,
        total_iterations=total_iterations,
        iterations_per_call=min(total_iterations, max(1, config.log_interval // steps_per_iteration)),
        eval_every_iterations=max(1, round(config.eval_interval / steps_per_iteration)) if config.eval_interval else 0,
        update_frames_per_iteration=update_frames_per_iteration(config),
        warm_iterations=warm_iterations(config),
        profile=None,
    )
    if not config.profile:
        return plan
    try:
        window = profile_window(config.profile_start, config.profile_calls, plan.calls)
    except WindowError as error:
        raise WindowError(f"{error} (one per --log-interval {config.log_interval} steps of --total-steps "
                          f"{config.total_steps}); lower them, or raise --total-steps or lower --log-interval") from None
    return dataclasses.replace(plan, profile=window)
