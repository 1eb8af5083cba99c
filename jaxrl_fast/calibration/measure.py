"""Calibration (Spreeze's automatic sizing): measure this machine, then pick the sizes.

    python -m jaxrl_fast.calibrate --env HalfCheetah-v4 --algo sac      # measure, print, cache
    python -m jaxrl_fast.train --env HalfCheetah-v4 --algo sac --calibrate

Measuring and choosing are separate. This module measures: each measuring function times one
kind of program on the device the run's placement gives it and returns plain rows:
  * `envpool`: EnvPool alone (its Python API, random actions), steps/s over a grid of `num_envs`
    (those the algorithm's `validate` accepts), thread counts and, in EnvPool's async mode, env
    batch sizes (`batch_size < num_envs`);
  * `acting`: the jitted rollout program (EnvPool's XLA step + policy inference) per `num_envs` at
    its best thread count, on placement's acting device; inference time = rollout time - env time;
  * `async_mode`: for the off-policy `async` schedule, the actors' host loop over EnvPool's async
    mode at env batches num_envs/2 and /4, the policy on placement's host device;
  * `update`: the jitted update program: on-policy per `num_envs` (its batch is num_envs x
    `num_steps`) on the learner device; off-policy per update batch size on each learner-role device.
What to measure is a plan of `Measurement`s, each saying whether it is essential: the preset's
sizes are measured whatever the budget; the others while the budget's estimate of their cost
(their kind's last measured cost, compile included) fits in what is left.

`jaxrl_fast.calibration.choose` chooses, from the rows alone (pure functions, no JAX): it predicts
trained env steps per second for every candidate under the run's schedule (`sync`: acting and
learning add up; `concurrent`/`async`: they overlap, the slower one sets the pace) while holding
the algorithm's ratios: on-policy keeps its rollout length, minibatch count and epochs; off-policy
keeps samples consumed per sample produced (utd_ratio x batch_size), so a larger update batch
comes with proportionally fewer updates. Among candidates within 5% of the best it picks the
smallest (fewer envs and smaller batches change learning least); an update batch larger than the
preset's only when it is 25% faster, and EnvPool's async mode only when it acts 10% faster.

The result is cached per machine, environment, algorithm and the sizes it depends on under the
user's cache directory; `--recalibrate` measures again.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_fast.algos import make_algorithm
from jaxrl_fast.calibration.choose import Row, best_threads, choose_off_policy, choose_on_policy, with_inference
from jaxrl_fast.config.checks import config_errors
from jaxrl_fast.config.plan import dispatch_steps, off_policy_plan
from jaxrl_fast.config.run import TrainConfig, algo_config, family
from jaxrl_fast.engine.acting import EnvOptions, env_options, init_env_carry, make_collect
from jaxrl_fast.engine.async_mode import AsyncModeActor
from jaxrl_fast.engine.offpolicy_steps import make_pieces
from jaxrl_fast.engine.placement import Placement, describe, describe_devices
from jaxrl_fast.engine.replay import empty_like
from jaxrl_fast.engine.timing import PhaseClock
from jaxrl_fast.env.envpool import make_pool, make_xla_env
from jaxrl_fast.env.spaces import random_actions_np
from jaxrl_fast.types import BatchedEnv, EnvSpec, Rollout, Transition

ENV_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MEASURE_S = 0.1  # wall time per EnvPool measurement


@dataclasses.dataclass
class Calibration:
    """One pass: the rows measured, the candidates and the choice (the JSON of the cache)."""

    env: str
    algo: str
    schedule: str
    budget_s: float
    elapsed_s: float
    machine: dict[str, Any]
    envpool: list[dict[str, Any]]  # num_envs, num_threads, batch_size, env_sps
    acting: list[dict[str, Any]]  # num_envs, num_threads, rollout_sps, inference_us_per_step | env_batch
    learning: list[dict[str, Any]]  # size, device, update_s, update_frames_per_s, num_envs | batch_size
    candidates: list[dict[str, Any]]  # predicted trained steps/s per choice
    choice: dict[str, Any]  # num_envs, num_threads, env_batch_size, (batch_size, utd_ratio) | (minibatch_size)
    reason: str
    skipped: list[str]
    cached: bool = False

    def apply(self, config: TrainConfig) -> TrainConfig:
        """The config with the chosen sizes."""
        changes: dict[str, Any] = {"num_envs": self.choice["num_envs"], "num_threads": self.choice["num_threads"]}
        if family(config) == "off_policy":
            hyper = dataclasses.replace(algo_config(config), batch_size=self.choice["batch_size"],
                                        utd_ratio=self.choice["utd_ratio"])
            changes[config.algo] = hyper
            batch = self.choice.get("env_batch_size", self.choice["num_envs"])
            changes["env_batch_size"] = batch if batch < self.choice["num_envs"] else 0
        return dataclasses.replace(config, **changes)

    def table(self) -> str:
        lines = [f"calibration for {self.algo} on {self.env} ({self.schedule} schedule), "
                 f"{self.elapsed_s:.1f} s of a {self.budget_s:.0f} s budget" + (" (cached)" if self.cached else "")]
        lines.append("EnvPool alone (Python API, random actions):")
        lines.append(f"  {'num_envs':>8} {'threads':>7} {'batch':>6} {'steps/s':>10}")
        for r in self.envpool:
            lines.append(f"  {r['num_envs']:>8} {r['num_threads']:>7} {r['batch_size']:>6} {r['env_sps']:>10,.0f}")
        lines.append("acting (policy + EnvPool: jitted XLA rollout at batch = num_envs, host loop in async mode):")
        lines.append(f"  {'num_envs':>8} {'threads':>7} {'batch':>6} {'steps/s':>10} {'inference us/step':>18}")
        for r in self.acting:
            inference = r.get("inference_us_per_step")
            lines.append(f"  {r['num_envs']:>8} {r['num_threads']:>7} {r.get('env_batch', r['num_envs']):>6} "
                         f"{r['rollout_sps']:>10,.0f} {'-' if inference is None else f'{inference:.1f}':>18}")
        lines.append("learning (jitted update):")
        lines.append(f"  {'size':>14} {'device':>8} {'update ms':>10} {'frames/s':>10}")
        for r in self.learning:
            lines.append(f"  {r['size']:>14} {r['device']:>8} {1e3 * r['update_s']:>10.2f} {r['update_frames_per_s']:>10,.0f}")
        lines.append("predicted trained env steps/s:")
        for c in sorted(self.candidates, key=lambda c: -c["trained_sps"])[:8]:
            sizes = ", ".join(f"{k}={v}" for k, v in c.items() if k != "trained_sps")
            lines.append(f"  {c['trained_sps']:>10,.0f}  {sizes}")
        lines.append("choice: " + ", ".join(f"{k}={v}" for k, v in self.choice.items()))
        lines.append("reason: " + self.reason)
        for note in self.skipped:
            lines.append("not measured: " + note)
        return "\n".join(lines)


# -- the cache ---------------------------------------------------------------------------------
def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or (
        os.path.join(os.environ.get("LOCALAPPDATA", ""), "cache") if sys.platform == "win32" else "~/.cache")
    return Path(base).expanduser() / "jaxrl_fast" / "calibration"


def machine() -> dict[str, Any]:
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "devices": describe_devices(),
        "jax": jax.__version__,
    }


def cache_key(config: TrainConfig) -> str:
    hyper = algo_config(config)
    depends = {
        "machine": machine(),
        "env": config.env,
        "algo": config.algo,
        "schedule": config.schedule,
        "placement": config.placement,
        "hyper": dataclasses.asdict(hyper),
    }
    digest = hashlib.sha256(json.dumps(depends, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"{config.env}-{config.algo}-{config.schedule}-{digest}"


# -- the budget and the plan of measurements ---------------------------------------------------
FIRST_COST_S = {"envpool": MEASURE_S + 0.1, "acting": 2.0, "async_mode": 2.0, "update": 3.0}  # compile included
COST_FACTOR = 1.5  # a kind's next measurement is expected to cost this times its last one (larger sizes come later)
ASYNC_CHUNK = 8  # env steps per env of one async-mode measurement
UPDATES = 8  # off-policy updates per timed call


class Budget:
    """Seconds a pass may spend, and what each kind of measurement is expected to cost next."""

    def __init__(self, seconds: float):
        self.seconds, self.start, self.cost = seconds, time.perf_counter(), dict(FIRST_COST_S)

    @property
    def used(self) -> float:
        return time.perf_counter() - self.start

    def allows(self, kinds: Sequence[str], before: float = 1.0) -> bool:
        """One measurement of each of `kinds` fits in what is left, and less than `before` of the budget is used."""
        return self.used + sum(self.cost[k] for k in kinds) <= self.seconds and self.used < before * self.seconds

    def record(self, kind: str, seconds: float) -> None:
        self.cost[kind] = COST_FACTOR * seconds


class Measurement(NamedTuple):
    """One program to time: `kind` names the measuring function, `args` its keyword arguments."""

    kind: str  # "envpool", "acting", "async_mode" or "update"
    args: dict[str, Any]
    essential: bool = False  # the choice needs it (the preset's sizes): measured whatever the budget
    before: float = 1.0  # optional ones start only while less than this share of the budget is used
    then: tuple[str, ...] = ()  # kinds that follow at the same size: no use without this one, nor it without them

    def label(self) -> str:
        values = (describe(v) if isinstance(v, jax.Device) else v for v in self.args.values())
        return f"{self.kind} " + " ".join(f"{k}={v}" for k, v in zip(self.args, values))


def run_measurements(plan: Sequence[Measurement], measures: Mapping[str, Callable[..., list[Row]]],
                     budget: Budget) -> tuple[dict[str, list[Row]], list[str]]:
    """Every measurement of `plan` in order: the essential ones always, the others while the budget
    allows them and the `then` kinds that follow (skipped with them). Returns the rows by kind and
    what the budget left out."""
    rows: dict[str, list[Row]] = {kind: [] for kind in measures}
    skipped, follows_skipped = [], set()
    for m in plan:
        if not m.essential and (m.kind in follows_skipped or not budget.allows((m.kind, *m.then), m.before)):
            skipped.append(f"{m.label()} (budget)")
            follows_skipped = set(m.then)
            continue
        follows_skipped = set()
        begin = time.perf_counter()
        rows[m.kind].extend(measures[m.kind](**m.args))
        budget.record(m.kind, time.perf_counter() - begin)
    return rows, skipped


def measuring_order(sizes, preset: int) -> list[int]:
    """The preset's size first, then outwards, larger before smaller: what the budget measures first."""
    return sorted(sizes, key=lambda n: (abs(math.log2(n / preset)), -n))


