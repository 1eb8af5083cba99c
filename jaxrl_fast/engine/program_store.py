"""Warm starts that neither trace nor lower: the fused loops' compiled programs (and the `async`
schedule's, the on-policy `concurrent` schedule's and the off-policy host-driven loops'), kept on disk.

JAX's persistent cache (`compile_cache`) skips XLA's compilation, but finds its entry by the
lowered program, so every run still traces and lowers the loop first: 1.2-2.3 s of a warm start on
a 2-core CPU, most of what is left of it. Here the fused loop's compiled executable is serialized
(`jax.experimental.serialize_executable`) the first time a configuration runs, and a later run of
the same configuration loads it, without tracing, lowering or consulting JAX's cache. A program
that JAX's cache already holds (after an edit or an upgrade) is stored from the second run that
meets it (`ProgramStore._served_before`).

A stored program is found by a key over everything that could change it: the resolved run (the
config but the fields only the host reads, `HOST_ONLY_FIELDS`; the env's spec and `program_key`; the plan;
the placement), the shapes, dtypes, placement and tree of its arguments, jaxrl_fast's own source
files, the versions of Python and of the libraries that trace into it, JAX's settings, XLA's flags
and the devices. A program whose step names this process's objects (`program_key` None: EnvPool's
pool address, an `io_callback`: both only without `env.ffi_forward`) is never stored, nor is anything of a run with several
processes. Entries are written whole (a temporary file, then a rename), so concurrent runs may
share the directory; an entry that cannot be loaded is compiled again, never run. Like JAX's own
cache, an entry holds native code: the directory must be the user's own.

Every edit of jaxrl_fast and every upgrade makes new keys, so old entries would pile up: after each
store, the least recently used entries (a load counts as a use) go until the directory holds at
most `MAX_STORE_BYTES`. Runs pruning side by side may remove an entry another has just loaded or
written; it holds the program already, and the next run compiles it again. Pruning never fails a
run: an entry it cannot remove stays.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import logging
import os
import pickle
import platform
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import jax

from jaxrl_fast.engine.placement import describe_devices
from jaxrl_fast.files import written_whole

log = logging.getLogger(__name__)

# Fields of the config that never reach a program: the host alone reads them (the seed reaches the
# programs as an argument, the key; the stop at the target, the evaluator's pool and policy,
# checkpoints, videos and calibration's time budget are the host's). The log and evaluation
# intervals and the profile's window stay: through the plan they set how many iterations one call
# of the loop scans.
HOST_ONLY_FIELDS = ("run_dir", "seed", "progress", "resume", "target_return", "eval_episodes", "eval_epsilon",
                    "eval_policy", "video_interval", "checkpoint_interval", "keep_checkpoints", "calibration_budget_s")
TRACED_LIBRARIES = ("jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin", "jax-cuda13-pjrt",
                    "ml_dtypes", "flax", "optax", "chex", "numpy", "envpool", "gymnax", "brax", "mujoco", "mujoco-mjx")
SUFFIX = ".executable"
SERVED_SUFFIX = ".served"  # an entry's note that JAX's cache served its program (`ProgramStore._served_before`)
SERVED_NOTE_S = 7 * 24 * 3600.0  # a note this old is forgotten: its configuration did not come back
MAX_STORE_BYTES = 1 << 30
ABANDONED_PARTIAL_S = 3600.0  # a temporary file this old is no concurrent run's write in progress


@functools.cache
def source_digest() -> str:
    """A digest of jaxrl_fast's source: an edited module never meets a program compiled before it."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".c"):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def package_version(name: str) -> str | None:
    """An installed distribution's version, None where it is not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _settings() -> dict[str, str]:
    """JAX's settings (but the cache's own) and XLA's flags."""
    values = {k: repr(v) for k, v in jax.config.values.items()
              if not k.startswith(("jax_compilation_cache", "jax_persistent_cache"))}
    return values | {"XLA_FLAGS": os.environ.get("XLA_FLAGS", "")}


