"""One training run, from a resolved config to a run directory with metrics and a summary."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_fast import placement
from jaxrl_fast.checkpoint import Checkpointer, check_finite, write_policy_info
from jaxrl_fast.algos import make_algorithm, make_off_policy_algorithm
from jaxrl_fast.config import OFF_POLICY, TrainConfig, algo_config, to_dict
from jaxrl_fast.curves import LearningCurve
from jaxrl_fast.env import make_xla_env
from jaxrl_fast.evaluation import EvalResult, Evaluator, VideoPlan
from jaxrl_fast.metrics import (PROCESS_START, MetricsSink, ProgressDisplay, create_run_dir, default_run_dir,
                                truncate_metrics, write_json)
from jaxrl_fast.profiler import PROFILE_DIR, CallTracer, ProfileWindow
from jaxrl_fast.schedules.acting import EnvOptions, observe
from jaxrl_fast.schedules.asynchronous import AsyncLoop
from jaxrl_fast.schedules.concurrent import ConcurrentLoop
from jaxrl_fast.schedules.timing import PhaseClock
from jaxrl_fast.schedules.offpolicy import dispatch_steps, make_off_policy_loop, off_policy_plan
from jaxrl_fast.schedules.sync import EvalPayload, make_sync_loop

log = logging.getLogger(__name__)

EVAL_SEED_OFFSET = 10_000  # evaluation envs are seeded apart from the training envs


@dataclasses.dataclass(frozen=True)
class Plan:
    """Sizes derived from the config before anything is compiled."""

    num_threads: int
    steps_per_iteration: int
    warmup_steps: int  # off-policy: random-action steps before learning (learning_starts)
    total_iterations: int
    iterations_per_call: int
    eval_every_iterations: int
    update_frames_per_iteration: int

    @property
    def total_steps(self) -> int:
        return self.warmup_steps + self.total_iterations * self.steps_per_iteration


def make_plan(config: TrainConfig, steps_per_iteration: int, warmup_steps: int, update_frames_per_iteration: int) -> Plan:
    total_iterations = max(1, (config.total_steps - warmup_steps) // steps_per_iteration)
    return Plan(
        num_threads=config.num_threads or min(config.num_envs, os.cpu_count() or 1),
        steps_per_iteration=steps_per_iteration,
        warmup_steps=warmup_steps,
        total_iterations=total_iterations,
        iterations_per_call=min(total_iterations, max(1, config.log_interval // steps_per_iteration)),
        eval_every_iterations=max(1, round(config.eval_interval / steps_per_iteration)) if config.eval_interval else 0,
        update_frames_per_iteration=update_frames_per_iteration,
    )


def iteration_steps(config: TrainConfig) -> tuple[int, int]:
    """(env steps per iteration, warm-up steps of random actions) from the config alone: the one
    place both the Driver and `planned_calls` take them from (PPO: a rollout of every env;
    off-policy: `off_policy_plan`)."""
    if config.algo in OFF_POLICY:
        plan = off_policy_plan(algo_config(config), config.num_envs, dispatch_steps(config))
        steps = plan.rollout_length * config.num_envs
        return steps, plan.warmup_iterations * steps
    return config.num_envs * config.ppo.num_steps, 0


def warm_iterations(config: TrainConfig) -> int:
    """Learning iterations `Driver.start` runs while compiling (they are training too): the
    concurrent on-policy and the async schedules compile their learner by running one."""
    if config.schedule == "async" or (config.schedule == "concurrent" and config.algo not in OFF_POLICY):
        return 1
    return 0


def planned_calls(config: TrainConfig) -> int:
    """Training calls (`driver.run`, one per log interval) of a fresh run that is not stopped early."""
    steps, warmup = iteration_steps(config)
    plan = make_plan(config, steps, warmup, 0)
    return -(-max(0, plan.total_iterations - warm_iterations(config)) // plan.iterations_per_call)


class Driver:
    """What the trainer needs of a schedule: start (init, warm-up, compile), run n iterations, the policy.

    `run(n)` returns host metrics: (train metrics dict, finished-episode stats).
    """

    def __init__(self, config: TrainConfig, env, evaluator_request: Callable[[Any, int], None]):
        self.config = config
        self.env = env
        self.options = EnvOptions(config.normalize_observations, config.scale_rewards,
                                  getattr(algo_config(config), "gamma", 0.99))
        self._request = evaluator_request
        self.warm_iterations = warm_iterations(config)  # iterations `start` runs while compiling
        if config.algo in OFF_POLICY:
            self._init_off_policy()
        else:
            self._init_on_policy()

    # -- on-policy: the fused sync loop ----------------------------------------------------
    def _init_on_policy(self) -> None:
        config, env = self.config, self.env
        algo = make_algorithm(config, env.spec)
        self.act_deterministic = algo.act_deterministic
        self.placement = {"mode": "single", "fused": placement.describe(placement.fused_loop_device(env))}
        self.device = placement.fused_loop_device(env)
        self.plan = make_plan(config, *iteration_steps(config), algo.update_frames_per_iteration)
        if config.schedule == "concurrent":
            return self._init_concurrent(algo)
        loop = make_sync_loop(algo, env, self.options, self.plan.iterations_per_call, self.plan.eval_every_iterations,
                              self._on_eval)

        def take(state) -> dict:
            return {"algo": state.algo, "key": state.key, "iteration": state.iteration,
                    "obs_moments": state.env.obs_moments, "reward_scale": state.env.reward_scale}

        def put(state, saved: dict):
            env_carry = state.env._replace(obs_moments=saved["obs_moments"], reward_scale=saved["reward_scale"])
            return state._replace(algo=saved["algo"], key=saved["key"], iteration=saved["iteration"], env=env_carry)

        def start(restored=None) -> float:
            with jax.default_device(self.device):
                self.state = jax.jit(loop.init)(jax.random.key(config.seed), env.handle, env.reset())
                if restored is not None:
                    self.state = put(self.state, restored.into(take(self.state)))
                begin = time.perf_counter()
                self._run = loop.run.lower(self.state, jnp.int32(0)).compile()  # before the clock starts
                return time.perf_counter() - begin

        def run(n: int):
            self.state, metrics = self._run(self.state, jnp.int32(n))
            metrics = jax.device_get(metrics)
            return metrics.train, metrics.episodes

        self.start, self.run = start, run
        self.snapshot = lambda: (take(self.state), {})
        self.eval_payload = lambda: jax.device_get(EvalPayload(algo.policy_params(self.state.algo), self.state.env.obs_moments))

    def _init_concurrent(self, algo) -> None:
        config, env = self.config, self.env
        loop = ConcurrentLoop(algo, env, self.options, self.device, PhaseClock(), self._on_eval, self.plan.eval_every_iterations)
        self.placement = {"mode": "single", "acting": placement.describe(loop.acting), "learner": placement.describe(loop.learner)}

        def take(state) -> dict:
            return {"algo": state.algo, "pending": state.pending, "key": state.key,
                    "obs_moments": state.env.obs_moments, "reward_scale": state.env.reward_scale}

        def start(restored=None) -> float:
            begin = time.perf_counter()
            self.state = loop.init(jax.random.key(config.seed), env.handle, env.reset())
            if restored is not None:
                saved = restored.into(take(self.state))
                env_carry = self.state.env._replace(obs_moments=saved["obs_moments"], reward_scale=saved["reward_scale"])
                self.state = self.state._replace(algo=saved["algo"], pending=saved["pending"], key=saved["key"],
                                                 env=env_carry, iteration=restored.meta["schedule"]["iteration"])
            self.state, _, _ = loop.run(self.state, 1)  # compiles both programs; counts as an iteration
            return time.perf_counter() - begin

        def run(n: int):
            self.state, metrics, episodes = loop.run(self.state, n)
            return metrics, episodes

        self.start, self.run = start, run
        self.snapshot = lambda: (take(self.state), {"iteration": self.state.iteration})
        self.eval_payload = lambda: loop.eval_payload(self.state)

    # -- off-policy: replay, role placement ------------------------------------------------
    def _init_off_policy(self) -> None:
        config, env = self.config, self.env
        hyper = algo_config(config)
        algo = make_off_policy_algorithm(config, env.spec)
        self.act_deterministic = algo.act_deterministic
        requested = "single" if config.schedule == "async" and config.placement == "auto" else config.placement
        where = placement.resolve_placement(requested, env)
        if config.schedule == "concurrent":  # measured on one H100: 1,088 vs 930 steps/s acting on the GPU (SAC)
            where = dataclasses.replace(where, acting=placement.concurrent_acting_device(env))
        self.placement = where.describe() | {"exchange": config.exchange}
        plan = off_policy_plan(hyper, config.num_envs, dispatch_steps(config))
        self.plan = make_plan(config, *iteration_steps(config), plan.updates_per_iteration * plan.batch_size)
        self.off_policy_plan = plan
        if config.schedule == "async":
            return self._init_async(algo, plan, where)
        concurrent = config.schedule == "concurrent"
        take, put = self._off_policy_parts()
        loop = make_off_policy_loop(algo, env, self.options, plan, where, config.exchange,
                                    self.plan.iterations_per_call, self.plan.eval_every_iterations, self._on_eval,
                                    concurrent=concurrent, clock=PhaseClock())  # used where the host drives

        def start(restored=None) -> float:
            self.state = loop.init(jax.random.key(config.seed), env.handle, env.reset())
            if restored is not None:
                self.state = put(self.state, restored.into(take(self.state)))
            begin = time.perf_counter()
            if restored is None or not config.checkpoint_replay:  # an empty buffer: fill it with random actions
                self.state, _ = loop.warmup(self.state)  # also compiles the acting program
            self.state, _, _ = loop.run(self.state, 0)  # compiles the learning program(s)
            jax.block_until_ready(self.state)
            return time.perf_counter() - begin

        def run(n: int):
            self.state, metrics, episodes = loop.run(self.state, n)
            return jax.device_get(metrics), jax.device_get(episodes)

        self.start, self.run = start, run
        self.snapshot = lambda: (take(self.state), {})
        self.eval_payload = lambda: jax.device_get(EvalPayload(loop.acting_params(self.state), self.state.env.obs_moments))

    def _off_policy_parts(self):
        """What of an off-policy state a checkpoint holds (`take`) and how it goes back (`put`)."""
        fields = ("actor", "critic", "key", "iteration", "updates") + (("replay",) if self.config.checkpoint_replay else ())

        def take(state) -> dict:
            return {name: getattr(state, name) for name in fields}

        def put(state, saved: dict):
            return state._replace(**saved)

        return take, put

    def _init_async(self, algo, plan, where) -> None:
        config, env = self.config, self.env
        loop = AsyncLoop(algo, env, self.options, plan, where.critic[0], config.seed, config.num_actors,
                         config.max_policy_lag, self._on_eval, self.plan.eval_every_iterations, config.env_batch_size)
        self.placement = where.describe() | {"actors": config.num_actors}
        if loop.async_mode:
            self.placement["acting"] = placement.describe(loop.actors[0].device)

        take, put = self._off_policy_parts()

        def start(restored=None) -> float:
            begin = time.perf_counter()
            resume = None
            if restored is not None:
                resume = (lambda state: put(state, restored.into(take(state))), restored.meta["schedule"],
                          config.checkpoint_replay)
            self.state = loop.init(jax.random.key(config.seed), env.handle, env.reset(), resume)
            loop.warmup()  # actors fill the buffer with random actions (and compile their programs)
            loop.run(1)  # compiles the learner's program; counts as the first iteration
            return time.perf_counter() - begin

        self.start, self.run = start, loop.run
        self.snapshot = lambda: (take(loop.state), loop.counters())
        self.eval_payload = loop.eval_payload
        self.close = loop.close
        def summary_extras(train_s: float) -> dict[str, Any]:
            ctrl, seconds = loop.controller, max(train_s, 1e-9)
            return {k.split("/", 1)[1]: v for k, v in loop.stats().items()} | {
                "production_sps": (ctrl.accepted + ctrl.dropped) / seconds,  # after the warm-up
                "consumption_frames_per_s": ctrl.consumed / seconds,
            }

        self.summary_extras = summary_extras

    def close(self) -> None:
        """Stop whatever threads the schedule runs (async actors)."""

    def summary_extras(self, train_s: float) -> dict[str, Any]:
        """Schedule-specific figures for summary.json."""
        return {}

    def _on_eval(self, payload: Any, iteration: Any) -> None:
        self._request(payload, self.plan.warmup_steps + int(iteration) * self.plan.steps_per_iteration)


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


class StopRequest:
    """SIGINT/SIGTERM during training: the first asks the loop to stop after the call in flight
    (and write a final checkpoint); a second SIGINT interrupts at once."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal = signum

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def train(config: TrainConfig, calibration: Any = None, resume: bool = False) -> dict[str, Any]:
    """Train as configured; returns the summary that is also written to `summary.json`.

    `calibration` (a `jaxrl_fast.calibrate.Calibration` already applied to `config`) is recorded
    in `config.json`. `resume=True` continues the run in `config.run_dir` from its newest
    complete checkpoint (`python -m jaxrl_fast.train --resume RUN_DIR`)."""
    if config.video_interval:  # refuse before anything is written (cached: the CLI asked already)
        from jaxrl_fast.video import check_video_support

        check_video_support(config.env)
    if resume:
        run_dir = Path(config.run_dir)
        checkpointer = Checkpointer(run_dir, config.keep_checkpoints)
        restored = checkpointer.restore()
    else:
        run_dir = create_run_dir(config.run_dir or default_run_dir(config.env, config.algo, config.seed))
        checkpointer, restored = Checkpointer(run_dir, config.keep_checkpoints), None
    threads = config.num_threads or min(config.num_envs, os.cpu_count() or 1)
    # a resumed run's environments start new episodes, seeded apart from the ones the run began with
    env_seed = (config.seed + restored.step) % 2**31 if restored else config.seed
    env = make_xla_env(config.env, config.num_envs, threads, env_seed)
    evaluator_box: list[Evaluator] = []
    driver = Driver(config, env, lambda payload, step: evaluator_box[0].request(payload, step))
    plan = driver.plan

    resolved = to_dict(config) | {
        "run_dir": str(run_dir),
        "num_threads": plan.num_threads,
        "schedule": config.schedule,
        "placement": driver.placement,
        "plan": dataclasses.asdict(plan) | ({"off_policy": driver.off_policy_plan._asdict()} if hasattr(driver, "off_policy_plan") else {}),
        "env_spec": dataclasses.asdict(env.spec),
        "devices": [placement.describe(d) for d in jax.devices()],
        "versions": {"jax": jax.__version__, "envpool": _version("envpool"), "flax": _version("flax")},
    }
    if calibration is not None:
        resolved["calibration"] = dataclasses.asdict(calibration)
    if restored is None:
        write_json(run_dir / "config.json", resolved | {"train_config": to_dict(config)})
        write_policy_info(run_dir, {"train_config": to_dict(config), "env_spec": dataclasses.asdict(env.spec)})
    else:  # the log continues from the checkpoint: lines written after it are dropped (they will be redone)
        truncate_metrics(run_dir / "metrics.jsonl", restored.step)
        saved = json.loads((run_dir / "config.json").read_text())
        saved["train_config"] = to_dict(config)  # a longer --total-steps holds for the next resume too
        saved.setdefault("resumed", []).append({"from_step": restored.step, "total_steps": config.total_steps})
        write_json(run_dir / "config.json", saved)
    sink = MetricsSink(run_dir, purge_step=restored.step + 1 if restored else None)
    progress = ProgressDisplay(plan.total_steps, config.progress)
    if restored is not None:
        progress.message(f"resuming {run_dir} from its checkpoint at step {restored.step:,d}")
    progress.message(
        f"{config.algo} on {config.env}: {plan.total_steps:,d} steps, {config.num_envs} envs, "
        f"{plan.num_threads} EnvPool threads, placement {driver.placement} -> {run_dir}"
    )
    target = TargetWatch(config.target_return)
    curve = LearningCurve(run_dir, f"{config.algo} on {config.env}, seed {config.seed}")

    results: dict[int, EvalResult] = {}  # by step: the final evaluation reuses one of the last iteration

    def on_result(result: EvalResult) -> None:
        results[result.step] = result
        record = {
            "eval_return_mean": result.mean,
            "eval_return_std": result.std,
            "eval_episodes": len(result.returns),
            "eval/episode_length": float(np.mean(result.lengths)),
            "eval/duration_s": result.duration_s,
        }
        sink.write(result.step, record)
        progress.set_eval(result.step, result.mean, result.std)
        target.observe(result)
        curve.update()  # after the line it draws is written; runs where the evaluation ran, never in training

    options = driver.options
    policy = jax.jit(lambda payload, obs: driver.act_deterministic(payload.policy, observe(options, payload.obs_moments, obs)))
    evaluator = Evaluator(
        config.env,
        config.eval_episodes,
        config.seed + EVAL_SEED_OFFSET,
        lambda payload, obs: np.asarray(policy(payload, obs)),
        on_result,
        env.spec.max_episode_steps,
        VideoPlan(run_dir, config.video_interval, plan.total_steps) if config.video_interval else None,
    )
    evaluator_box.append(evaluator)
    done, interrupted, train_time, compile_s = 0, False, 0.0, 0.0
    error: BaseException | None = None
    checkpoint_every = max(1, round(config.checkpoint_interval / plan.steps_per_iteration)) if config.checkpoint_interval else 0
    saved_at = restored.meta["iterations"] if restored else 0

    def save_checkpoint(step: int) -> None:
        state, schedule = driver.snapshot()
        checkpointer.save(step, state, driver.eval_payload(), {"iterations": done, "schedule": schedule})

    tracer = CallTracer(run_dir / PROFILE_DIR, ProfileWindow(config.profile_start, config.profile_calls)) if config.profile else None
    stop = StopRequest()
    try:
        with stop:
            compile_s = driver.start(restored)
            done = (restored.meta["iterations"] if restored else 0) + driver.warm_iterations
            calls = 0
            while done < plan.total_iterations and not target.reached.is_set():
                if stop.signal is not None:
                    raise KeyboardInterrupt
                n = min(plan.iterations_per_call, plan.total_iterations - done)
                step = plan.warmup_steps + done * plan.steps_per_iteration
                traced = tracer.call(calls, step, step + n * plan.steps_per_iteration) if tracer else contextlib.nullcontext()
                with traced:  # starting and stopping a trace happen outside the timed call
                    begin = time.perf_counter()
                    train_metrics, episodes = driver.run(n)
                    elapsed = time.perf_counter() - begin
                train_time += elapsed
                done += n
                calls += 1
                step = plan.warmup_steps + done * plan.steps_per_iteration
                learner = {k: v for k, v in driver.snapshot()[0].items() if k != "replay"}
                check_finite(train_metrics, learner, step)  # before anything of this call is logged or saved
                sps = n * plan.steps_per_iteration / elapsed
                record: dict[str, Any] = {"sps": sps, "update_frames_per_s": n * plan.update_frames_per_iteration / elapsed}
                record.update({k: float(v) for k, v in train_metrics.items()})
                count = int(episodes.count)
                if count:
                    record["train/episode_return"] = float(episodes.return_sum) / count
                    record["train/episode_length"] = float(episodes.length_sum) / count
                record["train/episodes"] = count
                sink.write(step, record)
                progress.update(step, sps)
                if checkpoint_every and done - saved_at >= checkpoint_every:
                    save_checkpoint(step)
                    saved_at = done
    except KeyboardInterrupt:
        interrupted = True
        name = signal.Signals(stop.signal).name if stop.signal else "SIGINT"
        progress.message(f"{name}: writing a final checkpoint and the summary of what ran")
    except Exception as failure:  # a failing schedule thread or a non-finite value: stop, keep what was written
        error = failure
        log.error("training stopped: %s", failure)
    finally:
        profile = tracer.close() if tracer else None  # a window the run ended inside is written too
        driver.close()
    steps = plan.warmup_steps + done * plan.steps_per_iteration if done else 0
    if error is None and done > saved_at:  # the end of the run (or an interruption) is a checkpoint too
        try:
            save_checkpoint(steps)
        except Exception as failure:  # e.g. state donated to a call that a second Ctrl-C cut short
            log.error("the final checkpoint could not be written: %s", failure)
    checkpointer.close()
    final: EvalResult | None = None
    try:
        if done and not interrupted and error is None:
            evaluator.wait_idle(timeout=600)
            final = results.get(steps)
            if final is None:
                final = evaluator.evaluate(driver.eval_payload(), steps)
                on_result(final)
    except Exception:  # a failing final evaluation is reported; the run's data stays intact
        evaluator.failures += 1
        log.exception("final evaluation failed")
    finally:
        evaluator.close()
        progress.close()
    summary = {
        "final_eval_return_mean": final.mean if final else None,
        "final_eval_return_std": final.std if final else None,
        "steps": steps,
        "wall_s": time.time() - PROCESS_START,
        "train_s": train_time,
        "compile_s": compile_s,
        "sps": done * plan.steps_per_iteration / train_time if train_time else None,
        "update_frames_per_s": done * plan.update_frames_per_iteration / train_time if train_time else None,
        "target_return": config.target_return,
        "eval_failures": evaluator.failures,
        "eval_skipped": evaluator.skipped,
        "videos": [str(path.relative_to(run_dir)) for path in evaluator.videos],
        "video_failures": evaluator.video_failures,
        "curve_failures": curve.failures,
        "interrupted": interrupted,
        "schedule": config.schedule,
    }
    summary.update(driver.summary_extras(train_time))
    if profile is not None:
        summary["profile"] = profile
    if error is not None:
        summary["error"] = f"{type(error).__name__}: {error}"
    if target.time_s is not None:
        summary["time_to_target_s"] = target.time_s
        summary["target_step"] = target.step
    write_json(run_dir / "summary.json", summary)
    sink.close()
    progress.message(
        f"done: {steps:,d} steps in {summary['wall_s']:.1f} s, final eval "
        + (f"{final.mean:.1f} ± {final.std:.1f}" if final else "-")
        + (f", target reached at {target.time_s:.1f} s" if target.time_s is not None else "")
        + f" -> {run_dir}"
    )
    if error is not None:
        raise error
    return summary


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"

