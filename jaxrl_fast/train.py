"""`python -m jaxrl_fast.train`: train an agent; `--help` lists every flag with its resolved default.

Defaults come from the environment's preset (envs/<env>.toml, then envs/defaults.toml by
family), so the command line is parsed twice: once for `--env` and `--algo`, then in full.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Sequence

from jaxrl_fast.config import ALGOS, OFF_POLICY, TrainConfig


class ConfigError(ValueError):
    pass


def validate(config: TrainConfig) -> None:
    """Raise ConfigError naming the flag for sizes that cannot work together."""

    def need(ok: bool, message: str) -> None:
        if not ok:
            raise ConfigError(message)

    need(config.total_steps > 0, f"--total-steps must be positive, got {config.total_steps}")
    need(config.num_envs > 0, f"--num-envs must be positive, got {config.num_envs}")
    need(config.num_threads >= 0, f"--num-threads must be 0 (auto) or positive, got {config.num_threads}")
    need(config.eval_interval >= 0, f"--eval-interval must be 0 (final evaluation only) or positive, got {config.eval_interval}")
    need(config.eval_episodes > 0, f"--eval-episodes must be positive, got {config.eval_episodes}")
    need(config.video_interval >= 0, f"--video-interval must be 0 (no videos) or positive, got {config.video_interval}")
    need(config.log_interval > 0, f"--log-interval must be positive, got {config.log_interval}")
    need(config.dispatch_steps >= 0, f"--dispatch-steps must be 0 (auto) or positive, got {config.dispatch_steps}")
    need(config.checkpoint_interval >= 0, f"--checkpoint-interval must be 0 (only at the end) or positive, got {config.checkpoint_interval}")
    need(config.keep_checkpoints >= 1, f"--keep-checkpoints must be at least 1, got {config.keep_checkpoints}")
    need(0 <= config.env_batch_size <= config.num_envs,
         f"--env-batch-size {config.env_batch_size} must be between 0 (all envs) and --num-envs {config.num_envs}")
    need(config.env_batch_size in (0, config.num_envs) or config.schedule == "async",
         f"--env-batch-size {config.env_batch_size} (EnvPool's async mode) is for the --schedule async actors; "
         f"the {config.schedule} schedule steps all --num-envs together inside its jitted program")
    need(config.calibration_budget_s > 0, f"--calibration-budget-s must be positive, got {config.calibration_budget_s}")
    need(config.profile_start >= 0, f"--profile-start must be 0 or positive, got {config.profile_start}")
    need(config.profile_calls >= 1, f"--profile-calls must be at least 1, got {config.profile_calls}")
    if config.algo in OFF_POLICY:
        hyper = getattr(config, config.algo)
        flag = f"--{config.algo}"
        need(hyper.batch_size > 0, f"{flag}.batch-size must be positive, got {hyper.batch_size}")
        need(hyper.buffer_size >= hyper.batch_size,
             f"{flag}.buffer-size {hyper.buffer_size} is smaller than one batch ({flag}.batch-size {hyper.batch_size})")
        need(hyper.utd_ratio > 0, f"{flag}.utd-ratio must be positive, got {hyper.utd_ratio}")
        need(hyper.learning_starts >= 0, f"{flag}.learning-starts must be 0 or positive, got {hyper.learning_starts}")
        need(hyper.n_step >= 1, f"{flag}.n-step must be at least 1, got {hyper.n_step}")
        need(0.0 < hyper.gamma <= 1.0, f"{flag}.gamma must be in (0, 1], got {hyper.gamma}")
        need(hyper.buffer_size >= hyper.learning_starts or hyper.learning_starts == 0,
             f"{flag}.buffer-size {hyper.buffer_size} cannot hold the {hyper.learning_starts} warm-up steps ({flag}.learning-starts)")
        need(hyper.learning_starts < config.total_steps,
             f"--total-steps {config.total_steps} leaves no learning after {flag}.learning-starts {hyper.learning_starts}")
        need(not config.normalize_observations and not config.scale_rewards,
             f"--normalize-observations and --scale-rewards are on-policy options; {config.algo} stores raw "
             "observations and rewards in its replay buffer")
    if config.schedule == "async":
        need(config.algo in OFF_POLICY,
             f"--schedule async is for the off-policy algorithms (sac, td3, dqn): {config.algo} learns from its own "
             "policy's rollouts, and rollouts from stale parameters would need an off-policy correction (V-trace) that "
             "this version does not have; --schedule concurrent gives it a lag of exactly one version, deterministically")
        need(config.num_actors >= 1, f"--num-actors must be at least 1, got {config.num_actors}")
        need(config.max_policy_lag >= 0, f"--max-policy-lag must be 0 or positive, got {config.max_policy_lag}")
        need(config.placement != "split",
             "--schedule async runs both learner roles on one device group; use --placement single (or auto)")
    if config.algo == "ppo":
        ppo = config.ppo
        need(ppo.num_steps > 0, f"--ppo.num-steps must be positive, got {ppo.num_steps}")
        need(ppo.update_epochs > 0, f"--ppo.update-epochs must be positive, got {ppo.update_epochs}")
        need(ppo.num_minibatches > 0, f"--ppo.num-minibatches must be positive, got {ppo.num_minibatches}")
        batch = config.num_envs * ppo.num_steps
        need(
            batch % ppo.num_minibatches == 0,
            f"--ppo.num-minibatches {ppo.num_minibatches} does not divide the batch "
            f"--num-envs x --ppo.num-steps = {config.num_envs} x {ppo.num_steps} = {batch}",
        )
        need(batch <= config.total_steps, f"--total-steps {config.total_steps} is smaller than one batch ({batch} samples)")
        need(0.0 < ppo.gamma <= 1.0, f"--ppo.gamma must be in (0, 1], got {ppo.gamma}")
        need(0.0 <= ppo.gae_lambda <= 1.0, f"--ppo.gae-lambda must be in [0, 1], got {ppo.gae_lambda}")
        need(ppo.learning_rate > 0, f"--ppo.learning-rate must be positive, got {ppo.learning_rate}")
        need(len(ppo.hidden_sizes) > 0 and min(ppo.hidden_sizes) > 0, f"--ppo.hidden-sizes must be positive sizes, got {ppo.hidden_sizes}")
    if config.profile:
        from jaxrl_fast.trainer import planned_calls

        calls = planned_calls(config)
        need(config.profile_start + config.profile_calls <= calls,
             f"--profile-start {config.profile_start} + --profile-calls {config.profile_calls} does not fit in the run's "
             f"{calls} training calls (one per --log-interval {config.log_interval} steps of --total-steps "
             f"{config.total_steps}); lower them, or raise --total-steps or lower --log-interval")


RESUME_FLAGS = ("--total-steps", "--progress")  # what may change when a run is resumed


def resume_config(argv: list[str]) -> TrainConfig | None:
    """The saved config of the run named by `--resume RUN_DIR` (None without the flag)."""
    import dataclasses
    import json
    from pathlib import Path

    from jaxrl_fast.checkpoint import latest_step
    from jaxrl_fast.config import config_from_dict

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--resume", type=Path)
    pre.add_argument("--total-steps", type=int)
    pre.add_argument("--progress", choices=("auto", "bar", "plain", "off"))
    known, rest = pre.parse_known_args(argv)
    if known.resume is None:
        return None
    if rest:
        raise ConfigError(f"--resume continues with the run's saved config; only {' and '.join(RESUME_FLAGS)} may be "
                          f"given with it, got {' '.join(rest)}")
    run_dir = known.resume
    saved = run_dir / "config.json"
    if not saved.exists():
        raise ConfigError(f"--resume: {run_dir} holds no run (no config.json)")
    data = json.loads(saved.read_text())
    if "train_config" not in data:
        raise ConfigError(f"--resume: {saved} was written by a version without checkpoints")
    if not os.access(run_dir, os.W_OK):
        raise ConfigError(f"--resume: {run_dir} is not writable")
    if latest_step(run_dir) is None:
        raise ConfigError(f"--resume: {run_dir} has no complete checkpoint yet (checkpoints/ is empty)")
    config = config_from_dict(data["train_config"])
    # sizes already applied; the profile window counted the calls of the first process, its trace is kept
    changes: dict = dict(run_dir=run_dir, resume=run_dir, calibrate=False, recalibrate=False, profile=False)
    if known.total_steps is not None:
        changes["total_steps"] = known.total_steps
    if known.progress is not None:
        changes["progress"] = known.progress
    return dataclasses.replace(config, **changes)


def parse_args(argv: Sequence[str] | None = None) -> TrainConfig:
    """Resolve the env's preset, then parse every flag on top of it, then validate."""
    import tyro

    from jaxrl_fast.env import check_env_id
    from jaxrl_fast.presets import resolve_defaults

    argv = list(sys.argv[1:] if argv is None else argv)
    resumed = resume_config(argv)
    if resumed is not None:
        validate(resumed)
        return resumed
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--env", default=TrainConfig.env)
    pre.add_argument("--algo", default=TrainConfig.algo)
    known, _ = pre.parse_known_args(argv)
    if known.algo not in ALGOS:
        raise ConfigError(f"--algo: unknown algorithm {known.algo!r}; choose from {', '.join(ALGOS)}")
    family = check_env_id(known.env)
    defaults = resolve_defaults(known.env, known.algo, family)
    config = tyro.cli(TrainConfig, default=defaults, args=argv, description=__doc__.splitlines()[0])
    validate(config)
    return config


