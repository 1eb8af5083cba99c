"""Resolving a run: a config in; the validated config, the env's spec, the placement, the plan and
the run directory out, each computed once here and handed down (to the build, the schedules,
calibration, the launcher and the benchmark), never recomputed.

    inputs = check_inputs(config, joined)      # no device touched: validation, the env's spec, the directory
    resolved = on_devices(inputs, joined)      # after joining: placement, device checks, calibration, plan
    resolve(config) = on_devices(check_inputs(config))      # one process (the Python API)

The CLI calls the two halves apart because a run of several processes joins between them
(`jax.distributed` must start before anything touches a backend). Every refusal is a
`ConfigError` whose message is one line naming the flag, raised before anything is written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any, Callable

from jaxrl_fast.algos import action_space_error
from jaxrl_fast.config.checks import validate
from jaxrl_fast.config.plan import Plan, env_threads, make_plan
from jaxrl_fast.config.run import (
    ALGOS,
    OFF_POLICY,
    TrainConfig,
    algo_config,
    config_from_dict,
    oldest_acting_lag,
    uses_async_mode,
)
from jaxrl_fast.engine.cluster import Cluster
from jaxrl_fast.env.envpool import probe_gpu_step, probe_spec
from jaxrl_fast.env.ids import JAX_FAMILIES, PIXEL_FAMILIES, check_env_kwargs, parse_env_kwargs
from jaxrl_fast.outputs.run_dir import (
    CONFIG_FILE,
    RunLock,
    check_run_dir,
    create_run_dir,
    default_run_dir,
    first_free,
)
from jaxrl_fast.types import ConfigError, EnvSpec


@dataclasses.dataclass(frozen=True)
class Inputs:
    """A config that passed every check that needs no device."""

    config: TrainConfig  # validated; its run_dir is the run's directory; its schedule chosen
    spec: EnvSpec  # one agent's envs (num_envs = config.num_envs)
    schedule_reason: str | None = None  # why `--schedule auto` chose the schedule (None: the user named it)
    new_dir: bool = False  # the run's directory did not exist when checked: this run creates it, alone
    default_dir: bool = False  # its name is the default (`runs/<env>__<algo>__<seed>__<time>`): a taken one moves on


@dataclasses.dataclass(frozen=True)
class ResolvedRun:
    """Everything a run is built from, resolved once."""

    config: TrainConfig  # validated, calibration's sizes applied, run_dir set
    spec: EnvSpec  # one agent's envs (a --num-seeds run's pool has num_seeds times as many)
    placement: Any  # jaxrl_fast.engine.placement.Placement
    plan: Plan
    calibration: Any  # jaxrl_fast.calibration.measure.Calibration, or None
    joined: Cluster  # the processes of the run (none: alone)
    primary: bool  # this process writes the run directory and evaluates (process 0)
    schedule_reason: str | None = None  # why `--schedule auto` chose the schedule (None: the user named it)
    lock: RunLock | None = None  # the run directory's, held by process 0 until the run ends (`run_training`)

    @property
    def run_dir(self) -> Path:
        return Path(self.config.run_dir)

    @property
    def resume(self) -> bool:
        return self.config.resume is not None


def resolve(config: TrainConfig, log: Callable[[str], None] = print) -> ResolvedRun:
    """A run of this one process, resolved (its directory created)."""
    return on_devices(check_inputs(config), log=log)


def check_inputs(config: TrainConfig, joined: Cluster = Cluster(), run_dir: bool = True) -> Inputs:
    """Validation, the env's options and spec, what can act in it, and (with `run_dir`) the run's
    directory: a new run's default is chosen here, once, and checked for being writable."""
    if joined.distributed:
        config = distributed_config(config, joined)
    options = parse_env_kwargs(config.env_kwargs)
    check_env_kwargs(config.env, options)
    spec = dataclasses.replace(probe_spec(config.env, options), num_envs=config.num_envs)
    check_actions(config, spec)  # the most basic mismatch first: no size makes SAC act in CartPole
    check_observations(config, spec)
    check_backend(config, spec)
    reason = None
    if config.schedule == "auto":
        schedule, reason = auto_schedule(config, spec)
        config = dataclasses.replace(config, schedule=schedule)
        if schedule == "async" and not config.dispatch_steps:  # what auto's measurements were made at
            config = dataclasses.replace(config, dispatch_steps=AUTO_ASYNC_DISPATCH_STEPS)
    validate(config)
    check_open_files(config.num_seeds)
    if not (run_dir and config.resume is None):
        return Inputs(config, spec, reason)
    directory = Path(config.run_dir) if config.run_dir else first_free(default_run_dir(config.env, config.algo, config.seed))
    check_run_dir(directory)
    default = not config.run_dir and not joined.distributed  # one that exists already is another run's, begun now
    return Inputs(dataclasses.replace(config, run_dir=directory), spec, reason,
                  new_dir=default or not directory.exists(), default_dir=default)


