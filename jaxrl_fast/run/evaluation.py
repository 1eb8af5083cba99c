"""Evaluation beside training: a background thread with its own EnvPool instance.

The jitted training loop hands policy parameters to `Evaluator.request` through an
`io_callback`. `request` only enqueues, newest wins: if an evaluation is still running when the
next request comes, the waiting request is replaced (and counted as skipped), so a slow
evaluation never stalls training. An evaluation that raises is logged and counted; training
goes on. `close()` stops the thread and joins it within a timeout.

Episodes are acted deterministically, epsilon-greedy with `--eval-epsilon` (Atari's presets:
0.05), or sampled from the policy with `--eval-policy sampled` (MiniGrid's and Procgen's presets),
from a random stream seeded by the evaluation's seed and step.

With a `VideoPlan`, some evaluations also film their first episode (env 0 of the evaluation
pool: an evaluation episode, acted as the others are) into RUN_DIR/videos/.
Rendering and encoding happen here, in the evaluation's thread; a failure of either is logged
and counted, and the evaluation goes on without its video.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np

from jaxrl_fast.engine.acting import draw_seed
from jaxrl_fast.env.envpool import evaluation_pool
from jaxrl_fast.env.episodes import episode_bound, step_seeds
from jaxrl_fast.outputs.video import EpisodeRecorder, render_pool, video_path

log = logging.getLogger(__name__)


class EvalResult(NamedTuple):
    step: int
    returns: np.ndarray  # [episodes] undiscounted returns
    lengths: np.ndarray  # [episodes]
    duration_s: float

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        return float(np.std(self.returns))


@dataclasses.dataclass(frozen=True)
class VideoPlan:
    """Which evaluations are filmed: the 1st, then every `every`-th, and any at or past `final_step`."""

    run_dir: Path
    every: int
    final_step: int

    def records(self, index: int, step: int) -> bool:
        """Whether the evaluation number `index` (from 0) of this run, at `step`, is filmed."""
        return index % self.every == 0 or step >= self.final_step


def run_episodes(pool: Any, policy: Callable[[np.ndarray], np.ndarray], max_steps: int,
                 on_frame: Callable[[], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One episode in each env of a synchronous pool; returns (returns, lengths) per env.

    Each env counts only its first episode: after it ends, EnvPool auto-resets that env and
    what follows is ignored. `on_frame`, if given, is called after the reset and after each
    step of env 0's episode, its last included (a recorder renders env 0 then).
    """
    obs, _ = pool.reset()
    n = obs.shape[0]
    # float32 sums, added step by step as `play_episodes` adds them: the same returns either way
    returns, lengths = np.zeros(n, np.float32), np.zeros(n, np.int64)
    running = np.ones(n, bool)
    if on_frame is not None:
        on_frame()
    for _ in range(max_steps + 1):
        action = np.asarray(policy(obs if obs.dtype == np.uint8 else np.asarray(obs, np.float32)))
        obs, reward, terminated, truncated, _ = pool.step(action)
        filming = on_frame is not None and running[0]
        returns += np.where(running, np.asarray(reward, np.float32), np.float32(0.0))
        lengths += running
        running &= ~(terminated | truncated)
        if filming:
            on_frame()
        if not running.any():
            break
    return returns.astype(np.float64), lengths


def epsilon_greedy(policy: Callable[[np.ndarray], np.ndarray], epsilon: float,
                   random_actions: Callable[[np.random.Generator, int], np.ndarray],
                   rng: np.random.Generator) -> Callable[[np.ndarray], np.ndarray]:
    """`policy` with each env's action replaced, with probability `epsilon`, by a uniform random one.

    Draws the same numbers every step whatever they decide, so an evaluation's random stream
    depends on its seed only."""

    def act(obs: np.ndarray) -> np.ndarray:
        action = np.asarray(policy(obs))
        n = action.shape[0]
        explore, random_action = rng.random(n) < epsilon, random_actions(rng, n)
        return np.where(explore.reshape((n,) + (1,) * (action.ndim - 1)), random_action, action).astype(action.dtype)

    return act


def on_host_device(tree: Any) -> Any:
    """`tree` committed to the host's first CPU device, as the evaluator acts on every payload: a
    training program's `io_callback` hands it committed arrays there, the host numpy arrays, and
    the two would be two programs to compile."""
    import jax

    from jaxrl_fast.engine.placement import host_device

    cpu = host_device()
    return jax.tree.map(lambda x: jax.device_put(x, cpu) if isinstance(x, (np.ndarray, np.generic, jax.Array)) else x, tree)


