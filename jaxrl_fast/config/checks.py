"""The checks a configuration passes before anything is built: sizes that work together, options
that fit the schedule, finite numbers. Pure arithmetic on the config (no JAX, no environment, no
devices): what needs the env's spec or the devices is checked when a run is resolved
(`jaxrl_fast.run.resolve`)."""

from __future__ import annotations

import dataclasses
import math

from jaxrl_fast.algos import ALGORITHMS
from jaxrl_fast.config.plan import dispatch_steps, iteration_steps
from jaxrl_fast.config.run import (
    ALGO_CONFIGS,
    EVAL_SEED_OFFSET,
    OFF_POLICY,
    TrainConfig,
    algo_config,
    oldest_acting_lag,
    uses_async_mode,
)
from jaxrl_fast.types import ConfigError


def validate(config: TrainConfig) -> None:
    """Raise ConfigError with the first of `config_errors` (one line that names the flag)."""
    errors = config_errors(config)
    if errors:
        raise ConfigError(errors[0])


def config_errors(config: TrainConfig) -> list[str]:
    """Every reason `config` cannot run, each naming its flag (empty when it can): the run's fields,
    then its algorithm's own checks."""
    errors = (non_finite_errors(config) + size_errors(config) + combination_errors(config)
              + ALGORITHMS[config.algo].validate(algo_config(config), config) + schedule_errors(config))
    return errors or length_errors(config)  # its arithmetic needs the sizes above to be sound


def length_errors(config: TrainConfig) -> list[str]:
    """An off-policy run learns in whole iterations after a warm-up of whole iterations: where the
    warm-up and one iteration pass --total-steps, the run would train past it (on-policy runs
    refuse a --total-steps below one batch in their own checks)."""
    if config.algo not in OFF_POLICY or config.schedule == "auto":  # checked again once auto has chosen
        return []
    steps, warmup = iteration_steps(config)
    if warmup + steps <= config.total_steps:
        return []
    hyper = algo_config(config)
    dispatch = dispatch_steps(config)
    made_of = (f"--dispatch-steps {dispatch} of the {config.schedule} schedule" if dispatch > 1 and steps >= dispatch
               else f"--num-envs {config.num_envs} at --{config.algo}.utd-ratio {hyper.utd_ratio:g}")
    return [f"--total-steps {config.total_steps:,d} ends before the run's first learning iteration does: "
            f"{warmup:,d} warm-up steps (--{config.algo}.learning-starts {hyper.learning_starts:,d} in whole "
            f"iterations), then iterations of {steps:,d} steps ({made_of}); raise --total-steps to "
            f"{warmup + steps:,d} or more, or make the iterations shorter"]


def non_finite_errors(config: TrainConfig) -> list[str]:
    """Every float of the run's fields and of its algorithm's group must be a finite number: a NaN
    or an infinity there would start a run that cannot learn (or divide by it)."""
    groups = [("", config), (f"{config.algo}.", algo_config(config))]
    return [f"--{prefix}{field.name.replace('_', '-')} must be a finite number, got {value}"
            for prefix, values in groups for field in dataclasses.fields(values)
            if field.name not in ALGO_CONFIGS
            for value in [getattr(values, field.name)]
            if isinstance(value, float) and not math.isfinite(value)]


