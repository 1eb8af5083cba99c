"""One training run, from a resolved config to a run directory with metrics and a summary.

    train(config)
      open_seeds       the run directory (new, or resumed from its newest checkpoint), and with
                       --num-seeds each agent's own in RUN_DIR/seed_<k> (`open_run` opens each)
      build            env, algorithm, placement, sizes, evaluators and the schedule (from the table)
      train_calls      the training calls, metrics lines and maybe checkpoints after each
      finish           the final checkpoints and evaluations, summary.json (each agent's, and theirs)
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import json
import logging
import math
import threading
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import numpy as np

from jaxrl_fast.engine import cluster, compile_cache
from jaxrl_fast.engine import placement as placements
from jaxrl_fast.engine.acting import agent_part, deterministic_policy, env_options
from jaxrl_fast.algos import make_algorithm
from jaxrl_fast.outputs.run_dir import seed_run_dir
from jaxrl_fast.outputs.checkpoint import (Checkpointer, CheckpointSaveError, NonFiniteError, Restored,
    StackedRestored, agent_state, check_finite, latest_step, write_policy_info)
from jaxrl_fast.config.run import TrainConfig, family, run_dict
from jaxrl_fast.outputs.curves import LearningCurve, evaluation_label
from jaxrl_fast.types import EnvSpec
from jaxrl_fast.env.envpool import XlaEnv, agent_env_seeds, make_xla_env
from jaxrl_fast.env.ids import evaluation_options, parse_env_kwargs
from jaxrl_fast.env.spaces import random_actions_np
from jaxrl_fast.run.evaluation import EvalResult, Evaluator, VideoPlan
from jaxrl_fast.outputs.metrics import (PROCESS_START, MetricsSink, ProgressDisplay, read_metrics, truncate_metrics,
    write_json)
from jaxrl_fast.outputs.run_dir import create_run_dir, default_run_dir
from jaxrl_fast.config.plan import Plan, env_threads, make_plan, planned_calls, run_off_policy_plan
from jaxrl_fast.engine.sharding import shard_threads
from jaxrl_fast.outputs.run_dir import PROFILE_DIR
from jaxrl_fast.outputs.profiler import CallTracer, profile_window
from jaxrl_fast.engine.schedules import Context, Schedule, make_schedule
from jaxrl_fast.engine.sharding import AXIS, local_shards, make_sharded_env
from jaxrl_fast.run.stopping import StopRequest
from jaxrl_fast.outputs.run_dir import clear_outputs
from jaxrl_fast.outputs.run_dir import CONFIG_FILE, METRICS_FILE, SUMMARY_FILE
from jaxrl_fast.config.run import EVAL_SEED_OFFSET

log = logging.getLogger(__name__)


class TargetWatch:
    """Records the first evaluation whose mean reaches the target; the trainer polls `reached`."""

    def __init__(self, target: float | None):
        self.target = target
        self.reached = threading.Event()
        self.time_s: float | None = None
        self.step: int | None = None

    def observe(self, result: EvalResult) -> None:
        if self.target is not None and not self.reached.is_set() and result.mean >= self.target:
            self.time_s = time.time() - PROCESS_START
            self.step = result.step
            self.reached.set()


class EvalBoard:
    """The progress display's evaluation field: a run's latest evaluation or, with --num-seeds, the
    spread of the agents' latest ones (called from the evaluators' threads)."""

    def __init__(self, progress: ProgressDisplay, num_seeds: int):
        self.progress = progress
        self.latest: list[float | None] = [None] * num_seeds
        self._lock = threading.Lock()

    def show(self, index: int, result: EvalResult) -> None:
        if len(self.latest) == 1:
            self.progress.set_eval(result.step, result.mean, result.std)
            return
        with self._lock:
            self.latest[index] = result.mean
            means = [mean for mean in self.latest if mean is not None]
            self.progress.set_eval_text(f"median {np.median(means):.1f} [{min(means):.1f}, {max(means):.1f}] "
                                        f"of {len(means)}/{len(self.latest)} seeds")


class LoggedEval(NamedTuple):
    """An evaluation that metrics.jsonl holds already (from the process a resumed run continues)."""

    step: int
    mean: float
    std: float


class Report:
    """Everything one agent's run writes as it goes: metrics lines, TensorBoard, the learning curve,
    and the evaluation results (kept by step: the final evaluation reuses one of the last step)."""

    def __init__(self, config: TrainConfig, run_dir: Path, restored: Restored | None, show: Callable[[EvalResult], None]):
        self.sink = MetricsSink(run_dir, rebuild_tensorboard=restored is not None)
        self.show = show
        self.target = TargetWatch(config.target_return)
        self.curve = LearningCurve(run_dir, f"{config.algo} on {config.env}, seed {config.seed}",
                                   eval_label=evaluation_label(config.eval_epsilon))
        self.results: dict[int, EvalResult] = {}
        # evaluations a previous process of this run logged (resuming a finished run reuses its final one)
        self.logged = {line["step"]: LoggedEval(line["step"], line["eval_return_mean"], line["eval_return_std"])
                       for line in read_metrics(run_dir / METRICS_FILE) if "eval_return_mean" in line} if restored else {}

    def evaluation(self, result: EvalResult) -> None:
        """Called where the evaluation ran (the evaluator's thread), never in training."""
        if not math.isfinite(result.mean):  # parameters that went NaN in the call the NaN guard stops at
            log.warning("the evaluation at step %d gave a non-finite return; it is not logged", result.step)
            return
        self.results[result.step] = result
        self.sink.write(result.step, {
            "eval_return_mean": result.mean,
            "eval_return_std": result.std,
            "eval_episodes": len(result.returns),
            "eval/episode_length": float(np.mean(result.lengths)),
            "eval/duration_s": result.duration_s,
        })
        self.show(result)
        self.target.observe(result)
        self.curve.update()  # after the line it draws is written

    def training(self, step: int, steps: int, update_frames: int, elapsed: float, metrics: dict, episodes: Any) -> None:
        record: dict[str, Any] = {"sps": steps / elapsed, "update_frames_per_s": update_frames / elapsed}
        record.update({k: float(v) for k, v in metrics.items()})
        count = int(episodes.count)
        if count:
            record["train/episode_return"] = float(episodes.return_sum) / count
            record["train/episode_length"] = float(episodes.length_sum) / count
        record["train/episodes"] = count
        self.sink.write(step, record)


class SilentReport:
    """The report of a process other than 0 of a distributed run: process 0 writes the run directory
    and evaluates, so this one records nothing (its target is never reached: process 0 says when)."""

    def __init__(self) -> None:
        self.target = TargetWatch(None)
        self.results: dict[int, EvalResult] = {}
        self.logged: dict[int, LoggedEval] = {}

    def evaluation(self, result: EvalResult) -> None:
        pass

    def training(self, *args: Any) -> None:
        pass


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
    """A run's parts, as `build` assembles them."""

    config: TrainConfig
    run_dir: Path
    seeds: list[SeedRun]
    restored: Restored | StackedRestored | None  # what the schedule starts from
    env: XlaEnv
    spec: EnvSpec  # one agent's env (a --num-seeds run's pool has num_seeds times its envs)
    plan: Plan
    schedule: Schedule
    progress: ProgressDisplay
    joined: cluster.Cluster = cluster.Cluster()  # the processes of a distributed run (none: alone)
    primary: bool = True  # this process writes the run directory and evaluates (process 0)

    def agent(self, tree: Any, index: int) -> Any:
        return agent_of(self.config, tree, index)


def open_run(config: TrainConfig, resume: bool, step: int | None = None,
             start_over: bool | None = None, primary: bool = True) -> tuple[Path, Checkpointer, Restored | None]:
    """The run directory, its checkpointer and, when resuming, its checkpoint at `step` (default the
    newest complete one). A resumed run `start_over` (default: when it stopped before its first
    checkpoint) clears its outputs and starts from its saved config. Only the `primary` process
    (process 0 of a distributed run) creates, clears or truncates anything; the others read."""
    if not primary:
        run_dir = Path(config.run_dir)
        checkpointer = Checkpointer(run_dir, config.keep_checkpoints)
        if start_over is None:
            start_over = resume and latest_step(run_dir) is None
        return run_dir, checkpointer, checkpointer.restore(step) if resume and not start_over else None
    if config.video_interval:  # refuse before anything is written (cached: the CLI asked already)
        from jaxrl_fast.outputs.video import check_video_support

        check_video_support(config.env)
    if start_over is None:
        start_over = resume and latest_step(Path(config.run_dir)) is None
    if start_over:
        Path(config.run_dir).mkdir(exist_ok=True)
        clear_outputs(Path(config.run_dir))
        return Path(config.run_dir), Checkpointer(Path(config.run_dir), config.keep_checkpoints), None
    if resume:
        run_dir = Path(config.run_dir)
        checkpointer = Checkpointer(run_dir, config.keep_checkpoints)
        restored = checkpointer.restore(step)
        checkpointer.drop_after(restored.step)
        # the log continues from the checkpoint: lines written after it are dropped (before the sink opens it)
        truncate_metrics(run_dir / METRICS_FILE, restored.step)
        return run_dir, checkpointer, restored
    run_dir = create_run_dir(config.run_dir or default_run_dir(config.env, config.algo, config.seed))
    return run_dir, Checkpointer(run_dir, config.keep_checkpoints), None


def seed_config(config: TrainConfig, run_dir: Path, index: int) -> TrainConfig:
    """Agent `index`'s own config: the single run with seed `seed + index` in RUN_DIR/seed_<index>."""
    own = seed_run_dir(run_dir, index)
    return dataclasses.replace(config, seed=config.seed + index, num_seeds=1, run_dir=own,
                               resume=own if config.resume is not None else None)


def open_seeds(config: TrainConfig, resume: bool, primary: bool = True) -> tuple[Path, list[OpenedSeed]]:
    """The run directory and each agent's run; a resumed --num-seeds run restores every agent at the
    newest step all of them saved, or starts every one over when one has no checkpoint."""
    if config.num_seeds == 1:
        saved = latest_step(Path(config.run_dir)) if resume else None
        step = cluster.from_primary(-1 if saved is None else saved)  # every process of a run resumes from one step
        run_dir, checkpointer, restored = open_run(config, resume, None if step < 0 else step, resume and step < 0, primary)
        return run_dir, [OpenedSeed(0, dataclasses.replace(config, run_dir=run_dir), checkpointer, restored)]
    run_dir = Path(config.run_dir) if resume else create_run_dir(
        config.run_dir or default_run_dir(config.env, config.algo, config.seed))
    step = latest_step(run_dir) if resume else None
    if resume and step is None:
        clear_outputs(run_dir)
    seeds = []
    for index in range(config.num_seeds):
        own = seed_config(config, run_dir, index)
        _, checkpointer, restored = open_run(own, resume, step, start_over=resume and step is None)
        seeds.append(OpenedSeed(index, own, checkpointer, restored))
    return run_dir, seeds


def stacked(restored: list[Restored | None]) -> Restored | StackedRestored | None:
    """What the schedule starts from: one checkpoint, or the agents' stacked (None: a new run)."""
    if None in restored:
        return None
    return restored[0] if len(restored) == 1 else StackedRestored(restored)


def record_config(run: Run, calibration: Any) -> None:
    """config.json: the resolved configuration once, as `train_config` (the run's fields and its
    algorithm's group: what --resume reads), beside what was resolved from it (threads,
    placement, plan, devices, ...); a resumed run appends what changed. A --num-seeds run writes
    its own in RUN_DIR and one per agent, with the agent's own config, in RUN_DIR/seed_<k>."""
    if not run.primary:
        return
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
        "placement": run.schedule.describe(),
        "plan": plan,
        "env_spec": dataclasses.asdict(run.spec),
        "devices": placements.describe_devices(),
        "versions": {"jax": jax.__version__, "envpool": _version("envpool"), "flax": _version("flax")},
    }
    if calibration is not None:
        resolved["calibration"] = dataclasses.asdict(calibration)
    if run.joined.distributed:
        resolved["distributed"] = cluster.describe(run.joined)
    if len(run.seeds) > 1:
        resolved["seed_run_dirs"] = [str(seed.run_dir) for seed in run.seeds]
    for config, run_dir in records:
        write_json(run_dir / CONFIG_FILE, dict(resolved, train_config=run_dict(config), run_dir=str(run_dir)))
    for seed in run.seeds:
        write_policy_info(seed.run_dir, {"train_config": run_dict(seed.config), "env_spec": dataclasses.asdict(run.spec)})