FILES_PER_AGENT = 4  # a --num-seeds agent's log, TensorBoard events, evaluator's pipes (45 files for 10, 2026-11-29)
FILES_OF_THE_PROCESS = 256  # the libraries', EnvPool's, the compilation cache's, with room to spare


def check_open_files(num_seeds: int) -> None:
    """A --num-seeds run keeps files open per agent: raise the process's soft limit on open files
    as far as its hard limit allows, or refuse the run before anything is built (it would fail
    opening the last agents' logs, with its first ones written)."""
    import resource

    need = FILES_OF_THE_PROCESS + FILES_PER_AGENT * num_seeds
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if num_seeds == 1 or soft == resource.RLIM_INFINITY or need <= soft:
        return
    if hard == resource.RLIM_INFINITY or need <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
        return
    raise ConfigError(f"--num-seeds {num_seeds} keeps about {need:,d} files open ({FILES_PER_AGENT} per agent: its "
                      f"log, TensorBoard events, evaluator), and this process may open at most {hard:,d} (`ulimit -Hn`); "
                      f"train at most {(hard - FILES_OF_THE_PROCESS) // FILES_PER_AGENT:,d} seeds per run, or raise the limit")


AUTO_ASYNC_DISPATCH_STEPS = 256  # auto's async on Python envs: 1.29-1.34x sync's env steps/s (docs/schedules.md)
ASYNC_ON_PYTHON_ENVS = ("sac", "td3")  # measured learning level with sync at auto's lag; DQN was not


