"""Building a resolved run: its directory opened (new, or resumed from its newest checkpoint, each
agent's own in RUN_DIR/seed_<k> with --num-seeds), the env, the algorithm, the evaluators and the
schedule the table gives it, and config.json recording what was resolved."""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxrl_fast.algos import make_algorithm
from jaxrl_fast.config.plan import Plan, run_off_policy_plan
from jaxrl_fast.config.run import EVAL_SEED_OFFSET, TrainConfig, family, run_dict
from jaxrl_fast.engine import cluster
from jaxrl_fast.engine import placement as placements
from jaxrl_fast.engine.acting import agent_part, env_options, evaluation_policy
from jaxrl_fast.engine.program_store import package_version
from jaxrl_fast.engine.schedules import Context, Schedule, make_schedule
from jaxrl_fast.engine.sharding import AXIS, local_shards, make_sharded_env
from jaxrl_fast.env.envpool import agent_env_seeds, make_xla_env
from jaxrl_fast.env.ids import evaluation_options, parse_env_kwargs
from jaxrl_fast.env.spaces import random_actions_np
from jaxrl_fast.outputs.checkpoint import (
    Checkpointer,
    Restored,
    StackedRestored,
    latest_step,
    saved_steps,
    write_policy_info,
)
from jaxrl_fast.outputs.metrics import ProgressDisplay, RunClock, read_metrics, truncate_metrics, write_json
from jaxrl_fast.outputs.run_dir import CONFIG_FILE, METRICS_FILE, clear_outputs, create_run_dir, seed_run_dir
from jaxrl_fast.outputs.video import drop_videos_after
from jaxrl_fast.run.evaluation import Evaluator, VideoPlan
from jaxrl_fast.run.report import EvalBoard, Report, SilentReport
from jaxrl_fast.run.resolve import ResolvedRun
from jaxrl_fast.types import BatchedEnv, ConfigError, EnvSpec


class OpenedSeed(NamedTuple):
    """One agent's directory as `open_seeds` opens it, before its report and evaluator exist."""

    index: int  # along the agents axis of the run's state
    config: TrainConfig  # its run_dir is the agent's directory
    checkpointer: Checkpointer
    restored: Restored | None


@dataclasses.dataclass
class SeedRun:
    """One agent's run: its directory and what writes it. A single run is one; a --num-seeds run has
    one per agent, each in RUN_DIR/seed_<k> and a complete single run's directory (its config says
    its own seed and one seed), so that `load_policy` and `--resume` take it alone."""

    index: int  # along the agents axis of the run's state
    config: TrainConfig  # its run_dir is the agent's directory
    checkpointer: Checkpointer
    restored: Restored | None
    report: Report | SilentReport
    evaluator: Evaluator | None  # None in the processes of a distributed run but process 0

    @property
    def run_dir(self) -> Path:
        return Path(self.config.run_dir)


def agent_of(config: TrainConfig, tree: Any, index: int) -> Any:
    """Agent `index`'s part of a pytree with the agents axis (a single run's tree itself)."""
    return tree if config.num_seeds == 1 else agent_part(tree, index)


@dataclasses.dataclass
class Run:
    """A run's parts, as `build` assembles them from its resolved run."""

    resolved: ResolvedRun
    seeds: list[SeedRun]
    restored: Restored | StackedRestored | None  # what the schedule starts from
    env: BatchedEnv
    schedule: Schedule
    progress: ProgressDisplay
    clock: RunClock  # wall_s of every line and summary
    previous: list[Path] = dataclasses.field(default_factory=list)  # where a start-over (--resume, no checkpoint yet) moved what the run had written

    @property
    def config(self) -> TrainConfig:
        return self.resolved.config

    @property
    def run_dir(self) -> Path:
        return self.resolved.run_dir

    @property
    def spec(self) -> EnvSpec:
        return self.resolved.spec

    @property
    def plan(self) -> Plan:
        return self.resolved.plan

    @property
    def joined(self) -> cluster.Cluster:
        return self.resolved.joined

    @property
    def primary(self) -> bool:
        return self.resolved.primary

    def agent(self, tree: Any, index: int) -> Any:
        return agent_of(self.config, tree, index)