def build(config: TrainConfig, resume: bool, joined: cluster.Cluster = cluster.Cluster()) -> Run:
    """Everything a run needs, in the order each part needs the others."""
    primary = cluster.is_primary()
    run_dir, opened = open_seeds(config, resume, primary)
    restored = stacked([seed.restored for seed in opened])
    agents, per_agent = config.num_seeds, config.num_envs
    # a resumed run's environments start new episodes, seeded apart from the ones the run began with
    env_seed = (config.seed + restored.step) % (2**31 - per_agent - (agents - 1)) if restored else config.seed
    pool_options = parse_env_kwargs(config.env_kwargs)
    where = None
    if placements.is_data_parallel(config):  # one pool per local shard; the algorithm is a shard's
        where = placements.resolve(config)
        threads = shard_threads(config, where.shards, local_shards(where))
        env = make_sharded_env(config.env, per_agent, threads, env_seed, where.mesh(), **pool_options)
        algo = make_algorithm(config, env.spec, where.shards, AXIS)
    else:
        env = make_xla_env(config.env, agents * per_agent, env_threads(config),
                           agent_env_seeds(env_seed, agents, per_agent) if agents > 1 else env_seed, **pool_options)
        algo = make_algorithm(config, dataclasses.replace(env.spec, num_envs=per_agent))
    spec = dataclasses.replace(env.spec, num_envs=per_agent)  # what one agent acts in
    plan = make_plan(config, algo, where.shards if where else 1)
    if where is not None:  # EnvPool threads of all this process's pools
        plan = dataclasses.replace(plan, num_threads=threads * len(env.pools))
    options = env_options(config)
    progress = ProgressDisplay(plan.total_steps, config.progress if primary else "off")
    board = EvalBoard(progress, agents)
    policy = jax.jit(deterministic_policy(algo, options))
    seeds = []
    for seed in opened:
        if not primary:  # process 0 writes the run directory and evaluates
            seeds.append(SeedRun(*seed, SilentReport(), None))
            continue
        own_dir = Path(seed.config.run_dir)
        report = Report(seed.config, own_dir, seed.restored, functools.partial(board.show, seed.index))
        evaluator = Evaluator(
            config.env, config.eval_episodes, seed.config.seed + EVAL_SEED_OFFSET,
            lambda payload, obs: np.asarray(policy(payload, obs)), report.evaluation, spec.max_episode_steps,
            VideoPlan(own_dir, config.video_interval, plan.total_steps) if config.video_interval else None,
            evaluation_options(pool_options), config.eval_epsilon, functools.partial(random_actions_np, spec),
        )
        seeds.append(SeedRun(*seed, report, evaluator))

    def on_eval(payload: Any, iteration: Any) -> None:
        step = plan.step_at(int(iteration))
        for seed in seeds:
            if seed.evaluator is not None:
                seed.evaluator.request(agent_of(config, payload, seed.index), step)

    schedule = build_schedule(config, env, on_eval, algo, where, plan)
    return Run(config, run_dir, seeds, restored, env, spec, plan, schedule, progress, joined, primary)


