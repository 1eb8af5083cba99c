"""Programs a run calls once (the agent's and the environments' initial state): compiled for a fast
compile, not a fast run.

At XLA's default optimisation level, compiling PPO CartPole's `init` takes longer than everything
else it does before its first update: the orthogonal initialiser's Gram-Schmidt loops go through
LLVM's whole pipeline to run once, in milliseconds. At level 0 they compile in about half the time
and still run in milliseconds (docs/profiling.md "Cold-start options" has the measurements). The
numbers may differ from level 2's in the last bits, so every place that initialises an agent uses
this, and a schedule or a seed count never changes an agent's first parameters.
"""

from __future__ import annotations

from typing import Any, Callable

import jax

RUN_ONCE_OPTIONS = {"xla_backend_optimization_level": 0}


def jit_once(fn: Callable, **jit_kwargs: Any) -> Callable:
    """`jax.jit(fn)` compiled at optimisation level 0, for a program called once per run."""
    return jax.jit(fn, compiler_options=RUN_ONCE_OPTIONS, **jit_kwargs)
