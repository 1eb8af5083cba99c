"""Algorithms: one module each, `make_<algo>(config, spec, ...)` returning an `Algorithm` bundle."""

from __future__ import annotations

from jaxrl_fast.config import TrainConfig
from jaxrl_fast.data import Algorithm
from jaxrl_fast.env import EnvSpec


def make_algorithm(config: TrainConfig, spec: EnvSpec) -> Algorithm:
    if config.algo == "ppo":
        from jaxrl_fast.algos.ppo import make_ppo

        return make_ppo(config.ppo, spec, config.total_steps)
    raise ValueError(f"--algo: unknown algorithm {config.algo!r}")
