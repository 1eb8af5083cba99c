"""The Python API: `jaxrl_fast.train`, which the command line is a thin layer over."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

from jaxrl_fast.config.run import TrainConfig
from jaxrl_fast.types import ConfigError


class Result:
    """What a run leaves: `summary` (the dict of RUN_DIR/summary.json), `run_dir`, and `policy`, the
    policy as `jaxrl_fast.load_policy(run_dir)` gives it (loaded on first use;
    `policies` with --num-seeds: one per agent, from RUN_DIR/seed_<k>)."""

    def __init__(self, summary: dict[str, Any], run_dir: Path, num_seeds: int = 1):
        self.summary, self.run_dir, self.num_seeds = summary, Path(run_dir), num_seeds

    @functools.cached_property
    def policies(self) -> list[Callable[[Any], Any]]:
        from jaxrl_fast.outputs.checkpoint import load_policy
        from jaxrl_fast.outputs.run_dir import seed_run_dir

        if self.num_seeds == 1:
            return [load_policy(self.run_dir)]
        return [load_policy(seed_run_dir(self.run_dir, k)) for k in range(self.num_seeds)]

    @property
    def policy(self) -> Callable[[Any], Any]:
        if self.num_seeds > 1:
            raise ValueError(f"this run trained {self.num_seeds} agents (--num-seeds): result.policies holds one policy each")
        return self.policies[0]

    def __repr__(self) -> str:
        final = self.summary.get("final_eval_return_mean")
        return f"Result(run_dir={str(self.run_dir)!r}, steps={self.summary.get('steps')}, final_eval_return_mean={final})"


def train(config: TrainConfig | None = None, /, *, resume: str | Path | None = None, **overrides: Any) -> Result:
    """Train an agent, as `python -m jaxrl_fast.train` does, and return its `Result`.

        result = jaxrl_fast.train(env="CartPole-v1", algo="ppo", total_steps=20_000)
        result.summary["final_eval_return_mean"], result.run_dir, result.policy(obs)

    Keywords are the command line's flags with `_` for `-` (`total_steps`, `num_envs`, `run_dir`,
    `target_return`, ...), applied over the env's preset exactly as the CLI applies them; the
    algorithm's settings are one dict under its name (`ppo={"learning_rate": 1e-3}`), and
    `env_kwargs` may be a dict of EnvPool options. `train(config)` trains a `TrainConfig` as it is
    (no preset applied), with `overrides` on top. `train(resume=RUN_DIR)` continues a run from its
    newest checkpoint (only `total_steps`, `progress` and `compile_cache` may be given beside it).

    Input that cannot run raises `jaxrl_fast.ConfigError` before anything is written, with the
    one-line message the CLI prints. A run stopped by an error raises it after the run directory
    holds what ran (`jaxrl_fast.outputs.checkpoint.NonFiniteError` for a NaN or an infinity,
    `CheckpointSaveError` for a checkpoint that could not be written, both `RuntimeError`s); a
    first Ctrl-C stops training after a final checkpoint and returns (`summary["interrupted"]`).
    After training, a Ctrl-C skips the final evaluation (a second one ends one under way), and the
    summary is written without it (`final_eval_return_mean` null).
    """
    from jaxrl_fast.run.loop import run_training
    from jaxrl_fast.run.resolve import resolve

    config = requested_config(config, resume, overrides)
    resolved = resolve(config, log=functools.partial(print, file=sys.stderr))
    return Result(run_training(resolved), resolved.run_dir, resolved.config.num_seeds)


def requested_config(config: TrainConfig | None, resume: str | Path | None, overrides: dict[str, Any]) -> TrainConfig:
    """The config `train` was asked for (before validation), EGL loaded first when it films."""
    from jaxrl_fast.config.overrides import with_overrides
    from jaxrl_fast.run.resolve import RESUME_CHANGES, resumed_config

    if resume is not None:
        if config is not None or set(overrides) - set(RESUME_CHANGES):
            others = sorted(set(overrides) - set(RESUME_CHANGES)) + (["config"] if config is not None else [])
            raise ConfigError(f"resume continues with the run's saved config; only {', '.join(RESUME_CHANGES)} may be "
                              f"given with it, got {', '.join(others)}")
        config = resumed_config(Path(resume), **overrides)
        films(config.video_interval)
        return config
    if config is not None and not isinstance(config, TrainConfig):
        raise ConfigError(f"train's first argument is a TrainConfig (or leave it out and give keywords: "
                          f"train(env=..., algo=...)), got a {type(config).__name__}")
    overrides = dict(overrides)
    films(overrides.get("video_interval", config.video_interval if config is not None else 0))
    if config is None:
        env, algo = overrides.pop("env", TrainConfig.env), overrides.pop("algo", TrainConfig.algo)
        for name, value in (("env", env), ("algo", algo)):
            if not isinstance(value, str):
                raise ConfigError(f"{name} must be a string (an id, as --{name} takes), got {value!r}")
        config = preset_config(env, algo)
    return with_overrides(config, with_env_kwargs(config, overrides))


def preset_config(env: str, algo: str) -> TrainConfig:
    """The config an env's preset gives an algorithm (what the CLI's flags apply over)."""
    from jaxrl_fast.config.presets import resolve_defaults
    from jaxrl_fast.env.ids import check_env_id, env_suite

    return resolve_defaults(env, algo, check_env_id(env), env_suite(env))


def with_env_kwargs(config: TrainConfig, overrides: dict[str, Any]) -> dict[str, Any]:
    """`env_kwargs` (a dict, or key=value strings) over the preset's, as the CLI merges them."""
    from jaxrl_fast.env.ids import merge_env_kwargs

    given = overrides.get("env_kwargs")
    if given is None:
        return overrides
    if isinstance(given, str):  # one key=value string, as one --env-kwargs flag takes (not its letters)
        given = [given]
    items = [option_item(key, value) for key, value in given.items()] if isinstance(given, dict) else list(given)
    return dict(overrides, env_kwargs=merge_env_kwargs(config.env_kwargs, items))


def option_item(key: str, value: Any) -> str:
    """One `env_kwargs` entry as the `key=value` text `--env-kwargs` reads back to the same value
    ("007" stays text)."""
    from jaxrl_fast.env.ids import option_text

    if isinstance(value, np.generic):  # a numpy scalar (np.int64(7)): its Python value
        value = value.item()
    if isinstance(value, (str, bool, int, float)):
        return option_text(key, value)
    raise ConfigError(f"env_kwargs[{key!r}] is a {type(value).__name__}; env options take a bool, an int, a float "
                      "or a str")


def films(video_interval: Any) -> None:
    """A run that films loads EGL before anything loads EnvPool's MuJoCo (its renderer binds then)."""
    if isinstance(video_interval, int) and video_interval > 0:
        from jaxrl_fast.outputs.video import preload_egl

        preload_egl()

