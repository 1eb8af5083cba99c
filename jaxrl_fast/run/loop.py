"""One training run, from a resolved run to a run directory with metrics and a summary.

    run_training(resolved)
      build            the run directory (new, or resumed from its newest checkpoint), env,
                       algorithm, evaluators and the schedule (`jaxrl_fast.run.build`)
      train_calls      the training calls, metrics lines and maybe checkpoints after each
      finish           the final checkpoints and evaluations, summary.json (each agent's, and theirs)
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import logging
import os
import time
from typing import Any, Callable

import jax
import numpy as np

from jaxrl_fast.config.plan import Plan
from jaxrl_fast.engine import cluster
from jaxrl_fast.engine import placement as placements
from jaxrl_fast.env.ffi_forward import host_error_behind
from jaxrl_fast.env.gymnasium_env import GymEnvError
from jaxrl_fast.outputs.checkpoint import CheckpointSaveError, NonFiniteError, agent_state, check_finite
from jaxrl_fast.outputs.metrics import write_json
from jaxrl_fast.outputs.profiler import CallTracer
from jaxrl_fast.outputs.run_dir import PROFILE_DIR, SUMMARY_FILE
from jaxrl_fast.run.build import Run, SeedRun, build, record_config
from jaxrl_fast.run.evaluation import EvalResult
from jaxrl_fast.run.report import LoggedEval
from jaxrl_fast.run.resolve import ResolvedRun
from jaxrl_fast.run.stopping import StopRequest

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Progress:
    """How far training got: iterations done (warm ones included), seconds inside training calls."""

    done: int = 0
    started_at: int = 0  # iterations done when this process's training calls began (a resume's, the warm ones)
    train_s: float = 0.0
    compile_s: float = 0.0
    saved_at: int = 0  # iterations at the newest checkpoint
    interrupted: bool = False
    forced: bool = False  # a second SIGINT cut the call in flight short: its state is gone
    error: BaseException | None = None
    profile: dict | None = None
    started: bool = False  # the schedule started in this process (a resume past its target starts none)


def save_checkpoint(run: Run, progress: Progress, step: int) -> None:
    """One checkpoint per agent, each a single run's (a --num-seeds run's agents one after another)."""
    state, schedule_meta = run.schedule.snapshot()
    payload = run.schedule.eval_payload()
    for seed in run.seeds:
        seed.report.sync()  # the log up to this checkpoint on disk before it
        own = state if len(run.seeds) == 1 else agent_state(state, seed.index, len(run.seeds))
        seed.checkpointer.save(step, own, run.agent(payload, seed.index),
                               {"iterations": progress.done, "schedule": schedule_meta, "wall_s": run.clock.now()})
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


def prepare_evaluations(run: Run) -> None:
    """Each evaluator compiles its program for the first policy's shapes on a thread of its own:
    beside the loop's compile where the schedule says the state exists (`initialized`), else
    beside the first training call."""
    payload = run.schedule.eval_payload()
    for seed in run.seeds:
        if seed.evaluator is not None:
            seed.evaluator.prepare(run.agent(payload, seed.index), run.spec.obs_shape, run.spec.obs_dtype)


def _train_calls(run: Run, progress: Progress, stop: StopRequest, tracer: CallTracer | None, work: Callable) -> None:
    plan, schedule, config = run.plan, run.schedule, run.config
    checkpoint_every = max(1, round(config.checkpoint_interval / plan.steps_per_iteration)) if config.checkpoint_interval else 0
    schedule.on_initialized = functools.partial(prepare_evaluations, run)
    if run.restored is not None and (cluster.any_process(every_target_reached(run))[0] or
                                     (plan.warm_iterations and run.restored.meta["iterations"] >= plan.total_iterations)):
        # reached before the resume (its log says so), or trained to the end where `start` would run
        # an iteration to compile its learner (concurrent PPO, async): nothing trains, and the summary
        # is written again from the log (its final evaluation, where one was logged)
        progress.done = progress.started_at = run.restored.meta["iterations"]
        return
    progress.compile_s = work(lambda: schedule.start(run.restored))
    progress.started = True
    schedule.initialized()  # where `start` did not
    progress.done = progress.started_at = (run.restored.meta["iterations"] if run.restored else 0) + plan.warm_iterations
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


def final_evaluation(run: Run, seed: SeedRun, progress: Progress, steps: int, payload: Callable[[], Any],
                     stop: StopRequest | None = None) -> EvalResult | LoggedEval | None:
    """An agent's evaluation of the last step (reused when its evaluator ran it already); `payload()`
    gives every agent's policy, placed where the periodic evaluations' payloads arrive (so that it
    reuses their program). Where training was interrupted, or a stop was requested since (an
    evaluation can take minutes: a second SIGINT ends one under way), none is run: an evaluation
    of the last step that reported stands, else None."""
    final: EvalResult | None = None
    try:
        if progress.done and not progress.interrupted and progress.error is None and (stop is None or stop.signal is None):
            seed.evaluator.wait_idle(timeout=600)
            final = seed.report.results.get(steps) or seed.report.logged.get(steps)
            if final is None and progress.started:  # (a resume past its target has no schedule to ask)
                agent = run.agent(payload(), seed.index)
                final = seed.evaluator.evaluate(agent, steps)
                seed.report.evaluation(final, agent)
            elif steps in seed.report.results and seed.evaluator.films_unfilmed(steps):  # this process's, unfilmed
                seed.evaluator.evaluate(run.agent(payload(), seed.index), steps)
    except KeyboardInterrupt:  # a second SIGINT (the API's; the CLI's ends the process): the summary still
        final = None
        log.warning("final evaluation stopped; the summary is written without it")
    except Exception:  # a failing final evaluation is reported; the run's data stays intact
        seed.evaluator.failures += 1
        log.exception("final evaluation failed")
    finally:
        seed.evaluator.close()  # an evaluation in flight reports before it returns (or is given up)
    if final is None and progress.done:
        final = seed.report.results.get(steps) or seed.report.logged.get(steps)
    return final


def seed_summary(run: Run, seed: SeedRun, progress: Progress, steps: int, final: EvalResult | LoggedEval | None) -> dict[str, Any]:
    """An agent's summary.json."""
    plan, report, evaluator = run.plan, seed.report, seed.evaluator
    report.curve.close()  # its last redraw, before the summary counts the failures
    trained = progress.done - progress.started_at  # iterations of this process's training calls (train_s)
    summary = {
        "final_eval_return_mean": final.mean if final else None,
        "final_eval_return_std": final.std if final else None,
        "steps": steps,
        "wall_s": run.clock.now(),
        "train_s": progress.train_s,
        "compile_s": progress.compile_s,
        "sps": trained * plan.steps_per_iteration / progress.train_s if progress.train_s else None,
        "update_frames_per_s": trained * plan.update_frames_per_iteration / progress.train_s if progress.train_s else None,
        "target_return": run.config.target_return,
        "eval_failures": evaluator.failures,
        "eval_skipped": evaluator.skipped,
        "videos": [str(path.relative_to(seed.run_dir)) for path in evaluator.videos],
        "video_failures": evaluator.video_failures,
        "curve_failures": report.curve.failures,
        "interrupted": progress.interrupted,
        "schedule": run.config.schedule,
    }
    if progress.started:  # its statistics (async's counts) are of a schedule that ran
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
    if report.best.step is not None:  # the policy kept in checkpoints/best_policy.npz
        summary["best_eval_return_mean"] = report.best.mean
        summary["best_eval_step"] = report.best.step
    if report.best.failures:
        summary["best_policy_failures"] = report.best.failures
    write_json(seed.run_dir / SUMMARY_FILE, summary)
    report.close()
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
        "wall_s": run.clock.now(),
        "train_s": progress.train_s,
        "compile_s": progress.compile_s,
        "sps": (len(run.seeds) * (progress.done - progress.started_at) * run.plan.steps_per_iteration / progress.train_s
                if progress.train_s else None),
        "target_return": run.config.target_return,
        "time_to_target_s": [s.get("time_to_target_s") for s in summaries],
        "target_step": [s.get("target_step") for s in summaries],
        "best_eval_return_mean": [s.get("best_eval_return_mean") for s in summaries],  # each seed_<k>'s best_policy.npz
        "eval_failures": sum(s["eval_failures"] for s in summaries),
        "interrupted": progress.interrupted,
        "schedule": run.config.schedule,
    }
    if progress.error is not None:
        summary["error"] = f"{type(progress.error).__name__}: {progress.error}"
    write_json(run.run_dir / SUMMARY_FILE, summary)
    return summary


