"""Capture a JAX profiler trace of the `sync` training loop on a preset.

    python profiling/trace_sync.py --env CartPole-v1 --calls 3 --out /tmp/jaxrl_fast_trace

The trace (`plugins/profile/<run>/*.xplane.pb`, plus a Perfetto `*.trace.json.gz`) opens in
TensorBoard's profile plugin (`pip install tensorboard tensorboard-plugin-profile`) and in
https://ui.perfetto.dev. One call of the loop runs one log interval of whole iterations; the
first call, which compiles, is left out of the trace.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp

from jaxrl_fast.algos import make_algorithm
from jaxrl_fast.env import env_family, make_xla_env
from jaxrl_fast.presets import resolve_defaults
from jaxrl_fast.schedules.sync import EnvOptions, make_sync_loop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--iterations-per-call", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path("/tmp/jaxrl_fast_trace"))
    args = parser.parse_args()

    config = resolve_defaults(args.env, "ppo", env_family(args.env))
    config = dataclasses.replace(config, total_steps=10**9)
    env = make_xla_env(config.env, config.num_envs, config.num_threads or 2, config.seed)
    algo = make_algorithm(config, env.spec)
    options = EnvOptions(config.normalize_observations, config.scale_rewards, config.ppo.gamma)
    loop = make_sync_loop(algo, env, options, args.iterations_per_call, eval_every_iterations=0, on_eval=None)
    state = jax.jit(loop.init)(jax.random.key(config.seed), env.handle, env.reset())
    state, _ = loop.run(state, jnp.int32(args.iterations_per_call))  # compile outside the trace
    jax.block_until_ready(state)
    with jax.profiler.trace(str(args.out), create_perfetto_trace=True):
        for call in range(args.calls):
            with jax.profiler.TraceAnnotation(f"sync_call_{call}"):
                state, metrics = loop.run(state, jnp.int32(args.iterations_per_call))
                jax.block_until_ready(metrics)
    print(f"trace written under {args.out}")


if __name__ == "__main__":
    main()
