"""Calibration's choosing half: rows of measurements in, sizes and the reason out.

Pure functions over plain data (lists of dicts, numbers, strings); nothing here imports JAX or
reads a config, so every rule is tested on hand-written rows (EnvPool's default thread count is
`config.plan.default_env_threads`, the run's own rule). The rows are what
`jaxrl_fast.calibration.measure` measures:

  envpool:  num_envs, num_threads, batch_size, env_sps                  (EnvPool alone)
  acting:   num_envs, num_threads, rollout_sps [, num_steps | env_batch] (XLA rollout; env_batch: async mode)
  learning: update_s, num_envs, device                                  (on-policy: the preset's update)
  overlap:  num_envs, num_steps, iteration_s, acting, learner           (on-policy, `--schedule auto`: the
            preset's rollout and update dispatched together, as `concurrent` runs them)

Calibration aims at time to a result, so it changes only what leaves learning per env step as the
preset has it (but for the schedule under `auto`, last below), and only where it is measured a
margin faster than the preset's own sizes in the same pass:
  * EnvPool's thread count (each env steps the same whichever thread steps it);
  * on-policy: how the preset's batch (num_envs x num_steps) is split between envs and steps; the
    batch, the minibatch count and the epochs are kept;
  * off-policy, under `async`: the actors' env batch (EnvPool's async mode). num_envs, the update
    batch and utd_ratio are kept: they set what is learned per env step;
  * on-policy, where `--schedule auto` chose: `sync` or `concurrent`, from the preset's rollout and
    update timed alone and timed dispatched together. The one change that is not a size: the
    concurrent iteration acts with parameters one update old (PPO's importance ratio is taken
    against them), so a seed's run is not `sync`'s; the batch, minibatches and epochs are kept.
"""

from __future__ import annotations

import math
from typing import Any

from jaxrl_fast.config.plan import default_env_threads

Row = dict[str, Any]

FLAT_MARGIN = 0.05  # splits this close to the best count as equal: the one nearest the preset's wins
SPLIT_MARGIN = 1.10  # another split of the batch must be predicted this much faster than the preset's
THREAD_MARGIN = 1.10  # another thread count must step EnvPool this much faster than its default
ASYNC_MODE_MARGIN = 1.10  # EnvPool's async mode must act this much faster than the XLA step
# `concurrent` must iterate this much faster than the rollout and the update one after the other,
# as measured: `sync` runs them fused into one program, a little faster than the two timed apart
SCHEDULE_MARGIN = 1.15


def per_step_seconds(act_s: float, learn_s: float, schedule: str, overlap_efficiency: float = 1.0) -> float:
    """Seconds per env step when acting takes `act_s` and learning `learn_s` per env step; beside
    each other they take `overlap_efficiency` times the slower one (1: a perfect overlap)."""
    return act_s + learn_s if schedule == "sync" else overlap_efficiency * max(act_s, learn_s)


def update_seconds(learning: list[Row], num_envs: int, device: str | None = None) -> float | None:
    """The on-policy update's seconds at `num_envs`, on `device` (a described device) if given."""
    return next((r["update_s"] for r in learning
                 if r.get("num_envs") == num_envs and device in (None, r.get("device"))), None)


def choose_schedule(acting: list[Row], learning: list[Row], overlap: list[Row], preset_envs: int
                    ) -> tuple[str, str, float]:
    """`sync` or `concurrent` for an on-policy run whose schedule `--schedule auto` chose: concurrent
    where the preset's rollout and update, dispatched together, iterate `SCHEDULE_MARGIN` faster than
    the two timed alone one after the other on `sync`'s devices (what `sync` does in one program).
    Returns the schedule, the reason and concurrent's overlap efficiency (its iteration over its
    slower phase alone, the update timed on concurrent's learner) that predicts the other splits
    under it."""
    rollout = xla_acting(acting).get(preset_envs)
    update_s = update_seconds(learning, preset_envs)  # the first row: sync's learner
    together = next((r for r in overlap if r["num_envs"] == preset_envs), None)
    if rollout is None or update_s is None or together is None:
        raise ValueError("choose_schedule needs the preset's rollout, update and both dispatched together")
    concurrent_update_s = update_seconds(learning, preset_envs, together.get("learner")) or update_s
    rollout_s = together["num_steps"] * preset_envs / rollout["rollout_sps"]
    apart, overlapped = rollout_s + update_s, together["iteration_s"]
    measured = (f"rollout {1e3 * rollout_s:.1f} ms and update {1e3 * update_s:.1f} ms alone, "
                f"{1e3 * overlapped:.1f} ms dispatched together")
    efficiency = overlapped / max(rollout_s, concurrent_update_s)
    if apart >= SCHEDULE_MARGIN * overlapped:
        return "concurrent", (f"concurrent: acting beside learning iterated {apart / overlapped:.2f}x as fast as "
                              f"one after the other ({measured})"), efficiency
    return "sync", (f"sync: acting beside learning was not {SCHEDULE_MARGIN:.2f}x as fast as one after the other "
                    f"({measured})"), efficiency