def host_zeros_like(tree: Any) -> Any:
    """Zeros of each leaf's shape and dtype, on the host's first CPU device (`on_host_device`)."""
    import jax

    return on_host_device(jax.tree.map(lambda x: np.zeros(np.shape(x), x.dtype), tree))


class Evaluator:
    """Runs evaluation episodes in a daemon thread.

    Args:
      env_id, seed: the evaluation pool is `num_episodes` envs of `env_id`, seeded apart from
        the training envs.
      policy: `(payload, obs [N, ...] float32, seed uint32) -> env actions`, jitted by the caller;
        `seed` is drawn each step from a generator seeded by (seed, step), for a policy that samples
        (`--eval-policy sampled`), and a deterministic one ignores it.
      on_result: called in the evaluator thread with each `EvalResult` and the payload it evaluated.
      max_episode_steps: bound on an evaluation's length.
      video: which evaluations to film (None: none); the pool is then made renderable.
      options: EnvPool options of the evaluation pool (`env.evaluation_options` of the training ones).
      epsilon, random_actions: with epsilon > 0, each step's action is `random_actions(rng, n)`'s
        with that probability (`epsilon_greedy`), from a generator seeded by (seed, step); for a
        deterministic policy (the run's checks refuse epsilon beside a sampling one).
      traceable_policy: `policy` before jit. A pool that plays whole episodes in one program (the
        JAX-native backend's, and EnvPool's through the forwarder: `play`) then runs the evaluation
        there, without a host call per step (its per-step seeds drawn inside the program from one
        seed of (seed, step)); not with epsilon or a video, which act from the host.
      program_per_pool: whether an EnvPool pool may have a program of its own (it names the pool's
        slots): False for the evaluators of `--num-seeds`, which would each compile one.
    """

    def __init__(
        self,
        env_id: str,
        num_episodes: int,
        seed: int,
        policy: Callable[[Any, np.ndarray, np.uint32], np.ndarray],
        on_result: Callable[[EvalResult, Any], None],
        max_episode_steps: int,
        video: VideoPlan | None = None,
        options: dict[str, Any] | None = None,
        epsilon: float = 0.0,
        random_actions: Callable[[np.random.Generator, int], np.ndarray] | None = None,
        traceable_policy: Callable[[Any, Any, Any], Any] | None = None,
        program_per_pool: bool = True,
    ):
        if epsilon > 0 and random_actions is None:
            raise ValueError("an evaluation epsilon needs the env's random actions")
        options = options or {}
        max_episode_steps = episode_bound(max_episode_steps)
        in_program = traceable_policy is not None and video is None and epsilon == 0
        if video is None:
            self._pool = evaluation_pool(env_id, num_episodes, seed, max_episode_steps, in_program and program_per_pool,
                                         **options)
        else:
            self._pool = render_pool(env_id, num_envs=num_episodes, seed=seed, **options)
        self._video = video
        self.num_episodes = num_episodes
        self._policy = policy
        self._on_result = on_result
        self._max_steps = max_episode_steps
        self._seed, self._epsilon, self._random_actions = seed, epsilon, random_actions
        self._traceable_policy = traceable_policy if in_program and hasattr(self._pool, "play") else None
        self._lock = threading.Lock()
        self._pool_lock = threading.Lock()  # the thread and a final `evaluate` share the pool
        self._wake = threading.Condition(self._lock)
        self._pending: tuple[Any, int] | None = None
        self._busy = False
        self._stopping = False
        # held while a result is reported; a `close` that gave up waiting takes it to stop any later report
        self._reporting = threading.Lock()
        self._abandoned = False
        self.skipped = 0
        self.failures = 0
        self.last_error: str | None = None
        self.evaluations = 0  # started, in this thread or the caller's
        self.filmed_steps: set[int] = set()  # the steps whose evaluation left a video
        self.videos: list[Path] = []
        self.video_failures = 0
        self._thread = threading.Thread(target=self._loop, name="jaxrl_fast-evaluator", daemon=True)
        self._thread.start()

    def request(self, payload: Any, step: int) -> None:
        """Enqueue an evaluation of `payload` at `step`; never blocks on a running evaluation."""
        with self._lock:
            if self._stopping:
                return
            if self._pending is not None:
                self.skipped += 1
            self._pending = (payload, int(step))
            self._wake.notify()

    def prepare(self, payload: Any, obs_shape: tuple[int, ...], obs_dtype: str = "float32") -> threading.Thread:
        """Compile the policy for payloads shaped like `payload` on a helper thread, so that the first
        evaluation, in the middle of the first training call, does not wait for it. Zeros stand in
        for the parameters (the training call may reuse the real ones' buffers meanwhile)."""
        zeros = host_zeros_like(payload)
        obs = np.zeros((self.num_episodes, *obs_shape), obs_dtype)

        def compile_policy() -> None:
            try:
                if self._traceable_policy is not None:  # the whole episodes' program
                    with self._pool_lock:
                        self._pool.prepare_play(self._traceable_policy, zeros)
                    return
                self._policy(zeros, obs, np.uint32(0))
            except Exception as error:  # the first evaluation compiles it then, and reports what fails
                log.debug("compiling the evaluation policy ahead failed: %s", error)

        # Not a daemon: the interpreter waits for it at exit. A daemon thread still inside XLA's
        # compiler when the interpreter finalizes is unwound through C++ frames and aborts the
        # process ("FATAL: exception not rethrown"), e.g. after a Ctrl-C during the first compilation.
        thread = threading.Thread(target=compile_policy, name="jaxrl_fast-eval-compile", daemon=False)
        thread.start()
        return thread

    def evaluate(self, payload: Any, step: int) -> EvalResult:
        """Run an evaluation in the calling thread (the final one, filmed when videos are on)."""
        return self._evaluate(payload, step, final=True)

    def films_unfilmed(self, step: int) -> bool:
        """Whether videos are on and no evaluation of `step` left one (the final policy is filmed)."""
        return self._video is not None and step not in self.filmed_steps

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no evaluation is pending or running; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._pending is not None or self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._thread.is_alive():
                    return False
                self._wake.wait(remaining)
        return True

    def close(self, timeout: float = 30.0) -> None:
        with self._lock:
            self._stopping = True
            self._pending = None
            self._wake.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            with self._reporting:  # after a report under way, none: the run writes its summary next
                self._abandoned = True
            log.warning("evaluation thread did not stop within %.0f s: the evaluation under way is given up, "
                        "and its result will not be logged", timeout)
            return
        self._pool.close()

    def _evaluate(self, payload: Any, step: int, final: bool = False) -> EvalResult:
        start = time.perf_counter()
        payload = on_host_device(payload)  # one program for every payload, whoever sent it
        with self._pool_lock:
            index, self.evaluations = self.evaluations, self.evaluations + 1
            recorder = None
            if self._video is not None and (final or self._video.records(index, step)):
                recorder = EpisodeRecorder(self._pool, video_path(self._video.run_dir, step))
            try:
                seeds = np.random.default_rng([self._seed, step])  # the policy's stream of this evaluation
                if self._traceable_policy is not None:
                    returns, lengths = self._pool.play(self._traceable_policy, payload, draw_seed(seeds))
                else:
                    returns, lengths = run_episodes(self._pool, self._acting(payload, seeds, step), self._max_steps,
                                                    on_frame=recorder.capture if recorder else None)
            except BaseException:
                if recorder is not None:
                    recorder.finish(keep=False)  # half an episode of a failed evaluation is no evaluation video
                raise
            if recorder is not None and self._keep_video(recorder):
                self.filmed_steps.add(step)
        return EvalResult(step, returns, lengths, time.perf_counter() - start)

    def _acting(self, payload: Any, seeds: np.random.Generator, step: int) -> Callable[[np.ndarray], np.ndarray]:
        """What acts in the evaluation at `step`: the policy, given each step's seed of one seed
        drawn from `seeds` (`episodes.step_seeds`: the seeds an evaluation in one program draws),
        epsilon-greedy when asked, from a stream of its own (also seeded by (seed, step), so neither
        stream moves the other's draws)."""
        each_step = iter(np.asarray(step_seeds(draw_seed(seeds), self._max_steps + 1)))

        def policy(obs: np.ndarray) -> np.ndarray:
            return self._policy(payload, obs, next(each_step))

        if self._epsilon == 0:
            return policy
        return epsilon_greedy(policy, self._epsilon, self._random_actions, np.random.default_rng([self._seed, step]))

    def _keep_video(self, recorder: EpisodeRecorder) -> bool:
        """Keep the recorder's video; whether there is one."""
        path = recorder.finish()
        if path is not None:
            self.videos.append(path)
        elif recorder.error is not None:
            self.video_failures += 1
        return path is not None

    def _loop(self) -> None:
        while True:
            with self._lock:
                while self._pending is None and not self._stopping:
                    self._wake.wait()
                if self._stopping:
                    return
                payload, step = self._pending
                self._pending = None
                self._busy = True
            try:
                result = self._evaluate(payload, step)
                with self._reporting:
                    if not self._abandoned:
                        self._on_result(result, payload)
            except Exception as error:  # an evaluation must never take training down
                self.failures += 1
                self.last_error = f"{type(error).__name__}: {error}"
                log.error("evaluation at step %d failed:\n%s", step, traceback.format_exc())
            finally:
                with self._lock:
                    self._busy = False
                    self._wake.notify_all()
