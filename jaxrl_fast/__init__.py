"""jaxrl_fast: EnvPool's C++ batched environments streaming into jitted JAX learner steps.

    import jaxrl_fast
    result = jaxrl_fast.train(env="CartPole-v1", algo="ppo", total_steps=100_000)
    result.summary["final_eval_return_mean"], result.run_dir, result.policy(obs)

`train`, `Result`, `TrainConfig` and `load_policy` are imported on first use: `import jaxrl_fast`
loads neither JAX nor EnvPool.
"""

from jaxrl_fast.types import ConfigError

__version__ = "0.1.0"
__all__ = ["ConfigError", "Result", "TrainConfig", "load_policy", "train"]

_LAZY = {"train": "jaxrl_fast.run.api", "Result": "jaxrl_fast.run.api", "TrainConfig": "jaxrl_fast.config.run",
         "load_policy": "jaxrl_fast.outputs.checkpoint"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'jaxrl_fast' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_LAZY))
