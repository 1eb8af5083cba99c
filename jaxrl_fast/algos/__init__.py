"""Algorithms: one module each, `make_<algo>(config, spec, ...)` returning a bundle of pure functions."""

from __future__ import annotations

from jaxrl_fast.config import TrainConfig
from jaxrl_fast.data import Algorithm, OffPolicyAlgorithm
from jaxrl_fast.env import EnvSpec


def make_algorithm(config: TrainConfig, spec: EnvSpec) -> Algorithm:
    """On-policy algorithms (driven by `schedules.sync`)."""
    if config.algo == "ppo":
        from jaxrl_fast.algos.ppo import make_ppo

        return make_ppo(config.ppo, spec, config.total_steps)
    raise ValueError(f"--algo: {config.algo!r} is not an on-policy algorithm")


def make_off_policy_algorithm(config: TrainConfig, spec: EnvSpec) -> OffPolicyAlgorithm:
    """Off-policy algorithms (driven by `schedules.offpolicy`)."""
    if config.algo == "sac":
        from jaxrl_fast.algos.sac import make_sac

        return make_sac(config.sac, spec)
    if config.algo == "td3":
        from jaxrl_fast.algos.td3 import make_td3

        return make_td3(config.td3, spec)
    if config.algo == "dqn":
        from jaxrl_fast.algos.dqn import make_dqn

        return make_dqn(config.dqn, spec, config.total_steps)
    raise ValueError(f"--algo: {config.algo!r} is not an off-policy algorithm")
