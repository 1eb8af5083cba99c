"""Everything one agent's run writes as it goes: metrics lines, TensorBoard, the learning curve, the
evaluations (and whether one reached the target), and the progress display's evaluation field."""

from __future__ import annotations

import logging
import math
import threading
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np

from jaxrl_fast.config.run import TrainConfig
from jaxrl_fast.outputs.best import BestPolicy
from jaxrl_fast.outputs.checkpoint import Restored, nonfinite_leaves
from jaxrl_fast.outputs.curves import LearningCurve, evaluation_label
from jaxrl_fast.outputs.metrics import MetricsSink, ProgressDisplay, RunClock, read_metrics
from jaxrl_fast.outputs.run_dir import METRICS_FILE
from jaxrl_fast.run.evaluation import EvalResult

log = logging.getLogger(__name__)


class TargetWatch:
    """Records the first evaluation whose mean reaches the target; the trainer polls `reached`."""

    def __init__(self, target: float | None, clock: RunClock = RunClock()):
        self.target = target
        self.clock = clock
        self.reached = threading.Event()
        self.time_s: float | None = None
        self.step: int | None = None

    def observe(self, result: EvalResult, wall_s: float | None = None) -> None:
        """`wall_s`: when the evaluation's line was logged (its `wall_s`, which a resumed run reads
        back: the same time either way); now where none is given."""
        if self.target is None or result.mean < self.target:
            return
        if self.time_s is None:  # the first reach is the run's (`reached_before`: one logged before a resume)
            self.time_s, self.step = self.clock.now() if wall_s is None else wall_s, result.step
        self.reached.set()

    def reached_before(self, lines: list[dict[str, Any]]) -> None:
        """A resumed run's log: the first evaluation that reached the target there is the run's
        (its step and its time), and the run has reached it: it trains no further (with
        --num-seeds, until every agent has)."""
        first = next((line for line in lines if self.target is not None and line.get("eval_return_mean", -math.inf)
                      >= self.target), None)
        if first is not None:
            self.time_s, self.step = first.get("wall_s"), first["step"]
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

    def __init__(self, config: TrainConfig, run_dir: Path, restored: Restored | None, show: Callable[[EvalResult], None],
                 clock: RunClock):
        self.sink = MetricsSink(run_dir, rebuild_tensorboard=restored is not None, clock=clock)
        self.show = show
        self.target = TargetWatch(config.target_return, clock)
        self.curve = LearningCurve(run_dir, f"{config.algo} on {config.env}, seed {config.seed}",
                                   eval_label=evaluation_label(config.eval_epsilon, config.eval_policy))
        if restored is not None and self.curve.path.exists():  # it shows the steps the resume cut: drawn again
            self.curve.update()
        self.results: dict[int, EvalResult] = {}
        self.best = BestPolicy(run_dir, restored.step if restored is not None else None)
        self._closing = threading.Lock()  # an evaluation logs whole, before the close or not at all
        self.closed = False
        # evaluations a previous process of this run logged (resuming a finished run reuses its final one)
        lines = read_metrics(run_dir / METRICS_FILE) if restored else []
        self.logged = {line["step"]: LoggedEval(line["step"], line["eval_return_mean"], line["eval_return_std"])
                       for line in lines if "eval_return_mean" in line}
        self.target.reached_before(lines)

    def evaluation(self, result: EvalResult, payload: Any) -> None:
        """Called where the evaluation ran (the evaluator's thread), never in training, with the
        policy it evaluated (kept when it is the run's best so far). After `close` (an evaluation the
        run's end did not wait for) nothing is written."""
        # parameters that went NaN in the call the NaN guard stops at (an argmax over NaN still acts,
        # and its return can be finite)
        if not math.isfinite(result.mean) or nonfinite_leaves(payload):
            log.warning("the evaluation at step %d was of non-finite parameters; it is not logged", result.step)
            return
        with self._closing:
            if not self.closed:
                self._log_evaluation(result, payload)

    def sync(self) -> None:
        self.sink.sync()

    def close(self) -> None:
        """The run's end: the metrics file closes, and a late evaluation is dropped."""
        with self._closing:
            self.closed = True
            self.sink.close()

    def _log_evaluation(self, result: EvalResult, payload: Any) -> None:
        self.results[result.step] = result
        line = self.sink.write(result.step, {
            "eval_return_mean": result.mean,
            "eval_return_std": result.std,
            "eval_episodes": len(result.returns),
            "eval/episode_length": float(np.mean(result.lengths)),
            "eval/duration_s": result.duration_s,
        })
        self.show(result)
        self.target.observe(result, line["wall_s"])  # the line's time: a resume reads the same back
        self.curve.update()  # after the line it draws is written
        self.best.offer(result.step, result.mean, result.std, len(result.returns), payload)

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

    def evaluation(self, result: EvalResult, payload: Any) -> None:
        pass

    def training(self, *args: Any) -> None:
        pass

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass
