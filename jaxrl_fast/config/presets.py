"""Per-environment presets: the TOML files in `envs/` (installed as `jaxrl_fast.envs`).

Resolution, later wins: the dataclass defaults in `config.py`, the family section of
`defaults.toml` (by EnvPool family, e.g. `classic_control`, `mujoco`), the env's own file
`<env id>.toml`, and finally the flags given on the command line. Within a file, an algorithm's
section may set run fields too (`[pqn] num_envs = 32`): they override the file's shared values
when that algorithm trains.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import tomllib
from typing import Any

from jaxrl_fast.config.run import ALGOS, OFF_POLICY, RunConfig, TrainConfig
from jaxrl_fast.types import ConfigError

# Family-level keys that only the on-policy algorithm uses: replay buffers keep raw observations and rewards.
ON_POLICY_ONLY = ("normalize_observations", "scale_rewards", "scaled_reward_clip")


class PresetError(ConfigError):
    pass


def _read(name: str) -> dict[str, Any] | None:
    resource = importlib.resources.files("jaxrl_fast.envs").joinpath(name)
    if not resource.is_file():
        return None
    return tomllib.loads(resource.read_text())


def preset_file_name(env_id: str) -> str:
    """An env's own preset file; a gymnax, Brax or Gymnasium id (`gymnax:CartPole-v1`, `gym:CartPole-v1`)
    takes the file of EnvPool's task of the same name, the same dynamics."""
    for prefix in ("gymnax:", "brax:", "gym:"):
        env_id = env_id.removeprefix(prefix)
    return env_id.replace("/", "__") + ".toml"


def available_presets() -> list[str]:
    root = importlib.resources.files("jaxrl_fast.envs")
    return sorted(p.name[: -len(".toml")].replace("__", "/") for p in root.iterdir()
                  if p.name.endswith(".toml") and p.name != "defaults.toml")


def preset_tables(env_id: str, family: str, suite: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """The (source, table) pairs that apply to an env, in resolution order: its family's section,
    its suite's (dm_control's tasks: `[dm_control]` over `[mujoco]`), its own file."""
    tables = []
    defaults = _read("defaults.toml") or {}
    for section in (family, suite):
        if section in defaults:
            tables.append((f"defaults.toml [{section}]", defaults[section]))
    name = preset_file_name(env_id)
    own = _read(name)
    if own is not None:
        tables.append((name, own))
    return tables


def _merge(base: Any, table: dict[str, Any], source: str) -> Any:
    fields = {f.name: f for f in dataclasses.fields(base)}
    updates: dict[str, Any] = {}
    for key, value in table.items():
        if key not in fields:
            raise PresetError(f"{source}: unknown key {key!r} for {type(base).__name__}")
        current = getattr(base, key)
        if dataclasses.is_dataclass(current):
            updates[key] = _merge(current, value, f"{source} [{key}]")
        elif isinstance(current, tuple) or key == "hidden_sizes":
            updates[key] = tuple(value)
        elif isinstance(current, float) and isinstance(value, int):
            updates[key] = float(value)
        else:
            updates[key] = value
    return dataclasses.replace(base, **updates)


def run_keys_of_section(table: dict[str, Any], algo: str) -> dict[str, Any]:
    """Run fields set in the algorithm's own section (e.g. `num_envs` under `[pqn]`), taken out of it:
    they apply to the run when that algorithm trains, over the table's shared values."""
    section = table.get(algo)
    if not isinstance(section, dict):
        return {}
    run_fields = {f.name for f in dataclasses.fields(RunConfig)}
    hoisted = {key: section[key] for key in section if key in run_fields}
    table[algo] = {key: value for key, value in section.items() if key not in run_fields}
    return hoisted


def resolve_defaults(env_id: str, algo: str, family: str, suite: str | None = None) -> TrainConfig:
    """The TrainConfig an env starts from before command-line flags are applied (`suite`: see
    `preset_tables`)."""
    if algo not in ALGOS:
        raise PresetError(f"--algo: unknown algorithm {algo!r}; choose from {', '.join(ALGOS)}")
    config = TrainConfig(env=env_id, algo=algo)
    for source, table in preset_tables(env_id, family, suite):
        keep = {k: v for k, v in table.items() if k not in ALGOS or k == algo}  # other algos' sections
        keep.update(run_keys_of_section(keep, algo))
        if algo in OFF_POLICY:
            keep = {k: v for k, v in keep.items() if k not in ON_POLICY_ONLY}
        config = _merge(config, keep, source)
    return config