def finish(run: Run, progress: Progress, stop: StopRequest | None = None) -> dict[str, Any]:
    """The final checkpoints and evaluations, then summary.json (each agent's, and their aggregate);
    a stop requested after training (`stop`) skips or ends the final evaluations, never the summary."""
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
    finals = [final_evaluation(run, seed, progress, steps, payload, stop) for seed in run.seeds]
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
        best = run.seeds[0].report.best
        return ("final eval " + (f"{final.mean:.1f} ± {final.std:.1f}" if final else "-")
                + (f", target reached at {reached[0]:.1f} s" if reached[0] is not None else "")
                + (f", best {best.mean:.1f} at step {best.step:,d} (load_policy(run_dir, best=True))"
                   if best.mean is not None and (final is None or best.mean > final.mean) else ""))
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


def env_error_behind(failure: BaseException) -> BaseException:
    """What a Python env raised behind `failure`: XLA's error of a host step, or an actor thread's
    (raised from it); else `failure`."""
    failure = host_error_behind(failure)
    return failure.__cause__ if isinstance(failure.__cause__, GymEnvError) else failure


def run_training(resolved: ResolvedRun, stop: StopRequest | None = None) -> dict[str, Any]:
    """Train the resolved run; returns the summary that is also written to `summary.json`.

    A resumed run (`config.resume`) continues from its newest complete checkpoint, or starts over
    from its saved config when it stopped before its first checkpoint. `stop`: the CLI's, installed
    before its imports (by default one that raises KeyboardInterrupt on a second SIGINT).
    Raises what stopped training early (a NaN, a failed checkpoint write, a failing thread) after
    the run directory holds what ran. The run directory's lock is let go when it returns or raises."""
    try:
        return train_resolved(resolved, stop)
    finally:
        if resolved.lock is not None:
            resolved.lock.release()


