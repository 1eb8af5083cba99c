"""Files written whole: every file that a run, a suite, the program store, calibration or the FFI
build writes in one go for another reader goes through `written_whole`, so a reader meets the old
file or the new one, never half of one, and writers of one path at the same time never share a
temporary file. (`metrics.jsonl` grows by whole lines instead; checkpoints are orbax's, flushed by `fsync_tree`.)"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from typing import Iterator


def partial_path(path: Path) -> Path:
    """Where a write of `path` goes before its rename: hidden, beside it (a rename within one
    directory is atomic), and unique to the write."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex}")


def fsync_path(path: Path) -> None:
    """Wait for `path` (a file, or a directory's entries) to reach the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """Wait for everything under `root` to reach the disk: each file, then each directory's entries
    from the deepest up, then `root`'s own entry in its parent (a checkpoint orbax renamed into place:
    its JSON files are written without a wait). A file system that refuses a directory's fsync is
    passed over, as in `written_whole`."""
    root = Path(root)
    directories = [root]
    for parent, subdirectories, files in os.walk(root):
        for name in files:
            fsync_path(Path(parent) / name)
        directories += [Path(parent) / name for name in subdirectories]
    for directory in [*reversed(directories), root.parent]:
        with contextlib.suppress(OSError):
            fsync_path(directory)


@contextlib.contextmanager
def written_whole(path: Path, durable: bool = False) -> Iterator[Path]:
    """Yields a temporary path to write `path`'s content to; renamed onto `path` when the block
    ends, removed if it raises (the error goes on). The name carries no suffix of `path`: a writer
    that picks a format by suffix (matplotlib) must be told it. `durable`: the content reaches the
    disk before the rename, and the rename before the block ends (a run's record, which a power cut
    must not leave empty: config.json, summary.json, metrics.jsonl cut at a resume, the best
    policy); caches and pictures, which are made again, skip the wait."""
    partial = partial_path(Path(path))
    try:
        yield partial
        if durable:
            fsync_path(partial)
        os.replace(partial, path)
        if durable:
            with contextlib.suppress(OSError):  # a file system that refuses a directory's fsync: the file is in place
                fsync_path(Path(path).parent)
    finally:
        with contextlib.suppress(OSError):  # renamed, or never made
            partial.unlink(missing_ok=True)