def auto_schedule(config: TrainConfig, spec: EnvSpec) -> tuple[str, str]:
    """`--schedule auto`: the schedule measured fastest for this kind of run, and why (docs/schedules.md).

    Acting and learning overlap only where both are substantial and use different resources: a
    Gymnasium env steps in Python under the GIL while the learner's XLA programs release it, so an
    actor-critic off-policy learner gains from the async actors there (at 256 env steps per
    dispatch, which auto takes with it, at its default lag of one version: 1.34x SAC and 1.29x TD3
    gym:Pendulum-v1 env steps/s of sync on a 2-core CPU, learning level over 8 seeds). DQN keeps
    sync: its speed-up needs the lag (async at lag 0 ran 1.01x sync), and the lag cost final
    returns on gym:CartPole-v1 (28 seeds of 48 ended at 500 against sync's 36; lag 0: as sync).
    EnvPool's C++ envs step in
    microseconds and JAX-native envs inside the program: sync was the fastest schedule, or level
    with it, in every EnvPool measurement on this CPU, an H100 and an H200 but Atari's on this CPU, and
    it is deterministic. On Atari (2-core CPU) concurrent was 1.15-1.23x sync's env steps/s on Pong but
    level on Breakout, where it learned as well per env step (PQN, seeds 0-2), and 0.92-0.93x on Pong on an H200:
    sync stays, and the reason names concurrent for on-policy pixels."""
    python_envs = spec.family == "gymnasium"
    if config.algo in OFF_POLICY and python_envs:
        blocked = [flag for flag, on in (("--num-seeds", config.num_seeds > 1), ("--data-parallel", config.data_parallel),
                                         ("--placement split", config.placement == "split")) if on]
        if blocked:
            return "sync", f"sync: {', '.join(blocked)} runs under the sync schedule only (async would overlap the Python envs)"
        if config.algo in ASYNC_ON_PYTHON_ENVS:
            return "async", ("SAC or TD3 on Python-stepped Gymnasium envs: the async actors step them while the "
                             f"learner updates, {AUTO_ASYNC_DISPATCH_STEPS} env steps per dispatch unless "
                             "--dispatch-steps is given (SAC and TD3 measured 1.29-1.34x sync's env steps/s)")
        if config.algo == "dqn":
            return "sync", ("sync: under async DQN's behaviour policy lags the learner's, which ended fewer "
                            "gym:CartPole-v1 seeds at 500 (28 of 48 against 36; --schedule async runs it 1.2-1.6x faster)")
        return "sync", f"sync: {config.algo} was not measured under async on Python envs"
    if python_envs:
        return "sync", "sync: async is off-policy only, and concurrent was not measured faster on Python envs"
    if spec.obs_dtype == "uint8" and config.algo not in OFF_POLICY:
        return "sync", ("sync: one fused program; on Atari concurrent measured 1.15-1.23x its env steps/s on Pong and "
                        "level on Breakout on a 2-core CPU, slower on a GPU (try --schedule concurrent on a CPU)")
    return "sync", ("sync: one fused program, the fastest schedule or level with it in every EnvPool measurement "
                    "(JAX-native envs step inside it), and deterministic")


def distributed_config(config: TrainConfig, joined: Cluster) -> TrainConfig:
    """A run of several processes: data-parallel, in a run directory every process names alike."""
    if config.run_dir is None:
        raise ConfigError("a run of several processes needs --run-dir (a directory every process sees; "
                          "`python -m jaxrl_fast.launch` gives one)")
    if joined.num_processes > 1 and config.num_envs % joined.num_processes:
        raise ConfigError(f"--num-envs {config.num_envs} does not split over {joined.num_processes} processes")
    return dataclasses.replace(config, data_parallel=True)


def check_actions(config: TrainConfig, spec: EnvSpec) -> None:
    """An algorithm (or gSDE) that cannot act in the env's action space."""
    error = action_space_error(config.algo, spec)
    if error is not None:
        raise ConfigError(error)
    if spec.discrete and getattr(algo_config(config), "use_sde", False):
        raise ConfigError(f"--{config.algo}.use-sde needs continuous actions; {config.env} has discrete actions")
    bounds = spec.action_low + spec.action_high
    if config.algo in OFF_POLICY and not all(math.isfinite(bound) for bound in bounds):
        raise ConfigError(f"--algo {config.algo}: {config.env}'s action bounds are not finite (low {spec.action_low}, "
                          f"high {spec.action_high}); {config.algo} squashes its actions into them (give the env's "
                          "action space finite bounds, or use ppo, which clips)")


def check_backend(config: TrainConfig, spec: EnvSpec) -> None:
    """What the Gymnasium backend's host envs and the JAX-native backend cannot do (docs/own-env.md
    lists it)."""
    if spec.family not in ("gymnasium", *JAX_FAMILIES):
        return
    kind = {"gymnasium": "Gymnasium", "brax": "Brax"}.get(spec.family, spec.family)
    refusals = [
        (config.env_batch_size, "--env-batch-size: EnvPool's async mode needs an EnvPool id"),
        (config.data_parallel, "--data-parallel shards EnvPool's pools; use an EnvPool id, or --num-seeds for many agents"),
        (config.calibrate or config.recalibrate, "--calibrate measures EnvPool's pools; give --num-envs yourself"),
        (config.video_interval, f"--video-interval films EnvPool's renders; a {kind} env's run has no video"),
    ]
    for refused, message in refusals:
        if refused:
            raise ConfigError(f"{message} ({config.env} is a {kind} environment)")


