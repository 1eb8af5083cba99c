"""Schedules: when acting and learning happen relative to each other.

Every implementation follows `schedules.base.Schedule`; `make_schedule` picks it from the table
`SCHEDULES`, keyed by (the algorithm's family, `--schedule`, whether placement fuses everything on
the acting device); data parallelism (placement mode `data`) runs `DataParallelSync`. No schedule
imports an algorithm: each runs whatever bundle the registry built.
"""

from __future__ import annotations

from jaxrl_fast.config.run import family
from jaxrl_fast.engine.schedules.asynchronous import AsyncSchedule
from jaxrl_fast.engine.schedules.base import CallResult, Context, Schedule, Snapshot
from jaxrl_fast.engine.schedules.concurrent import OnPolicyConcurrent
from jaxrl_fast.engine.schedules.data_parallel import DataParallelSync
from jaxrl_fast.engine.schedules.offpolicy import OffPolicyConcurrent, OffPolicyFused, OffPolicyHostDriven
from jaxrl_fast.engine.schedules.sync import OnPolicySync

__all__ = ["SCHEDULES", "AsyncSchedule", "CallResult", "Context", "DataParallelSync", "OffPolicyConcurrent", "OffPolicyFused",
           "OffPolicyHostDriven", "OnPolicyConcurrent", "OnPolicySync", "Schedule", "Snapshot", "make_schedule",
           "schedule_class"]

SCHEDULES: dict[tuple[str, str, str], type] = {
    ("on_policy", "sync", "fused"): OnPolicySync,
    ("on_policy", "concurrent", "fused"): OnPolicyConcurrent,
    ("off_policy", "sync", "fused"): OffPolicyFused,
    ("off_policy", "sync", "roles"): OffPolicyHostDriven,
    ("off_policy", "concurrent", "fused"): OffPolicyConcurrent,
    ("off_policy", "concurrent", "roles"): OffPolicyConcurrent,
    ("off_policy", "async", "fused"): AsyncSchedule,
    ("off_policy", "async", "roles"): AsyncSchedule,
}


def schedule_class(config, placement) -> type:
    if placement.mode == "data":  # one shard's sync program on every device of the mesh
        return DataParallelSync
    key = (family(config), config.schedule, "fused" if placement.fused else "roles")
    if key not in SCHEDULES:
        raise ValueError(f"--schedule {config.schedule} is not available for {config.algo} ({key[0]}) "
                         f"with its roles {'fused' if placement.fused else 'on their own devices'}")
    return SCHEDULES[key]


def make_schedule(ctx: Context) -> Schedule:
    return schedule_class(ctx.config, ctx.placement)(ctx)
