"""The run directory's layout: the name of each file and folder a run writes, where a run goes by
default, and the checks before one is created. Every writer of a run's outputs takes its file's
name from here.

    RUN_DIR/config.json        the resolved configuration (`--resume` reads it back)
    RUN_DIR/metrics.jsonl      one JSON object per log line
    RUN_DIR/summary.json       the run's figures at its end
    RUN_DIR/learning_curve.png evaluation mean and spread against env steps
    RUN_DIR/events.out.tfevents.*  the same scalars for TensorBoard
    RUN_DIR/checkpoints/       orbax checkpoints, policy.json for `load_policy`, best_policy.npz
    RUN_DIR/videos/, profile/  with --video-interval, --profile
    RUN_DIR/seed_<k>/          with --num-seeds: agent k's complete run directory
    RUN_DIR/previous-<n>/      what a run started over by --resume (no checkpoint yet) had written
"""

from __future__ import annotations

import datetime
import logging
import os
from pathlib import Path

from jaxrl_fast.types import ConfigError

log = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
CURVE_FILE = "learning_curve.png"
TB_EVENTS = "events.out.tfevents.*"
CHECKPOINT_DIR = "checkpoints"
POLICY_JSON = "policy.json"  # inside CHECKPOINT_DIR
BEST_POLICY = "best_policy.npz"  # inside CHECKPOINT_DIR: the best evaluation's policy (`outputs.best`)
VIDEO_DIR = "videos"
PROFILE_DIR = "profile"
# what a run writes besides config.json (a run started over in its directory moves these to previous-<n>/)
RUN_OUTPUTS = (METRICS_FILE, SUMMARY_FILE, CURVE_FILE, TB_EVENTS, CHECKPOINT_DIR, VIDEO_DIR, PROFILE_DIR)
PREVIOUS_PREFIX = "previous-"
SEED_PREFIX = "seed_"  # RUN_DIR/seed_<k>: agent k of a --num-seeds run


class RunDirError(ConfigError):
    """A run directory that cannot be used: it holds a run already, or cannot be created or written."""