def thread_grid(num_envs: int) -> list[int]:
    cpus = os.cpu_count() or 1
    return sorted({min(t, num_envs) for t in (1, 2, 4, 8, 16, 32) if t <= cpus} | {min(cpus, num_envs)})


def env_sizes(config: TrainConfig) -> list[int]:
    """num_envs to try: powers of two up to max(64, 4x the preset's) and the preset's own, each one a
    run accepts with the other flags as given (PPO: the minibatches must split num_envs x num_steps),
    so that any size it picks needs no check again."""
    grid = sorted({n for n in ENV_GRID if n <= max(64, 4 * config.num_envs)} | {config.num_envs})
    valid = [n for n in grid if not config_errors(dataclasses.replace(config, num_envs=n))]
    return valid or [config.num_envs]


def envpool_plan(config: TrainConfig, sizes: list[int]) -> list[Measurement]:
    """EnvPool alone over num_envs x threads; the preset's num_envs is essential."""
    return [Measurement("envpool", dict(num_envs=n, num_threads=t, batch_size=n), essential=n == config.num_envs)
            for n in sizes for t in thread_grid(n)]


def async_envpool_plan(threads: dict[int, int]) -> list[Measurement]:
    """EnvPool's async mode at env batches n/2 and n/4 of the two largest num_envs, where it can
    matter most; in the first quarter of the budget only (acting and learning need the rest)."""
    return [Measurement("envpool", dict(num_envs=n, num_threads=threads[n], batch_size=batch), before=0.25)
            for n in [n for n in threads if n >= 4][-2:] for batch in (n // 2, n // 4)]


def on_policy_plan(config: TrainConfig, threads: dict[int, int]) -> list[Measurement]:
    """A rollout and an update per num_envs, the preset's first (essential), then outwards; a rollout
    starts only if its update fits too (a candidate needs both)."""
    plan = []
    for n in measuring_order(threads, config.num_envs):
        preset = n == config.num_envs
        plan += [Measurement("acting", dict(num_envs=n, num_threads=threads[n]), preset, then=("update",)),
                 Measurement("update", dict(num_envs=n), preset)]
    return plan


def off_policy_plan_of_measurements(config: TrainConfig, threads: dict[int, int],
                                    devices: Sequence[jax.Device]) -> list[Measurement]:
    """Updates at the preset's batch (essential), 2x and 4x on each learner device; then acting
    per num_envs, the preset's first (essential), and for the `async` schedule EnvPool's async mode."""
    batch = algo_config(config).batch_size
    plan = [Measurement("update", dict(batch_size=size, device=d), size == batch)
            for size in (batch, 2 * batch, 4 * batch) for d in devices]
    for n in measuring_order(threads, config.num_envs):
        preset = n == config.num_envs
        plan.append(Measurement("acting", dict(num_envs=n, num_threads=threads[n]), preset))
        if config.schedule == "async" and n >= 4:  # only the async actors can use EnvPool's async mode
            plan.append(Measurement("async_mode", dict(num_envs=n, num_threads=threads[n]), preset))
    return plan


# -- measuring: each times one kind of program where placement puts it, and returns plain rows ------
def envpool_sps(env_id: str, spec, num_envs: int, num_threads: int, batch_size: int) -> float:
    """Steps/s of EnvPool alone (async send/recv, which is also the sync mode when batch == num_envs)."""
    pool = make_pool(env_id, num_envs, num_threads, seed=0, batch_size=batch_size)
    rng = np.random.default_rng(0)
    pool.async_reset()
    steps, start = 0, None
    while True:
        _, _, _, _, info = pool.recv()
        if start is None:
            start = time.perf_counter()
        elif time.perf_counter() - start > MEASURE_S:
            break
        ids = info["env_id"]
        pool.send(random_actions_np(spec, rng, len(ids)), ids)
        steps += len(ids)
    elapsed = time.perf_counter() - start
    pool.close()
    return steps / elapsed


def timed_calls(fn, state, min_s: float = 0.1, max_calls: int = 50) -> tuple[float, Any]:
    """Seconds per call after a warm-up (compiling) call."""
    state = fn(state)
    jax.block_until_ready(state)
    calls, start = 0, time.perf_counter()
    while calls < max_calls and (calls == 0 or time.perf_counter() - start < min_s):
        state = fn(state)
        jax.block_until_ready(state)
        calls += 1
    return (time.perf_counter() - start) / calls, state


class Setup(NamedTuple):
    """What the measuring functions of one pass share."""

    config: TrainConfig
    spec: EnvSpec  # of one env
    placement: Placement
    options: EnvOptions
    algo: Any  # built once: its programs' shapes do not depend on num_envs (PPO's update is rebuilt per size)
    state: Any  # zeros shaped like its initial state (off-policy: the (actor, critic) roles)
    probe: BatchedEnv  # a one-env XLA env, around which the off-policy update programs are built
    opened: list  # XLA envs, closed when the pass ends: after every program that steps them has run


def make_setup(config: TrainConfig, placement: Placement) -> Setup:
    probe = make_xla_env(config.env, 1, 1, config.seed)
    algo = sized_algorithm(config, probe.spec, config.num_envs if family(config) == "on_policy" else 1)
    # zeros shaped like the initial state: programs cost the same whatever the numbers, and
    # compiling the initializers (orthogonal: a QR per layer) costs seconds of the budget
    state = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), jax.eval_shape(algo.init, jax.random.key(0)))
    return Setup(config, probe.spec, placement, env_options(config), algo, state, probe, [probe])