def size_errors(config: TrainConfig) -> list[str]:
    max_seed = 2**31 - 1 - EVAL_SEED_OFFSET - max(config.num_envs, config.eval_episodes) - (config.num_seeds - 1)
    checks = [
        (config.total_steps > 0, f"--total-steps must be positive, got {config.total_steps}"),
        (config.num_envs > 0, f"--num-envs must be positive, got {config.num_envs}"),
        (config.num_threads >= 0, f"--num-threads must be 0 (auto) or positive, got {config.num_threads}"),
        (config.eval_interval >= 0, f"--eval-interval must be 0 (final evaluation only) or positive, got {config.eval_interval}"),
        (config.eval_episodes > 0, f"--eval-episodes must be positive, got {config.eval_episodes}"),
        (0.0 <= config.eval_epsilon < 1.0, f"--eval-epsilon must be in [0, 1), got {config.eval_epsilon}"),
        (config.scaled_reward_clip >= 0, f"--scaled-reward-clip must be 0 (no clip) or positive, got {config.scaled_reward_clip}"),
        (config.video_interval >= 0, f"--video-interval must be 0 (no videos) or positive, got {config.video_interval}"),
        (config.log_interval > 0, f"--log-interval must be positive, got {config.log_interval}"),
        (config.dispatch_steps >= 0, f"--dispatch-steps must be 0 (auto) or positive, got {config.dispatch_steps}"),
        (config.checkpoint_interval >= 0,
         f"--checkpoint-interval must be 0 (only at the end) or positive, got {config.checkpoint_interval}"),
        (config.keep_checkpoints >= 1, f"--keep-checkpoints must be at least 1, got {config.keep_checkpoints}"),
        (0 <= config.env_batch_size <= config.num_envs,
         f"--env-batch-size {config.env_batch_size} must be between 0 (all envs) and --num-envs {config.num_envs}"),
        (config.calibration_budget_s > 0, f"--calibration-budget-s must be positive, got {config.calibration_budget_s}"),
        (config.num_seeds >= 1, f"--num-seeds must be at least 1, got {config.num_seeds}"),
        (0 <= config.seed <= max_seed, f"--seed must be between 0 and {max_seed} (EnvPool seeds env i with --seed + i in 32 "
         f"bits, evaluation envs with --seed + {EVAL_SEED_OFFSET} + i"
         + (", and --num-seeds adds up to N - 1" if config.num_seeds > 1 else "") + f"), got {config.seed}"),
        (config.run_dir is None or str(config.run_dir) not in ("", "."),
         "--run-dir must name a directory for the run, not the current directory (leave it out for "
         "runs/<env>__<algo>__<seed>__<time>)"),
        (config.profile_start is None or config.profile_start >= 0,
         f"--profile-start must be 0 or positive, got {config.profile_start}"),
        (config.profile_calls is None or config.profile_calls >= 1,
         f"--profile-calls must be at least 1, got {config.profile_calls}"),
    ]
    return [message for ok, message in checks if not ok]