def build_schedule(config: TrainConfig, env: Any, on_eval: Any = None, algo: Any = None,
                   where: placements.Placement | None = None, plan: Plan | None = None) -> Schedule:
    """The schedule the table gives this config, over `env`, with the run's placement and sizes."""
    algo = make_algorithm(config, env.spec) if algo is None else algo
    where = placements.resolve(config, env.has_gpu_step) if where is None else where
    plan = make_plan(config, algo) if plan is None else plan
    return make_schedule(Context(config, env, algo, env_options(config), where, plan, on_eval))


@dataclasses.dataclass
class Progress:
    """How far training got: iterations done (warm ones included), seconds inside training calls."""

    done: int = 0
    train_s: float = 0.0
    compile_s: float = 0.0
    saved_at: int = 0  # iterations at the newest checkpoint
    interrupted: bool = False
    forced: bool = False  # a second SIGINT cut the call in flight short: its state is gone
    error: BaseException | None = None
    profile: dict | None = None


def save_checkpoint(run: Run, progress: Progress, step: int) -> None:
    """One checkpoint per agent, each a single run's (a --num-seeds run's agents one after another)."""
    state, schedule_meta = run.schedule.snapshot()
    payload = run.schedule.eval_payload()
    for seed in run.seeds:
        own = state if len(run.seeds) == 1 else agent_state(state, seed.index, len(run.seeds))
        seed.checkpointer.save(step, own, run.agent(payload, seed.index), {"iterations": progress.done, "schedule": schedule_meta})
    progress.saved_at = progress.done


