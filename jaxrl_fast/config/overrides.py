"""Keyword overrides of a config, as the Python API takes them: the CLI's flag names with `_` for
`-` (`total_steps=20_000`), and the algorithm's group as a dict (`ppo={"learning_rate": 1e-3}`).
Each value is checked against its field's type and refused with the message the CLI would give."""

from __future__ import annotations

import dataclasses
import difflib
import typing
from pathlib import Path
from typing import Any

from jaxrl_fast.config.run import ALGO_CONFIGS, TrainConfig
from jaxrl_fast.types import ConfigError


def with_overrides(config: TrainConfig, overrides: dict[str, Any]) -> TrainConfig:
    """`config` with `overrides` applied: run fields by name, the run's algorithm's group by a dict
    of its fields (or a config of its class)."""
    run_fields = {f.name: f for f in dataclasses.fields(config) if f.name not in ALGO_CONFIGS}
    changes: dict[str, Any] = {}
    for name, value in overrides.items():
        if name in ALGO_CONFIGS:
            changes[name] = group_override(config, name, value)
        elif name in run_fields:
            changes[name] = checked(f"--{flag(name)}", run_fields[name], value, type(config))
        else:
            close = difflib.get_close_matches(name, [*run_fields, config.algo], n=3)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise ConfigError(f"{name}: no such setting.{hint} (`python -m jaxrl_fast.train --algo {config.algo} "
                              "--help` lists them, with - for _)")
    return dataclasses.replace(config, **changes)


def group_override(config: TrainConfig, group: str, value: Any) -> Any:
    if group != config.algo:
        raise ConfigError(f"{group}=...: the run's algorithm is {config.algo}; give algo={group!r} to train {group}, "
                          f"or {config.algo}={{...}} for its settings")
    current = getattr(config, group)
    if isinstance(value, type(current)):
        return value
    if not isinstance(value, dict):
        raise ConfigError(f"{group}=...: give a dict of its settings (e.g. {group}={{'gamma': 0.98}}), "
                          f"got {type(value).__name__}")
    fields = {f.name: f for f in dataclasses.fields(current)}
    changes = {}
    for name, field_value in value.items():
        if name not in fields:
            close = difflib.get_close_matches(name, list(fields), n=3)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise ConfigError(f"--{group}.{flag(name)}: {group} has no such setting.{hint}")
        changes[name] = checked(f"--{group}.{flag(name)}", fields[name], field_value, type(current))
    return dataclasses.replace(current, **changes)


def flag(name: str) -> str:
    return name.replace("_", "-")


def checked(where: str, field: dataclasses.Field, value: Any, owner: type) -> Any:
    """`value` as the field's type (a list for a tuple, an int for a float, a str for a path), or a
    ConfigError naming the flag."""
    kind = typing.get_type_hints(owner)[field.name]
    options = typing.get_args(kind) if typing.get_origin(kind) is typing.Union or type(kind).__name__ == "UnionType" else (kind,)
    for option in options:
        converted = convert(option, value)
        if converted is not _NO:
            return converted
    raise ConfigError(f"{where} takes {describe(kind)}, got {value!r}")


_NO = object()


def convert(kind: Any, value: Any) -> Any:
    if kind is type(None):
        return None if value is None else _NO
    if typing.get_origin(kind) is typing.Literal:
        return value if value in typing.get_args(kind) else _NO
    if kind is bool:
        return value if isinstance(value, bool) else _NO
    if kind is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _NO
    if kind is float:
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else _NO
    if kind is str:
        return value if isinstance(value, str) else _NO
    if kind is Path:
        return Path(value) if isinstance(value, (str, Path)) else _NO
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        if not isinstance(value, (list, tuple)):
            return _NO
        items = [convert(item, v) for v in value]
        return _NO if _NO in items else tuple(items)
    return value


def describe(kind: Any) -> str:
    if typing.get_origin(kind) is typing.Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(kind))
    return str(kind).replace("typing.", "").replace("pathlib.", "").replace("<class '", "").replace("'>", "")