def choose_threads(envpool: list[Row], num_envs: int, cpus: int, given: int = 0) -> tuple[int, str]:
    """EnvPool's thread count at `num_envs`: the fastest measured (synchronous rows) when it steps
    `THREAD_MARGIN` faster than the default, else 0 (the run keeps the count it was given: `given`,
    a --num-threads, which the pass never changes, or EnvPool's default for the run's num_envs)."""
    if given:
        return 0, f"--num-threads {given} as given"
    sps = {r["num_threads"]: r["env_sps"] for r in envpool if r["num_envs"] == num_envs == r["batch_size"]}
    default = default_env_threads(num_envs, cpus)
    if default not in sps:
        return 0, "EnvPool's thread count as given (not measured)"
    if len(sps) == 1:
        return 0, f"EnvPool's default {default} threads (no other count measured)"
    best = max(sps, key=lambda t: sps[t])
    if sps[best] >= THREAD_MARGIN * sps[default]:
        return best, (f"{best} EnvPool threads step {sps[best] / sps[default]:.2f}x as fast as its default "
                      f"{default}")
    return 0, f"EnvPool's default {default} threads (no other count stepped {THREAD_MARGIN:.2f}x faster)"


def xla_acting(acting: list[Row]) -> dict[int, Row]:
    """num_envs -> the XLA rollout row (the rows without an async-mode env batch)."""
    return {r["num_envs"]: r for r in acting if r.get("env_batch", r["num_envs"]) == r["num_envs"]}


def with_inference(acting: list[Row], envpool: list[Row]) -> list[Row]:
    """The acting rows, XLA rollouts given `inference_us_per_step` where EnvPool alone was measured
    at their num_envs and thread count: their time per vector step less EnvPool's."""
    env_sps = {(r["num_envs"], r["num_threads"]): r["env_sps"] for r in envpool if r["batch_size"] == r["num_envs"]}
    out = []
    for row in acting:
        n, alone = row["num_envs"], env_sps.get((row["num_envs"], row["num_threads"]))
        if row.get("env_batch", n) == n and alone:
            row = row | {"inference_us_per_step": max(0.0, n / row["rollout_sps"] - n / alone) * 1e6}
        out.append(row)
    return out