def check_devices(config: TrainConfig) -> None:
    """Refuse a placement the present devices cannot give, and a replay buffer that cannot fit."""
    if config.algo not in OFF_POLICY:
        return
    from jaxrl_fast.env import probe_spec
    from jaxrl_fast.placement import resolve_placement
    from jaxrl_fast.replay import check_fits, replay_nbytes

    placement = resolve_placement(config.placement)
    spec = probe_spec(config.env)
    if config.algo == "dqn" and not spec.discrete:
        raise ConfigError(f"--algo dqn: {config.env} has continuous actions; DQN needs discrete actions (use sac, td3 or ppo)")
    if config.algo in ("sac", "td3") and spec.discrete:
        raise ConfigError(f"--algo {config.algo}: {config.env} has discrete actions; use dqn or ppo")
    hyper = getattr(config, config.algo)
    nbytes = replay_nbytes(hyper.buffer_size, config.num_envs, spec.obs_shape, "float32", spec.action_shape,
                           "int32" if spec.discrete else "float32")
    from jaxrl_fast.replay import ReplayError

    try:
        check_fits(nbytes, placement.critic[0], f"--{config.algo}.buffer-size")
    except ReplayError as error:
        raise ConfigError(str(error)) from None


def check_video(config: TrainConfig) -> None:
    """With --video-interval, refuse an env that cannot render here or a missing encoder, up front."""
    if not config.video_interval:
        return
    from jaxrl_fast.video import VideoError, check_video_support

    try:
        check_video_support(config.env)
    except VideoError as error:
        raise ConfigError(str(error)) from None


