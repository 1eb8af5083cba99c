"""Calibration's choosing half: rows of measurements in, sizes and the reason out.

Pure functions over plain data (lists of dicts, numbers, strings); nothing here imports JAX or
reads a config, so every rule is tested on hand-written rows. The rows are what
`jaxrl_fast.calibrate` measures:

  envpool:  num_envs, num_threads, batch_size, env_sps        (EnvPool alone)
  acting:   num_envs, num_threads, rollout_sps [, env_batch]  (XLA rollout; env_batch: async mode)
  learning: update_s, and num_envs (on-policy: the batch is num_envs x rollout length) or
            batch_size (off-policy: the update batch), plus device

A candidate's predicted trained env steps/s comes from seconds per env step of acting and of
learning: `sync` runs them one after the other (they add up), `concurrent` and `async` overlap
them (the slower one sets the pace).
"""

from __future__ import annotations

from typing import Any

Row = dict[str, Any]

FLAT_MARGIN = 0.05  # candidates this close to the best count as equal: the smallest wins
BATCH_MARGIN = 1.25  # a larger update batch must be this much faster to replace the preset's
ASYNC_MODE_MARGIN = 1.10  # EnvPool's async mode must act this much faster to replace the XLA step


def per_step_seconds(act_s: float, learn_s: float, schedule: str) -> float:
    """Seconds per env step when acting takes `act_s` and learning `learn_s` per env step."""
    return act_s + learn_s if schedule == "sync" else max(act_s, learn_s)


def smallest_within(candidates: list[Row], margin: float = FLAT_MARGIN) -> Row:
    """The candidate with the fewest envs among those within `margin` of the best trained steps/s
    (fewer envs change learning least)."""
    best = max(c["trained_sps"] for c in candidates)
    return min((c for c in candidates if c["trained_sps"] >= (1 - margin) * best), key=lambda c: c["num_envs"])


def best_threads(envpool: list[Row]) -> dict[int, int]:
    """num_envs -> the EnvPool thread count that stepped fastest (synchronous rows only)."""
    best: dict[int, Row] = {}
    for row in envpool:
        n = row["num_envs"]
        if row["batch_size"] == n and (n not in best or row["env_sps"] > best[n]["env_sps"]):
            best[n] = row
    return {n: row["num_threads"] for n, row in sorted(best.items())}


def xla_acting(acting: list[Row]) -> dict[int, Row]:
    """num_envs -> the XLA rollout row (the rows without an async-mode env batch)."""
    return {r["num_envs"]: r for r in acting if r.get("env_batch", r["num_envs"]) == r["num_envs"]}


def with_inference(acting: list[Row], envpool: list[Row]) -> list[Row]:
    """The acting rows, XLA rollouts given `inference_us_per_step`: their time per vector step
    less EnvPool's alone at the same num_envs (its fastest thread count)."""
    env_sps: dict[int, float] = {}
    for row in envpool:
        if row["batch_size"] == row["num_envs"]:
            env_sps[row["num_envs"]] = max(env_sps.get(row["num_envs"], 0.0), row["env_sps"])
    out = []
    for row in acting:
        n = row["num_envs"]
        if row.get("env_batch", n) == n and n in env_sps:
            row = row | {"inference_us_per_step": max(0.0, n / row["rollout_sps"] - n / env_sps[n]) * 1e6}
        out.append(row)
    return out


