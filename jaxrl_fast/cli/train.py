"""`python -m jaxrl_fast.train`: train an agent; `--help` lists the run's flags and the chosen
algorithm's, each with its resolved default.

Defaults come from the environment's preset (envs/<env>.toml, then envs/defaults.toml by
family), so the command line is parsed twice: once for `--env` and `--algo`, then in full
(the run's fields and `--algo`'s group only: `config.cli_config`).
"""

from __future__ import annotations

import sys

from jaxrl_fast.run.stopping import StopRequest

# The `jaxrl-fast-train` script (never a mere import): catch SIGINT and SIGTERM before the imports
# below (seconds, JAX among them), so that a Ctrl-C in the first second is a stop request like any
# later one, never lost. `python -m jaxrl_fast.train` catches them in its own first lines.
EARLY_STOP = StopRequest(second="exit").__enter__() if sys.argv[0].endswith("jaxrl-fast-train") else None

import argparse
import contextlib
import dataclasses
import logging
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from jaxrl_fast.algos import ALGORITHMS, action_space_error
from jaxrl_fast.config.run import ALGOS, OFF_POLICY, TrainConfig, algo_config, cli_config

from jaxrl_fast.engine.cluster import Cluster
from jaxrl_fast.outputs.run_dir import CONFIG_FILE
from jaxrl_fast.config.run import EVAL_SEED_OFFSET

if TYPE_CHECKING:
    from jaxrl_fast.types import EnvSpec

PROG = "python -m jaxrl_fast.train"
DESCRIPTION = ("Train an agent on an EnvPool environment. Defaults come from the env's preset; only the chosen "
               "--algo's flag group is listed (`--algo sac --help` shows SAC's flags). A process of a run of several "
               "also takes --coordinator-address, --num-processes, --process-id and --distributed-timeout-s "
               "(python -m jaxrl_fast.launch gives them; docs/distributed.md).")


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
    need(0.0 <= config.eval_epsilon < 1.0, f"--eval-epsilon must be in [0, 1), got {config.eval_epsilon}")
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
    need(config.num_seeds >= 1, f"--num-seeds must be at least 1, got {config.num_seeds}")
    if config.num_seeds > 1:
        need(config.schedule == "sync", f"--num-seeds trains its agents in the sync schedule's one program; "
             f"--schedule {config.schedule} runs one agent (leave --num-seeds out, or use --schedule sync)")
        need(config.placement != "split", "--num-seeds trains every agent in one program on one device; "
             "--placement split runs one agent's roles on two (use --placement single or auto)")
        need(not (config.calibrate or config.recalibrate), "--calibrate sizes one agent's run; with --num-seeds give "
             "--num-envs (each agent's) yourself, or calibrate a single-seed run first and reuse its sizes")
        need(config.keep_checkpoints >= 2, f"--num-seeds needs --keep-checkpoints 2 or more (got {config.keep_checkpoints}): "
             "the agents save one after another, and a run stopped between two saves resumes from the step before")
    if config.data_parallel:
        need(config.schedule == "sync", f"--data-parallel (and a run of several processes) runs the sync schedule's one "
             f"program on every device; --schedule {config.schedule} is not data-parallel (use --schedule sync)")
        need(config.num_seeds == 1, "--data-parallel trains one agent over every device; --num-seeds trains several "
             "in one process (use one or the other)")
        need(config.placement != "split", "--data-parallel replicates both learner roles on every device; "
             "--placement split gives each role its own (leave --placement out)")
        need(not (config.calibrate or config.recalibrate), "--calibrate measures one process's sizes; give "
             "--num-envs yourself with --data-parallel (or calibrate a one-process run and reuse its sizes)")
        need(not config.profile, "--profile traces one process; leave it out with --data-parallel")
    need(not config.batch_seed_updates or config.num_seeds > 1, "--batch-seed-updates batches the updates of "
         "--num-seeds agents; give --num-seeds 2 or more")
    max_seed = 2**31 - 1 - EVAL_SEED_OFFSET - max(config.num_envs, config.eval_episodes) - (config.num_seeds - 1)
    need(0 <= config.seed <= max_seed, f"--seed must be between 0 and {max_seed} (EnvPool seeds env i with "
         f"--seed + i in 32 bits, evaluation envs with --seed + {EVAL_SEED_OFFSET} + i"
         + (", and --num-seeds adds up to N - 1" if config.num_seeds > 1 else "") + f"), got {config.seed}")
    need(config.target_return is None or math.isfinite(config.target_return),
         f"--target-return must be a finite number, got {config.target_return}")
    need(config.run_dir is None or str(config.run_dir) not in ("", "."),
         "--run-dir must name a directory for the run, not the current directory (leave it out for runs/<env>__<algo>__<seed>__<time>)")
    for message in ALGORITHMS[config.algo].validate(algo_config(config), config):
        raise ConfigError(message)
    if config.schedule == "async":
        need(config.algo in OFF_POLICY,
             f"--schedule async is for the off-policy algorithms ({', '.join(OFF_POLICY)}): {config.algo} learns from its own "
             "policy's rollouts, and rollouts from stale parameters would need an off-policy correction (V-trace) that "
             "this version does not have; --schedule concurrent gives it a lag of exactly one version, deterministically")
        need(config.num_actors >= 1, f"--num-actors must be at least 1, got {config.num_actors}")
        need(config.max_policy_lag >= 0, f"--max-policy-lag must be 0 or positive, got {config.max_policy_lag}")
        need(config.placement != "split",
             "--schedule async runs both learner roles on one device group; use --placement single (or auto)")
    need(config.profile_start is None or config.profile_start >= 0,
         f"--profile-start must be 0 or positive, got {config.profile_start}")
    need(config.profile_calls is None or config.profile_calls >= 1,
         f"--profile-calls must be at least 1, got {config.profile_calls}")
    if config.profile:
        from jaxrl_fast.config.plan import planned_calls
        from jaxrl_fast.outputs.profiler import WindowError, profile_window

        try:
            profile_window(config.profile_start, config.profile_calls, planned_calls(config))
        except WindowError as error:
            raise ConfigError(f"{error} (one per --log-interval {config.log_interval} steps of --total-steps "
                              f"{config.total_steps}); lower them, or raise --total-steps or lower --log-interval") from None

