"""One training run, from a resolved config to a run directory with metrics and a summary."""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_fast import placement
from jaxrl_fast.algos import make_algorithm
from jaxrl_fast.config import TrainConfig, algo_config, to_dict
from jaxrl_fast.env import make_xla_env
from jaxrl_fast.evaluation import EvalResult, Evaluator
from jaxrl_fast.metrics import PROCESS_START, MetricsSink, ProgressDisplay, create_run_dir, default_run_dir, write_json
from jaxrl_fast.schedules.sync import EnvOptions, EvalPayload, make_sync_loop, observe

log = logging.getLogger(__name__)

EVAL_SEED_OFFSET = 10_000  # evaluation envs are seeded apart from the training envs


@dataclasses.dataclass(frozen=True)
class Plan:
    """Sizes derived from the config before anything is compiled."""

    num_threads: int
    steps_per_iteration: int
    total_iterations: int
    iterations_per_call: int
    eval_every_iterations: int

    @property
    def total_steps(self) -> int:
        return self.total_iterations * self.steps_per_iteration


def make_plan(config: TrainConfig, rollout_length: int) -> Plan:
    steps_per_iteration = config.num_envs * rollout_length
    total_iterations = max(1, config.total_steps // steps_per_iteration)
    return Plan(
        num_threads=config.num_threads or min(config.num_envs, os.cpu_count() or 1),
        steps_per_iteration=steps_per_iteration,
        total_iterations=total_iterations,
        iterations_per_call=min(total_iterations, max(1, config.log_interval // steps_per_iteration)),
        eval_every_iterations=max(1, round(config.eval_interval / steps_per_iteration)) if config.eval_interval else 0,
    )


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


def train(config: TrainConfig) -> dict[str, Any]:
    """Train as configured; returns the summary that is also written to `summary.json`."""
    run_dir = create_run_dir(config.run_dir or default_run_dir(config.env, config.algo, config.seed))
    hyper = algo_config(config)
    threads = config.num_threads or min(config.num_envs, os.cpu_count() or 1)
    env = make_xla_env(config.env, config.num_envs, threads, config.seed)
    algo = make_algorithm(config, env.spec)
    plan = make_plan(config, algo.rollout_length)
    device = placement.fused_loop_device(env)
    options = EnvOptions(config.normalize_observations, config.scale_rewards, getattr(hyper, "gamma", 0.99))

    resolved = to_dict(config) | {
        "run_dir": str(run_dir),
        "num_threads": plan.num_threads,
        "schedule": "sync",
        "placement": {"fused": placement.describe(device)},
        "plan": dataclasses.asdict(plan),
        "env_spec": dataclasses.asdict(env.spec),
        "versions": {"jax": jax.__version__, "envpool": _version("envpool"), "flax": _version("flax")},
    }
    write_json(run_dir / "config.json", resolved)
    sink = MetricsSink(run_dir)
    progress = ProgressDisplay(plan.total_steps, config.progress)
    progress.message(
        f"{config.algo} on {config.env}: {plan.total_steps:,d} steps, {config.num_envs} envs, "
        f"{plan.num_threads} EnvPool threads, device {placement.describe(device)} -> {run_dir}"
    )
    target = TargetWatch(config.target_return)

    def on_result(result: EvalResult) -> None:
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

    policy = jax.jit(
        lambda payload, obs: algo.act_deterministic(payload.policy, observe(options, payload.obs_moments, obs))
    )
    evaluator = Evaluator(
        config.env,
        config.eval_episodes,
        config.seed + EVAL_SEED_OFFSET,
        lambda payload, obs: np.asarray(policy(payload, obs)),
        on_result,
        env.spec.max_episode_steps,
    )

    def on_eval(payload: EvalPayload, iteration: Any) -> None:
        evaluator.request(payload, int(iteration) * plan.steps_per_iteration)

    loop = make_sync_loop(algo, env, options, plan.iterations_per_call, plan.eval_every_iterations, on_eval)
    done, interrupted, train_time, compile_s = 0, False, 0.0, 0.0
    try:
        with jax.default_device(device):
            state = jax.jit(loop.init)(jax.random.key(config.seed), env.handle, env.reset())
            start = time.perf_counter()
            run = loop.run.lower(state, jnp.int32(0)).compile()  # compile once, before the clock starts
            compile_s = time.perf_counter() - start
            while done < plan.total_iterations and not target.reached.is_set():
                n = min(plan.iterations_per_call, plan.total_iterations - done)
                start = time.perf_counter()
                state, metrics = run(state, jnp.int32(n))
                metrics = jax.device_get(metrics)
                elapsed = time.perf_counter() - start
                train_time += elapsed
                done += n
                step = done * plan.steps_per_iteration
                sps = n * plan.steps_per_iteration / elapsed
                record: dict[str, Any] = {"sps": sps, "update_frames_per_s": n * algo.update_frames_per_iteration / elapsed}
                record.update({k: float(v) for k, v in metrics.train.items()})
                episodes = int(metrics.episodes.count)
                if episodes:
                    record["train/episode_return"] = float(metrics.episodes.return_sum) / episodes
                    record["train/episode_length"] = float(metrics.episodes.length_sum) / episodes
                record["train/episodes"] = episodes
                sink.write(step, record)
                progress.update(step, sps)
    except KeyboardInterrupt:
        interrupted = True
        progress.message("interrupted: writing the summary of what ran")
    steps = done * plan.steps_per_iteration
    final: EvalResult | None = None
    try:
        if done and not interrupted:
            evaluator.wait_idle(timeout=600)
            payload = jax.device_get(EvalPayload(algo.policy_params(state.algo), state.obs_moments))
            final = evaluator.evaluate(payload, steps)
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
        "sps": steps / train_time if train_time else None,
        "update_frames_per_s": done * algo.update_frames_per_iteration / train_time if train_time else None,
        "target_return": config.target_return,
        "eval_failures": evaluator.failures,
        "eval_skipped": evaluator.skipped,
        "interrupted": interrupted,
    }
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
    return summary


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"