def default_run_dir(env_id: str, algo: str, seed: int) -> Path:
    """`runs/<env>__<algo>__<seed>__<time>`, for a run given no --run-dir."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{env_id.replace('/', '_').replace(':', '_')}__{algo}__{seed}__{stamp}"


def free_names(path: Path) -> list[Path]:
    """`path`, then `<path>-2` ... `<path>-99`: the names a default run directory may take."""
    return [path, *(path.with_name(f"{path.name}-{k}") for k in range(2, 100))]


def first_free(path: Path) -> Path:
    """The first of `free_names(path)` that does not exist (runs started in one second share a default name)."""
    return next((name for name in free_names(path) if not name.exists()), path)


def check_run_dir(path: Path) -> None:
    """Raise RunDirError if `path` already holds a run or cannot be created and written."""
    if (path / CONFIG_FILE).exists():
        started = any(p.name.isdigit() for p in [*path.glob(f"{CHECKPOINT_DIR}/*"), *path.glob(f"seed_*/{CHECKPOINT_DIR}/*")])
        raise RunDirError(f"--run-dir: {path} already holds a run ({CONFIG_FILE} exists); choose another directory, or "
                          + (f"continue it with --resume {path}" if started else
                             f"start it over from its saved config with --resume {path} (it has no checkpoint yet)"))
    if path.exists() and not path.is_dir():
        raise RunDirError(f"--run-dir: {path} exists and is not a directory")
    left = earlier_outputs(path)
    if left:
        raise RunDirError(f"--run-dir: {path} holds another run's outputs ({', '.join(left)}) but no {CONFIG_FILE}: "
                          "a new run there would mix its log and checkpoints with them; choose another directory, or "
                          "remove them")
    existing = path
    while not existing.exists():  # the nearest ancestor that exists decides writability
        existing = existing.parent
    if not existing.is_dir():
        raise RunDirError(f"--run-dir: {path} is not writable ({existing} is not a directory)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise RunDirError(f"--run-dir: {path} is not writable (no write permission on {existing})")


def earlier_outputs(path: Path) -> list[str]:
    """What a run that wrote no config.json (or lost it) left in `path` that a new run would mix
    with its own: saved checkpoint steps and logged lines, its own or its agents'. Empty files (a
    start that failed before its first line) are nothing to keep."""
    if not path.is_dir():
        return []
    found = [p for p in (*path.glob(f"{CHECKPOINT_DIR}/*"), *path.glob(f"seed_*/{CHECKPOINT_DIR}/*")) if p.name.isdigit()]
    found += [p for p in (path / METRICS_FILE, *path.glob(f"seed_*/{METRICS_FILE}")) if p.is_file() and p.stat().st_size]
    return sorted(str(p.relative_to(path)) for p in found)[:3]


def create_run_dir(path: Path, new: bool = False, free_name: bool = False) -> Path:
    """Create a run's directory, so that one the system refuses (/proc/x, a full disk) is a one-line
    error before anything is compiled; returns it. `new`: it did not exist when the run checked it,
    so it must be this call that creates it (another run started with the same directory meanwhile
    is refused); with `free_name` (a default name, which two runs started in one second share) the
    first free `<name>-2`, `<name>-3`, ... is taken instead."""
    if not free_name:  # a default name that exists is skipped, never checked
        check_run_dir(path)
    try:
        if not new:
            path.mkdir(parents=True, exist_ok=True)
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        for candidate in free_names(path) if free_name else [path]:
            try:
                candidate.mkdir()
                return candidate
            except FileExistsError:
                continue
    except OSError as error:
        raise RunDirError(f"--run-dir: {path} cannot be created ({error.strerror})") from None
    raise RunDirError(f"--run-dir: {path} was created by another process after this run checked it (two runs "
                      "given one directory?); choose another directory")


class RunLock:
    """This process's hold on a run directory while its run lives: a second process there (a run
    given the same --run-dir, a --resume of a run still running) is refused instead of writing into
    the same files. An agent's directory of a --num-seeds run (`RUN_DIR/seed_<k>`, resumed alone)
    holds its run's directory too, so that the two never run at once. An advisory `flock` on each
    directory itself: no file is left behind, and the kernel lets go when the process ends, however
    it ends. A file system without `flock` (some NFS and Lustre mounts) runs without the lock."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._fds: list[int] = []
        parent = self.path.parent
        is_agent = is_seed_run_dir(self.path) and (parent / CONFIG_FILE).exists()
        for directory in (self.path, parent) if is_agent else (self.path,):
            self._hold(directory)

    def _hold(self, directory: Path) -> None:
        import fcntl

        try:
            fd = os.open(directory, os.O_RDONLY)
        except OSError as error:  # unreadable: the run's own checks say what is wrong with it
            log.warning("run directory %s not locked: %s", directory, error)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # held: another process runs there
            os.close(fd)
            self.release()
            raise RunDirError(f"--run-dir: another process is running in {directory} (a run given the same "
                              "directory, or a --resume of a run still running); wait for it to end, or choose "
                              "another directory") from None
        except OSError as error:  # no flock here (EBADF on NFS, ENOSYS on Lustre): the run goes on unlocked
            os.close(fd)
            log.warning("run directory %s not locked (%s): nothing keeps a second process out of it", directory, error)
            return
        self._fds.append(fd)

    def release(self) -> None:
        while getattr(self, "_fds", None):
            os.close(self._fds.pop())

    __del__ = release


def clear_outputs(run_dir: Path) -> Path | None:
    """Move what a run wrote besides config.json into `RUN_DIR/previous-<n>/` (the first free n),
    so that it can start over in its directory and nothing it logged is lost; where it went (None:
    there was nothing)."""
    found = [path for pattern in RUN_OUTPUTS for path in run_dir.glob(pattern)]
    if not found:
        return None
    n = 1
    while (run_dir / f"{PREVIOUS_PREFIX}{n}").exists():
        n += 1
    kept = run_dir / f"{PREVIOUS_PREFIX}{n}"
    kept.mkdir()
    for path in found:
        os.replace(path, kept / path.name)
    return kept


def seed_run_dir(run_dir: Path, index: int) -> Path:
    """Agent `index`'s complete run directory inside a --num-seeds run's directory."""
    return Path(run_dir) / f"{SEED_PREFIX}{index}"


def seed_run_dirs(run_dir: Path) -> list[Path]:
    """The agents' run directories of a --num-seeds run, in seed order (none for a single run)."""
    found = [path for path in Path(run_dir).glob(f"{SEED_PREFIX}*") if is_seed_run_dir(path)]
    return sorted(found, key=lambda path: int(path.name.removeprefix(SEED_PREFIX)))


def is_seed_run_dir(path: Path) -> bool:
    """Whether `path` is named as an agent's directory of a --num-seeds run (`seed_<k>`)."""
    return path.name.startswith(SEED_PREFIX) and path.name[len(SEED_PREFIX):].isdecimal()