def open_run(config: TrainConfig, resume: bool, step: int | None = None, start_over: bool | None = None,
             primary: bool = True, cut: bool = True) -> tuple[Path, Checkpointer, Restored | None, Path | None]:
    """The run directory, its checkpointer and, when resuming, its checkpoint at `step` (default the
    newest complete one), what was written after it dropped unless not `cut` (`cut_after`'s to do
    once every agent of a --num-seeds run is restored). A resumed run `start_over` (default: when it
    stopped before its first checkpoint) moves its outputs aside (the fourth value says where: None
    when there were none, or this is not a start-over) and starts from its saved config. A new
    run's directory was made when the run was resolved (an agent's is made here). Only the `primary`
    process (process 0 of a distributed run) creates, clears or truncates anything; the others read."""
    if not primary:
        run_dir = Path(config.run_dir)
        checkpointer = Checkpointer(run_dir, config.keep_checkpoints)
        if start_over is None:
            start_over = resume and latest_step(run_dir) is None
        return run_dir, checkpointer, checkpointer.restore(step) if resume and not start_over else None, None
    if start_over is None:
        start_over = resume and latest_step(Path(config.run_dir)) is None
    if start_over:
        Path(config.run_dir).mkdir(exist_ok=True)
        previous = clear_outputs(Path(config.run_dir))
        return Path(config.run_dir), Checkpointer(Path(config.run_dir), config.keep_checkpoints), None, previous
    if resume:
        run_dir = Path(config.run_dir)
        checkpointer = Checkpointer(run_dir, config.keep_checkpoints)
        restored = restore_for_resume(checkpointer, step)
        if cut:
            cut_after(run_dir, checkpointer, restored.step)
        return run_dir, checkpointer, restored, None
    run_dir = create_run_dir(Path(config.run_dir))
    return run_dir, Checkpointer(run_dir, config.keep_checkpoints), None, None


def cut_after(run_dir: Path, checkpointer: Checkpointer, step: int) -> None:
    """A resumed run's outputs as they stood at its checkpoint `step`: newer checkpoints go, the log
    continues from the checkpoint (lines written after it are dropped, before the sink opens it),
    and so do the videos of those steps."""
    checkpointer.drop_after(step)
    truncate_metrics(run_dir / METRICS_FILE, step)
    drop_videos_after(run_dir, step)


class ResumeError(ConfigError):
    """A checkpoint `--resume` cannot read: the run stops before it trains (the CLI's exit status 2)."""


def restore_for_resume(checkpointer: Checkpointer, step: int | None) -> Restored:
    """The checkpoint a resumed run continues from; one that cannot be read is a one-line error that
    says which and what else was saved (before this agent's directory changes)."""
    try:
        return checkpointer.restore(step)
    except Exception as error:  # noqa: BLE001 (orbax's errors for a damaged step are of many kinds)
        steps = saved_steps(checkpointer.directory.parent)
        step = steps[-1] if step is None and steps else step
        reason = (str(error).strip().splitlines() or [""])[0][:200]
        raise ResumeError(f"--resume: the checkpoint at step {step} in {checkpointer.directory} cannot be read "
                          f"({type(error).__name__}: {reason}); complete checkpoints: {steps}. If it is damaged, "
                          "move that step's directory out of the way to resume from the one before it") from error


def seed_config(config: TrainConfig, run_dir: Path, index: int) -> TrainConfig:
    """Agent `index`'s own config: the single run with seed `seed + index` in RUN_DIR/seed_<index>."""
    own = seed_run_dir(run_dir, index)
    return dataclasses.replace(config, seed=config.seed + index, num_seeds=1, run_dir=own,
                               resume=own if config.resume is not None else None)


