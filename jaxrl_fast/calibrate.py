"""Calibration (Spreeze's automatic sizing): measure this machine, then pick the sizes.

    python -m jaxrl_fast.calibrate --env HalfCheetah-v4 --algo sac      # measure, print, cache
    python -m jaxrl_fast.train --env HalfCheetah-v4 --algo sac --calibrate

Within a time budget it measures:
  * EnvPool alone (its Python API, random actions), steps/s over a grid of `num_envs`, EnvPool
    thread counts and, in EnvPool's async mode, env batch sizes (`batch_size < num_envs`);
  * acting: the jitted rollout program (EnvPool's XLA step + policy inference) per `num_envs`,
    at the best thread count; inference time = rollout time - env time; for the `async`
    schedule also the actors' host loop over EnvPool's async mode at env batches num_envs/2 and
    /4, taken instead of the XLA step when it acts 10% faster;
  * learning: the jitted update program, per `num_envs` for PPO (its batch is num_envs x
    num_steps), per update batch size for the off-policy algorithms, on each learner device.
From these it predicts trained env steps per second for every candidate under the run's schedule
(`sync`: acting and learning add up; `concurrent`/`async`: they overlap, the slower one sets the
pace) while holding the algorithm's ratios: PPO keeps its rollout length, minibatch count and
epochs; the off-policy algorithms keep samples consumed per sample produced (utd_ratio x
batch_size), so a larger update batch comes with proportionally fewer updates. Among candidates
within 5% of the best it picks the smallest (fewer envs and smaller batches change learning
least), and an update batch larger than the preset's only when it is 25% faster.

The result is cached per machine, environment, algorithm and the sizes it depends on under the
user's cache directory; `--recalibrate` measures again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_fast.config import OFF_POLICY, TrainConfig, algo_config

FLAT_MARGIN = 0.05  # candidates this close to the best count as equal: the smallest wins
BATCH_MARGIN = 1.25  # a larger update batch must be this much faster to replace the preset's
ASYNC_MODE_MARGIN = 1.10  # EnvPool's async mode must act this much faster to replace the XLA step
ENV_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MEASURE_S = 0.1  # wall time per EnvPool measurement


@dataclasses.dataclass
class Calibration:
    env: str
    algo: str
    schedule: str
    budget_s: float
    elapsed_s: float
    machine: dict[str, Any]
    envpool: list[dict[str, Any]]  # num_envs, num_threads, batch_size, env_sps
    acting: list[dict[str, Any]]  # num_envs, num_threads, rollout_sps, inference_us_per_step
    learning: list[dict[str, Any]]  # size, device, update_s, update_frames_per_s
    candidates: list[dict[str, Any]]  # predicted trained steps/s per choice
    choice: dict[str, Any]  # num_envs, num_threads, env_batch_size, (batch_size, utd_ratio) | (minibatch_size)
    reason: str
    skipped: list[str]
    cached: bool = False

    def apply(self, config: TrainConfig) -> TrainConfig:
        """The config with the chosen sizes."""
        changes: dict[str, Any] = {"num_envs": self.choice["num_envs"], "num_threads": self.choice["num_threads"]}
        if config.algo in OFF_POLICY:
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
        "devices": [f"{d.platform}:{getattr(d, 'device_kind', '')}" for d in jax.devices()],
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


# -- measurements ------------------------------------------------------------------------------
class Budget:
    def __init__(self, seconds: float):
        self.seconds, self.start = seconds, time.perf_counter()

    @property
    def used(self) -> float:
        return time.perf_counter() - self.start

    def allows(self, estimate_s: float) -> bool:
        return self.used + estimate_s <= self.seconds


def random_actions_np(spec, n: int, rng: np.random.Generator) -> np.ndarray:
    if spec.discrete:
        return rng.integers(0, spec.num_actions, size=n)
    return rng.uniform(spec.action_low, spec.action_high, size=(n, *spec.action_shape)).astype(np.float32)


def envpool_sps(env_id: str, spec, num_envs: int, num_threads: int, batch_size: int) -> float:
    """Steps/s of EnvPool alone (async send/recv, which is also the sync mode when batch == num_envs)."""
    import envpool

    pool = envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, batch_size=batch_size,
                        num_threads=num_threads, seed=0)
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
        pool.send(random_actions_np(spec, len(ids), rng), ids)
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


def _thread_grid(num_envs: int) -> list[int]:
    cpus = os.cpu_count() or 1
    grid = sorted({min(t, num_envs) for t in (1, 2, 4, 8, 16, 32) if t <= cpus} | {min(cpus, num_envs)})
    return grid


def _env_grid(config: TrainConfig) -> list[int]:
    top = max(64, 4 * config.num_envs)
    grid = [n for n in ENV_GRID if n <= top]
    if config.algo == "ppo":  # the batch num_envs x num_steps must split into the minibatches
        grid = [n for n in grid if (n * config.ppo.num_steps) % config.ppo.num_minibatches == 0]
    return grid or [config.num_envs]


# -- the pass ----------------------------------------------------------------------------------
def calibrate(config: TrainConfig, budget_s: float = 30.0, recalibrate: bool = False,
              log=print) -> Calibration:
    """Measure (or load from the cache) and choose; see the module docstring."""
    path = cache_dir() / f"{cache_key(config)}.json"
    if path.exists() and not recalibrate:
        try:
            cached = Calibration(**json.loads(path.read_text()))
            cached.cached = True
            return cached
        except (TypeError, ValueError):
            pass  # an unreadable or older cache entry: measure again
    result = measure_and_choose(config, budget_s)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(result), indent=1))
        tmp.replace(path)
    except OSError as error:  # a read-only home: the run goes on with the measured choice
        log(f"calibration: could not cache to {path}: {error}")
    return result


def measure_and_choose(config: TrainConfig, budget_s: float) -> Calibration:
    from jaxrl_fast.env import probe_spec

    budget = Budget(budget_s)
    spec = probe_spec(config.env)
    skipped: list[str] = []
    grid = _env_grid(config)

    # 1. EnvPool alone: threads per num_envs, then async-mode batch sizes at the best thread count.
    envpool_rows = []
    for n in grid:
        for t in _thread_grid(n):
            if not budget.allows(MEASURE_S + 0.1):
                skipped.append(f"EnvPool num_envs={n} threads={t} (budget)")
                continue
            envpool_rows.append(dict(num_envs=n, num_threads=t, batch_size=n, env_sps=envpool_sps(config.env, spec, n, t, n)))
    best_threads = {}
    for n in grid:
        rows = [r for r in envpool_rows if r["num_envs"] == n]
        if rows:
            best_threads[n] = max(rows, key=lambda r: r["env_sps"])["num_threads"]
    for n in [n for n in grid if n >= 4 and n in best_threads][-2:]:  # async mode, where it can matter most
        for batch in (n // 2, n // 4):
            if budget.allows(MEASURE_S + 0.1) and budget.used < 0.25 * budget.seconds:
                envpool_rows.append(dict(num_envs=n, num_threads=best_threads[n], batch_size=batch,
                                         env_sps=envpool_sps(config.env, spec, n, best_threads[n], batch)))
    if config.algo in OFF_POLICY:
        return _choose_off_policy(config, spec, budget, envpool_rows, best_threads, skipped)
    return _choose_ppo(config, spec, budget, envpool_rows, best_threads, skipped)


def measuring_order(sizes, preset: int) -> list[int]:
    """The preset's size first, then outwards, larger before smaller: what the budget measures first."""
    return sorted(sizes, key=lambda n: (abs(math.log2(n / preset)), -n))