def combination_errors(config: TrainConfig) -> list[str]:
    """Options that exclude each other (--num-seeds, --data-parallel, async-mode batches)."""
    checks = [
        (config.env_batch_size in (0, config.num_envs) or config.schedule == "async",
         f"--env-batch-size {config.env_batch_size} (EnvPool's async mode) is for the --schedule async actors; "
         f"the {config.schedule} schedule steps all --num-envs together inside its jitted program"),
        (not config.batch_seed_updates or config.num_seeds > 1,
         "--batch-seed-updates batches the updates of --num-seeds agents; give --num-seeds 2 or more"),
        (config.eval_policy == "deterministic" or ALGORITHMS[config.algo].stochastic_policy,
         f"--eval-policy sampled draws from a policy's distribution, and {config.algo}'s policy is deterministic "
         f"(sampled: {', '.join(name for name, spec in ALGORITHMS.items() if spec.stochastic_policy)}); "
         "evaluate it with --eval-epsilon instead"),
        (config.scaled_reward_clip == 0 or config.scale_rewards,
         f"--scaled-reward-clip {config.scaled_reward_clip:g} clips the rewards --scale-rewards scales; add it "
         f"(an on-policy option: {', '.join(name for name, spec in ALGORITHMS.items() if spec.family == 'on_policy')})"),
        (config.eval_policy == "deterministic" or config.eval_epsilon == 0,
         f"--eval-policy sampled and --eval-epsilon {config.eval_epsilon:g} (the Atari presets set 0.05) are two ways "
         "to evaluate a noisy policy; give one (add --eval-epsilon 0 to sample)"),
        (config.placement != "split" or config.algo in OFF_POLICY,
         f"--placement split puts an off-policy learner's actor and critic roles on two devices ({', '.join(OFF_POLICY)}); "
         f"{config.algo} has one learner (--schedule concurrent updates it on a second device while the first acts)"),
    ]
    defaults = {field.name: field.default for field in dataclasses.fields(TrainConfig)}
    async_only = [f"--{name.replace('_', '-')} {getattr(config, name)}" for name in ("num_actors", "policy_lag", "max_policy_lag")
                  if getattr(config, name) != defaults[name]]
    checks.append((not async_only or config.schedule == "async" or config.resume is not None,  # saved: as it ran
                   f"{', '.join(async_only)}: the --schedule async actors' settings; the {config.schedule} schedule "
                   "has no actors to set"))
    if config.num_seeds > 1:
        checks += [
            (config.schedule == "sync", f"--num-seeds trains its agents in the sync schedule's one program; "
             f"--schedule {config.schedule} runs one agent (leave --num-seeds out, or use --schedule sync)"),
            (config.placement != "split", "--num-seeds trains every agent in one program on one device; "
             "--placement split runs one agent's roles on two (use --placement single or auto)"),
            (not (config.calibrate or config.recalibrate), "--calibrate sizes one agent's run; with --num-seeds give "
             "--num-envs (each agent's) yourself, or calibrate a single-seed run first and reuse its sizes"),
            (config.keep_checkpoints >= 2, f"--num-seeds needs --keep-checkpoints 2 or more (got {config.keep_checkpoints}): "
             "the agents save one after another, and a run stopped between two saves resumes from the step before"),
        ]
    if config.data_parallel:
        checks += [
            (config.schedule == "sync", f"--data-parallel (and a run of several processes) runs the sync schedule's one "
             f"program on every device; --schedule {config.schedule} is not data-parallel (use --schedule sync)"),
            (config.num_seeds == 1, "--data-parallel trains one agent over every device; --num-seeds trains several "
             "in one process (use one or the other)"),
            (config.placement != "split", "--data-parallel replicates both learner roles on every device; "
             "--placement split gives each role its own (leave --placement out)"),
            (not (config.calibrate or config.recalibrate), "--calibrate measures one process's sizes; give "
             "--num-envs yourself with --data-parallel (or calibrate a one-process run and reuse its sizes)"),
            (not config.profile, "--profile traces one process; leave it out with --data-parallel"),
        ]
    return [message for ok, message in checks if not ok]


def schedule_errors(config: TrainConfig) -> list[str]:
    if config.schedule != "async":
        return []
    async_mode = uses_async_mode(config)
    ahead = f" (+ --num-actors {config.num_actors} in EnvPool's async mode)" if async_mode else ""
    checks = [
        (config.algo in OFF_POLICY,
         f"--schedule async is for the off-policy algorithms ({', '.join(OFF_POLICY)}): {config.algo} learns from its own "
         "policy's rollouts, and rollouts from stale parameters would need an off-policy correction (V-trace) that "
         "this version does not have; --schedule concurrent gives it a lag of exactly one version, deterministically"),
        (config.num_actors >= 1, f"--num-actors must be at least 1, got {config.num_actors}"),
        (config.max_policy_lag >= 0, f"--max-policy-lag must be 0 or positive, got {config.max_policy_lag}"),
        (config.policy_lag >= 0, f"--policy-lag must be 0 or positive, got {config.policy_lag}"),
        (oldest_acting_lag(config, async_mode) <= config.max_policy_lag,
         f"--policy-lag {config.policy_lag}{ahead} would have (most) chunks dropped by --max-policy-lag "
         f"{config.max_policy_lag}: raise --max-policy-lag or lower --policy-lag"),
        (config.placement != "split",
         "--schedule async runs both learner roles on one device group; use --placement single (or auto)"),
    ]
    return [message for ok, message in checks if not ok]