def sized_algorithm(config: TrainConfig, spec: EnvSpec, num_envs: int) -> Any:
    return make_algorithm(dataclasses.replace(config, num_envs=num_envs), dataclasses.replace(spec, num_envs=num_envs))


def open_env(setup: Setup, num_envs: int, num_threads: int) -> BatchedEnv:
    env = make_xla_env(setup.config.env, num_envs, num_threads, setup.config.seed)
    setup.opened.append(env)
    return env


def env_carry_on(setup: Setup, env: BatchedEnv, device: jax.Device) -> Any:
    """A fresh env carry committed to `device`, like every other input of a timed program: a mix of
    committed and uncommitted inputs compiles again when the first outputs come back, mid-timing."""
    carry = jax.jit(lambda h, o: init_env_carry(env, setup.options, h, o))(env.handle, env.reset())
    return jax.device_put(carry, device)


def measure_envpool(setup: Setup, num_envs: int, num_threads: int, batch_size: int) -> list[Row]:
    """EnvPool alone, its Python API stepping random actions."""
    sps = envpool_sps(setup.config.env, setup.spec, num_envs, num_threads, batch_size)
    return [dict(num_envs=num_envs, num_threads=num_threads, batch_size=batch_size, env_sps=sps)]


def measure_rollout(setup: Setup, num_envs: int, num_threads: int) -> list[Row]:
    """On-policy acting: the jitted rollout of `num_steps` per env (policy + EnvPool's XLA step)
    on placement's acting device."""
    length, device = algo_config(setup.config).num_steps, setup.placement.acting
    env = open_env(setup, num_envs, num_threads)
    algo, collect = sized_algorithm(setup.config, setup.spec, num_envs), make_collect(env, setup.options, length)

    def rollout(carry, state, key):  # the transitions are outputs: all of the policy is computed
        carry, transitions, _ = collect(carry, lambda obs, k: algo.act(state, obs, k), key)
        return carry, transitions

    carry = env_carry_on(setup, env, device)
    state = jax.device_put(algo.init(jax.random.key(0)), device)  # sized state: gSDE holds a matrix per env
    program = jax.jit(rollout, donate_argnums=0)
    seconds, _ = timed_calls(lambda c: program(c, state, jax.random.key(1))[0], carry)
    return [dict(num_envs=num_envs, num_threads=num_threads, rollout_sps=length * num_envs / seconds)]