def _choose_ppo(config, spec, budget, envpool_rows, best_threads, skipped) -> Calibration:
    from jaxrl_fast.algos import make_algorithm
    from jaxrl_fast.data import Rollout
    from jaxrl_fast.env import make_xla_env
    from jaxrl_fast.acting import EnvOptions, init_env_carry, make_collect, observe

    T = config.ppo.num_steps
    options = EnvOptions(config.normalize_observations, config.scale_rewards, config.ppo.gamma)
    acting, learning, candidates = [], [], []
    per_iteration_estimate = 3.0  # compile + measure seconds, refined after the first size
    algo_state = None  # parameter shapes do not depend on num_envs: initialised once
    for n in measuring_order(best_threads, config.num_envs):
        if not budget.allows(per_iteration_estimate):
            skipped.append(f"rollout and update at num_envs={n} (budget)")
            continue
        begin = time.perf_counter()
        sized = dataclasses.replace(config, num_envs=n)
        env = make_xla_env(config.env, n, best_threads[n], config.seed)
        algo = make_algorithm(sized, env.spec)
        collect = make_collect(env, options, T)

        def rollout(carry, algo_state, key):
            carry, transitions, _ = collect(carry, lambda obs, k: algo.act(algo_state, obs, k), key)
            return carry, Rollout(transitions, observe(options, carry.obs_moments, carry.obs))

        if algo_state is None:
            algo_state = jax.jit(algo.init)(jax.random.key(0))
        carry = jax.jit(lambda h, o: init_env_carry(env, options, h, o))(env.handle, env.reset())
        rollout_program = jax.jit(rollout, donate_argnums=0)
        box = {}

        def act_once(carry):
            carry, box["rollout"] = rollout_program(carry, algo_state, jax.random.key(1))
            return carry

        rollout_s, carry = timed_calls(act_once, carry)
        update_program = jax.jit(algo.update)
        update_s, _ = timed_calls(lambda s: update_program(s, box["rollout"], jax.random.key(2))[0], algo_state,
                                  max_calls=10)
        env.pool.close()
        env_sps = max(r["env_sps"] for r in envpool_rows if r["num_envs"] == n and r["batch_size"] == n)
        inference = max(0.0, rollout_s / T - n / env_sps) * 1e6
        acting.append(dict(num_envs=n, num_threads=best_threads[n], rollout_sps=T * n / rollout_s,
                           inference_us_per_step=inference))
        learning.append(dict(size=f"batch {T * n}", device=str(jax.devices()[0].platform), update_s=update_s,
                             update_frames_per_s=T * n * config.ppo.update_epochs / update_s))
        per_iteration = rollout_s + update_s if config.schedule == "sync" else max(rollout_s, update_s)
        candidates.append(dict(num_envs=n, num_threads=best_threads[n], minibatch_size=T * n // config.ppo.num_minibatches,
                               trained_sps=T * n / per_iteration))
        per_iteration_estimate = 1.5 * (time.perf_counter() - begin)
    if not candidates:
        raise RuntimeError(f"calibration: a budget of {budget.seconds:.0f} s measured no candidate; raise --budget-s")
    best = max(c["trained_sps"] for c in candidates)
    pick = min((c for c in candidates if c["trained_sps"] >= (1 - FLAT_MARGIN) * best), key=lambda c: c["num_envs"])
    choice = dict(num_envs=pick["num_envs"], num_threads=pick["num_threads"], env_batch_size=pick["num_envs"],
                  minibatch_size=pick["minibatch_size"])
    reason = (f"{pick['num_envs']} envs is the fewest within {FLAT_MARGIN:.0%} of the best predicted "
              f"{best:,.0f} trained steps/s ({config.schedule}); rollout length {T}, "
              f"{config.ppo.num_minibatches} minibatches and {config.ppo.update_epochs} epochs kept; "
              "env batch = num_envs (only the off-policy async actors use EnvPool's async mode)")
    return Calibration(config.env, config.algo, config.schedule, budget.seconds, budget.used, machine(), envpool_rows,
                       acting, learning, candidates, choice, reason, skipped)


