"""`python -m jaxrl_fast.train`: train an agent; `--help` lists the run's flags and the chosen
algorithm's, each with its resolved default. A thin layer over the library: the flags become a
config, which is resolved (`jaxrl_fast.run.resolve`) and trained (`jaxrl_fast.run.loop`) as
`jaxrl_fast.train` does; this module adds the exit status and the processes of a distributed run.

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

import argparse  # noqa: E402
import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Sequence  # noqa: E402

from jaxrl_fast.config.run import ALGOS, TrainConfig, cli_config  # noqa: E402
from jaxrl_fast.engine import cluster  # noqa: E402
from jaxrl_fast.outputs.run_dir import CONFIG_FILE  # noqa: E402
from jaxrl_fast.types import ConfigError  # noqa: E402

PROG = "python -m jaxrl_fast.train"
DESCRIPTION = ("Train an agent on an EnvPool environment. Defaults come from the env's preset; only the chosen "
               "--algo's flag group is listed (`--algo sac --help` shows SAC's flags). A process of a run of several "
               "also takes --coordinator-address, --num-processes, --process-id and --distributed-timeout-s "
               "(python -m jaxrl_fast.launch gives them; docs/distributed.md).")
RESUME_FLAGS = ("--total-steps", "--progress", "--no-compile-cache")  # what may change when a run is resumed


class PreParser(argparse.ArgumentParser):
    """The few flags read before the full parse (`--resume`, `--env`, `--algo`, ...): a bad value is
    a one-line error, not argparse's usage line, which would list these flags as if they were all."""

    def __init__(self) -> None:
        super().__init__(prog=PROG, add_help=False, allow_abbrev=False)  # tyro takes whole flags only

    def error(self, message: str):
        raise ConfigError(message)


def main(argv: Sequence[str] | None = None, early_stop: StopRequest | None = None) -> int:
    """The CLI; its exit status: 0 done, 1 a run stopped by an error (a NaN, a failed checkpoint
    write, a lost process of a distributed run), 2 bad input, 130 stopped by SIGINT or SIGTERM.
    `early_stop`: a stop request its caller entered before importing this module."""
    with early_stop or EARLY_STOP or StopRequest(second="exit") as stop:
        return run_command(list(sys.argv[1:] if argv is None else argv), stop)


def parse_args(argv: Sequence[str]) -> TrainConfig:
    """The config the flags ask for (not yet validated): the env's preset with every flag on top,
    or, with `--resume RUN_DIR`, the run's saved config."""
    import tyro

    from jaxrl_fast.config.presets import resolve_defaults
    from jaxrl_fast.env.ids import check_env_id, env_suite, merge_env_kwargs
    from jaxrl_fast.run.resolve import resumed_config

    argv = list(argv)
    resume = PreParser()
    resume.add_argument("--resume", type=Path)
    resume.add_argument("--total-steps", type=int)
    resume.add_argument("--progress", choices=("auto", "bar", "plain", "off"))
    resume.add_argument("--no-compile-cache", action="store_true")
    known, rest = resume.parse_known_args(argv)
    if known.resume is not None:
        if rest:
            raise ConfigError(f"--resume continues with the run's saved config; only {', '.join(RESUME_FLAGS)} may be "
                              f"given with it, got {' '.join(rest)}")
        return resumed_config(known.resume, known.total_steps, known.progress, not known.no_compile_cache)
    pre = PreParser()
    pre.add_argument("--env", default=TrainConfig.env)
    pre.add_argument("--algo", default=TrainConfig.algo)
    known, _ = pre.parse_known_args(argv)
    if known.algo not in ALGOS:
        raise ConfigError(f"--algo: unknown algorithm {known.algo!r}; choose from {', '.join(ALGOS)}")
    others = sorted({flag.split("=")[0] for flag in argv for name in ALGOS
                     if name != known.algo and flag.startswith(f"--{name}.")})
    if others:  # tyro knows the chosen group only, and would call them unrecognized
        raise ConfigError(f"{', '.join(others)}: the run's algorithm is {known.algo} (give --algo "
                          f"{others[0][2:].split('.')[0]} for its settings)")
    defaults = resolve_defaults(known.env, known.algo, check_env_id(known.env), env_suite(known.env))
    target = cli_config(known.algo)  # the run's flags and --algo's group only
    parsed = tyro.cli(target, default=target(**{f.name: getattr(defaults, f.name) for f in dataclasses.fields(target)}),
                      args=argv, prog=PROG, description=DESCRIPTION)
    config = dataclasses.replace(defaults, **{f.name: getattr(parsed, f.name) for f in dataclasses.fields(target)})
    return dataclasses.replace(config, env_kwargs=merge_env_kwargs(defaults.env_kwargs, config.env_kwargs))