def main(argv: Sequence[str] | None = None) -> int:
    from jaxrl_fast.env import EnvError
    from jaxrl_fast.metrics import RunDirError, check_run_dir, default_run_dir
    from jaxrl_fast.placement import PlacementError
    from jaxrl_fast.presets import PresetError

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("jaxrl_fast").setLevel(logging.INFO)
    try:
        config = parse_args(argv)
        if config.resume is None:
            check_run_dir(config.run_dir or default_run_dir(config.env, config.algo, config.seed))
        check_devices(config)
        check_video(config)
    except (ConfigError, EnvError, PresetError, RunDirError, PlacementError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    calibration = None
    if config.calibrate or config.recalibrate:
        from jaxrl_fast.calibrate import calibrate

        calibration = calibrate(config, config.calibration_budget_s, recalibrate=config.recalibrate)
        print(calibration.table(), file=sys.stderr)
        config = calibration.apply(config)
        try:
            validate(config)
        except ConfigError as error:
            print(f"error: the calibrated sizes do not fit the other flags: {error}", file=sys.stderr)
            return 2
    from jaxrl_fast.checkpoint import NonFiniteError
    from jaxrl_fast.trainer import train

    try:
        summary = train(config, calibration, resume=config.resume is not None)
    except NonFiniteError as error:
        print(f"error: {error}; training stopped, the last good checkpoint is kept", file=sys.stderr)
        return 1
    return 130 if summary["interrupted"] else 0


if __name__ == "__main__":
    sys.exit(main())
