"""What a JAX-native evaluation's whole-episode program (`jax_envs.episodes_program`) costs to
compile and to run, with the env stepped with or without its reset branch.

    python profiling/eval_program.py --env gymnax:CartPole-v1 --resets never
    python profiling/eval_program.py --env brax:halfcheetah --resets when_due --out halfcheetah.json

One process per measurement (run it once per `--resets`, alternating): the persistent compilation
cache is off, and the program is traced, lowered and compiled once for `--episodes` envs with a
fixed linear policy (zeros: argmax of zero logits, or zero actions), then run `--repeats` times.
Prints one JSON line (the compile seconds, the median run seconds, the episodes' returns and
lengths, which "never" must leave unchanged) and appends it to `--out` when given.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
from record import machine  # noqa: E402


def measure(env_id: str, resets: str, episodes: int, repeats: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxrl_fast.env import jax_envs

    env = jax_envs.functional(env_id)
    width = env.num_actions or len(env.action_low)
    weights = np.zeros((env.obs_size, width), np.float32)

    def policy(payload, obs, seed):  # a row-wise policy, as the evaluators' are
        logits = obs @ payload
        return jnp.argmax(logits, -1) if env.num_actions else jnp.tanh(logits)

    program = jax_envs.episodes_program(env_id, (), policy, resets=resets)
    seeds = jax_envs.env_seeds(0, episodes)
    args = (weights, seeds, np.uint32(0), np.uint32(0))
    begin = time.perf_counter()
    compiled = program.lower(*args).compile()
    compile_s = time.perf_counter() - begin
    returns, lengths = jax.device_get(compiled(*args))
    runs = []
    for _ in range(repeats):
        begin = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        runs.append(time.perf_counter() - begin)
    return {"env": env_id, "resets": resets, "episodes": episodes, "trace_lower_compile_s": round(compile_s, 3),
            "run_s": round(statistics.median(runs), 5), "returns": np.asarray(returns).round(4).tolist(),
            "lengths": np.asarray(lengths).tolist(), "machine": machine(), "jax": jax.__version__,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="gymnax:CartPole-v1", help="a gymnax: or brax: id")
    parser.add_argument("--resets", default="never", choices=("never", "when_due", "every_step"))
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, help="append the JSON line to this file")
    args = parser.parse_args()
    row = measure(args.env, args.resets, args.episodes, args.repeats)
    line = json.dumps(row)
    print(line)
    if args.out:
        with args.out.open("a") as out:
            out.write(line + "\n")


if __name__ == "__main__":
    main()