RESUME_FLAGS = ("--total-steps", "--progress", "--no-compile-cache")  # what may change when a run is resumed


def resume_config(argv: list[str]) -> TrainConfig | None:
    """The saved config of the run named by `--resume RUN_DIR` (None without the flag)."""
    import json

    from jaxrl_fast.outputs.checkpoint import agents_out_of_step, latest_step
    from jaxrl_fast.config.run import config_from_dict

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--resume", type=Path)
    pre.add_argument("--total-steps", type=int)
    pre.add_argument("--progress", choices=("auto", "bar", "plain", "off"))
    pre.add_argument("--no-compile-cache", action="store_true")
    known, rest = pre.parse_known_args(argv)
    if known.resume is None:
        return None
    if rest:
        raise ConfigError(f"--resume continues with the run's saved config; only {', '.join(RESUME_FLAGS)} may be "
                          f"given with it, got {' '.join(rest)}")
    run_dir = known.resume
    saved = run_dir / CONFIG_FILE
    if not saved.exists():
        raise ConfigError(f"--resume: {run_dir} holds no run (no config.json)")
    data = json.loads(saved.read_text())
    if "train_config" not in data:
        raise ConfigError(f"--resume: {saved} was written by a version without checkpoints")
    if not os.access(run_dir, os.W_OK):
        raise ConfigError(f"--resume: {run_dir} is not writable")
    ahead = agents_out_of_step(run_dir)
    if ahead:
        raise ConfigError(f"--resume: {', '.join(ahead)} of {run_dir} trained past the run's other seeds on its own "
                          "(--resume of its directory); resuming the whole run would drop that training. Resume those "
                          "seeds' directories one by one instead")
    done = latest_step(run_dir)  # None: stopped before its first checkpoint, the trainer starts it over
    if done is not None and known.total_steps is not None and known.total_steps < done:
        raise ConfigError(f"--resume: {run_dir} has trained {done:,d} steps already; --total-steps {known.total_steps:,d} "
                          "is below that (give a larger one to train longer, or leave it out)")
    config = config_from_dict(data["train_config"])
    # sizes already applied; the profile window counted the calls of the first process, its trace is kept
    changes: dict = dict(run_dir=run_dir, resume=run_dir, calibrate=False, recalibrate=False, profile=False,
                         compile_cache=not known.no_compile_cache)  # this process's setting, not the saved one
    if known.total_steps is not None:
        changes["total_steps"] = known.total_steps
    if known.progress is not None:
        changes["progress"] = known.progress
    return dataclasses.replace(config, **changes)