def call_in_worker(worker: concurrent.futures.Executor, call: Callable[[], Any]) -> Any:
    """`call()` on the worker thread while the main thread waits: Python runs signal handlers only in
    the main thread and only between bytecodes, so a jitted call blocking the main thread would hold
    back a second Ctrl-C until it returned (minutes, for a long call)."""
    return worker.submit(call).result()


def iterations_to_grid(plan: Plan, done: int) -> int:
    """Iterations to the next log line of the run's grid (its warm iterations, then every
    `iterations_per_call`): a resumed run's warm iteration would otherwise shift every later line."""
    return plan.iterations_per_call - (done - plan.warm_iterations) % plan.iterations_per_call


def train_calls(run: Run, progress: Progress, stop: StopRequest, tracer: CallTracer | None) -> None:
    """Training calls until the budget is spent, the target is reached or a signal asks to stop."""
    worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="train-call")
    try:
        _train_calls(run, progress, stop, tracer, lambda call: call_in_worker(worker, call))
    finally:
        worker.shutdown(wait=not stop.forced)  # a call a second SIGINT cut short is not waited for


def every_target_reached(run: Run) -> bool:
    return all(seed.report.target.reached.is_set() for seed in run.seeds)


def _train_calls(run: Run, progress: Progress, stop: StopRequest, tracer: CallTracer | None, work: Callable) -> None:
    plan, schedule, config = run.plan, run.schedule, run.config
    checkpoint_every = max(1, round(config.checkpoint_interval / plan.steps_per_iteration)) if config.checkpoint_interval else 0
    progress.compile_s = work(lambda: schedule.start(run.restored))
    payload = schedule.eval_payload()
    for seed in run.seeds:  # beside the first training call
        if seed.evaluator is not None:
            seed.evaluator.prepare(run.agent(payload, seed.index), run.spec.obs_shape, run.spec.obs_dtype)
    progress.done = (run.restored.meta["iterations"] if run.restored else 0) + plan.warm_iterations
    calls = 0
    while progress.done < plan.total_iterations:
        # every process decides alike: a signal in any of them, the target in process 0's evaluations
        stopping, reached = cluster.any_process(stop.signal is not None, every_target_reached(run))
        if reached:
            break
        if stopping:
            raise KeyboardInterrupt
        n = min(iterations_to_grid(plan, progress.done), plan.total_iterations - progress.done)
        step = plan.step_at(progress.done)
        traced = tracer.call(calls, step, plan.step_at(progress.done + n)) if tracer else contextlib.nullcontext()
        with traced:  # starting and stopping a trace happen outside the timed call
            begin = time.perf_counter()
            result = work(lambda: schedule.run(n))
            elapsed = time.perf_counter() - begin
        progress.train_s += elapsed
        progress.done += n
        calls += 1
        step = plan.step_at(progress.done)
        learner = {k: v for k, v in schedule.snapshot().state.items() if k != "replay"}
        check_finite(result.metrics, learner, step, config.num_seeds)  # before anything of this call is logged or saved
        for seed in run.seeds:
            seed.report.training(step, n * plan.steps_per_iteration, n * plan.update_frames_per_iteration, elapsed,
                                 run.agent(result.metrics, seed.index), run.agent(result.episodes, seed.index))
        run.progress.update(step, len(run.seeds) * n * plan.steps_per_iteration / elapsed)
        if checkpoint_every and progress.done - progress.saved_at >= checkpoint_every:
            save_checkpoint(run, progress, step)
    if cluster.any_process(stop.signal is not None)[0]:  # one that came during the last call is honoured too
        raise KeyboardInterrupt