def films(argv: Sequence[str]) -> bool:
    """Whether the run will film evaluations (`--video-interval N`, or a resumed run that does)."""
    pre = PreParser()
    pre.add_argument("--video-interval", type=int, default=0)
    pre.add_argument("--resume", type=Path)
    known, _ = pre.parse_known_args(argv)
    saved = known.resume / CONFIG_FILE if known.resume is not None else None
    if saved is not None and saved.exists():
        with contextlib.suppress(ValueError, KeyError):
            return json.loads(saved.read_text())["train_config"].get("video_interval", 0) > 0
    return known.video_interval > 0


def run_command(argv: list[str], stop: StopRequest) -> int:
    from jaxrl_fast.run.resolve import check_inputs

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("jaxrl_fast").setLevel(logging.INFO)
    try:  # every process of a distributed run refuses bad input alike, before joining the others
        joined, argv = cluster.split_flags(argv)
        if films(argv):  # EGL first: EnvPool's MuJoCo renders only if EGL was loaded before it
            from jaxrl_fast.outputs.video import preload_egl

            preload_egl()
        inputs = check_inputs(parse_args(argv), joined)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not joined.distributed:
        return run_joined(inputs, stop, joined)
    try:
        cluster.initialize(joined)
        code = run_joined(inputs, stop, joined)
    except BaseException as failure:  # noqa: BLE001  a process that fails leaves at once (cluster's docstring)
        cluster.leave(1, f"error: {cluster.name(joined)}: {cluster.failure_text(failure)}")
    cluster.finish(code)


def run_joined(inputs, stop: StopRequest, joined: cluster.Cluster) -> int:
    """The run, once this process has joined the others of a distributed run (or alone)."""
    from jaxrl_fast.env.gymnasium_env import GymEnvError
    from jaxrl_fast.outputs.checkpoint import CheckpointSaveError, NonFiniteError, latest_step
    from jaxrl_fast.run.build import ResumeError
    from jaxrl_fast.run.loop import run_training
    from jaxrl_fast.run.resolve import on_devices

    try:
        resolved = on_devices(inputs, joined, log=lambda text: print(text, file=sys.stderr))
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if cluster.any_process(stop.signal is not None)[0]:  # before training began (imports, checks, calibration)
        if not resolved.resume and resolved.primary:
            with contextlib.suppress(OSError):
                resolved.run_dir.rmdir()
        print(f"{stop.name}: stopped before training began; nothing was written", file=sys.stderr)
        return 130
    try:
        summary = run_training(resolved, stop)
    except ResumeError as error:  # found while building: a checkpoint --resume cannot read
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (NonFiniteError, CheckpointSaveError, GymEnvError) as error:  # GymEnvError: what a Python env returned
        step = latest_step(resolved.run_dir)
        kept = (f"the last good checkpoint (step {step:,d}) is kept" if step is not None else
                f"no checkpoint was written; --resume {resolved.run_dir} starts the run over")
        print(f"error: {error}; training stopped, {kept}", file=sys.stderr)
        return 1
    return 130 if summary["interrupted"] else 0
