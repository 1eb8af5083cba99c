"""JAX's persistent compilation cache, on by default: a second run of the same programs loads
them from disk instead of compiling them (seconds saved per run).

Where: `$JAXRL_FAST_COMPILE_CACHE_DIR` if set, else `${XDG_CACHE_HOME:-~/.cache}/jaxrl_fast/xla`,
in a subdirectory per JAX version (`jax-0.10.2/`): JAX keys entries by its version, flags and
backend anyway, so entries of another version are never read; the subdirectory makes them easy
to delete. `--no-compile-cache` (`RunConfig.compile_cache`) turns it off.

Concurrent runs may share the directory: JAX names an entry by its key, skips a write when the
file exists, and a reader that meets a half-written entry gets a decompression error, which JAX
turns into a warning and a fresh compilation (never a wrong program). JAX writes an entry in place
and never rewrites one, so an entry cut short (a run killed while writing it, a full disk) would
cost every later run that warning and that compilation: `heal_entries` makes its writes whole and
lets a write replace an entry that does not decompress.

The cache is process-wide and JAX opens it once, at the first compilation that consults it: the
first `enable` in a process decides where it is.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
import uuid
from pathlib import Path

log = logging.getLogger(__name__)

CACHE_DIR_ENV = "JAXRL_FAST_COMPILE_CACHE_DIR"


def cache_root() -> Path:
    """The configured root: the environment variable, else the user's cache directory."""
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "jaxrl_fast" / "xla"


def cache_dir(jax_version: str) -> Path:
    """Where this JAX version's entries go."""
    return cache_root() / f"jax-{jax_version}"


def writable_dir(path: Path) -> str | None:
    """None if `path` can be created and written, else why not."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".probe-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        return error.strerror or str(error)
    return None


_warned = False
_enabled = False


def enable() -> Path | None:
    """Point JAX's persistent cache at `cache_dir` and cache every program (our programs compile in
    well under JAX's default one-second threshold, and small ones load faster than they compile).
    Returns the directory, or None (after one warning per process) when it cannot be written: the
    run goes on without the cache."""
    global _warned
    import jax

    path = cache_dir(jax.__version__)
    problem = writable_dir(path)
    if problem is not None:
        if not _warned:
            log.warning("compilation cache %s is not writable (%s): compiling without it; set %s to another "
                        "directory, or pass --no-compile-cache", path, problem, CACHE_DIR_ENV)
            _warned = True
        return None
    global _enabled
    _enabled = True
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # every size, no override
    heal_entries()
    sweep_partials(path)
    return path


PARTIAL_SUFFIX = ".partial"
PARTIAL_AGE_S = 3600.0  # a write this old is a run killed between the write and its rename


def sweep_partials(path: Path) -> None:
    """Remove the partial writes of runs killed before their rename (`heal_entries`)."""
    cutoff = time.time() - PARTIAL_AGE_S
    for partial in path.glob(f".*{PARTIAL_SUFFIX}"):
        with contextlib.suppress(OSError):  # another run swept it, or it is another's to keep
            if partial.stat().st_mtime < cutoff:
                partial.unlink()


def heal_entries() -> None:
    """Patch JAX's file cache (`LRUCache.put`, the same in JAX 0.10 to 0.12) so that a write lands
    whole, through a temporary file and a rename, and replaces an entry that does not decompress
    (JAX skips a write whenever the file exists). A JAX whose cache lacks these internals keeps its
    own `put`, with a debug line: the cache still works, it just does not heal."""
    try:
        from jax._src import compilation_cache, lru_cache

        cache_class, suffix, local = lru_cache.LRUCache, lru_cache._CACHE_SUFFIX, lru_cache._is_local_filesystem
        decompress = compilation_cache.decompress_executable
        jax_put = cache_class.put
    except (ImportError, AttributeError) as error:
        log.debug("JAX's compilation cache is not the one heal_entries knows (%s): left as it is", error)
        return
    if getattr(jax_put, "heals", False):
        return

    def readable(path: Path) -> bool:
        try:
            return len(decompress(path.read_bytes())) > 0
        except Exception:  # noqa: BLE001 - zstd's, zlib's and the file's errors alike: unreadable
            return False

    @functools.wraps(jax_put)
    def put(self, key: str, value: bytes) -> None:
        if not key or getattr(self, "eviction_enabled", True) or not local(str(self._path)):
            return jax_put(self, key, value)  # eviction's lock and bookkeeping (a size limit set), a remote cache: JAX's
        path = Path(os.fspath(self._path)) / f"{key}{suffix}"
        if path.exists():
            if readable(path):
                return None
            log.info("compilation cache: replacing the unreadable entry %s", path.name)
        partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}{PARTIAL_SUFFIX}")
        try:
            partial.write_bytes(value)
            os.replace(partial, path)  # readers see no entry or a whole one
        finally:
            partial.unlink(missing_ok=True)

    put.heals = True
    cache_class.put = put


def program_dir() -> Path | None:
    """Where `engine.program_store` keeps the runs' compiled programs: beside the directory
    JAX's cache uses (`programs-jax-<version>/`), once `enable` has set it; None before."""
    import jax

    configured = jax.config.jax_compilation_cache_dir
    if not _enabled or not configured:
        return None
    return Path(configured).with_name(f"programs-{Path(configured).name}")