def check_observations(config: TrainConfig, spec: EnvSpec) -> None:
    """Images need an encoder and the sync or concurrent schedule, and Atari's (the ones the encoders
    are tested on); vectors need none."""
    hyper = algo_config(config)
    encoder = hyper.encoder
    flag = f"--{config.algo}.encoder"
    if not spec.pixels:
        if len(spec.obs_shape) != 1:  # EnvPool's toy_text: FrozenLake's and Taxi's state numbers, Catch's grid
            shape = "one integer (a Discrete observation)" if not spec.obs_shape else f"an array {list(spec.obs_shape)}"
            raise ConfigError(f"{config.env} observes {shape}; this version trains on vector observations (a 1-D "
                              "Box, or a dict of them) and Atari's and Procgen's images")
        if encoder not in ("auto", "none"):
            raise ConfigError(f"{flag} {encoder} encodes images; {config.env} observes vectors {list(spec.obs_shape)} "
                              "(leave it out, or use none)")
        return
    refusals = [
        (spec.family not in PIXEL_FAMILIES, f"{config.env} observes images {list(spec.obs_shape)}; this version trains on "
                                            "Atari's and Procgen's only (its encoders are tested on them)"),
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


def on_devices(inputs: Inputs, joined: Cluster = Cluster(), log: Callable[[str], None] = print,
               run_dir: bool = True) -> ResolvedRun:
    """The placement and what the devices refuse (every process of a run agreeing), the run's
    directory made (with `run_dir`: last, once nothing else refuses), calibration's sizes, the plan."""
    from jaxrl_fast.engine import compile_cache
    from jaxrl_fast.engine.cluster import is_primary

    config, primary = inputs.config, is_primary()
    placement, refusal = None, flags_apart(config, joined)
    try:
        placement = place(config)
        warning = check_devices(config, placement, inputs.spec)
        if warning and primary:
            log(warning)
        check_video(config)
        make_plan(config, threads(config, placement))  # a --profile window that does not fit, before calibration
    except ConfigError as error:
        refusal = str(error)
    refusal = agreed(refusal, joined)
    made, lock = run_dir and config.resume is None and primary, None
    if refusal is None and run_dir and primary:
        try:
            if made:
                config = dataclasses.replace(config, run_dir=create_run_dir(Path(config.run_dir), inputs.new_dir,
                                                                            inputs.default_dir))
            lock = RunLock(Path(config.run_dir))  # a new run's, or the resumed one's
        except ConfigError as error:
            refusal = str(error)
    refusal = agreed(refusal, joined)
    if refusal is not None:
        raise ConfigError(refusal)
    try:
        if config.compile_cache:  # before calibration, the first thing that compiles
            compile_cache.enable()
        calibration, schedule_reason = None, inputs.schedule_reason
        if config.calibrate or config.recalibrate:
            config, placement, calibration, schedule_reason = calibrated(config, placement, inputs, log, primary)
        plan = make_plan(config, threads(config, placement))
    except BaseException:  # refused (or stopped) before training began: the new directory goes too
        if lock is not None:
            lock.release()
        if made:
            with contextlib.suppress(OSError):
                Path(config.run_dir).rmdir()
        raise
    return ResolvedRun(config, dataclasses.replace(inputs.spec, num_envs=config.num_envs), placement, plan, calibration,
                       joined, primary, schedule_reason, lock)


def calibrated(config: TrainConfig, placement: Any, inputs: Inputs, log: Callable[[str], None], primary: bool
               ) -> tuple[TrainConfig, Any, Any, str | None]:
    """The run after calibration (`--calibrate`): its config with the sizes chosen, its placement
    (concurrent's where the pass chose that schedule), the pass and the schedule's reason."""
    from jaxrl_fast.calibration.measure import calibrate

    schedule_reason = inputs.schedule_reason
    concurrent = concurrent_placement(config, schedule_reason)
    calibration = calibrate(config, placement, config.calibration_budget_s, config.recalibrate, log, concurrent)
    log(calibration.table())
    measured = (config, placement)
    config = calibration.apply(config)
    if calibration.schedule_reason is not None:  # the pass chose the schedule: its reason replaces auto's
        schedule_reason = f"calibration: {calibration.schedule_reason}"
        placement = concurrent if config.schedule == "concurrent" else placement
    elif concurrent is not None:
        schedule_reason += " (calibration's budget left no time to measure acting beside learning)"
    if (config, placement) != measured:  # its sizes, or concurrent's devices, checked as the given ones were
        warning = check_devices(config, placement, inputs.spec)
        if warning and primary:
            log(warning)
    return config, placement, calibration, schedule_reason


def concurrent_placement(config: TrainConfig, schedule_reason: str | None) -> Any:
    """The placement `concurrent` would take, where calibration may choose it over `sync`: an
    on-policy run whose schedule `--schedule auto` chose as `sync`, and which `concurrent` accepts
    (None otherwise: the schedule stays as it is)."""
    from jaxrl_fast.config.checks import config_errors

    if schedule_reason is None or config.algo in OFF_POLICY or config.schedule != "sync":
        return None
    candidate = dataclasses.replace(config, schedule="concurrent")
    if config_errors(candidate):
        return None
    try:  # a --profile window that concurrent's extra warm iteration would push past the run's end
        make_plan(candidate, env_threads(candidate))
    except ConfigError:
        return None
    return place(candidate)


def place(config: TrainConfig) -> Any:
    """The run's placement: the one place a run asks for it."""
    from jaxrl_fast.engine import placement

    return placement.resolve(config, probe_gpu_step(config.env, parse_env_kwargs(config.env_kwargs)))


def threads(config: TrainConfig, placement: Any) -> int:
    """EnvPool threads of the whole run in this process: --num-threads (or one per env up to the
    cores), or, data-parallel, each local shard's pool's threads times the pools."""
    if placement.mode != "data":
        return env_threads(config)
    from jaxrl_fast.engine.sharding import local_shards, shard_threads

    local = local_shards(placement)
    return shard_threads(config, placement.shards, local) * local


def check_devices(config: TrainConfig, placement: Any, spec: EnvSpec) -> str | None:
    """Sizes that do not split over the data-parallel shards, and a run that cannot fit in the memory
    where the placement puts it (`run.memory`); a warning line for one close to the limit."""
    from jaxrl_fast.env.ids import env_family
    from jaxrl_fast.run.memory import check_memory

    share, device = 1.0, placement.critic[0]
    if placement.mode == "data":
        from jaxrl_fast.engine.sharding import local_shards, shard_sizes_error

        error = shard_sizes_error(config, placement.shards) or resumed_shards_error(config, placement.shards)
        if error:
            raise ConfigError(error)
        # each device holds its shard's buffer; this process sees its own devices only
        share, device = local_shards(placement) / placement.shards, placement.acting
    return check_memory(config, spec, env_family(config.env), device, share)


def resumed_shards_error(config: TrainConfig, shards: int) -> str | None:
    """Why a data-parallel `--resume` cannot restore its checkpoint over `shards` shards, or None:
    the checkpoint holds each shard's envs and buffer, so the count must be the one it was saved with."""
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
    """With --video-interval, refuse an env that cannot render here or a missing encoder."""
    if not config.video_interval:
        return
    from jaxrl_fast.outputs.video import check_video_support

    check_video_support(config.env)


OWN_FIELDS = ("run_dir", "progress", "compile_cache")  # what each process of a run may set its own way


def flags_apart(config: TrainConfig, joined: Cluster) -> str | None:
    """Why the processes of a distributed run cannot train together (a collective): they were given
    different flags (another --seed would give each shard its own parameters, silently)."""
    if not joined.distributed:
        return None
    from jaxrl_fast.engine.cluster import differing

    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name not in OWN_FIELDS}
    fields = {name: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for name, v in fields.items()}
    apart = differing(fields)
    if not apart:
        return None
    flags = ", ".join(f"--{name.replace('_', '-')}" + (".*" if name in ALGOS else "") for name in apart)
    return f"the processes of the run were given different {flags}: every process takes the same flags"