def final_evaluation(run: Run, seed: SeedRun, progress: Progress, steps: int, payload: Callable[[], Any]) -> EvalResult | LoggedEval | None:
    """An agent's evaluation of the last step (reused when its evaluator ran it already); `payload()`
    gives every agent's policy, placed where the periodic evaluations' payloads arrive (so that it
    reuses their program)."""
    final: EvalResult | None = None
    try:
        if progress.done and not progress.interrupted and progress.error is None:
            seed.evaluator.wait_idle(timeout=600)
            final = seed.report.results.get(steps) or seed.report.logged.get(steps)
            if final is None:
                final = seed.evaluator.evaluate(run.agent(payload(), seed.index), steps)
                seed.report.evaluation(final)
    except Exception:  # a failing final evaluation is reported; the run's data stays intact
        seed.evaluator.failures += 1
        log.exception("final evaluation failed")
    finally:
        seed.evaluator.close()
    return final


def seed_summary(run: Run, seed: SeedRun, progress: Progress, steps: int, final: EvalResult | LoggedEval | None) -> dict[str, Any]:
    """An agent's summary.json."""
    plan, report, evaluator = run.plan, seed.report, seed.evaluator
    report.curve.close()  # its last redraw, before the summary counts the failures
    trained = progress.done * plan.steps_per_iteration
    summary = {
        "final_eval_return_mean": final.mean if final else None,
        "final_eval_return_std": final.std if final else None,
        "steps": steps,
        "wall_s": time.time() - PROCESS_START,
        "train_s": progress.train_s,
        "compile_s": progress.compile_s,
        "sps": trained / progress.train_s if progress.train_s else None,
        "update_frames_per_s": progress.done * plan.update_frames_per_iteration / progress.train_s if progress.train_s else None,
        "target_return": run.config.target_return,
        "eval_failures": evaluator.failures,
        "eval_skipped": evaluator.skipped,
        "videos": [str(path.relative_to(seed.run_dir)) for path in evaluator.videos],
        "video_failures": evaluator.video_failures,
        "curve_failures": report.curve.failures,
        "interrupted": progress.interrupted,
        "schedule": run.config.schedule,
    }
    summary.update(run.schedule.summary(progress.train_s))
    if len(run.seeds) > 1:
        summary["num_seeds_run"] = run.config.num_seeds  # trained beside the other agents of RUN_DIR
    if progress.profile is not None:
        summary["profile"] = progress.profile
    if progress.error is not None:
        summary["error"] = f"{type(progress.error).__name__}: {progress.error}"
    if report.target.time_s is not None:
        summary["time_to_target_s"] = report.target.time_s
        summary["target_step"] = report.target.step
    write_json(seed.run_dir / SUMMARY_FILE, summary)
    report.sink.close()
    return summary


