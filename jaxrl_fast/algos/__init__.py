"""Algorithms by registry: every folder here whose `config.py` declares `ALGORITHM = AlgorithmSpec(...)` is one.

Nothing else in the engine names an algorithm: `--algo`, the `--<name>.*` flag groups, presets,
validation and the choice of schedule are read from `ALGORITHMS`. Reading the registry imports
each algorithm's config and nothing heavier; `make_algorithm` imports the learner it builds.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from jaxrl_fast.algos.base import AlgorithmSpec, ReplayConfig, RolloutConfig
from jaxrl_fast.types import EnvSpec

__all__ = ["ALGORITHMS", "AlgorithmSpec", "ReplayConfig", "RolloutConfig", "action_space_error", "algorithm_spec",
           "make_algorithm"]

FIRST = "ppo"  # listed first (the default); the others follow in name order


def _discover() -> dict[str, AlgorithmSpec]:
    found: dict[str, AlgorithmSpec] = {}
    for module_info in pkgutil.iter_modules(__path__):
        if not module_info.ispkg:
            continue
        module = importlib.import_module(f"{__name__}.{module_info.name}.config")
        spec = getattr(module, "ALGORITHM", None)
        if isinstance(spec, AlgorithmSpec):
            if spec.name in found:
                raise RuntimeError(f"two algorithm folders declare the name {spec.name!r}")
            found[spec.name] = spec
    return dict(sorted(found.items(), key=lambda item: (item[0] != FIRST, item[0])))


ALGORITHMS: dict[str, AlgorithmSpec] = _discover()


def algorithm_spec(name: str) -> AlgorithmSpec:
    if name not in ALGORITHMS:
        raise ValueError(f"--algo: unknown algorithm {name!r}; choose from {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]


def action_space_error(name: str, spec: EnvSpec) -> str | None:
    """Why `--algo name` cannot act in `spec`'s action space, naming the algorithms that can; or None."""
    others = tuple(other for other, algorithm in ALGORITHMS.items() if algorithm.fits(spec))
    return algorithm_spec(name).action_space_error(spec, others)


def make_algorithm(config: Any, spec: EnvSpec, shards: int = 1, axis_name: str | None = None) -> Any:
    """The bundle of pure functions of `config.algo` (an `Algorithm` or an `OffPolicyAlgorithm`).

    Data-parallel over `shards` shards of the `axis_name` axis, it is one shard's: `spec` holds the
    shard's envs, its schedules count a shard's share of `--total-steps`, and its optimizers
    average the shards' gradients."""
    algorithm = algorithm_spec(config.algo)
    error = action_space_error(config.algo, spec)
    if error is not None:
        raise ValueError(error)
    return algorithm.build(getattr(config, config.algo), spec, config.total_steps // shards, axis_name)