def open_seeds(config: TrainConfig, resume: bool,
               primary: bool = True) -> tuple[Path, list[OpenedSeed], list[Path]]:
    """The run directory, each agent's run and where a start-over moved outputs (the run
    directory's and each agent's: `open_run`'s fourth value); a resumed --num-seeds run restores
    every agent at the newest step all of them saved, or starts every one over when one has no
    checkpoint."""
    if config.num_seeds == 1:
        saved = latest_step(Path(config.run_dir)) if resume else None
        step = cluster.from_primary(-1 if saved is None else saved)  # every process of a run resumes from one step
        run_dir, checkpointer, restored, previous = open_run(config, resume, None if step < 0 else step,
                                                             resume and step < 0, primary)
        opened = [OpenedSeed(0, dataclasses.replace(config, run_dir=run_dir), checkpointer, restored)]
        return run_dir, opened, [previous] if previous else []
    run_dir = Path(config.run_dir)
    step = latest_step(run_dir) if resume else None
    moved = [clear_outputs(run_dir)] if resume and step is None else []
    seeds = []
    try:  # every agent restored before any is cut: one that cannot be read changes nothing
        for index in range(config.num_seeds):
            own = seed_config(config, run_dir, index)
            _, checkpointer, restored, previous = open_run(own, resume, step, start_over=resume and step is None, cut=False)
            seeds.append(OpenedSeed(index, own, checkpointer, restored))
            moved.append(previous)
    except BaseException:
        for seed in seeds:
            seed.checkpointer.close()
        raise
    for seed in seeds:
        if seed.restored is not None:
            cut_after(Path(seed.config.run_dir), seed.checkpointer, seed.restored.step)
    return run_dir, seeds, [path for path in moved if path is not None]


def stacked(restored: list[Restored | None]) -> Restored | StackedRestored | None:
    """What the schedule starts from: one checkpoint, or the agents' stacked (None: a new run)."""
    if None in restored:
        return None
    return restored[0] if len(restored) == 1 else StackedRestored(restored)


def record_config(run: Run) -> None:
    """config.json: the resolved configuration once, as `train_config` (the run's fields and its
    algorithm's group: what --resume reads), beside what was resolved from it (threads,
    placement, plan, devices, ...); a resumed run appends what changed. A --num-seeds run writes
    its own in RUN_DIR and one per agent, with the agent's own config, in RUN_DIR/seed_<k>."""
    if not run.primary:
        return
    for seed in run.seeds:  # a resumed run's too: what load_policy reads, in case it was lost
        write_policy_info(seed.run_dir, {"train_config": run_dict(seed.config), "env_spec": dataclasses.asdict(run.spec)})
    records = [(run.config, run.run_dir)] + ([(seed.config, seed.run_dir) for seed in run.seeds] if len(run.seeds) > 1 else [])
    if run.restored is not None:
        for config, run_dir in records:
            saved = json.loads((run_dir / CONFIG_FILE).read_text())
            saved["train_config"] = run_dict(config)  # a longer --total-steps holds for the next resume too
            saved.setdefault("resumed", []).append({"from_step": run.restored.step, "total_steps": config.total_steps})
            write_json(run_dir / CONFIG_FILE, saved)
        return
    plan = dataclasses.asdict(run.plan)
    if family(run.config) == "off_policy":
        plan["off_policy"] = run_off_policy_plan(run.config)._asdict()
    resolved = {
        "num_threads": run.plan.num_threads,
        "schedule": run.config.schedule,
        "schedule_reason": run.resolved.schedule_reason or "named by --schedule",
        "placement": run.schedule.describe(),
        "plan": plan,
        "env_spec": dataclasses.asdict(run.spec),
        "devices": placements.describe_devices(),
        "versions": {"jax": jax.__version__, "envpool": package_version("envpool") or "unknown",
                     "flax": package_version("flax") or "unknown"},
    }
    if run.resolved.calibration is not None:
        resolved["calibration"] = dataclasses.asdict(run.resolved.calibration)
    if run.joined.distributed:
        resolved["distributed"] = cluster.describe(run.joined)
    if len(run.seeds) > 1:
        resolved["seed_run_dirs"] = [str(seed.run_dir) for seed in run.seeds]
    for config, run_dir in records:
        write_json(run_dir / CONFIG_FILE, dict(resolved, train_config=run_dict(config), run_dir=str(run_dir)))


