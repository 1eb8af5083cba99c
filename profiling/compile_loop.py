"""How long one preset's fused `sync` loop takes to trace, lower and compile, in this process.

    python profiling/compile_loop.py                           # PPO CartPole-v1, 5 repeats
    python profiling/compile_loop.py --algo pqn --repeats 3
    python profiling/compile_loop.py --json                    # one JSON line, for an A/B script
    XLA_FLAGS=--xla_cpu_use_fusion_emitters=false python profiling/compile_loop.py --speed-rounds 5
    python profiling/compile_loop.py --repeats 1 --xla-trace /tmp/xla-trace   # where XLA's compile goes
    python profiling/compile_loop.py --algo sac --env Pendulum-v1 --speed-rounds 5  # an off-policy loop
    python profiling/compile_loop.py --options '{"xla_backend_optimization_level": 1}' --speed-rounds 5

What a cold run's critical path spends on its largest program (`profiling/startup.py` shows the
whole path, with more noise: imports, pools, `init` and the first evaluation share it). Each
repeat clears JAX's in-memory caches, and the persistent cache is off, so every repeat traces,
lowers and compiles from nothing; the first repeat also pays the imports' first calls, and the
median is reported beside it. Off-policy algorithms (`sac`, `td3`, `dqn`) time their fused loop's
`run` (the warm-up and `init` are other programs). `--options` passes XLA compile options to the
loop's compile alone (`jax.stages.Lowered.compile`). `--speed-rounds N` then runs the last compiled program N times for
`--iterations-per-call` iterations and reports its env steps/s (what a compile option costs the
run). `--xla-trace DIR` records the last compile with `jax.profiler` into DIR and prints the
compiler's largest spans, summed over its threads (the fusions' emitters, LLVM's code generation,
the thunk emitter). Compare two versions of the code in alternation (a worktree and
`PYTHONPATH`), never across machines or sequences.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gzip
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_fast.algos import make_algorithm
from jaxrl_fast.config.plan import off_policy_plan
from jaxrl_fast.config.presets import resolve_defaults
from jaxrl_fast.engine.acting import env_options
from jaxrl_fast.engine.placement import resolve_placement
from jaxrl_fast.engine.program_store import ProgramStore, placed_shapes
from jaxrl_fast.engine.run_once import jit_once
from jaxrl_fast.engine.schedules.base import EvalRequests
from jaxrl_fast.engine.schedules.offpolicy import fused_loop
from jaxrl_fast.engine.schedules.sync import make_sync_loop
from jaxrl_fast.env.envpool import make_xla_env
from jaxrl_fast.env.ids import env_family


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="ppo", choices=ON_POLICY + OFF_POLICY, help="the sync schedule's fused loop of")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--iterations-per-call", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5, help="at least 1")
    parser.add_argument("--speed-rounds", type=int, default=0, help="then time the compiled loop this many times")
    parser.add_argument("--xla-trace", type=Path, help="record the last compile's profile here and summarise it")
    parser.add_argument("--options", type=json.loads, default={}, help="XLA compile options of the loop, as JSON")
    parser.add_argument("--json", action="store_true", help="print one JSON line instead of a table")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    jax.config.update("jax_enable_compilation_cache", False)

    config = resolve_defaults(args.env, args.algo, env_family(args.env))
    env = make_xla_env(config.env, config.num_envs, config.num_threads or 2, seed=config.seed)
    loop = preset_loop(config, env, args.algo, args.iterations_per_call)
    shapes = loop.state_shapes(jax.random.key(0), env.handle, env.reset())
    rows = []
    for repeat in range(args.repeats):
        jax.clear_caches()
        start = time.perf_counter()
        traced = loop.jitted_run.trace(shapes, jax.ShapeDtypeStruct((), jnp.int32))
        lowered = traced.lower()
        lowered_at = time.perf_counter()
        cpu = time.process_time()
        traced_here = args.xla_trace is not None and repeat == args.repeats - 1
        with jax.profiler.trace(str(args.xla_trace)) if traced_here else contextlib.nullcontext():
            run = lowered.compile(compiler_options=args.options or None)
        done = time.perf_counter()
        rows.append({"trace_lower_s": lowered_at - start, "compile_s": done - lowered_at,
                     "compile_cpu_s": time.process_time() - cpu})
    median = {k: statistics.median(r[k] for r in rows[1:] or rows) for k in rows[0]}
    record = {"algo": args.algo, "env": args.env, "jax": jax.__version__, "xla_flags": os.environ.get("XLA_FLAGS", ""),
              "options": args.options, "first": rows[0], "median_after_first": median, "repeats": rows}
    if args.speed_rounds:
        record["env_steps_per_s"] = loop_speed(run, loop, env, args.iterations_per_call, args.speed_rounds)
    if args.xla_trace is not None:
        record["xla_spans"] = compiler_spans(args.xla_trace)
    env.pool.close()
    if args.json:
        print(json.dumps(record))
        return
    for i, r in enumerate(rows):
        print(f"repeat {i}: trace+lower {r['trace_lower_s']:.2f} s, compile {r['compile_s']:.2f} s "
              f"({r['compile_cpu_s']:.2f} CPU-s)")
    print(f"median after the first: trace+lower {median['trace_lower_s']:.2f} s, compile {median['compile_s']:.2f} s "
          f"({median['compile_cpu_s']:.2f} CPU-s)")
    for name, span in record.get("xla_spans", {}).items():
        print(f"  {name:40s} {span['seconds']:6.2f} s in {span['count']} spans")
    if args.speed_rounds:
        print(f"the compiled loop: {statistics.median(record['env_steps_per_s']):,.0f} env steps/s (median of "
              f"{args.speed_rounds} calls of {args.iterations_per_call} iterations)")


ON_POLICY, OFF_POLICY = ("ppo", "pqn"), ("sac", "td3", "dqn")


class PresetLoop(NamedTuple):
    init: Callable  # (key, handle, first obs) -> state
    state_shapes: Callable  # (key, handle, first obs) -> the state's shapes, as `run` compiles from them
    warmup: Callable  # state -> state: the off-policy buffer's first fill (nothing on-policy)
    jitted_run: Callable  # jax.jit of (state, iterations) -> (state, ...)
    steps_per_iteration: int


def preset_loop(config: Any, env: Any, algo_name: str, iterations_per_call: int) -> PresetLoop:
    """The preset's fused `sync` loop, built as a run builds it, with its `run` as the jitted function."""
    algo = make_algorithm(config, env.spec)
    if algo_name in ON_POLICY:
        loop = make_sync_loop(algo, env, env_options(config), iterations_per_call, 0, None)
        return PresetLoop(jit_once(loop.init), functools.partial(jax.eval_shape, loop.init), lambda state: state,
                          loop.run, loop.steps_per_iteration)
    recorded = {}

    class Recording(ProgramStore):  # compiles nothing ahead: keeps each program's jitted function
        def lazy(self, name, jitted):
            recorded[name] = jitted
            return super().lazy(name, jitted)

    placement = resolve_placement("single", env)
    loop = fused_loop(algo, env, env_options(config), off_policy_plan(getattr(config, algo_name), config.num_envs),
                      placement, iterations_per_call, EvalRequests(None, 0), programs=Recording(None, None))
    raw_init = recorded["offpolicy-init"].__wrapped__  # as `compile_ahead` takes the shapes

    def state_shapes(*args):
        return placed_shapes(jax.eval_shape(raw_init, *args), placement.acting)

    return PresetLoop(loop.init, state_shapes, lambda state: loop.warmup(state)[0], recorded["offpolicy-run"],
                      loop.steps_per_iteration)