def choose_on_policy(acting: list[Row], learning: list[Row], schedule: str, rollout_length: int,
                     num_minibatches: int) -> tuple[Row, str, list[Row]]:
    """num_envs and threads for an on-policy algorithm; its rollout length and minibatch count are
    kept, so the batch is num_envs x rollout_length. Returns (choice, reason, candidates)."""
    rollouts = xla_acting(acting)
    update_s = {r["num_envs"]: r["update_s"] for r in learning}
    candidates = []
    for n in sorted(set(rollouts) & set(update_s)):
        batch = rollout_length * n
        rollout_s = batch / rollouts[n]["rollout_sps"]
        per_iteration = per_step_seconds(rollout_s, update_s[n], schedule)
        candidates.append(dict(num_envs=n, num_threads=rollouts[n]["num_threads"],
                               minibatch_size=batch // num_minibatches, trained_sps=batch / per_iteration))
    if not candidates:
        raise ValueError("no num_envs has both a rollout and an update measured")
    pick = smallest_within(candidates)
    best = max(c["trained_sps"] for c in candidates)
    choice = dict(num_envs=pick["num_envs"], num_threads=pick["num_threads"], env_batch_size=pick["num_envs"],
                  minibatch_size=pick["minibatch_size"])
    reason = (f"{pick['num_envs']} envs is the fewest within {FLAT_MARGIN:.0%} of the best predicted "
              f"{best:,.0f} trained steps/s ({schedule}); rollout length {rollout_length}, minibatch count "
              f"{num_minibatches} and the update's epochs kept; "
              "env batch = num_envs (only the off-policy async actors use EnvPool's async mode)")
    return choice, reason, candidates


def acting_seconds(acting: list[Row]) -> dict[int, tuple[int, float]]:
    """num_envs -> (env batch, seconds per env step) of the way to act: the XLA rollout, or
    EnvPool's async mode at its fastest env batch when that is `ASYNC_MODE_MARGIN` faster."""
    out = {n: (n, 1.0 / r["rollout_sps"]) for n, r in xla_acting(acting).items()}
    staged: dict[int, tuple[int, float]] = {}
    for row in acting:
        n, batch, seconds = row["num_envs"], row.get("env_batch", row["num_envs"]), 1.0 / row["rollout_sps"]
        if batch < n and (n not in staged or seconds < staged[n][1]):
            staged[n] = (batch, seconds)
    for n, (batch, seconds) in staged.items():
        if n in out and seconds * ASYNC_MODE_MARGIN < out[n][1]:
            out[n] = (batch, seconds)
    return out


def update_seconds(learning: list[Row]) -> dict[int, float]:
    """Update batch size -> seconds per update; measured on several devices (split placement),
    the slowest sets the pace."""
    out: dict[int, float] = {}
    for row in learning:
        out[row["batch_size"]] = max(out.get(row["batch_size"], 0.0), row["update_s"])
    return out


def choose_off_policy(acting: list[Row], learning: list[Row], schedule: str, batch_size: int,
                      utd_ratio: float) -> tuple[Row, str, list[Row]]:
    """num_envs, threads, env batch and update batch for an off-policy algorithm. Samples consumed
    per env step (utd_ratio x batch_size) are held: a larger batch comes with fewer updates, and
    replaces the preset's `batch_size` only when `BATCH_MARGIN` faster. Returns (choice, reason,
    candidates)."""
    samples_per_step = utd_ratio * batch_size
    acts, threads = acting_seconds(acting), {n: r["num_threads"] for n, r in xla_acting(acting).items()}
    candidates = []
    for n, (env_batch, act_s) in sorted(acts.items()):
        for size, update_s in sorted(update_seconds(learning).items()):
            per_step = per_step_seconds(act_s, samples_per_step / size * update_s, schedule)
            candidates.append(dict(num_envs=n, num_threads=threads[n], env_batch_size=env_batch, batch_size=size,
                                   utd_ratio=samples_per_step / size, trained_sps=1.0 / per_step))
    at_preset = [c for c in candidates if c["batch_size"] == batch_size]
    if not at_preset:
        raise ValueError(f"no acting and no update at the preset's batch {batch_size} measured")
    pick = smallest_within(at_preset)
    bigger = [smallest_within([c for c in candidates if c["batch_size"] == size])
              for size in sorted({c["batch_size"] for c in candidates}) if size > batch_size]
    faster = [c for c in bigger if c["trained_sps"] >= BATCH_MARGIN * pick["trained_sps"]]
    batch_note = f"the preset's update batch {batch_size} kept (no larger batch was {BATCH_MARGIN:.2f}x faster)"
    if faster:
        pick = max(faster, key=lambda c: c["trained_sps"])
        batch_note = (f"update batch {pick['batch_size']} with utd_ratio {pick['utd_ratio']:g} (same samples consumed "
                      f"per env step) is {BATCH_MARGIN:.2f}x+ faster than the preset's {batch_size}")
    choice = {k: pick[k] for k in ("num_envs", "num_threads", "env_batch_size", "batch_size", "utd_ratio")}
    reason = (f"{pick['num_envs']} envs is the fewest within {FLAT_MARGIN:.0%} of the best predicted trained steps/s "
              f"({pick['trained_sps']:,.0f}, {schedule}); {batch_note}; {env_batch_note(pick, schedule)}")
    return choice, reason, candidates


def env_batch_note(pick: Row, schedule: str) -> str:
    if pick["env_batch_size"] < pick["num_envs"]:
        return (f"env batch {pick['env_batch_size']} (EnvPool's async mode) acts {ASYNC_MODE_MARGIN:.2f}x+ "
                f"faster than stepping all {pick['num_envs']} envs together")
    if schedule == "async":
        return f"env batch = num_envs (EnvPool's async mode was not {ASYNC_MODE_MARGIN:.2f}x faster)"
    return "env batch = num_envs (only the async actors use EnvPool's async mode)"