def zeros_rollout(algo: Any, state: Any, spec: EnvSpec, num_envs: int, length: int) -> Rollout:
    """A rollout `[length, num_envs, ...]` of zeros shaped like the algorithm's: an update costs the
    same whatever the numbers."""
    obs = jnp.zeros((num_envs, *spec.obs_shape), jnp.float32)
    act = jax.eval_shape(algo.act, state, obs, jax.random.key(0))
    stack = lambda x: jnp.zeros((length, *x.shape), x.dtype)  # noqa: E731
    flags = jnp.zeros((length, num_envs), bool)
    transitions = Transition(stack(obs), stack(act.action), jnp.zeros((length, num_envs), jnp.float32), flags, flags,
                             ~flags, jax.tree.map(stack, act.extras))
    return Rollout(transitions, obs)


def measure_on_policy_update(setup: Setup, num_envs: int) -> list[Row]:
    """The jitted on-policy update of a num_envs x num_steps batch, on placement's learner device."""
    length, device = algo_config(setup.config).num_steps, setup.placement.learner
    algo = sized_algorithm(setup.config, setup.spec, num_envs)
    state = jax.device_put(algo.init(jax.random.key(0)), device)
    batch = jax.device_put(zeros_rollout(algo, state, setup.spec, num_envs, length), device)
    program = jax.jit(algo.update)
    seconds, _ = timed_calls(lambda s: program(s, batch, jax.random.key(2))[0], state, max_calls=10)
    return [dict(num_envs=num_envs, size=f"batch {length * num_envs}", device=describe(device), update_s=seconds,
                 update_frames_per_s=algo_config(setup.config).update_epochs * length * num_envs / seconds)]


