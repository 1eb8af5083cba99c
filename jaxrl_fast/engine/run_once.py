"""The agent's initial state, a program each run calls once: compiled for a fast compile, not a
fast run.

At XLA's default optimisation level, PPO CartPole's `init` compiled for 4.0-4.3 s, beside the fused
loop's 5.7-6.0 s on the same two cores: the orthogonal initialiser's Gram-Schmidt loops go through
LLVM's whole pipeline to run once, in milliseconds. At level 0 they compile in under half the time
and still run in milliseconds (docs/profiling.md "Cold-start options" has the measurements). The
numbers may differ from level 2's in the last bits, so every place that initialises an agent uses
this, and a schedule or a seed count never changes an agent's first parameters.
"""

from __future__ import annotations

from typing import Callable

import jax

RUN_ONCE_OPTIONS = {"xla_backend_optimization_level": 0}


def jit_once(fn: Callable) -> Callable:
    """`jax.jit(fn)` compiled at optimisation level 0, for a program called once per run (no
    caching is implied: JAX's and the program store's apply as to any program)."""
    return jax.jit(fn, compiler_options=RUN_ONCE_OPTIONS)
