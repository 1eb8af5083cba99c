"""Calibration (Spreeze's automatic sizing), aimed at time to a result: measure, then pick the sizes.

    python -m jaxrl_fast.calibrate --env HalfCheetah-v4 --algo sac      # measure, print, cache
    python -m jaxrl_fast.train --env HalfCheetah-v4 --algo sac --calibrate

Measuring and choosing are separate. This module measures: each measuring function times one
kind of program on the device the run's placement gives it and returns plain rows:
  * `envpool`: EnvPool alone (its Python API, random actions) at the preset's `num_envs`, per
    thread count;
  * `acting`: the jitted rollout program (EnvPool's XLA step + policy inference) on placement's
    acting device: on-policy per split of the preset's batch (num_envs x num_steps kept), the
    preset's first; off-policy at the preset's num_envs;
  * `async_mode`: for the off-policy `async` schedule, the actors' host loop over EnvPool's async
    mode at env batches num_envs/2 and /4, the policy on placement's host device;
  * `update`: on-policy, the jitted update of the preset's batch on the learner device (every
    split has the same batch, so one update serves them all);
  * `overlap`: on-policy, where `--schedule auto` chose the schedule, the preset's rollout and
    update dispatched together as the `concurrent` schedule runs them, on its devices.

A calibration must not cost more than it can save. Its budget is the smaller of the one given
(`--calibration-budget-s`) and `RUN_SHARE` of the run's lower bound: `total_steps` at the speed of
EnvPool alone, measured first (the run itself can never be faster). The other measurements come
in order of use and stop at the first whose estimated cost (its kind's last measured cost,
compile included) does not fit in what is left; what is left out keeps the preset's value, and
the report says so. A short run (PPO CartPole-v1's 100,000 steps: a bound of 0.7-1.2 s on 2
cores) measures EnvPool once and keeps the preset's sizes.

`jaxrl_fast.calibration.choose` chooses from the rows alone (pure functions, no JAX): it changes
only what leaves learning per env step as it was (threads; the split of an on-policy batch; the
off-policy async actors' env batch), each only when measured a margin faster than the preset's,
and, the one exception, an on-policy run's schedule where `auto` chose it (`concurrent` acts one
update behind).

The result is cached per machine, environment, algorithm, run length, whether the pass may choose
the schedule, and the sizes it depends on
under the user's cache directory; `--recalibrate` measures again.
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
from jaxrl_fast.calibration.choose import (
    Row,
    choose_off_policy,
    choose_on_policy,
    choose_schedule,
    choose_threads,
    with_inference,
)
from jaxrl_fast.config.checks import config_errors
from jaxrl_fast.config.plan import default_env_threads, off_policy_plan
from jaxrl_fast.config.run import TrainConfig, algo_config, family, oldest_acting_lag
from jaxrl_fast.engine.acting import EnvOptions, env_options, init_env_carry, make_collect, make_rollout
from jaxrl_fast.engine.async_mode import AsyncModeActor
from jaxrl_fast.engine.offpolicy_steps import make_pieces
from jaxrl_fast.engine.placement import Placement, describe, describe_devices
from jaxrl_fast.engine.replay import empty_like
from jaxrl_fast.engine.timing import PhaseClock
from jaxrl_fast.env.envpool import make_pool, make_xla_env, probe_spec
from jaxrl_fast.env.ids import parse_env_kwargs
from jaxrl_fast.env.spaces import random_actions_np
from jaxrl_fast.files import written_whole
from jaxrl_fast.types import BatchedEnv, EnvSpec, Rollout, Transition

ENV_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MEASURE_S = 0.1  # wall time per EnvPool measurement
PROBE_S = 0.02  # wall time of the first one, which only bounds the run's length (to a few percent)
RUN_SHARE = 0.05  # a pass may spend this share of the run's lower bound (total_steps at EnvPool's own speed)
MIN_ROLLOUT = 16  # the shortest rollout (steps per env) a split may have, unless the preset's is shorter


@dataclasses.dataclass
class Calibration:
    """One pass: the rows measured, the candidates and the choice (the JSON of the cache)."""

    env: str
    algo: str
    schedule: str  # the one it measured for: the run's, or what `auto` chose before it (see `choice`)
    budget_s: float  # the budget it had: the smaller of the given one and RUN_SHARE x bound_s
    elapsed_s: float
    bound_s: float  # the run's lower bound: total_steps at the speed of EnvPool alone
    machine: dict[str, Any]
    envpool: list[dict[str, Any]]  # num_envs, num_threads, batch_size, env_sps
    acting: list[dict[str, Any]]  # num_envs, num_threads, rollout_sps, inference_us_per_step | env_batch
    learning: list[dict[str, Any]]  # on-policy: size, device, update_s, update_frames_per_s, num_envs
    candidates: list[dict[str, Any]]  # on-policy: predicted trained steps/s per split; off-policy: acting per env batch
    choice: dict[str, Any]  # num_envs, num_threads (0: as given), num_steps (on-policy) | env_batch_size [, schedule]
    reason: str
    skipped: list[str]
    cached: bool = False
    overlap: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # acting beside learning (auto's schedule)
    schedule_reason: str | None = None  # why the pass chose the schedule (None: it did not choose one)
    cache_file: str = ""  # where the pass is cached ("": it could not be written there)

    def apply(self, config: TrainConfig) -> TrainConfig:
        """The config with the chosen sizes."""
        if self.choice["num_threads"] and not config.num_threads:  # a --num-threads given stays
            config = dataclasses.replace(config, num_threads=self.choice["num_threads"])
        if "schedule" in self.choice:  # chosen where `--schedule auto` chose the run's
            config = dataclasses.replace(config, schedule=self.choice["schedule"])
        if family(config) == "on_policy":
            return split(config, self.choice["num_envs"])
        if self.choice["env_batch_size"] < config.num_envs:
            config = dataclasses.replace(config, env_batch_size=self.choice["env_batch_size"])
        return config

    def table(self) -> str:
        schedule = f"{self.schedule} schedule" + (", auto's: sync or concurrent" if "schedule" in self.choice else "")
        lines = [f"calibration for {self.algo} on {self.env} ({schedule}), "
                 f"{self.elapsed_s:.1f} s of a {self.budget_s:.1f} s budget" + (" (cached)" if self.cached else ""),
                 f"the run's lower bound: {self.bound_s:.1f} s (its steps at EnvPool's own speed); the budget is at most "
                 f"{RUN_SHARE:.0%} of it"]
        lines.append("EnvPool alone (Python API, random actions):")
        lines.append(f"  {'num_envs':>8} {'threads':>7} {'batch':>6} {'steps/s':>10}")
        for r in self.envpool:
            lines.append(f"  {r['num_envs']:>8} {r['num_threads']:>7} {r['batch_size']:>6} {r['env_sps']:>10,.0f}")
        lines.append("acting (policy + EnvPool: jitted XLA rollout at batch = num_envs, host loop in async mode):")
        lines.append(f"  {'num_envs':>8} {'steps':>6} {'threads':>7} {'batch':>6} {'steps/s':>10} {'inference us/step':>18}")
        for r in self.acting:
            inference = r.get("inference_us_per_step")
            lines.append(f"  {r['num_envs']:>8} {r.get('num_steps', '-'):>6} {r['num_threads']:>7} "
                         f"{r.get('env_batch', r['num_envs']):>6} {r['rollout_sps']:>10,.0f} "
                         f"{'-' if inference is None else f'{inference:.1f}':>18}")
        lines.append("learning (jitted update):")
        lines.append(f"  {'size':>14} {'device':>8} {'update ms':>10} {'frames/s':>10}")
        for r in self.learning:
            lines.append(f"  {r['size']:>14} {r['device']:>8} {1e3 * r['update_s']:>10.2f} {r['update_frames_per_s']:>10,.0f}")
        if self.overlap:
            lines.append("acting beside learning (the preset's rollout and update dispatched together, as concurrent):")
            lines.append(f"  {'num_envs':>8} {'steps':>6} {'acting':>7} {'learner':>8} {'iteration ms':>13}")
            for r in self.overlap:
                lines.append(f"  {r['num_envs']:>8} {r['num_steps']:>6} {r['acting']:>7} {r['learner']:>8} "
                             f"{1e3 * r['iteration_s']:>13.2f}")
        if self.candidates:
            lines.append("candidates (predicted env steps/s):")
        for c in sorted(self.candidates, key=lambda c: -c.get("trained_sps", c.get("acting_sps", 0)))[:8]:
            sps = c.get("trained_sps", c.get("acting_sps", 0))
            sizes = ", ".join(f"{k}={v}" for k, v in c.items() if k not in ("trained_sps", "acting_sps"))
            lines.append(f"  {sps:>10,.0f}  {sizes}")
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


# Fields that bound what the pass may choose (the policy lag decides whether async mode keeps its
# chunks), or change the env it measures: a run that differs in one never takes another's entry.
KEYED_FIELDS = ("policy_lag", "max_policy_lag", "num_actors", "env_batch_size", "num_threads", "env_kwargs",
                "normalize_observations", "scale_rewards")


def cache_key(config: TrainConfig, chooses_schedule: bool = False) -> str:
    hyper = algo_config(config)
    depends = {
        "machine": machine(),
        "env": config.env,
        "algo": config.algo,
        "schedule": config.schedule,
        "placement": config.placement,
        "total_steps": config.total_steps,  # the run's length sets the budget
        "num_envs": config.num_envs,
        "hyper": dataclasses.asdict(hyper),
    }
    if chooses_schedule:  # `--schedule auto`: the pass may choose the schedule (absent: earlier entries stay valid)
        depends["chooses_schedule"] = True
    defaults = TrainConfig()
    others = {name: getattr(config, name) for name in KEYED_FIELDS if getattr(config, name) != getattr(defaults, name)}
    if others:  # what bounds or changes the choice besides (absent at their defaults: earlier entries stay valid)
        depends["others"] = others
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

    def allows(self, kinds: Sequence[str]) -> bool:
        """One measurement of each of `kinds` fits in what is left (the first `overlap` is expected to
        cost a rollout and an update: it compiles and runs both)."""
        return self.used + sum(self.expected_cost(k) for k in kinds) <= self.seconds

    def expected_cost(self, kind: str) -> float:
        """Its last measured cost; the first overlap, a rollout's and an update's (it compiles and runs both)."""
        if kind == "overlap" and kind not in self.cost:
            return self.cost["acting"] + self.cost["update"]
        return self.cost[kind]

    def record(self, kind: str, seconds: float) -> None:
        self.cost[kind] = COST_FACTOR * seconds


class Measurement(NamedTuple):
    """One program to time: `kind` names the measuring function, `args` its keyword arguments."""

    kind: str  # "envpool", "acting", "async_mode", "update" or "overlap"
    args: dict[str, Any]
    then: tuple[str, ...] = ()  # kinds that follow at the same size: no use without this one, nor it without them
    optional: bool = False  # left out when it does not fit, the plan going on: nothing after it needs it

    def label(self) -> str:
        values = (describe(v) if isinstance(v, jax.Device) else v for v in self.args.values())
        return f"{self.kind} " + " ".join(f"{k}={v}" for k, v in zip(self.args, values))


def run_measurements(plan: Sequence[Measurement], measures: Mapping[str, Callable[..., list[Row]]],
                     budget: Budget) -> tuple[dict[str, list[Row]], list[str]]:
    """The measurements of `plan` in order, up to the first one the budget does not allow with the
    `then` kinds that follow it (a plan is in order of use: what comes later is of no use without
    what came before). Once one starts, its `then` kinds follow it whatever the budget then says.
    Returns the rows by kind and what the budget left out."""
    rows: dict[str, list[Row]] = {kind: [] for kind in measures}
    follows: set[str] = set()
    skipped: list[str] = []
    for i, m in enumerate(plan):
        if m.kind not in follows and not budget.allows((m.kind, *m.then)):
            if m.optional:
                skipped.append(f"{m.label()} (budget)")
                continue
            return rows, skipped + [f"{left.label()} (budget)" for left in plan[i:]]
        follows = set(m.then)
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


def split(config: TrainConfig, num_envs: int) -> TrainConfig:
    """The on-policy config with its batch (num_envs x num_steps) split over `num_envs` envs."""
    hyper = algo_config(config)
    batch = config.num_envs * hyper.num_steps
    return dataclasses.replace(config, num_envs=num_envs,
                               **{config.algo: dataclasses.replace(hyper, num_steps=batch // num_envs)})


def split_sizes(config: TrainConfig) -> list[int]:
    """num_envs the preset's on-policy batch may be split over: as many envs or more (fewer never
    step faster), each rollout at least `MIN_ROLLOUT` steps (or the preset's, if shorter), each
    accepted by a run with the other flags as given, so that any size it picks needs no check again."""
    hyper = algo_config(config)
    batch, shortest = config.num_envs * hyper.num_steps, min(MIN_ROLLOUT, hyper.num_steps)
    sizes = {n for n in ENV_GRID if n > config.num_envs and batch % n == 0 and batch // n >= shortest}
    return [config.num_envs] + [n for n in sorted(sizes) if not config_errors(split(config, n))]


def threads_plan(config: TrainConfig) -> list[Measurement]:
    """EnvPool alone at the preset's num_envs, per thread count (none where --num-threads is given:
    the pass never changes it)."""
    n = config.num_envs
    if config.num_threads:
        return []
    return [Measurement("envpool", dict(num_envs=n, num_threads=t, batch_size=n)) for t in thread_grid(n)]


def rollout_threads(threads: int, num_envs: int) -> int:
    """EnvPool threads of a rollout at `num_envs` as the run would take them: `threads` (given or
    chosen), or, 0, EnvPool's default at that size."""
    return min(threads, num_envs) if threads else default_env_threads(num_envs)