def measure_off_policy_acting(setup: Setup, num_envs: int, num_threads: int) -> list[Row]:
    """Off-policy acting: the jitted `act_rows` program of the sync and concurrent schedules (and the
    async actors without EnvPool's async mode) on placement's acting device."""
    env, device = open_env(setup, num_envs, num_threads), setup.placement.acting
    plan = off_policy_plan(algo_config(setup.config), num_envs)._replace(rollout_length=8, replay_rows=2)
    pieces = make_pieces(setup.algo, env, setup.options, plan)
    carry = env_carry_on(setup, env, device)
    params = jax.device_put(setup.algo.acting_params(*setup.state), device)  # committed, like the carry
    act = jax.jit(pieces.act_rows, static_argnums=4, donate_argnums=0)
    seconds, _ = timed_calls(lambda c: act(c, params, jax.random.key(1), jnp.int32(0), False)[0], carry)
    return [dict(num_envs=num_envs, num_threads=num_threads, rollout_sps=plan.rollout_length * num_envs / seconds)]


def measure_async_mode(setup: Setup, num_envs: int, num_threads: int) -> list[Row]:
    """The `async` actors' host loop over EnvPool's async mode at env batches num_envs/2 and /4,
    the policy on placement's host device (where `recv` leaves the observations)."""
    device = setup.placement.host
    params = jax.device_put(setup.algo.acting_params(*setup.state), device)
    rows = []
    for batch in (num_envs // 2, num_envs // 4):
        actor = AsyncModeActor(setup.algo, setup.spec, num_envs, batch, num_threads, setup.config.seed, ASYNC_CHUNK,
                               device)
        try:
            act = lambda _: actor.act_chunk(params, 0, False, jax.random.key(1), 0, PhaseClock())  # noqa: E731
            seconds, _ = timed_calls(act, None, max_calls=20)
        finally:
            actor.close()
        rows.append(dict(num_envs=num_envs, num_threads=num_threads, env_batch=batch,
                         rollout_sps=ASYNC_CHUNK * num_envs / seconds))
    return rows


def measure_off_policy_update(setup: Setup, batch_size: int, device: jax.Device) -> list[Row]:
    """`UPDATES` jitted off-policy updates (critic and actor steps, replay sampling) at `batch_size`,
    on one learner-role device."""
    plan = off_policy_plan(algo_config(setup.config), 1)._replace(batch_size=batch_size,
                                                                  replay_rows=max(1024, batch_size))
    pieces = make_pieces(setup.algo, setup.probe, setup.options, plan)
    # an empty buffer of the right shapes: sampling costs the same whatever the rows hold
    first_obs = jax.ShapeDtypeStruct((1, *setup.spec.obs_shape), jnp.float32)
    shapes = jax.eval_shape(pieces.init, jax.random.key(0), setup.probe.handle, first_obs).replay
    replay = empty_like(shapes, plan.replay_rows, shapes.rows.obs.shape[1])

    # arrays go in as arguments: closed over, they would be baked into the program as constants
    def run(roles, replay, keys):
        return pieces.run_updates(*roles, replay, keys, jnp.int32(0))[:2]

    program = jax.jit(run, donate_argnums=0)
    keys = jax.random.split(jax.random.key(3), UPDATES)
    replay, roles, keys = jax.device_put((replay, setup.state, keys), device, may_alias=False)  # roles are donated
    seconds, _ = timed_calls(lambda r: program(r, replay, keys), roles, max_calls=20)
    return [dict(batch_size=batch_size, size=f"batch {batch_size}", device=describe(device),
                 update_s=seconds / UPDATES, update_frames_per_s=batch_size * UPDATES / seconds)]


def learner_devices(placement: Placement, schedule: str) -> list[jax.Device]:
    """Where off-policy updates run: split (sync, concurrent), each role's devices, the slower setting
    the pace; otherwise the learner's (the async learner updates both roles there)."""
    if placement.mode == "split" and schedule != "async":
        return list(dict.fromkeys([*placement.actor, *placement.critic]))
    return [placement.learner]


def measuring_functions(setup: Setup) -> dict[str, Callable[..., list[Row]]]:
    measures = {"envpool": functools.partial(measure_envpool, setup)}
    if family(setup.config) == "on_policy":
        return measures | {"acting": functools.partial(measure_rollout, setup),
                           "update": functools.partial(measure_on_policy_update, setup)}
    return measures | {"acting": functools.partial(measure_off_policy_acting, setup),
                       "async_mode": functools.partial(measure_async_mode, setup),
                       "update": functools.partial(measure_off_policy_update, setup)}


# -- the pass ----------------------------------------------------------------------------------
def calibrate(config: TrainConfig, placement: Placement, budget_s: float = 30.0, recalibrate: bool = False,
              log=print) -> Calibration:
    """Measure (or load from the cache) and choose, on the devices of the run's `placement`; see the
    module docstring. `config` is resolved: its schedule is named (`resolve.check_inputs` chooses for
    `auto`)."""
    if config.schedule == "auto":
        raise ValueError("calibrate takes a resolved config: --schedule auto is chosen by resolve.check_inputs first")
    path = cache_dir() / f"{cache_key(config)}.json"
    if path.exists() and not recalibrate:
        try:
            cached = Calibration(**json.loads(path.read_text()))
            cached.cached = True
            return cached
        except (TypeError, ValueError):
            pass  # an unreadable or older cache entry: measure again
    result = measure_and_choose(config, placement, budget_s)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(result), indent=1))
        tmp.replace(path)
    except OSError as error:  # a read-only home: the run goes on with the measured choice
        log(f"calibration: could not cache to {path}: {error}")
    return result