def parse_args(argv: Sequence[str] | None = None) -> TrainConfig:
    """Resolve the env's preset, then parse every flag on top of it, then validate."""
    import tyro

    from jaxrl_fast.env.ids import check_env_id, merge_env_kwargs
    from jaxrl_fast.config.presets import resolve_defaults

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
    target = cli_config(known.algo)  # the run's flags and --algo's group only
    parsed = tyro.cli(target, default=target(**{f.name: getattr(defaults, f.name) for f in dataclasses.fields(target)}),
                      args=argv, prog=PROG, description=DESCRIPTION)
    config = dataclasses.replace(defaults, **{f.name: getattr(parsed, f.name) for f in dataclasses.fields(target)})
    config = dataclasses.replace(config, env_kwargs=merge_env_kwargs(defaults.env_kwargs, config.env_kwargs))
    check_action_space(config)  # the most basic mismatch first: no size makes SAC act in CartPole
    validate(config)
    return config


def check_action_space(config: TrainConfig) -> None:
    """Refuse EnvPool options the env does not have, an algorithm (or gSDE) that cannot act in its
    action space, and what cannot take its observations."""
    from jaxrl_fast.env.ids import check_env_kwargs, parse_env_kwargs
    from jaxrl_fast.env.envpool import probe_spec

    options = parse_env_kwargs(config.env_kwargs)
    check_env_kwargs(config.env, options)
    spec = probe_spec(config.env, options)
    error = action_space_error(config.algo, spec)
    if error is not None:
        raise ConfigError(error)
    if spec.discrete and getattr(algo_config(config), "use_sde", False):
        raise ConfigError(f"--{config.algo}.use-sde needs continuous actions; {config.env} has discrete actions")
    check_observations(config, spec)


def check_observations(config: TrainConfig, spec: EnvSpec) -> None:
    """Images need an encoder and the sync or concurrent schedule, and Atari's (the ones the encoders
    are tested on); vectors need none."""
    from jaxrl_fast.env.ids import PIXEL_FAMILIES, env_family

    hyper = algo_config(config)
    encoder = hyper.encoder
    flag = f"--{config.algo}.encoder"
    if not spec.pixels:
        if encoder not in ("auto", "none"):
            raise ConfigError(f"{flag} {encoder} encodes images; {config.env} observes vectors {list(spec.obs_shape)} "
                              "(leave it out, or use none)")
        return
    refusals = [
        (env_family(config.env) not in PIXEL_FAMILIES, f"{config.env} observes images {list(spec.obs_shape)}; this version "
                                                        "trains on Atari's frames only (its encoders are tested on them)"),
        (encoder == "none", f"{flag} none: {config.env} observes images {list(spec.obs_shape)}, which need an encoder "
                            "(nature or impala)"),
        (config.normalize_observations, f"--normalize-observations: {config.env} observes uint8 images, which the "
                                        "encoder scales to [0, 1] (leave the flag out)"),
        (config.schedule == "async", "--schedule async: its actors take vector observations; images train with "
                                     "--schedule sync or concurrent"),
        (config.calibrate or config.recalibrate, "--calibrate measures vector-observation envs; with images give "
                                                 "--num-envs yourself"),
    ]
    for refused, message in refusals:
        if refused:
            raise ConfigError(message)
    if config.algo not in OFF_POLICY:
        return
    rows = hyper.n_step + spec.frame_stack  # replay rows per env that a first sample reads
    if hyper.learning_starts < config.num_envs * rows:
        raise ConfigError(f"--{config.algo}.learning-starts {hyper.learning_starts}: the first sample rebuilds "
                          f"{spec.frame_stack}-frame stacks over {hyper.n_step} step(s), which needs at least {rows} "
                          f"rows per env: give {config.num_envs * rows} or more")


