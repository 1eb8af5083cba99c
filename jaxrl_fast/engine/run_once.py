"""The first state of a run (the agent's, and the concurrent and async schedules' env carries),
programs each run calls once: compiled for a fast compile, not a fast run.

At XLA's default optimisation level, PPO CartPole's `init` compiled for 4.0-4.3 s, beside the fused
loop's 5.7-6.0 s on the same two cores: the orthogonal initialiser's Gram-Schmidt loops go through
LLVM's whole pipeline to run once, in milliseconds. At level 0 they compile in under half the time
and still run in milliseconds. XLA's CPU compiler in jaxlib 0.10 still has its older fusion
emitters, with which `init` compiled in another third (PPO) to half (SAC) less time (PPO 1.10-1.58 -> 0.74-0.98 s, SAC
1.40-2.00 -> 0.84-1.06 s) to the same parameters; jaxlib 0.12's has only the newer ones
(docs/profiling.md "Cold-start options" has the measurements). Level 0's numbers may differ from
level 2's in the last bits, so every place that initialises an agent uses this, and a schedule or
a seed count never changes an agent's first parameters.
"""

from __future__ import annotations

from typing import Callable

import jax
from jaxlib import version as jaxlib_version

RUN_ONCE_OPTIONS = {"xla_backend_optimization_level": 0}
# Faster to compile, slower to run (PPO's fused loop stepped 16-42% fewer env steps/s): for `init`
# only. Measured on jaxlib 0.10; not known to exist in 0.11, refused by 0.12 ("No such compile option").
OLDER_CPU_EMITTERS = {"xla_cpu_use_fusion_emitters": False}
OLDER_EMITTERS_UNTIL = (0, 11)


def run_once_options(jaxlib_release: tuple[int, ...] | None = None) -> dict[str, object]:
    """`RUN_ONCE_OPTIONS`, with `OLDER_CPU_EMITTERS` on the jaxlib releases measured to have them
    (decided from the version, so that no probe compiles: a warm start compiles nothing)."""
    release = jaxlib_release or tuple(int(part) for part in jaxlib_version.__version__.split(".")[:2])
    if tuple(release[:2]) < OLDER_EMITTERS_UNTIL:
        return RUN_ONCE_OPTIONS | OLDER_CPU_EMITTERS
    return dict(RUN_ONCE_OPTIONS)


def jit_once(fn: Callable) -> Callable:
    """`jax.jit(fn)` compiled with `run_once_options()`, for a program called once per run (no
    caching is implied: JAX's and the program store's apply as to any program)."""
    return jax.jit(fn, compiler_options=run_once_options())