def choose_on_policy(acting: list[Row], learning: list[Row], envpool: list[Row], schedule: str, batch: int,
                     preset_envs: int, cpus: int, overlap_efficiency: float = 1.0, learner: str | None = None,
                     given_threads: int = 0) -> tuple[Row, str, list[Row]]:
    """num_envs, num_steps and threads for an on-policy algorithm, its batch (num_envs x num_steps)
    kept. A split other than the preset's is taken when predicted `SPLIT_MARGIN` faster; among
    those within `FLAT_MARGIN` of the best, the nearest the preset's. Under `concurrent` a split's
    iteration is predicted as `overlap_efficiency` times its slower phase (measured at the
    preset's split where calibration chose the schedule), the update timed on `learner` (a
    described device; None: the first update row); each rollout row is timed at the thread count
    the run takes at its size. Returns (choice, reason, candidates)."""
    rollouts = xla_acting(acting)
    update_s = update_seconds(learning, preset_envs, learner)
    kept = f"batch {batch}, minibatch count and epochs kept"
    threads, thread_note = choose_threads(envpool, preset_envs, cpus, given_threads)
    if preset_envs not in rollouts or update_s is None:
        choice = dict(num_envs=preset_envs, num_steps=batch // preset_envs, num_threads=threads)
        return choice, (f"the preset's {preset_envs} envs x {batch // preset_envs} steps kept (the run is too short "
                        f"for its rollout and update to be measured); {thread_note}; {kept}"), []
    candidates = []
    for n, row in sorted(rollouts.items()):
        seconds = per_step_seconds(batch / row["rollout_sps"], update_s, schedule, overlap_efficiency)
        candidates.append(dict(num_envs=n, num_steps=batch // n, num_threads=row["num_threads"],
                               trained_sps=batch / seconds))
    preset = next(c for c in candidates if c["num_envs"] == preset_envs)
    best = max(c["trained_sps"] for c in candidates)
    pick = preset
    if best >= SPLIT_MARGIN * preset["trained_sps"]:
        near = [c for c in candidates if c["trained_sps"] >= (1 - FLAT_MARGIN) * best]
        pick = min(near, key=lambda c: abs(math.log2(c["num_envs"] / preset_envs)))
    speedup = pick["trained_sps"] / preset["trained_sps"]
    why = (f"no other split predicted {SPLIT_MARGIN:.2f}x faster, {schedule}" if len(candidates) > 1 else
           "no other split measured within the budget")
    split_note = (f"{pick['num_envs']} envs x {pick['num_steps']} steps predicted {speedup:.2f}x the preset's "
                  f"{preset_envs} x {preset['num_steps']} ({schedule})" if pick is not preset else
                  f"the preset's {preset_envs} envs x {preset['num_steps']} steps kept ({why})")
    if pick is not preset and not threads and not given_threads:  # EnvPool's default at the new size, as timed
        thread_note += f", {pick['num_threads']} at {pick['num_envs']} envs"
    choice = dict(num_envs=pick["num_envs"], num_steps=pick["num_steps"], num_threads=threads)
    return choice, f"{split_note}; {thread_note}; {kept}", candidates


def choose_off_policy(acting: list[Row], envpool: list[Row], schedule: str, num_envs: int,
                      cpus: int, given_threads: int = 0, given_env_batch: int = 0) -> tuple[Row, str, list[Row]]:
    """Threads and, under `async`, the actors' env batch for an off-policy algorithm; num_envs, the
    update batch and utd_ratio are kept. EnvPool's async mode is taken when it acts
    `ASYNC_MODE_MARGIN` faster than the XLA step; a given --env-batch-size (`given_env_batch`) and
    --num-threads stay. Returns (choice, reason, candidates)."""
    threads, thread_note = choose_threads(envpool, num_envs, cpus, given_threads)
    xla = xla_acting(acting).get(num_envs)
    staged = [r for r in acting if r["num_envs"] == num_envs and r.get("env_batch", num_envs) < num_envs]
    candidates = [dict(env_batch=r.get("env_batch", num_envs), acting_sps=r["rollout_sps"])
                  for r in ([xla] if xla else []) + staged]
    env_batch, batch_note = num_envs, "env batch = num_envs"
    if 0 < given_env_batch < num_envs:
        env_batch, batch_note = given_env_batch, f"env batch {given_env_batch} as given (--env-batch-size)"
    elif schedule == "async":
        batch_note = "env batch = num_envs (EnvPool's async mode not measured: the run is too short)"
        if xla and staged:
            fastest = max(staged, key=lambda r: r["rollout_sps"])
            if fastest["rollout_sps"] >= ASYNC_MODE_MARGIN * xla["rollout_sps"]:
                env_batch = fastest["env_batch"]
                batch_note = (f"env batch {env_batch} (EnvPool's async mode) acts "
                              f"{fastest['rollout_sps'] / xla['rollout_sps']:.2f}x as fast as all {num_envs} together")
            else:
                batch_note = f"env batch = num_envs (EnvPool's async mode was not {ASYNC_MODE_MARGIN:.2f}x faster)"
    choice = dict(num_envs=num_envs, num_threads=threads, env_batch_size=env_batch)
    reason = f"{thread_note}; {batch_note}; num_envs, update batch and utd_ratio kept"
    return choice, reason, candidates