def check_devices(config: TrainConfig) -> None:
    """Refuse a placement the present devices cannot give, sizes that do not split over its
    data-parallel shards, and a replay buffer that cannot fit where the run's placement puts it."""
    from jaxrl_fast.env.ids import parse_env_kwargs
    from jaxrl_fast.env.envpool import probe_spec
    from jaxrl_fast.engine.placement import resolve
    from jaxrl_fast.engine.replay import ReplayError, check_fits, replay_nbytes
    from jaxrl_fast.engine.sharding import shard_sizes_error

    placement = resolve(config)
    if placement.mode == "data":
        error = shard_sizes_error(config, placement.shards) or resumed_shards_error(config, placement.shards)
        if error:
            raise ConfigError(error)
    if config.algo not in OFF_POLICY:
        return
    spec = probe_spec(config.env, parse_env_kwargs(config.env_kwargs))
    hyper = algo_config(config)
    nbytes = config.num_seeds * replay_nbytes(hyper.buffer_size, config.num_envs, spec.obs_shape, spec.obs_dtype,
                                              spec.action_shape, "int32" if spec.discrete else "float32", spec.frame_stack)
    device = placement.critic[0]
    if placement.mode == "data":  # each device holds its shard's buffer; this process sees its own devices only
        nbytes, device = nbytes // placement.shards, placement.acting
    try:
        check_fits(nbytes, device, f"--{config.algo}.buffer-size")
    except ReplayError as error:
        raise ConfigError(str(error)) from None


def resumed_shards_error(config: TrainConfig, shards: int) -> str | None:
    """Why a data-parallel `--resume` cannot restore its checkpoint over `shards` shards, or None:
    the checkpoint holds each shard's envs and buffer, so the count must be the one it was saved with."""
    import json

    if config.resume is None:
        return None
    saved = json.loads((Path(config.resume) / CONFIG_FILE).read_text())
    if not saved["train_config"].get("data_parallel"):
        return (f"--resume: {config.resume} was trained by one process without --data-parallel; resume it the same "
                "way (python -m jaxrl_fast.train --resume RUN_DIR)")
    before = saved.get("placement", {}).get("shards")
    if before != shards:
        return (f"--resume: {config.resume} was trained over {before} data-parallel shards (devices of all its "
                f"processes); this run has {shards}: resume it with as many processes and devices")
    return None


def check_video(config: TrainConfig) -> None:
    """With --video-interval, refuse an env that cannot render here or a missing encoder, up front."""
    if not config.video_interval:
        return
    from jaxrl_fast.outputs.video import VideoError, check_video_support

    try:
        check_video_support(config.env)
    except VideoError as error:
        raise ConfigError(str(error)) from None


def make_run_dir(config: TrainConfig) -> Path:
    """Create the new run's directory now, so that one the system refuses (/proc/x, a full disk) is a
    one-line error before anything is compiled."""
    from jaxrl_fast.outputs.run_dir import RunDirError, default_run_dir

    run_dir = Path(config.run_dir or default_run_dir(config.env, config.algo, config.seed))
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunDirError(f"--run-dir: {run_dir} cannot be created ({error.strerror})") from None
    return run_dir


def main(argv: Sequence[str] | None = None, early_stop: StopRequest | None = None) -> int:
    """The CLI; its exit status: 0 done, 1 a run stopped by an error (a NaN, a failed checkpoint
    write, a lost process of a distributed run), 2 bad input, 130 stopped by SIGINT or SIGTERM.
    `early_stop`: a stop request its caller entered before importing this module."""
    with early_stop or EARLY_STOP or StopRequest(second="exit") as stop:
        return run_command(argv, stop)


def check_cluster(config: TrainConfig, joined: Cluster) -> TrainConfig:
    """A distributed run's config: data-parallel, in a run directory every process names alike."""
    if not joined.distributed:
        return config
    if config.run_dir is None:
        raise ConfigError("a run of several processes needs --run-dir (a directory every process sees; "
                          "`python -m jaxrl_fast.launch` gives one)")
    if not config.data_parallel:
        config = dataclasses.replace(config, data_parallel=True)
        validate(config)
    if joined.num_processes > 1 and config.num_envs % joined.num_processes:
        raise ConfigError(f"--num-envs {config.num_envs} does not split over {joined.num_processes} processes")
    return config