@functools.cache
def cpu_features() -> str:
    """The CPU's model and flags (XLA:CPU compiles for them): a cache shared by two machines keeps
    each one's programs apart."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    wanted = [line for line in lines if line.startswith(("model name", "flags", "Features"))]
    return hashlib.sha256("\n".join(sorted(set(wanted))).encode()).hexdigest()


def run_identity(config: Any, env: Any, plan: Any, placement: Any) -> str | None:
    """The part of a program's key that a run fixes, or None where its programs cannot be stored."""
    if env.program_key is None or jax.process_count() > 1:
        return None
    run = {k: v for k, v in dataclasses.asdict(config).items() if k not in HOST_ONLY_FIELDS}
    identity = {
        "run": run, "env": [env.program_key, repr(env.spec)], "plan": repr(plan), "placement": placement.describe(),
        "source": source_digest(), "python": platform.python_version(),
        "versions": {name: package_version(name) for name in TRACED_LIBRARIES}, "settings": _settings(),
        "devices": describe_devices(kinds=True), "cpu": cpu_features(),
    }
    return json.dumps(identity, sort_keys=True, default=repr)


def _devices(leaves: list[Any]) -> list[Any] | None:
    """The devices the placed arguments are on, in id order (None where none is placed, or where
    they are of two platforms). An uncommitted array (`jnp.int32(n)`) goes where the others are."""
    shardings = [getattr(leaf, "sharding", None) for leaf in leaves if getattr(leaf, "committed", True)]
    devices = sorted({d for s in shardings if s is not None for d in s.device_set}, key=lambda d: d.id)
    return devices if devices and len({d.platform for d in devices}) == 1 else None


# Whether XLA compiled this thread's last program (JAX then writes it to its cache), and whether
# JAX's persistent cache served it. Only a compiled executable is stored: one that JAX's persistent
# cache served serializes without its compiled kernels on XLA's CPU backend (a later run fails
# with "Function ... not found"), and one that JAX's in-memory caches return again may be such an
# executable.
_compiled = threading.local()


def _on_event(name: str, **kwargs: Any) -> None:
    if name == "/jax/compilation_cache/cache_misses":
        _compiled.fresh = True
    elif name == "/jax/compilation_cache/cache_hits":
        _compiled.served = True


def _compile(lowered: Any, salt: str | None = None) -> tuple[Any, bool, bool]:
    """`lowered` compiled, and whether XLA compiled it and whether JAX's persistent cache served
    it. `salt` compiles it under a key of JAX's cache of its own: the name of a pass to leave out,
    which names no pass of XLA's (the same program, `tests/test_program_store.py` checks)."""
    _compiled.fresh = _compiled.served = False
    options = None if salt is None else {"xla_disable_hlo_passes": f"jaxrl-fast-store-{salt}"}
    compiled = lowered.compile(compiler_options=options)
    return compiled, _compiled.fresh, _compiled.served


jax.monitoring.register_event_listener(_on_event)