def agreed(refusal: str | None, joined: Cluster) -> str | None:
    """A refusal any process of a distributed run made, in every process (a collective): one
    process refusing alone would leave the others waiting for it in their first collective."""
    if not joined.distributed:
        return refusal
    from jaxrl_fast.engine.cluster import any_process

    if any_process(refusal is not None)[0]:
        return refusal or "another process of the run refused its input (its error is above)"
    return None


RESUME_CHANGES = ("total_steps", "progress", "compile_cache")  # what may change when a run is resumed


def resumed_config(run_dir: Path, total_steps: int | None = None, progress: str | None = None,
                   compile_cache: bool = True) -> TrainConfig:
    """The saved config of the run in `run_dir`, to continue it from its newest complete checkpoint
    (`--resume RUN_DIR`): a longer `total_steps`, another `progress` display and this process's
    compilation cache setting may differ from the saved ones; nothing else."""
    from jaxrl_fast.outputs.checkpoint import agents_out_of_step, latest_step

    run_dir = Path(run_dir)
    saved = run_dir / CONFIG_FILE
    if not saved.exists():
        raise ConfigError(f"--resume: {run_dir} holds no run (no {CONFIG_FILE})")
    try:
        data = json.loads(saved.read_text())
    except (OSError, ValueError) as error:  # a truncated or hand-edited file
        raise ConfigError(f"--resume: {saved} cannot be read ({error}); it is the run's config, which --resume "
                          "continues with") from None
    if not isinstance(data, dict) or "train_config" not in data:
        raise ConfigError(f"--resume: {saved} was written by a version without checkpoints")
    if not os.access(run_dir, os.W_OK):
        raise ConfigError(f"--resume: {run_dir} is not writable")
    ahead = agents_out_of_step(run_dir)
    if ahead:
        raise ConfigError(f"--resume: {', '.join(ahead)} of {run_dir} trained past the run's other seeds on its own "
                          "(--resume of its directory); resuming the whole run would drop that training. Resume those "
                          "seeds' directories one by one instead")
    done = latest_step(run_dir)  # None: stopped before its first checkpoint, the run starts over
    if done is not None and total_steps is not None and total_steps < done:
        raise ConfigError(f"--resume: {run_dir} has trained {done:,d} steps already; --total-steps {total_steps:,d} "
                          "is below that (give a larger one to train longer, or leave it out)")
    config = config_from_dict(data["train_config"])
    # sizes already applied; the profile window counted the calls of the first process, its trace is kept
    changes: dict[str, Any] = dict(run_dir=run_dir, resume=run_dir, calibrate=False, recalibrate=False, profile=False,
                                   compile_cache=compile_cache)  # this process's setting, not the saved one
    if total_steps is not None:
        changes["total_steps"] = total_steps
    if progress is not None:
        changes["progress"] = progress
    if "policy_lag" not in data["train_config"]:  # saved before --policy-lag: the largest its bound admits
        over = oldest_acting_lag(config, uses_async_mode(config)) - config.max_policy_lag
        changes["policy_lag"] = max(0, config.policy_lag - max(0, over))
    return dataclasses.replace(config, **changes)