def measure(config: TrainConfig, placement: Placement, budget: Budget) -> tuple[dict[str, list[Row]], list[str]]:
    """Every row of the pass: EnvPool first (it picks each num_envs' thread count), then the plan of
    the algorithm's family."""
    setup = make_setup(config, placement)
    try:
        measures = measuring_functions(setup)
        rows, skipped = run_measurements(envpool_plan(config, env_sizes(config)), measures, budget)
        threads = best_threads(rows["envpool"])
        plan = async_envpool_plan(threads) + (
            on_policy_plan(config, threads) if family(config) == "on_policy"
            else off_policy_plan_of_measurements(config, threads, learner_devices(setup.placement, config.schedule)))
        more, more_skipped = run_measurements(plan, measures, budget)
    finally:
        for env in setup.opened:
            env.pool.close()
    return {kind: rows[kind] + more[kind] for kind in measures}, skipped + more_skipped


def measure_and_choose(config: TrainConfig, placement: Placement, budget_s: float) -> Calibration:
    budget = Budget(budget_s)
    rows, skipped = measure(config, placement, budget)
    hyper = algo_config(config)
    acting = with_inference(rows["acting"] + rows.get("async_mode", []), rows["envpool"])
    try:
        if family(config) == "on_policy":
            choice, reason, candidates = choose_on_policy(acting, rows["update"], config.schedule, hyper.num_steps,
                                                          getattr(hyper, "num_minibatches", 1))
        else:
            choice, reason, candidates = choose_off_policy(acting, rows["update"], config.schedule, hyper.batch_size,
                                                           hyper.utd_ratio)
            chosen = dataclasses.replace(hyper, batch_size=choice["batch_size"], utd_ratio=choice["utd_ratio"])
            plan = off_policy_plan(chosen, choice["num_envs"], dispatch_steps(config))
            choice |= dict(rollout_length=plan.rollout_length, updates_per_iteration=plan.updates_per_iteration)
    except ValueError as error:
        raise RuntimeError(f"calibration: a budget of {budget.seconds:.0f} s measured no candidate ({error}); "
                           "raise --budget-s") from error
    return Calibration(config.env, config.algo, config.schedule, budget.seconds, budget.used, machine(),
                       rows["envpool"], acting, rows["update"], candidates, choice, reason, skipped)
