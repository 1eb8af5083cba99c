"""The `async` schedule's two phases, each alone: the learner's program and an actor's chunk,
timed back to back with nothing else running, at each env-steps-per-dispatch size given.

    python profiling/async_alone.py                                   # SAC gym:Pendulum-v1 at 64 and 256
    python profiling/async_alone.py --algo dqn --env gym:CartPole-v1 --dispatch-steps 64,256,1024

Inside an `async` run the phase clock gives each phase's busy time with the other one beside it
(`experiments/bench_gym_schedules.py`'s `a` and `l`); alone, the difference is what the two
threads cost each other on the shared cores. Each size builds the schedule at the env's preset
(`--schedule async --dispatch-steps N`, seed 0), starts it (the warm-up's random chunks fill the
buffer), stops its actor, then times `--repeats` learner programs dispatched back to back
(`learner_ms`) and as many policy chunks of a new actor over an env of its own (the same id, size
and options, seed + 1; `actor_ms`, which includes handing it the parameters, a no-op on one CPU
device), after three calls of each; per step is per env step of the chunk (all envs together).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
from record import command, machine  # noqa: E402


def measure(algo: str, env_id: str, dispatch: int, repeats: int) -> dict:
    import jax

    from jaxrl_fast.config.overrides import with_overrides
    from jaxrl_fast.engine.offpolicy_steps import make_pieces
    from jaxrl_fast.engine.program_store import ProgramStore
    from jaxrl_fast.engine.schedules.asynchronous import xla_acting
    from jaxrl_fast.engine.timing import PhaseClock
    from jaxrl_fast.env.envpool import make_xla_env
    from jaxrl_fast.env.ids import parse_env_kwargs
    from jaxrl_fast.run.api import preset_config
    from jaxrl_fast.run.build import build_schedule
    from jaxrl_fast.run.resolve import check_inputs, on_devices

    config = with_overrides(preset_config(env_id, algo), {"schedule": "async", "dispatch_steps": dispatch,
                                                          "eval_interval": 0, "progress": "off", "seed": 0})
    resolved = on_devices(check_inputs(config, run_dir=False), run_dir=False)
    env = make_xla_env(config.env, config.num_envs, resolved.plan.num_threads, config.seed,
                       **parse_env_kwargs(config.env_kwargs))
    schedule = build_schedule(resolved, env)
    if schedule.num_actors != 1 or schedule.async_mode:
        raise SystemExit("one actor acting through the jitted chunk only (the preset's --num-actors 1)")
    schedule.start(None)
    schedule.close()  # its actor stops: each phase is timed alone from here

    def back_to_back(call, args, carry):
        for _ in range(3):
            args = carry(args, call(*args))
        jax.block_until_ready(args)
        begin = time.perf_counter()
        for _ in range(repeats):
            args = carry(args, call(*args))
        jax.block_until_ready(args)
        return (time.perf_counter() - begin) / repeats

    s = schedule.state
    learner_s = back_to_back(schedule._learn_program, (s.actor, s.critic, s.replay, s.key, s.iteration, s.updates),
                             lambda args, out: (out[0], out[1], args[2], *out[2:5]))
    actor_env = make_xla_env(config.env, config.num_envs, resolved.plan.num_threads, config.seed + 1, **env.options)
    act = xla_acting(lambda e: make_pieces(schedule.algo, e, schedule.options, schedule.plan), actor_env,
                     schedule.options, resolved.placement.acting, PhaseClock(),
                     ProgramStore.for_run(config, actor_env, resolved.plan, resolved.placement), jax.random.key(1))
    params, version = schedule.store.latest()
    actor_s = back_to_back(lambda: act(params, version, False, 10**6)[0], (), lambda args, out: ())
    steps = schedule.chunk
    return {"dispatch_steps": dispatch, "env_steps_per_chunk": steps,
            "updates_per_iteration": schedule.plan.updates_per_iteration,
            "learner_ms": 1e3 * learner_s, "actor_ms": 1e3 * actor_s,
            "learner_us_per_step": 1e6 * learner_s / steps, "actor_us_per_step": 1e6 * actor_s / steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", default="sac")
    parser.add_argument("--env", default="gym:Pendulum-v1")
    parser.add_argument("--dispatch-steps", default="64,256", help="comma-separated sizes")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--out", type=Path, help="also write the rows here as JSON")
    args = parser.parse_args()
    rows = []
    for dispatch in (int(d) for d in args.dispatch_steps.split(",")):
        row = measure(args.algo, args.env, dispatch, args.repeats)
        rows.append(row)
        print(f"{args.algo} {args.env} at {dispatch} steps per dispatch: learner {row['learner_ms']:.2f} ms "
              f"({row['learner_us_per_step']:.1f} us/step), actor {row['actor_ms']:.2f} ms "
              f"({row['actor_us_per_step']:.1f} us/step)", flush=True)
    if args.out:
        record = {"command": command(), "machine": machine(),
                  "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}
        args.out.write_text(json.dumps(record, indent=1) + "\n")
        print(f"-> {args.out}")


if __name__ == "__main__":
    main()