def seeds_summary(run: Run, progress: Progress, steps: int, summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """A --num-seeds run's RUN_DIR/summary.json: each agent's figures and their aggregates."""
    from jaxrl_fast.outputs.aggregate import aggregate

    finals = [s["final_eval_return_mean"] for s in summaries]
    summary = {
        "num_seeds": run.config.num_seeds,
        "seeds": [seed.config.seed for seed in run.seeds],
        "seed_run_dirs": [str(seed.run_dir) for seed in run.seeds],
        "final_eval_return_mean": finals,
        "final_eval_return": aggregate(finals) if None not in finals else None,
        "steps": steps,
        "wall_s": time.time() - PROCESS_START,
        "train_s": progress.train_s,
        "compile_s": progress.compile_s,
        "sps": len(run.seeds) * progress.done * run.plan.steps_per_iteration / progress.train_s if progress.train_s else None,
        "target_return": run.config.target_return,
        "time_to_target_s": [s.get("time_to_target_s") for s in summaries],
        "target_step": [s.get("target_step") for s in summaries],
        "eval_failures": sum(s["eval_failures"] for s in summaries),
        "interrupted": progress.interrupted,
        "schedule": run.config.schedule,
    }
    if progress.error is not None:
        summary["error"] = f"{type(progress.error).__name__}: {progress.error}"
    write_json(run.run_dir / SUMMARY_FILE, summary)
    return summary


def finish(run: Run, progress: Progress) -> dict[str, Any]:
    """The final checkpoints and evaluations, then summary.json (each agent's, and their aggregate)."""
    steps = run.plan.step_at(progress.done) if progress.done else 0
    if progress.error is None and not progress.forced and progress.done > progress.saved_at:  # the end (or an interruption) is a checkpoint too
        try:
            save_checkpoint(run, progress, steps)
        except Exception as failure:  # a failed write: the run ends with an error, the last good checkpoint stays
            progress.error = failure
    for seed in run.seeds:
        try:
            seed.checkpointer.close()
        except Exception as failure:  # the write that failed reports again here; it was reported once
            log.debug("closing the checkpointer: %s", failure)
    if not run.primary:  # process 0 evaluates and writes the summaries
        return {"steps": steps, "interrupted": progress.interrupted}
    payload = functools.cache(lambda: jax.device_put(run.schedule.eval_payload(), placements.host_device()))
    finals = [final_evaluation(run, seed, progress, steps, payload) for seed in run.seeds]
    run.progress.close()
    summaries = [seed_summary(run, seed, progress, steps, final) for seed, final in zip(run.seeds, finals)]
    summary = summaries[0] if len(run.seeds) == 1 else seeds_summary(run, progress, steps, summaries)
    run.progress.message(f"done: {steps:,d} steps in {summary['wall_s']:.1f} s, " + outcome_text(run, finals) + f" -> {run.run_dir}")
    return summary


def outcome_text(run: Run, finals: list[EvalResult | LoggedEval | None]) -> str:
    """The end line's results: the final evaluation and when the target was reached, or their spread over the seeds."""
    reached = [seed.report.target.time_s for seed in run.seeds]
    if len(run.seeds) == 1:
        final, = finals
        return ("final eval " + (f"{final.mean:.1f} ± {final.std:.1f}" if final else "-")
                + (f", target reached at {reached[0]:.1f} s" if reached[0] is not None else ""))
    means = [final.mean for final in finals if final is not None]
    text = (f"final eval over {len(means)} seeds: median {np.median(means):.1f} [{min(means):.1f}, {max(means):.1f}]"
            if means else "final eval -")
    times = [t for t in reached if t is not None]
    return text + (f", target reached by {len(times)}/{len(reached)} seeds (the last at {max(times):.1f} s)" if times else "")


def plural(count: int, noun: str) -> str:
    return f"{count:,d} {noun}" + ("" if count == 1 else "s")


def placement_text(record: dict[str, Any]) -> str:
    """The placement record of config.json as the start line says it: `placement single (acting cpu:0, ...)`."""
    details = [f"{key} {value}" for key, value in record.items() if key not in ("mode", "learner", "fused")]
    return f"placement {record['mode']} ({', '.join(details)})"


def train(config: TrainConfig, calibration: Any = None, resume: bool = False, stop: StopRequest | None = None,
          joined: cluster.Cluster = cluster.Cluster()) -> dict[str, Any]:
    """Train as configured; returns the summary that is also written to `summary.json`.

    `calibration` (a `jaxrl_fast.calibrate.Calibration` already applied to `config`) is recorded
    in `config.json`. `resume=True` continues the run in `config.run_dir` from its newest
    complete checkpoint (`python -m jaxrl_fast.train --resume RUN_DIR`), or starts it over from its
    saved config when it stopped before its first checkpoint. `stop`: the CLI's, installed before
    its imports (by default one that raises KeyboardInterrupt on a second SIGINT). `joined`: the
    processes of a distributed run, joined already (`cluster.initialize`)."""
    if config.compile_cache:  # the CLI did this already; in-process callers (tests, notebooks) get it here
        compile_cache.enable()
    run = build(config, resume, joined)
    message = run.progress.message
    if resume and run.restored is None:
        message(f"{run.run_dir} has no checkpoint yet: starting the run over from its saved config")
    record_config(run, calibration)
    progress = Progress(saved_at=run.restored.meta["iterations"] if run.restored else 0)
    if run.restored is not None:
        message(f"resuming {run.run_dir} from its checkpoint at step {run.restored.step:,d}")
    sizes = f"{run.plan.total_steps:,d} steps, {plural(config.num_envs, 'env')}"
    if config.num_seeds > 1:
        sizes = (f"{config.num_seeds} seeds ({config.seed}-{config.seed + config.num_seeds - 1}), each "
                 f"{run.plan.total_steps:,d} steps over {plural(config.num_envs, 'env')}")
    message(f"{config.algo} on {config.env}: {sizes}, {plural(run.plan.num_threads, 'EnvPool thread')}, "
            f"{placement_text(run.schedule.describe())} -> {run.run_dir}")
    tracer = None
    if config.profile:
        window = profile_window(config.profile_start, config.profile_calls, planned_calls(config))
        tracer = CallTracer(run.run_dir / PROFILE_DIR, window)
    owned, stop = stop is None, stop or StopRequest()
    try:
        with stop if owned else contextlib.nullcontext():  # the CLI's stays in place for finish() too
            train_calls(run, progress, stop, tracer)
    except KeyboardInterrupt:
        progress.interrupted, progress.forced = True, stop.forced
        message(f"{stop.name}: " + ("stopped at once, without a final checkpoint" if stop.forced else
                                    "writing a final checkpoint and the summary of what ran" if progress.done else
                                    f"stopped before the first training call; --resume {run.run_dir} starts the run over"))
    except (NonFiniteError, CheckpointSaveError) as failure:  # the caller reports these in one line
        progress.error = failure
    except Exception as failure:  # a failing schedule thread: stop, keep what was written
        progress.error = failure
        log.error("training stopped: %s", failure)
    finally:
        progress.profile = tracer.close() if tracer else None  # a window the run ended inside is written too
        run.schedule.close()
    summary = finish(run, progress)
    if progress.error is not None:
        raise progress.error
    return summary


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"
