"""The learning-curve image of a run: RUN_DIR/learning_curve.png, drawn from metrics.jsonl.

The evaluation side redraws it after every evaluation: evaluation mean ± std against env steps,
and the mean return of the training episodes where the run logged one. The image is written
to a temporary file and renamed, so a viewer never sees half of it. matplotlib is used through
its object API with the Agg canvas (no pyplot: it keeps global state and is not thread-safe).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from jaxrl_fast.files import written_whole
from jaxrl_fast.outputs.run_dir import CURVE_FILE, METRICS_FILE

log = logging.getLogger(__name__)


class CurvePoints(NamedTuple):
    eval_step: np.ndarray  # [E] env steps of the evaluations, ascending
    eval_mean: np.ndarray  # [E]
    eval_std: np.ndarray  # [E]
    train_step: np.ndarray  # [T] env steps of the training lines that saw finished episodes
    train_return: np.ndarray  # [T]


def read_curve_points(metrics_path: Path) -> CurvePoints:
    """The curve's points from a metrics.jsonl; a line cut short (a writer mid-line) is skipped."""
    evals: dict[int, tuple[float, float]] = {}  # by step: a re-run final evaluation replaces its twin
    train: dict[int, float] = {}
    for line in Path(metrics_path).read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        step = record.get("step")
        if record.get("eval_return_mean") is not None:
            evals[step] = (record["eval_return_mean"], record.get("eval_return_std") or 0.0)
        if record.get("train/episode_return") is not None:
            train[step] = record["train/episode_return"]
    eval_steps, train_steps = sorted(evals), sorted(train)
    return CurvePoints(
        eval_step=np.asarray(eval_steps, np.int64),
        eval_mean=np.asarray([evals[s][0] for s in eval_steps], np.float64),
        eval_std=np.asarray([evals[s][1] for s in eval_steps], np.float64),
        train_step=np.asarray(train_steps, np.int64),
        train_return=np.asarray([train[s] for s in train_steps], np.float64),
    )


def evaluation_label(eval_epsilon: float, eval_policy: str = "deterministic") -> str:
    """How the curve names its evaluation points: deterministic, epsilon-greedy (--eval-epsilon) or
    sampled (--eval-policy sampled)."""
    how = eval_policy if eval_epsilon == 0 else f"epsilon-greedy, {eval_epsilon:g}"
    return f"evaluation ({how}, mean ± std)"


def draw_learning_curve(points: CurvePoints, path: Path, title: str, eval_label: str = evaluation_label(0.0)) -> None:
    """Write the curve as a PNG at `path`, atomically."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 4.0), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    if len(points.train_step):
        axes.plot(points.train_step, points.train_return, color="tab:gray", alpha=0.6, linewidth=1,
                  label="training episodes (mean return)")
    if len(points.eval_step):
        axes.fill_between(points.eval_step, points.eval_mean - points.eval_std, points.eval_mean + points.eval_std,
                          color="tab:blue", alpha=0.2, linewidth=0)
        axes.plot(points.eval_step, points.eval_mean, color="tab:blue", marker="o", markersize=3,
                  label=eval_label)
    axes.set_xlabel("environment steps")
    axes.set_ylabel("episode return")
    axes.set_title(title, fontsize=10)
    axes.grid(alpha=0.3)
    if len(points.train_step) or len(points.eval_step):
        axes.legend(loc="best", fontsize=8)
    figure.tight_layout()
    path = Path(path)
    with written_whole(path) as partial:
        figure.savefig(partial, format="png")


class LearningCurve:
    """Redraws RUN_DIR/learning_curve.png on its own thread; a failure is logged and counted, never raised.

    `update()` only asks for a redraw, so an evaluation never waits for matplotlib. Redraws come at
    most every `interval_s`, the first one `interval_s` after the curve is made: importing
    matplotlib takes most of a CPU-second, which a short run's evaluations would otherwise share.
    `close()` draws what is still asked for."""

    def __init__(self, run_dir: Path, title: str, interval_s: float = 10.0, eval_label: str = evaluation_label(0.0)):
        self.interval_s = interval_s
        self._eval_label = eval_label
        self.path = Path(run_dir) / CURVE_FILE
        self._metrics = Path(run_dir) / METRICS_FILE
        self._title = title
        self.failures = 0
        self._asked = threading.Condition()
        self._pending = self._closing = False
        self._thread: threading.Thread | None = None

    def update(self) -> None:
        with self._asked:
            self._pending = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="jaxrl_fast-curve", daemon=True)
                self._thread.start()
            self._asked.notify()

    def close(self, timeout: float = 120.0) -> None:
        """Finish the redraw asked for last, then stop the thread."""
        with self._asked:
            self._closing = True
            self._asked.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        due = time.monotonic() + self.interval_s
        while True:
            with self._asked:
                while not self._closing and (not self._pending or time.monotonic() < due):
                    self._asked.wait(due - time.monotonic() if self._pending else None)
                if not self._pending:
                    return
                self._pending = False
            self.draw()
            due = time.monotonic() + self.interval_s

    def draw(self) -> None:
        try:
            draw_learning_curve(read_curve_points(self._metrics), self.path, self._title, self._eval_label)
        except Exception as error:  # a picture must never take the evaluation (or training) down
            self.failures += 1
            log.error("learning curve %s could not be drawn: %s: %s", self.path, type(error).__name__, error)
