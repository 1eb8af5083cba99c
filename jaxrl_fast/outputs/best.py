"""The policy of a run's best evaluation, kept beside its checkpoints.

Evaluation runs beside training, so by the time an evaluation reports, training has moved on: a
run stopped at `--target-return` ends (and checkpoints) with a later policy than the one that
reached the target, and a run whose returns fall back late ends with the lower policy. Each
evaluation that beats every earlier one of the run writes the policy it evaluated (parameters and
observation statistics) to `RUN_DIR/checkpoints/best_policy.npz`, as Stable-Baselines3's
`EvalCallback` keeps `best_model.zip`; `load_policy(run_dir, best=True)` loads it.

One `.npz` file: the arrays by position (`flatten_state`'s keys) and `__meta__`, a JSON string with
the step, the evaluation's mean, std and episode count, and the arrays' tree paths. It is written
to a temporary name and renamed, so a reader meets the previous best or the new one, never half
of one. A resumed run keeps the best its earlier process wrote until an evaluation beats it; one
from past the checkpoint it resumes from is replaced by the best as it stood at that checkpoint
(each checkpoint keeps a link to it, `CHECKPOINT_DIR/<step>/best_policy.npz`, replaced when an
evaluation of a step it covers reports a new best after it was written), or removed where that
checkpoint has none, as that trajectory's metrics are.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from jaxrl_fast.files import written_whole
from jaxrl_fast.outputs.checkpoint import flatten_state
from jaxrl_fast.outputs.run_dir import BEST_POLICY, CHECKPOINT_DIR

log = logging.getLogger(__name__)
META = "__meta__"


def best_policy_path(run_dir: Path) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / BEST_POLICY


def read_best_policy(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays by position and the meta of a best-policy file."""
    with np.load(path, allow_pickle=False) as saved:
        meta = json.loads(str(saved[META]))
        return {key: saved[key] for key in saved.files if key != META}, meta


class BestPolicy:
    """Writes the policy of each evaluation that beats the run's best so far: on the evaluator's
    thread, and on the trainer's for the final evaluation, one at a time (a lock). A failed write
    is logged and counted, never raised: the best file is a convenience, the checkpoints are the
    run's record.

    `resumed_from`: the step of the checkpoint a resumed run restarts from (None: a new run). Its
    earlier best stands until beaten, unless it comes from a later step: the resumed run redoes
    those steps (its metrics are cut back to the checkpoint), so that policy, of a trajectory it
    discards, is removed."""

    def __init__(self, run_dir: Path, resumed_from: int | None = None):
        self.path = best_policy_path(run_dir)
        self.mean: float | None = None
        self.step: int | None = None
        self.failures = 0
        self._lock = threading.Lock()
        if self.path.exists():
            try:
                _, meta = read_best_policy(self.path)
            except Exception as error:  # noqa: BLE001 - an unreadable file is replaced by the next best
                log.warning("best policy %s could not be read (%s); the next evaluation replaces it", self.path, error)
                return
            if resumed_from is None:  # a new run (a start-over clears the directory): the next best replaces it
                return
            if int(meta["step"]) > resumed_from:  # of steps the resumed run redoes: the checkpoint's best instead
                meta = self._back_to(resumed_from, meta["step"])
            if meta is not None:
                self.mean, self.step = float(meta["eval_return_mean"]), int(meta["step"])

    def _back_to(self, checkpoint: int, late_step: int) -> dict[str, Any] | None:
        """The best as it stood at `checkpoint`, put back in place of one of a later step; its meta
        (None where the checkpoint kept no best: the late one is removed)."""
        kept = self.path.parent / str(checkpoint) / BEST_POLICY
        try:
            if not kept.exists():
                self.path.unlink(missing_ok=True)
                log.info("best policy of step %s, past the checkpoint resumed from: removed", late_step)
                return None
            with written_whole(self.path, durable=True) as partial:
                partial.write_bytes(kept.read_bytes())
            meta = read_best_policy(self.path)[1]
            log.info("best policy of step %s, past the checkpoint resumed from: back to that of step %s", late_step,
                     meta["step"])
            return meta
        except (OSError, ValueError, KeyError) as error:
            log.warning("best policy %s of a redone step could not be replaced: %s", self.path, error)
            return None

    def offer(self, step: int, mean: float, std: float, episodes: int, payload: Any) -> bool:
        """Keep `payload` if `mean` beats the best so far (ties keep the earlier policy); True if written."""
        with self._lock:
            if not math.isfinite(mean) or (self.mean is not None and mean <= self.mean):
                return False
            try:
                self._write(step, mean, std, episodes, payload)
            except Exception as error:  # noqa: BLE001 - never the evaluation's (or the run's) failure
                self.failures += 1
                log.error("best policy at step %d could not be written to %s: %s", step, self.path, error)
                return False
            self.mean, self.step = float(mean), int(step)
            self._link_into_checkpoints(int(step))
            return True

    def _link_into_checkpoints(self, step: int) -> None:
        """The new best, linked into every checkpoint of its step or later in place of the link that
        checkpoint took when it was saved: an evaluation reports after training moved on, so one of a
        step a checkpoint covers often ends after that checkpoint was written, and a run resumed from
        it keeps that evaluation's line. It beats every evaluation reported before it, so it is the
        best of each such checkpoint's steps."""
        for checkpoint in self.path.parent.iterdir():
            if not checkpoint.name.isdigit() or int(checkpoint.name) < step:
                continue
            link = checkpoint / BEST_POLICY
            try:
                partial = link.with_name(link.name + ".linking")
                partial.unlink(missing_ok=True)
                os.link(self.path, partial)
                os.replace(partial, link)
            except OSError as error:  # a checkpoint rotated away meanwhile, or a file system without links
                log.debug("best policy not linked into checkpoint %s: %s", checkpoint.name, error)

    def _write(self, step: int, mean: float, std: float, episodes: int, payload: Any) -> None:
        flat, paths = flatten_state(payload)
        meta = {"step": int(step), "eval_return_mean": float(mean), "eval_return_std": float(std),
                "eval_episodes": int(episodes), "paths": paths}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with written_whole(self.path, durable=True) as partial, open(partial, "wb") as file:
            np.savez(file, **{META: np.array(json.dumps(meta))}, **{k: np.asarray(v) for k, v in flat.items()})