class ProgramStore:
    """Compiles a run's programs (`compile`, `lazy`): loaded from `directory` where an earlier
    run of the same `identity` stored them, else as `jitted.lower(*args).compile()` and then stored.
    With `identity` None, it only compiles."""

    def __init__(self, directory: Path | None, identity: str | None):
        self.directory = directory if identity is not None else None
        self.identity = identity

    @classmethod
    def for_run(cls, config: Any, env: Any, plan: Any, placement: Any) -> ProgramStore:
        """The store of a run's programs: on where the compilation cache is and the programs can be kept."""
        from jaxrl_fast.engine import compile_cache

        directory = compile_cache.program_dir() if config.compile_cache else None
        return cls(directory, run_identity(config, env, plan, placement) if directory is not None else None)

    def compile(self, name: str, jitted: Callable, args: tuple, lowered_or_found: Callable[[], None] = lambda: None
                ) -> Callable:
        """`jitted` compiled for `args` (arrays or `jax.ShapeDtypeStruct`s with their placement).
        `lowered_or_found` is called once the program is lowered, or found stored (`compile_beside`)."""
        leaves, in_tree = jax.tree.flatten(args)
        devices = _devices(leaves)
        if self.directory is None or devices is None:
            lowered = jitted.lower(*args)
            lowered_or_found()
            return lowered.compile()
        shapes = [f"{x.dtype}{list(x.shape)}{'w' if getattr(x, 'weak_type', False) else ''}"
                  f"@{getattr(x, 'sharding', None) if getattr(x, 'committed', True) else 'any'}" for x in leaves]
        key = hashlib.sha256(json.dumps([self.identity, name, str(in_tree), shapes]).encode()).hexdigest()
        path = self.directory / f"{name}-{key[:40]}{SUFFIX}"
        compiled = None
        if path.exists():
            lowered_or_found()  # loading it needs no tracing
            compiled = self._load(path, devices)
        if compiled is None:
            lowered = jitted.lower(*args)  # tracing may compile small programs of its own: not this one
            lowered_or_found()
            compiled, fresh, served = _compile(lowered)
            if served and self._served_before(path):
                try:  # a salt of this compile's own: JAX's cache may hold an earlier one's, as it held this program
                    compiled, fresh, _ = _compile(lowered, salt=f"{path.stem}-{uuid.uuid4().hex[:8]}")
                except Exception as error:  # noqa: BLE001 (the executable JAX's cache served runs this run)
                    log.debug("program %s not compiled again: %s", path.name, error)
            if fresh:
                self._save(path, compiled)
        return compiled

    def compile_beside(self, executor: concurrent.futures.Executor, name: str, jitted: Callable,
                       args: tuple) -> concurrent.futures.Future:
        """`compile` on `executor`, returning once the program is lowered (or found stored).

        Tracing and lowering are Python and hold the GIL; XLA's compile releases it. A program
        traced while the caller traces its own (`init`, the warm-up) shares the GIL with them, and
        its compile, the longest step of a cold start, starts that much later; so it is traced
        alone first, and the caller's work overlaps only its compile."""
        lowered = threading.Event()
        future = executor.submit(self.compile, name, jitted, args, lowered.set)
        future.add_done_callback(lambda _: lowered.set())  # failed before it was lowered: the caller goes on
        lowered.wait()
        return future

    def _served_before(self, path: Path) -> bool:
        """Whether JAX's cache served this entry's program to an earlier run too, which it then noted.

        JAX's cache serves a program compiled for a run of another key (before an edit of
        jaxrl_fast or an upgrade, or whose entry was pruned here), and that executable cannot be
        stored: every later run would trace and lower the program again. The second run that meets
        this compiles it once more, under a key of JAX's cache no compile used before (JAX's cache
        may hold an earlier such compile's too: the entry was lost again), and stores it; the first
        only notes it, so that a configuration run once (or a loop of edits and runs) never pays a
        compile that its cache could spare it. A note its run never follows is forgotten after
        `SERVED_NOTE_S` (`prune`)."""
        note = path.with_suffix(SERVED_SUFFIX)
        try:
            if note.exists():
                note.unlink(missing_ok=True)
                return True
            path.parent.mkdir(parents=True, exist_ok=True)
            note.write_bytes(b"")
        except OSError:  # a read-only store: nothing is stored anyway
            return False
        prune(path.parent, MAX_STORE_BYTES, keep=path)  # the notes of runs that never came back
        return False

    def lazy(self, name: str, jitted: Callable) -> LazyProgram:
        """`jitted`, compiled through `compile` at its first call, or ahead from shapes (`LazyProgram.ahead`)."""
        return LazyProgram(self, name, jitted)

    def _save(self, path: Path, compiled: Any) -> None:
        from jax.experimental import serialize_executable

        try:
            body = pickle.dumps(serialize_executable.serialize(compiled))
            path.parent.mkdir(parents=True, exist_ok=True)
            with written_whole(path) as partial:
                partial.write_bytes(body)
        except Exception as error:  # noqa: BLE001 (unstored, the next run compiles it again: never worse than before)
            log.debug("program %s not stored: %s", path.name, error)
        prune(path.parent, MAX_STORE_BYTES, keep=path)

    def _load(self, path: Path, devices: list[Any]) -> Any | None:
        from jax.experimental import serialize_executable

        read = None
        try:
            with open(path, "rb") as file:  # which file was read: another run may rename a fresh entry over it
                read, body = os.fstat(file.fileno()), file.read()
            payload, in_tree, out_tree = pickle.loads(body)
            loaded = serialize_executable.deserialize_and_load(payload, in_tree, out_tree, backend=devices[0].client,
                                                               execution_devices=devices)
            _touch(path)  # used: the last entry pruning removes
            return loaded
        except FileNotFoundError:
            return None
        except Exception as error:  # noqa: BLE001 (a damaged or foreign entry is compiled again)
            log.warning("stored program %s could not be loaded (%s): compiling it", path, error)
            try:  # once: the next run that compiles the loop stores it again (not another run's fresh entry)
                if read is not None and path.stat().st_ino == read.st_ino:
                    path.unlink(missing_ok=True)
            except OSError:  # another's file, a read-only store: it stays, and is compiled around each time
                pass
            return None