def build(resolved: ResolvedRun) -> Run:
    """Everything a run needs, in the order each part needs the others."""
    config, plan, placement, primary = resolved.config, resolved.plan, resolved.placement, resolved.primary
    run_dir, opened, previous = open_seeds(config, resolved.resume, primary)
    restored = stacked([seed.restored for seed in opened])
    agents, per_agent = config.num_seeds, config.num_envs
    # a resumed run's environments start new episodes, seeded apart from the ones the run began with
    env_seed = (config.seed + restored.step) % (2**31 - per_agent - (agents - 1)) if restored else config.seed
    pool_options = parse_env_kwargs(config.env_kwargs)
    if placement.mode == "data":  # one pool per local shard; the algorithm is a shard's
        pools = local_shards(placement)
        env = make_sharded_env(config.env, per_agent, plan.num_threads // pools, env_seed, placement.mesh(), **pool_options)
        algo = make_algorithm(config, env.spec, placement.shards, AXIS)
    else:
        env = make_xla_env(config.env, agents * per_agent, plan.num_threads,
                           agent_env_seeds(env_seed, agents, per_agent) if agents > 1 else env_seed, **pool_options)
        algo = make_algorithm(config, resolved.spec)
    progress = ProgressDisplay(plan.total_steps, config.progress if primary else "off")
    board = EvalBoard(progress, agents)
    clock = RunClock(resumed_at_s(run_dir, restored))
    traceable_policy = evaluation_policy(algo, env_options(config), sampled=config.eval_policy == "sampled")
    policy = jax.jit(traceable_policy)
    seeds = []
    for seed in opened:
        if not primary:  # process 0 writes the run directory and evaluates
            seeds.append(SeedRun(*seed, SilentReport(), None))
            continue
        own_dir = Path(seed.config.run_dir)
        report = Report(seed.config, own_dir, seed.restored, functools.partial(board.show, seed.index), clock)
        evaluator = Evaluator(
            config.env, config.eval_episodes, seed.config.seed + EVAL_SEED_OFFSET,
            lambda payload, obs, step_seed: np.asarray(policy(payload, obs, step_seed)), report.evaluation,
            resolved.spec.max_episode_steps,
            VideoPlan(own_dir, config.video_interval, plan.total_steps) if config.video_interval else None,
            evaluation_options(pool_options), config.eval_epsilon, functools.partial(random_actions_np, resolved.spec),
            traceable_policy, program_per_pool=agents == 1,
        )
        seeds.append(SeedRun(*seed, report, evaluator))

    def on_eval(payload: Any, iteration: Any) -> None:
        step = plan.step_at(int(iteration))
        for seed in seeds:
            if seed.evaluator is not None:
                seed.evaluator.request(agent_of(config, payload, seed.index), step)

    return Run(resolved, seeds, restored, env, build_schedule(resolved, env, algo, on_eval), progress, clock, previous)


def resumed_at_s(run_dir: Path, restored: Restored | StackedRestored | None) -> float:
    """The run's wall_s at the checkpoint it resumes from (0 for a new run): saved with the
    checkpoint, or, by a version that did not save it, its last metrics line up to that step."""
    if restored is None:
        return 0.0
    if "wall_s" in restored.meta:
        return float(restored.meta["wall_s"])
    agent_dir = seed_run_dir(run_dir, 0) if isinstance(restored, StackedRestored) else run_dir
    lines = [line["wall_s"] for line in read_metrics(agent_dir / METRICS_FILE) if line["step"] <= restored.step]
    return float(lines[-1]) if lines else 0.0


def build_schedule(resolved: ResolvedRun, env: Any, algo: Any = None, on_eval: Any = None) -> Schedule:
    """The schedule the table gives this run, over `env`, with its placement and sizes (`algo`: the
    bundle built for `env`'s spec, by default)."""
    config = resolved.config
    algo = make_algorithm(config, resolved.spec) if algo is None else algo
    return make_schedule(Context(config, env, algo, env_options(config), resolved.placement, resolved.plan, on_eval))