def _choose_off_policy(config, spec, budget, envpool_rows, best_threads, skipped) -> Calibration:
    from jaxrl_fast.algos import make_algorithm as make_off_policy_algorithm
    from jaxrl_fast.env import make_xla_env
    from jaxrl_fast.placement import resolve_placement
    from jaxrl_fast.replay import init_replay
    from jaxrl_fast.acting import EnvOptions, init_env_carry
    from jaxrl_fast.plan import dispatch_steps, off_policy_plan
    from jaxrl_fast.schedules.offpolicy import make_pieces

    hyper = algo_config(config)
    options = EnvOptions(False, False, hyper.gamma)
    acting, learning = [], []

    probe_env = make_xla_env(config.env, 1, 1, config.seed)
    probe_algo = make_off_policy_algorithm(config, probe_env.spec)
    first_obs = probe_env.reset()
    init_roles = jax.jit(probe_algo.init)
    roles = init_roles(jax.random.key(0))
    rollout_per_step: dict[int, float] = {}
    keep_alive: list = []

    def measure_acting(n: int) -> None:
        env = make_xla_env(config.env, n, best_threads[n], config.seed)
        algo = make_off_policy_algorithm(dataclasses.replace(config, num_envs=n), env.spec)
        plan = off_policy_plan(hyper, n)._replace(rollout_length=8, replay_rows=2)
        pieces = make_pieces(algo, env, options, plan)
        carry = jax.jit(lambda h, o: init_env_carry(env, options, h, o))(env.handle, env.reset())
        params = algo.acting_params(*roles)  # parameter shapes do not depend on num_envs
        act = jax.jit(pieces.act_rows, static_argnums=4, donate_argnums=0)
        seconds, _ = timed_calls(lambda c: act(c, params, jax.random.key(1), jnp.int32(0), False)[0], carry)
        keep_alive.append(env)  # closed once every program has run
        rollout_per_step[n] = seconds / plan.rollout_length
        env_sps = max(r["env_sps"] for r in envpool_rows if r["num_envs"] == n and r["batch_size"] == n)
        acting.append(dict(num_envs=n, num_threads=best_threads[n], rollout_sps=n / rollout_per_step[n],
                           inference_us_per_step=max(0.0, rollout_per_step[n] - n / env_sps) * 1e6))

    async_mode_per_step: dict[int, tuple[int, float]] = {}  # num_envs -> (env batch, seconds per env step)

    def measure_async_mode(n: int) -> None:
        """The `async` actors' host loop over EnvPool's async mode, at env batches n/2 and n/4."""
        from jaxrl_fast.placement import host_device as host_acting_device
        from jaxrl_fast.schedules.async_mode import AsyncModeActor
        from jaxrl_fast.schedules.timing import PhaseClock

        device = host_acting_device()
        params = jax.device_put(probe_algo.acting_params(*roles), device)
        for batch in (n // 2, n // 4):
            actor = AsyncModeActor(probe_algo, probe_env.spec, n, batch, best_threads[n], config.seed, 8, device)
            act = lambda _: actor.act_chunk(params, 0, False, jax.random.key(1), 0, PhaseClock())  # noqa: E731
            seconds, _ = timed_calls(act, None, max_calls=20)
            actor.close()
            acting.append(dict(num_envs=n, num_threads=best_threads[n], env_batch=batch, rollout_sps=8 * n / seconds))
            per_step = seconds / (8 * n)
            if n not in async_mode_per_step or per_step < async_mode_per_step[n][1]:
                async_mode_per_step[n] = (batch, per_step)

    # learning: per update batch size, on each learner device (split: the slower one sets the pace)
    where = resolve_placement("single" if config.schedule == "async" and config.placement == "auto" else config.placement)
    devices = list(dict.fromkeys([*where.actor, *where.critic])) if where.mode == "split" else [where.critic[0]]

    update_s_at: dict[int, float] = {}

    def measure_update(size: int, device) -> None:
        plan = off_policy_plan(hyper, 1)._replace(batch_size=size, replay_rows=max(1024, size))
        pieces = make_pieces(probe_algo, probe_env, options, plan)
        updates = 8
        keys = jax.random.split(jax.random.key(3), updates)
        # an empty buffer of the right shapes: sampling costs the same whatever the rows hold
        shapes = jax.eval_shape(pieces.init, jax.random.key(0), probe_env.handle, first_obs).replay.rows
        replay = init_replay(plan.replay_rows, jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), shapes))

        # arrays go in as arguments: closed over, they would be baked into the program as constants
        def run(carry, replay, keys):
            return pieces.run_updates(*carry, replay, keys, jnp.int32(0))[:2]

        program = jax.jit(run, donate_argnums=0)
        replay, carry, keys = jax.device_put((replay, init_roles(jax.random.key(0)), keys), device)  # fresh: donated
        seconds, _ = timed_calls(lambda c: program(c, replay, keys), carry, max_calls=20)
        per_update = seconds / updates
        update_s_at[size] = max(update_s_at.get(size, 0.0), per_update)
        learning.append(dict(size=f"batch {size}", device=f"{device.platform}:{device.id}", update_s=per_update,
                             update_frames_per_s=size / per_update))

    # What a choice needs first (the preset's sizes), then the alternatives, while the budget lasts.
    env_sizes = measuring_order(best_threads, config.num_envs)
    batch_sizes = [2 * hyper.batch_size, 4 * hyper.batch_size]
    tasks = [("update", (size, d)) for size in [hyper.batch_size, *batch_sizes] for d in devices]
    for n in env_sizes:
        tasks.append(("acting", (n,)))
        if config.schedule == "async" and n >= 4:  # only the async actors can use EnvPool's async mode
            tasks.append(("async_mode", (n,)))
    first_acting = (1 + len(batch_sizes)) * len(devices)
    # the preset batch and num_envs (and, for async actors, its async mode) are measured whatever the budget
    essential = set(range(len(devices))) | {first_acting} | (
        {first_acting + 1} if first_acting + 1 < len(tasks) and tasks[first_acting + 1][0] == "async_mode" else set())
    cost = {"acting": 2.0, "update": 3.0, "async_mode": 2.0}  # seconds, compile included; refined by each measurement
    measure = {"acting": measure_acting, "update": measure_update, "async_mode": measure_async_mode}
    for index, (kind, args) in enumerate(tasks):
        if index not in essential and not budget.allows(cost[kind]):
            skipped.append(f"{kind} at {'batch' if kind == 'update' else 'num_envs'} {args[0]} (budget)")
            continue
        begin = time.perf_counter()
        measure[kind](*args)
        cost[kind] = 1.2 * (time.perf_counter() - begin)
    for env in [probe_env, *keep_alive]:
        env.pool.close()

    samples_per_step = hyper.utd_ratio * hyper.batch_size  # held fixed: consumed per produced
    candidates = []
    for n, act_s in rollout_per_step.items():
        env_batch, act_per_env_step = n, act_s / n
        staged = async_mode_per_step.get(n)
        if staged is not None and staged[1] * ASYNC_MODE_MARGIN < act_per_env_step:
            env_batch, act_per_env_step = staged
        for size, update_s in update_s_at.items():
            learn_per_env_step = samples_per_step / size * update_s
            per_step = act_per_env_step + learn_per_env_step if config.schedule == "sync" else max(act_per_env_step, learn_per_env_step)
            candidates.append(dict(num_envs=n, num_threads=best_threads[n], env_batch_size=env_batch, batch_size=size,
                                   utd_ratio=samples_per_step / size, trained_sps=1.0 / per_step))

    def best_at(size: int) -> dict:
        rows = [c for c in candidates if c["batch_size"] == size]
        top = max(c["trained_sps"] for c in rows)
        return min((c for c in rows if c["trained_sps"] >= (1 - FLAT_MARGIN) * top), key=lambda c: c["num_envs"])

    pick = best_at(hyper.batch_size)
    bigger = [best_at(size) for size in update_s_at if size > hyper.batch_size]
    faster = [c for c in bigger if c["trained_sps"] >= BATCH_MARGIN * pick["trained_sps"]]
    batch_note = f"the preset's update batch {hyper.batch_size} kept (no larger batch was {BATCH_MARGIN:.2f}x faster)"
    if faster:
        pick = max(faster, key=lambda c: c["trained_sps"])
        batch_note = (f"update batch {pick['batch_size']} with utd_ratio {pick['utd_ratio']:g} (same samples consumed "
                      f"per env step) is {BATCH_MARGIN:.2f}x+ faster than the preset's {hyper.batch_size}")
    plan = off_policy_plan(dataclasses.replace(hyper, batch_size=pick["batch_size"], utd_ratio=pick["utd_ratio"]),
                           pick["num_envs"], dispatch_steps(config))
    choice = dict(num_envs=pick["num_envs"], num_threads=pick["num_threads"], env_batch_size=pick["env_batch_size"],
                  batch_size=pick["batch_size"], utd_ratio=pick["utd_ratio"],
                  rollout_length=plan.rollout_length, updates_per_iteration=plan.updates_per_iteration)
    if pick["env_batch_size"] < pick["num_envs"]:
        env_batch_note = (f"env batch {pick['env_batch_size']} (EnvPool's async mode) acts {ASYNC_MODE_MARGIN:.2f}x+ "
                          f"faster than stepping all {pick['num_envs']} envs together")
    elif config.schedule == "async":
        env_batch_note = f"env batch = num_envs (EnvPool's async mode was not {ASYNC_MODE_MARGIN:.2f}x faster)"
    else:
        env_batch_note = "env batch = num_envs (only the async actors use EnvPool's async mode)"
    reason = (f"{pick['num_envs']} envs is the fewest within {FLAT_MARGIN:.0%} of the best predicted trained steps/s "
              f"({pick['trained_sps']:,.0f}, {config.schedule}); {batch_note}; {env_batch_note}")
    return Calibration(config.env, config.algo, config.schedule, budget.seconds, budget.used, machine(), envpool_rows,
                       acting, learning, candidates, choice, reason, skipped)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    from jaxrl_fast.env import EnvError, check_env_id
    from jaxrl_fast.presets import resolve_defaults

    parser = argparse.ArgumentParser(prog="python -m jaxrl_fast.calibrate", description=__doc__.splitlines()[0])
    parser.add_argument("--env", default=TrainConfig.env)
    parser.add_argument("--algo", default=TrainConfig.algo, choices=["ppo", *OFF_POLICY])
    parser.add_argument("--schedule", default="sync", choices=["sync", "concurrent", "async"])
    parser.add_argument("--budget-s", type=float, default=30.0, help="time budget of the measurements (seconds)")
    parser.add_argument("--recalibrate", action="store_true", help="measure again even when a cached result exists")
    args = parser.parse_args(argv)
    try:
        family = check_env_id(args.env)
    except EnvError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.budget_s <= 0:
        print(f"error: --budget-s must be positive, got {args.budget_s}", file=sys.stderr)
        return 2
    config = dataclasses.replace(resolve_defaults(args.env, args.algo, family), schedule=args.schedule)
    try:
        result = calibrate(config, args.budget_s, args.recalibrate)
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(result.table())
    print(f"cached in {cache_dir()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