def train_resolved(resolved: ResolvedRun, stop: StopRequest | None) -> dict[str, Any]:
    config = resolved.config
    run = build(resolved)
    message = run.progress.message
    if resolved.resume and run.restored is None:
        message(f"{run.run_dir} has no checkpoint yet: starting the run over from its saved config"
                + (f" (what it wrote is in {', '.join(os.path.relpath(path, run.run_dir) for path in run.previous)} of "
                   f"{run.run_dir})" if run.previous else ""))
    record_config(run)
    progress = Progress(saved_at=run.restored.meta["iterations"] if run.restored else 0)
    if run.restored is not None:
        message(f"resuming {run.run_dir} from its checkpoint at step {run.restored.step:,d}")
    sizes = f"{run.plan.total_steps:,d} steps, {plural(config.num_envs, 'env')}"
    if config.num_seeds > 1:
        sizes = (f"{config.num_seeds} seeds ({config.seed}-{config.seed + config.num_seeds - 1}), each "
                 f"{run.plan.total_steps:,d} steps over {plural(config.num_envs, 'env')}")
    stepping = {"gymnax": "envs in the XLA program", "brax": "envs in the XLA program",
                "gymnasium": "Python envs on the host"}.get(
        run.spec.family, plural(run.plan.num_threads, "EnvPool thread"))
    chosen = f"{config.schedule} schedule{' (auto)' if run.resolved.schedule_reason else ''}"
    message(f"{config.algo} on {config.env}: {sizes}, {stepping}, {chosen}, {placement_text(run.schedule.describe())} -> {run.run_dir}")
    tracer = CallTracer(run.run_dir / PROFILE_DIR, run.plan.profile) if run.plan.profile else None
    owned, stop = stop is None, stop or StopRequest()
    with stop if owned else contextlib.nullcontext():  # in place for finish() too (the CLI's is the command's)
        try:
            train_calls(run, progress, stop, tracer)
        except KeyboardInterrupt:
            progress.interrupted, progress.forced = True, stop.forced
            message(f"{stop.name}: " + ("stopped at once, without a final checkpoint" if stop.forced else
                                        "writing a final checkpoint and the summary of what ran" if progress.done else
                                        f"stopped before the first training call; --resume {run.run_dir} starts the run over"))
        except (NonFiniteError, CheckpointSaveError) as failure:  # the caller reports these in one line
            progress.error = failure
        except Exception as failure:  # a failing schedule thread: stop, keep what was written
            progress.error = env_error_behind(failure)  # a Python env's own error, not XLA's text of it
            if not isinstance(progress.error, GymEnvError):  # the caller reports that one in one line
                log.error("training stopped: %s", failure)
        finally:
            progress.profile = tracer.close() if tracer else None  # a window the run ended inside is written too
            run.schedule.close()
        summary = finish(run, progress, stop)
    if progress.error is not None:
        raise progress.error
    return summary