def run_command(argv: Sequence[str] | None, stop: StopRequest) -> int:
    from jaxrl_fast.engine import cluster
    from jaxrl_fast.env.ids import EnvError
    from jaxrl_fast.outputs.run_dir import RunDirError, check_run_dir, default_run_dir
    from jaxrl_fast.config.presets import PresetError

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("jaxrl_fast").setLevel(logging.INFO)
    try:  # every process of a distributed run refuses bad input alike, before joining the others
        joined, argv = cluster.split_flags(sys.argv[1:] if argv is None else argv)
        config = check_cluster(parse_args(argv), joined)
        if config.resume is None:
            check_run_dir(config.run_dir or default_run_dir(config.env, config.algo, config.seed))
    except (ConfigError, cluster.ClusterError, EnvError, PresetError, RunDirError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not joined.distributed:
        return run_joined(config, stop, joined)
    try:
        cluster.initialize(joined)
        code = run_joined(config, stop, joined)
    except BaseException as failure:  # noqa: BLE001  a process that fails leaves at once (cluster's docstring)
        cluster.leave(1, f"error: {cluster.name(joined)}: {cluster.failure_text(failure)}")
    cluster.finish(code)


def agreed(refusal: str | None, joined: Cluster) -> str | None:
    """A refusal any process of a distributed run made, in every process (a collective): one
    process refusing alone would leave the others waiting for it in their first collective."""
    if not joined.distributed:
        return refusal
    from jaxrl_fast.engine.cluster import any_process

    if any_process(refusal is not None)[0]:
        return refusal or "another process of the run refused its input (its error is above)"
    return None


def refusal_after_joining(config: TrainConfig) -> str | None:
    """What `check_devices` and `check_video` refuse once the devices are known (None: nothing)."""
    from jaxrl_fast.env.ids import EnvError
    from jaxrl_fast.engine.placement import PlacementError

    try:
        check_devices(config)
        check_video(config)
    except (ConfigError, EnvError, PlacementError) as error:
        return str(error)
    return None


def run_joined(config: TrainConfig, stop: StopRequest, joined: Cluster) -> int:
    """The run, once this process has joined the others of a distributed run (or alone)."""
    from jaxrl_fast.engine.cluster import any_process, is_primary
    from jaxrl_fast.outputs.run_dir import RunDirError, default_run_dir

    refusal = agreed(refusal_after_joining(config), joined)
    if config.resume is None:
        config = dataclasses.replace(config, run_dir=Path(config.run_dir or default_run_dir(config.env, config.algo, config.seed)))
        if refusal is None and is_primary():  # last: everything else is checked before the directory exists
            try:
                make_run_dir(config)
            except RunDirError as error:
                refusal = str(error)
        refusal = agreed(refusal, joined)
    if refusal is not None:
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    if config.compile_cache:  # before calibration, the first thing that compiles
        from jaxrl_fast.engine import compile_cache

        compile_cache.enable()
    calibration = None
    if config.calibrate or config.recalibrate:
        from jaxrl_fast.calibration.measure import calibrate

        calibration = calibrate(config, config.calibration_budget_s, recalibrate=config.recalibrate)
        print(calibration.table(), file=sys.stderr)
        config = calibration.apply(config)
        try:
            validate(config)
        except ConfigError as error:
            with contextlib.suppress(OSError):  # the empty directory made for the run
                config.run_dir.rmdir()
            print(f"error: the calibrated sizes do not fit the other flags: {error}", file=sys.stderr)
            return 2
    if any_process(stop.signal is not None)[0]:  # before training began (imports, checks, calibration)
        if config.resume is None and is_primary():
            with contextlib.suppress(OSError):
                config.run_dir.rmdir()
        print(f"{stop.name}: stopped before training began; nothing was written", file=sys.stderr)
        return 130
    from jaxrl_fast.outputs.checkpoint import CheckpointSaveError, NonFiniteError, latest_step
    from jaxrl_fast.run.trainer import train

    try:
        summary = train(config, calibration, resume=config.resume is not None, stop=stop, joined=joined)
    except (NonFiniteError, CheckpointSaveError) as error:
        step = latest_step(config.run_dir)
        kept = (f"the last good checkpoint (step {step:,d}) is kept" if step is not None else
                f"no checkpoint was written; --resume {config.run_dir} starts the run over")
        print(f"error: {error}; training stopped, {kept}", file=sys.stderr)
        return 1
    return 130 if summary["interrupted"] else 0