class LazyProgram:
    """A program compiled at its first call (later calls have the same shapes), or before it, on
    another thread, from the shapes of its arguments (`ahead`). Called inside another transformation
    (a data-parallel `shard_map`, a test's `jax.jit`), it is `jitted` itself. If the compile from
    shapes fails, the first call compiles from its real arguments."""

    def __init__(self, store: ProgramStore, name: str, jitted: Callable):
        self.store, self.name, self.jitted = store, name, jitted
        self.compiled: Callable | None = None
        self.pending: concurrent.futures.Future | None = None

    def ahead(self, executor: concurrent.futures.Executor, *shapes: Any) -> None:
        """Start compiling on `executor` for arguments of `shapes` (see `placed_shapes`), returning
        once the program is lowered (`ProgramStore.compile_beside`); the first call waits for it."""
        self.pending = self.store.compile_beside(executor, self.name, self.jitted, shapes)

    def __call__(self, *args: Any) -> Any:
        if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(args)):
            return self.jitted(*args)
        if self.compiled is None:
            self.compiled = self._compile_first(args)
        return self.compiled(*args)

    def _compile_first(self, args: tuple) -> Callable:
        """What the ahead compile made; if it failed, a compile from the real arguments (whose error,
        if it fails too, is the one raised)."""
        if self.pending is not None:
            try:
                return self.pending.result()
            except Exception as error:  # noqa: BLE001 - shapes are a guess at the arguments: try them
                log.warning("%s: the compile from its arguments' shapes failed (%s: %s); compiling from the "
                            "arguments", self.name, type(error).__name__, error)
        return self.store.compile(self.name, self.jitted, args)


def placed_shapes(tree: Any, device: Any) -> Any:
    """`tree`'s shapes and dtypes (arrays, or `jax.eval_shape`'s output) as arguments committed to
    `device`: what a program compiles from before its inputs exist."""
    where = jax.sharding.SingleDeviceSharding(device)
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=where, weak_type=s.weak_type), tree)


def _is_partial(name: str) -> bool:
    """Whether `name` is an entry's write in progress (`files.partial_path`'s name)."""
    return name.startswith(".") and f"{SUFFIX}." in name


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:  # pruned by a concurrent run meanwhile, or a read-only store: it was loaded anyway
        pass


def prune(directory: Path, max_bytes: int, keep: Path | None = None, now: float | None = None) -> list[Path]:
    """Remove the least recently used entries of `directory` (by modification time, which a load
    renews) until the rest hold at most `max_bytes`, never `keep` (the entry just written), and any
    temporary file an interrupted write left more than `ABANDONED_PARTIAL_S` ago. Returns what went.
    Only regular files are considered; one that cannot be removed (another's file, a read-only
    store) stays, and one another run removed meanwhile is skipped."""
    now = time.time() if now is None else now
    entries, doomed = [], []
    try:
        listing = list(os.scandir(directory))
    except OSError:
        return []
    for item in listing:
        try:
            if not item.is_file(follow_symlinks=False):
                continue
            stat = item.stat(follow_symlinks=False)
        except OSError:
            continue
        if _is_partial(item.name):
            if now - stat.st_mtime > ABANDONED_PARTIAL_S:
                doomed.append(Path(item.path))
        elif item.name.endswith(SERVED_SUFFIX):
            if now - stat.st_mtime > SERVED_NOTE_S:
                doomed.append(Path(item.path))
        elif item.name.endswith(SUFFIX):
            entries.append((stat.st_mtime, stat.st_size, Path(item.path)))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries, key=lambda entry: entry[0]):
        if total <= max_bytes:
            break
        if path != keep:
            doomed.append(path)
            total -= size
    removed = []
    for path in doomed:
        try:
            path.unlink(missing_ok=True)
            removed.append(path)
        except OSError as error:
            log.debug("stored program %s not pruned: %s", path.name, error)
    return removed