def on_policy_plan(config: TrainConfig, threads: int, concurrent: Placement | None = None,
                   learner: jax.Device | None = None) -> list[Measurement]:
    """The preset's rollout and update (a rollout starts only if its update fits too: neither is of
    use alone), each rollout at the threads a run of its size takes (`rollout_threads`); with `concurrent` (the placement the `concurrent` schedule would take, where the
    pass chooses the schedule) the two dispatched together on its devices, after the update alone
    on its learner where that is not `learner` (the run's); then a rollout per other split of its
    batch, outwards from the preset's."""
    batch, preset = config.num_envs * algo_config(config).num_steps, config.num_envs
    plan = [Measurement("acting", dict(num_envs=preset, num_threads=rollout_threads(threads, preset),
                                          num_steps=batch // preset), then=("update",)),
            Measurement("update", dict(num_envs=preset))]
    if concurrent is not None:  # optional: the splits after it are predicted whether it is measured or not
        if concurrent.learner != learner:
            plan.append(Measurement("update", dict(num_envs=preset, device=concurrent.learner), then=("overlap",),
                                    optional=True))
        plan.append(Measurement("overlap", dict(num_envs=preset, num_threads=rollout_threads(threads, preset),
                                                num_steps=batch // preset, acting=concurrent.acting,
                                                learner=concurrent.learner), optional=True))
    return plan + [Measurement("acting", dict(num_envs=n, num_threads=rollout_threads(threads, n), num_steps=batch // n))
                   for n in measuring_order(split_sizes(config), preset) if n != preset]


def off_policy_plan_of_measurements(config: TrainConfig, threads: int) -> list[Measurement]:
    """For the `async` schedule, acting at the preset's num_envs, then the actors over EnvPool's
    async mode (neither is of use alone); the other schedules, and a given --env-batch-size, have
    nothing more to choose."""
    n, threads = config.num_envs, rollout_threads(threads, config.num_envs)
    # not where the lag bound would drop the rows that async mode's envs ran ahead to act
    if (config.schedule != "async" or n < 4 or config.env_batch_size
            or oldest_acting_lag(config, True) > config.max_policy_lag):
        return []
    return [Measurement("acting", dict(num_envs=n, num_threads=threads), then=("async_mode",)),
            Measurement("async_mode", dict(num_envs=n, num_threads=threads))]


# -- measuring: each times one kind of program where placement puts it, and returns plain rows ------
def envpool_sps(env_id: str, spec, num_envs: int, num_threads: int, batch_size: int,
                seconds: float = MEASURE_S, options: Mapping[str, Any] | None = None) -> float:
    """Steps/s of EnvPool alone (async send/recv, which is also the sync mode when batch == num_envs),
    made with the run's `options` (its --env-kwargs)."""
    pool = make_pool(env_id, num_envs, num_threads, seed=0, batch_size=batch_size, **(options or {}))
    rng = np.random.default_rng(0)
    pool.async_reset()
    steps, start = 0, None
    while True:
        _, _, _, _, info = pool.recv()
        if start is None:
            start = time.perf_counter()
        elif time.perf_counter() - start > seconds:
            break
        ids = info["env_id"]
        pool.send(random_actions_np(spec, rng, len(ids)), ids)
        steps += len(ids)
    elapsed = time.perf_counter() - start
    pool.close()
    return steps / elapsed


def timed_calls(fn, state, min_s: float = 0.1, max_calls: int = 50, min_calls: int = 1) -> tuple[float, Any]:
    """Seconds per call after a warm-up (compiling) call: at least `min_calls` calls and `min_s`."""
    state = fn(state)
    jax.block_until_ready(state)
    calls, start = 0, time.perf_counter()
    while calls < max_calls and (calls < min_calls or time.perf_counter() - start < min_s):
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
    pool_options: dict[str, Any]  # the run's --env-kwargs: every env the pass makes is the run's
    algo: Any  # built once: its programs' shapes do not depend on num_envs (PPO's update is rebuilt per size)
    state: Any  # zeros shaped like its initial state (off-policy: the (actor, critic) roles)
    probe: BatchedEnv  # a one-env XLA env, around which the off-policy update programs are built
    opened: list  # XLA envs, closed when the pass ends: after every program that steps them has run


def make_setup(config: TrainConfig, placement: Placement) -> Setup:
    pool_options = parse_env_kwargs(config.env_kwargs)
    probe = make_xla_env(config.env, 1, 1, config.seed, **pool_options)
    algo = sized_algorithm(config, probe.spec, config.num_envs if family(config) == "on_policy" else 1)
    # zeros shaped like the initial state: programs cost the same whatever the numbers, and
    # compiling the initializers (orthogonal: a QR per layer) costs seconds of the budget
    state = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), jax.eval_shape(algo.init, jax.random.key(0)))
    return Setup(config, probe.spec, placement, env_options(config), pool_options, algo, state, probe, [probe])


def sized_algorithm(config: TrainConfig, spec: EnvSpec, num_envs: int) -> Any:
    return make_algorithm(dataclasses.replace(config, num_envs=num_envs), dataclasses.replace(spec, num_envs=num_envs))


def open_env(setup: Setup, num_envs: int, num_threads: int) -> BatchedEnv:
    env = make_xla_env(setup.config.env, num_envs, num_threads, setup.config.seed, **setup.pool_options)
    setup.opened.append(env)
    return env


def env_carry_on(setup: Setup, env: BatchedEnv, device: jax.Device) -> Any:
    """A fresh env carry committed to `device`, like every other input of a timed program: a mix of
    committed and uncommitted inputs compiles again when the first outputs come back, mid-timing."""
    carry = jax.jit(lambda h, o: init_env_carry(env, setup.options, h, o))(env.handle, env.reset())
    return jax.device_put(carry, device)


def measure_envpool(env_id: str, options: dict[str, Any], num_envs: int, num_threads: int, batch_size: int,
                    seconds: float = MEASURE_S) -> list[Row]:
    """EnvPool alone, its Python API stepping random actions, made with `options` (--env-kwargs)."""
    sps = envpool_sps(env_id, probe_spec(env_id, options), num_envs, num_threads, batch_size, seconds, options)
    return [dict(num_envs=num_envs, num_threads=num_threads, batch_size=batch_size, env_sps=sps)]


def measure_rollout(setup: Setup, num_envs: int, num_threads: int, num_steps: int) -> list[Row]:
    """On-policy acting: the jitted rollout of `num_steps` per env (policy + EnvPool's XLA step)
    on placement's acting device."""
    length, device = num_steps, setup.placement.acting
    env = open_env(setup, num_envs, num_threads)
    algo, collect = sized_algorithm(setup.config, setup.spec, num_envs), make_collect(env, setup.options, length)

    def rollout(carry, state, key):  # the transitions are outputs: all of the policy is computed
        carry, transitions, _ = collect(carry, lambda obs, k: algo.act(state, obs, k), key)
        return carry, transitions

    carry = env_carry_on(setup, env, device)
    state = jax.device_put(algo.init(jax.random.key(0)), device)  # sized state: gSDE holds a matrix per env
    program = jax.jit(rollout, donate_argnums=0)
    seconds, _ = timed_calls(lambda c: program(c, state, jax.random.key(1))[0], carry)
    return [dict(num_envs=num_envs, num_steps=length, num_threads=num_threads, rollout_sps=length * num_envs / seconds)]


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


def measure_on_policy_update(setup: Setup, num_envs: int, device: jax.Device | None = None) -> list[Row]:
    """The jitted on-policy update of a num_envs x num_steps batch, on `device` (default:
    placement's learner device)."""
    length, device = algo_config(setup.config).num_steps, device or setup.placement.learner
    algo = sized_algorithm(setup.config, setup.spec, num_envs)
    state = jax.device_put(algo.init(jax.random.key(0)), device)
    batch = jax.device_put(zeros_rollout(algo, state, setup.spec, num_envs, length), device)
    program = jax.jit(algo.update)
    seconds, _ = timed_calls(lambda s: program(s, batch, jax.random.key(2))[0], state, max_calls=10)
    return [dict(num_envs=num_envs, size=f"batch {length * num_envs}", device=describe(device), update_s=seconds,
                 update_frames_per_s=algo_config(setup.config).update_epochs * length * num_envs / seconds)]


def measure_overlap(setup: Setup, num_envs: int, num_threads: int, num_steps: int, acting: jax.Device,
                    learner: jax.Device) -> list[Row]:
    """The preset's rollout and update dispatched together, as `concurrent` iterates: the update
    (of the batch collected before) dispatched on `learner`, the rollout run on `acting` meanwhile
    with the parameters it had, the rollout moved to the learner. Seconds per iteration."""
    env = open_env(setup, num_envs, num_threads)
    algo = sized_algorithm(setup.config, setup.spec, num_envs)
    rollout = make_rollout(env, setup.options, algo.act, num_steps)  # concurrent's program
    collect_program, update = jax.jit(rollout, donate_argnums=0), jax.jit(algo.update)
    state = jax.device_put(algo.init(jax.random.key(0)), learner)
    carry, first, _ = collect_program(env_carry_on(setup, env, acting), jax.device_put(state, acting),
                                      jax.random.key(1))
    pending = jax.device_put(first, learner)  # a collected batch: the update compiles for what it is given

    def iteration(inputs):
        state, carry, pending = inputs
        behaviour = jax.device_put(state, acting)
        state, _ = update(state, pending, jax.random.key(2))  # returns at once: it runs on its device
        carry, collected, _ = collect_program(carry, behaviour, jax.random.key(1))
        return state, carry, jax.device_put(collected, learner)

    seconds, _ = timed_calls(iteration, (state, carry, pending), max_calls=10, min_calls=3)
    return [dict(num_envs=num_envs, num_steps=num_steps, num_threads=num_threads, acting=describe(acting),
                 learner=describe(learner), iteration_s=seconds)]


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
                               device, setup.pool_options)
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


class LazySetup:
    """The pass's `Setup`, made when a program is first measured: a short run measures EnvPool
    alone and needs none (making one costs a pool and a trace of the algorithm)."""

    def __init__(self, config: TrainConfig, placement: Placement):
        self.config, self.placement, self.made = config, placement, None

    def __call__(self) -> Setup:
        if self.made is None:
            self.made = make_setup(self.config, self.placement)
        return self.made

    def close(self) -> None:
        for env in self.made.opened if self.made else ():
            env.pool.close()


def measuring_functions(setup: LazySetup) -> dict[str, Callable[..., list[Row]]]:
    def on(measure):  # the function with the pass's setup, made on the first call
        return lambda **args: measure(setup(), **args)

    measures = {"envpool": functools.partial(measure_envpool, setup.config.env, parse_env_kwargs(setup.config.env_kwargs))}
    if family(setup.config) == "on_policy":
        return measures | {"acting": on(measure_rollout), "update": on(measure_on_policy_update),
                           "overlap": on(measure_overlap)}
    return measures | {"acting": on(measure_off_policy_acting), "async_mode": on(measure_async_mode),
                       "update": on(measure_off_policy_update)}


# -- the pass ----------------------------------------------------------------------------------
def calibrate(config: TrainConfig, placement: Placement, budget_s: float = 30.0, recalibrate: bool = False,
              log=print, concurrent: Placement | None = None) -> Calibration:
    """Measure (or load from the cache) and choose, on the devices of the run's `placement`; see the
    module docstring. `config` is resolved: its schedule is named (`resolve.check_inputs` chooses for
    `auto`). With `concurrent`, the placement of the `concurrent` schedule (an on-policy run whose
    schedule `auto` chose), the pass chooses between that schedule and `sync`."""
    if config.schedule == "auto":
        raise ValueError("calibrate takes a resolved config: --schedule auto is chosen by resolve.check_inputs first")
    path = cache_dir() / f"{cache_key(config, concurrent is not None)}.json"
    if path.exists() and not recalibrate:
        try:
            cached = Calibration(**json.loads(path.read_text()))
            cached.cached, cached.cache_file = True, str(path)
            return cached
        except (TypeError, ValueError):
            pass  # an unreadable or older cache entry: measure again
    result = measure_and_choose(config, placement, budget_s, concurrent)
    result.cache_file = str(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with written_whole(path) as partial:
            partial.write_text(json.dumps(dataclasses.asdict(result), indent=1))
    except OSError as error:  # a read-only home: the run goes on with the measured choice
        log(f"calibration: could not cache to {path}: {error}")
        result.cache_file = ""
    return result


def measure(config: TrainConfig, placement: Placement, budget: Budget, concurrent: Placement | None = None
            ) -> tuple[dict[str, list[Row]], list[str], float]:
    """Every row of the pass, what the budget left out, and the run's lower bound: a short probe of
    EnvPool alone at the preset's num_envs and default threads first (the bound, which caps the
    budget), EnvPool per thread count, then the plan of the algorithm's family."""
    setup = LazySetup(config, placement)
    n, cpus = config.num_envs, os.cpu_count() or 1
    try:
        measures = measuring_functions(setup)
        probe = measures["envpool"](num_envs=n, num_threads=config.num_threads or default_env_threads(n, cpus),
                                    batch_size=n, seconds=PROBE_S)
        budget.record("envpool", budget.used + MEASURE_S - PROBE_S)  # a pool to make costs as much again
        bound_s = config.total_steps / probe[0]["env_sps"]
        budget.seconds = min(budget.seconds, RUN_SHARE * bound_s)
        rows, skipped = run_measurements(threads_plan(config), measures, budget)
        rows["envpool"] = rows["envpool"] or probe  # the thread counts' rows, measured longer, when there are any
        threads = config.num_threads or choose_threads(rows["envpool"], n, cpus)[0]  # 0: EnvPool's default per size
        plan = (on_policy_plan(config, threads, concurrent, placement.learner) if family(config) == "on_policy"
                else off_policy_plan_of_measurements(config, threads))
        more, more_skipped = run_measurements(plan, measures, budget)
    finally:
        setup.close()
    return {kind: rows[kind] + more[kind] for kind in measures}, skipped + more_skipped, bound_s


def measure_and_choose(config: TrainConfig, placement: Placement, budget_s: float,
                       concurrent: Placement | None = None) -> Calibration:
    budget = Budget(budget_s)
    rows, skipped, bound_s = measure(config, placement, budget, concurrent)
    acting = with_inference(rows["acting"] + rows.get("async_mode", []), rows["envpool"])
    cpus = os.cpu_count() or 1
    if family(config) == "on_policy":
        batch = config.num_envs * algo_config(config).num_steps
        schedule, schedule_reason, efficiency = config.schedule, None, 1.0
        if concurrent is not None and rows["overlap"]:
            schedule, schedule_reason, efficiency = choose_schedule(acting, rows["update"], rows["overlap"],
                                                                    config.num_envs)
        # whose update paces it: concurrent's learner where the pass chose it (a named schedule's is the first row)
        learner = rows["overlap"][0]["learner"] if schedule_reason is not None and schedule == "concurrent" else None
        choice, reason, candidates = choose_on_policy(acting, rows["update"], rows["envpool"], schedule, batch,
                                                      config.num_envs, cpus, efficiency, learner, config.num_threads)
        if schedule_reason is not None:
            choice, reason = choice | {"schedule": schedule}, f"{schedule_reason}; {reason}"
    else:
        schedule_reason = None
        choice, reason, candidates = choose_off_policy(acting, rows["envpool"], config.schedule, config.num_envs, cpus,
                                                       config.num_threads, config.env_batch_size)
    return Calibration(config.env, config.algo, config.schedule, budget.seconds, budget.used, bound_s, machine(),
                       rows["envpool"], acting, rows["update"] if family(config) == "on_policy" else [], candidates,
                       choice, reason, skipped, overlap=rows.get("overlap", []), schedule_reason=schedule_reason)


def measure_phases(config: TrainConfig, placement: Placement) -> dict[str, list[Row]]:
    """The preset's acting and update, each alone, whatever the run's length: the phase times that
    `experiments/bench_schedules.py` sets beside its end-to-end figures."""
    setup = LazySetup(config, placement)
    n, hyper = config.num_envs, algo_config(config)
    threads = config.num_threads or default_env_threads(n)
    measures = measuring_functions(setup)
    try:
        if family(config) == "on_policy":
            return {"acting": measures["acting"](num_envs=n, num_threads=threads, num_steps=hyper.num_steps),
                    "learning": measures["update"](num_envs=n)}
        return {"acting": measures["acting"](num_envs=n, num_threads=threads),
                "learning": [row for device in learner_devices(placement, config.schedule)
                             for row in measures["update"](batch_size=hyper.batch_size, device=device)]}
    finally:
        setup.close()
