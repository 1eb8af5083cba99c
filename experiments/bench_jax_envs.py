"""JAX-native envs (gymnax's, Brax's) inside jaxrl_fast against the env alone: env steps/s of one jitted scan.

    python experiments/bench_jax_envs.py                          # CartPole-v1 and Breakout-MinAtar, 8 and 64 envs
    python experiments/bench_jax_envs.py --envs Pendulum-v1 --num-envs 8,256
    python experiments/bench_jax_envs.py --envs brax:halfcheetah --num-envs 16,2048   # Brax (MJX), the brax extra

Three arms per env and batch size, each a `lax.scan` of `--steps` batched steps with random actions
in one jitted program (compiled first, then timed over `--repeats` calls, best kept):

- **alone**: gymnax's own `env.step`, vmapped, with its auto-reset: what PureJaxRL and rejax step;
  for Brax, `brax.envs.create(..., batch_size=N)` (its episode and auto-reset wrappers, vmapped):
  what Brax's own trainers step;
- **adapter**: the JAX-native backend's step (`jaxrl_fast.env.jax_envs.env_functions`), with
  EnvPool's episode convention (the final observation kept, a reset step after each end);
- **acting**: the adapter inside the engine's acting loop (`engine.acting.make_collect`) with PPO's
  policy on the default preset's network: episode statistics, observation bookkeeping, the policy.

The issue's goal is adapter / alone >= 0.8 (the backend does not slow the env down). Writes
`experiments/results/bench_jax_envs.json` (`--out`).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import jax
import numpy as np


def best_rate(program, args, steps: int, num_envs: int, repeats: int) -> float:
    jax.block_until_ready(program(*args))  # compiled and warmed
    best = float("inf")
    for _ in range(repeats):
        begin = time.perf_counter()
        jax.block_until_ready(program(*args))
        best = min(best, time.perf_counter() - begin)
    return steps * num_envs / best


def random_actions(spec, key, steps: int, num_envs: int):
    if spec.discrete:
        return jax.random.randint(key, (steps, num_envs), 0, spec.num_actions)
    low, high = np.asarray(spec.action_low, np.float32), np.asarray(spec.action_high, np.float32)
    return jax.random.uniform(key, (steps, num_envs, *spec.action_shape), minval=low, maxval=high)


def alone(env_id: str, num_envs: int, actions, options: dict) -> tuple:
    family, name = env_id.split(":", 1)
    if family == "brax":
        return brax_alone(name, num_envs, actions, options.get("backend", "mjx"))
    import gymnax

    env, params = gymnax.make(name)
    keys = jax.random.split(jax.random.key(0), num_envs)
    _, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)

    @jax.jit
    def run(state, keys, actions):
        def body(carry, action):
            state, keys = carry
            keys, step_keys = jax.vmap(lambda k: tuple(jax.random.split(k)), out_axes=(0, 0))(keys)
            obs, state, reward, *_ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(step_keys, state, action, params)
            return (state, keys), reward.sum()

        return jax.lax.scan(body, (state, keys), actions)[1].sum()

    return run, (state, keys, actions)


def brax_alone(name: str, num_envs: int, actions, backend: str) -> tuple:
    from brax import envs

    env = envs.create(name, backend=backend, episode_length=1000, batch_size=num_envs)
    state = jax.jit(env.reset)(jax.random.key(0))

    @jax.jit
    def run(state, actions):
        return jax.lax.scan(lambda s, a: (lambda s: (s, s.reward.sum()))(env.step(s, a)), state, actions)[1].sum()

    return run, (state, actions)


def adapter(env_id: str, num_envs: int, actions, options: dict) -> tuple:
    from jaxrl_fast.env.jax_envs import env_functions, env_seeds, start_keys

    reset, step = env_functions(env_id, options)
    _, batch = jax.jit(reset)(start_keys(env_seeds(0, num_envs)))

    @jax.jit
    def run(batch, actions):
        return jax.lax.scan(lambda b, a: (lambda out: (out[0], out[1].reward.sum()))(step(b, a)), batch, actions)[1].sum()

    return run, (batch, actions)


def acting(env_id: str, num_envs: int, steps: int, options: dict) -> tuple:
    from jaxrl_fast.algos.ppo.learner import make_ppo
    from jaxrl_fast.engine.acting import env_options, init_env_carry, make_collect
    from jaxrl_fast.env.envpool import make_xla_env
    from jaxrl_fast.run.api import preset_config

    config = preset_config(env_id, "ppo")
    env = make_xla_env(env_id, num_envs, 1, 0, **options)
    algo = make_ppo(config.ppo, env.spec, 1_000_000)
    options = env_options(config)
    collect = make_collect(env, options, steps)
    state = jax.jit(algo.init)(jax.random.key(0))
    carry = jax.jit(lambda h, o: init_env_carry(env, options, h, o))(env.handle, env.reset())

    @jax.jit
    def run(carry, key):
        _, transitions, _ = collect(carry, lambda obs, k: algo.act(state, obs, k), key)
        return transitions.reward.sum()

    return run, (carry, jax.random.key(1))


def installed(library: str) -> bool:
    from importlib.util import find_spec

    return find_spec(library) is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default="CartPole-v1,Breakout-MinAtar",
                        help="ids, comma-separated: gymnax:<name> or brax:<name>; a bare name is gymnax's")
    parser.add_argument("--num-envs", default="8,64")
    parser.add_argument("--backend", help="a Brax id's physics backend (mjx, generalized, positional, spring)")
    parser.add_argument("--steps", type=int, default=1024, help="batched steps per timed call")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "bench_jax_envs.json")
    args = parser.parse_args()
    from jaxrl_fast.env.envpool import probe_spec

    options = {"backend": args.backend} if args.backend else {}

    rows = []
    for name in args.envs.split(","):
        env_id = name if ":" in name else f"gymnax:{name}"
        spec = probe_spec(env_id, options if env_id.startswith("brax:") else None)
        for num_envs in (int(n) for n in args.num_envs.split(",")):
            actions = random_actions(spec, jax.random.key(2), args.steps, num_envs)
            kwargs = options if env_id.startswith("brax:") else {}
            row = {"env": env_id, "num_envs": num_envs, **kwargs}
            for arm, (program, program_args) in {"alone": alone(env_id, num_envs, actions, kwargs),
                                                 "adapter": adapter(env_id, num_envs, actions, kwargs),
                                                 "acting": acting(env_id, num_envs, args.steps, kwargs)}.items():
                row[f"{arm}_sps"] = round(best_rate(program, program_args, args.steps, num_envs, args.repeats))
            row["adapter_over_alone"] = round(row["adapter_sps"] / row["alone_sps"], 3)
            print(json.dumps(row), flush=True)
            rows.append(row)
    from importlib.metadata import version

    result = {"command": "python experiments/bench_jax_envs.py " + " ".join(
                  f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "out" and v is not None),
              "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
                          "jax": jax.__version__, "devices": [str(d) for d in jax.devices()],
                          **{lib: version(lib) for lib in ("gymnax", "brax") if installed(lib)},
                          "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
              "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