COMPILER_SPANS = ("CpuCompiler::RunBackend", "FusionCompiler::Compile", "JitCompiler::Compile",
                  "ThunkEmitter::EmitEntryComputation", "HLO passes through layout assignment (jit_run)")


def compiler_spans(directory: Path) -> dict[str, dict]:
    """Seconds and count of XLA's main compile spans in the newest trace under `directory`."""
    trace = max(directory.rglob("*.trace.json.gz"), key=lambda path: path.stat().st_mtime)
    events = [e for e in json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"] if e.get("ph") == "X"]
    return {name: {"seconds": sum(e["dur"] for e in events if e["name"] == name) / 1e6,
                   "count": sum(e["name"] == name for e in events)} for name in COMPILER_SPANS}


def loop_speed(run, loop: PresetLoop, env, iterations: int, rounds: int) -> list[float]:
    """Env steps/s of `rounds` calls of the compiled loop, from the seed-0 state, after one call to warm up."""
    state = loop.warmup(loop.init(jax.random.key(0), env.handle, env.reset()))
    state = jax.block_until_ready(run(state, np.int32(iterations))[0])
    speeds = []
    for _ in range(rounds):
        start = time.perf_counter()
        state = jax.block_until_ready(run(state, np.int32(iterations))[0])
        speeds.append(iterations * loop.steps_per_iteration / (time.perf_counter() - start))
    return speeds


if __name__ == "__main__":
    main()
