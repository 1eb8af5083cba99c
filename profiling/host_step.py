"""What one step of a Gymnasium env costs when a jitted program steps it (the host target of
`env.ffi_forward`, or the `io_callback` without it), against the same envs stepped from Python.

    python profiling/host_step.py                                    # gym:CartPole-v1 x4 and x8, gym:Pendulum-v1 x1
    python profiling/host_step.py --envs gym:Acrobot-v1:1 --out step.json

Each case is a `lax.scan` of `--steps` steps with uniform random actions drawn inside the program,
timed `--repeats` times after one call that compiles it; the median and the fastest are microseconds
per vector step. `python` is the same `GymPool` stepped `--steps` times from a Python loop with
actions drawn by numpy: the env's own cost, which the program adds its dispatch to. Run it from any
directory; `PYTHONPATH` picks the jaxrl_fast it measures (an older checkout for a before/after).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
from record import machine  # noqa: E402

DEFAULT_ENVS = "gym:CartPole-v1:4,gym:CartPole-v1:8,gym:Pendulum-v1:1"


def program_cost(env_id: str, num_envs: int, steps: int, repeats: int) -> list[float]:
    import jax

    from jaxrl_fast.env.gymnasium_env import make_gym_xla_env

    env = make_gym_xla_env(env_id, num_envs, 0)
    env.reset()
    spec = env.spec

    def draw(key):
        if spec.discrete:
            return jax.random.randint(key, (num_envs,), 0, spec.num_actions)
        low, high = jax.numpy.asarray(spec.action_low), jax.numpy.asarray(spec.action_high)
        return jax.random.uniform(key, (num_envs, *spec.action_shape), minval=low, maxval=high)

    @jax.jit
    def run(handle, key):
        def body(carry, _):
            handle, key = carry
            key, sub = jax.random.split(key)
            handle, step = env.step(handle, draw(sub))
            return (handle, key), step.reward.sum()

        (handle, _), rewards = jax.lax.scan(body, (handle, key), None, length=steps)
        return handle, rewards.sum()

    handle, key = jax.numpy.asarray(env.handle), jax.random.key(0)
    jax.block_until_ready(run(handle, key))
    times = []
    for _ in range(repeats):
        begin = time.perf_counter()
        jax.block_until_ready(run(handle, key))
        times.append((time.perf_counter() - begin) / steps * 1e6)
    env.pool.close()
    return times


def python_cost(env_id: str, num_envs: int, steps: int, repeats: int) -> list[float]:
    import numpy as np

    from jaxrl_fast.env.gymnasium_env import GymPool

    pool = GymPool(env_id, num_envs, 0)
    pool.reset()
    space, rng = pool.single_action_space, np.random.default_rng(0)
    discrete = not hasattr(space, "low")
    times = []
    for _ in range(repeats):
        actions = (rng.integers(0, space.n, (steps, num_envs)) if discrete
                   else rng.uniform(space.low, space.high, (steps, num_envs, *space.shape)).astype(np.float32))
        begin = time.perf_counter()
        for action in actions:
            pool.step(action)
        times.append((time.perf_counter() - begin) / steps * 1e6)
    pool.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default=DEFAULT_ENVS, help="comma-separated id:num_envs")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import jaxrl_fast

    rows = []
    for case in args.envs.split(","):
        env_id, num_envs = case.rsplit(":", 1)
        for where, cost in (("program", program_cost), ("python", python_cost)):
            times = cost(env_id, int(num_envs), args.steps, args.repeats)
            rows.append({"env": env_id, "num_envs": int(num_envs), "stepped_from": where,
                         "median_us": statistics.median(times), "min_us": min(times), "us": times})
            print(f"{env_id} x{num_envs}, from {where}: {statistics.median(times):.1f} us per vector step "
                  f"(fastest {min(times):.1f})", flush=True)
    if args.out:
        record = {"command": " ".join(["python", "profiling/host_step.py", *sys.argv[1:]]), "machine": machine(),
                  "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "jaxrl_fast": jaxrl_fast.__file__,
                  "rows": rows}
        args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
