"""Large arrays (the replay's columns) written to and read from a checkpoint in chunks.

Saving a replay through orbax's standard handler costs about three times the buffer on top of the
buffer itself: a host copy of the device array, then the serialisation's own. Here each large array
is an `.npy` file of the checkpoint's `streamed` item, written chunk by chunk (a jitted slice of
`CHUNK_BYTES`, copied to the host, appended to the file), and read back the same way into the
buffer a fresh run allocated (a jitted update that donates it, so the write is in place). The peak
is the buffer plus one chunk, on save and on restore alike.

The files are plain NumPy arrays (`np.load` opens them): a `--num-seeds` agent's file holds its own
block of columns, and a data-parallel run's holds every shard's (gathered chunk by chunk, written
by process 0 only). `orbax_item()` registers the item with orbax, which renames it into place with
the rest of the checkpoint.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import NamedSharding

CHUNK_BYTES = 32 * 2**20  # what one step of a save or restore holds beside the buffer


@dataclasses.dataclass(frozen=True)
class Slab:
    """A large array to stream, or the block of columns `[start, start + width)` of its axis 1 (a
    --num-seeds agent's own streams of the replay its siblings share). Not a pytree: a leaf."""

    array: jax.Array
    start: int = 0
    width: int | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        shape = self.array.shape
        return shape if self.width is None else (shape[0], self.width, *shape[2:])


@dataclasses.dataclass(frozen=True)
class SavedArray:
    """A streamed array's `.npy` file in a checkpoint, read when it is put back. Not a pytree: a leaf."""

    path: Path
    shape: tuple[int, ...]
    dtype: np.dtype
    offset: int  # bytes before the data

    def load(self) -> np.ndarray:
        """The whole array, mapped from its file (pages are read as they are touched)."""
        return np.load(self.path, mmap_mode="r")


def chunk_axis(array: jax.Array) -> int:
    """The axis chunks are taken along: rows, after the shard axis of a data-parallel array."""
    sharding = getattr(array, "sharding", None)
    split_first = isinstance(sharding, NamedSharding) and len(sharding.spec) > 0 and sharding.spec[0] is not None
    return 1 if split_first and array.ndim > 1 else 0


def chunk_length(shape: tuple[int, ...], axis: int, itemsize: int) -> int:
    """Indices of `axis` per chunk: about `CHUNK_BYTES`, at least one, at most the axis."""
    per_index = int(np.prod(shape[:axis] + shape[axis + 1:], dtype=np.int64)) * itemsize
    return int(min(shape[axis], max(1, CHUNK_BYTES // max(per_index, 1))))


def chunk_starts(size: int, length: int) -> list[int]:
    """Starts of the chunks covering `[0, size)`; the last is moved back to end at `size` (a chunk
    overlapping the one before it keeps one compiled shape)."""
    return [min(start, size - length) for start in range(0, size, length)]


@functools.cache
def _slicer(axis: int, length: int, width: int | None) -> Any:
    def take(array: jax.Array, start: jax.Array, column: jax.Array) -> jax.Array:
        starts = [0] * array.ndim
        sizes = list(array.shape)
        starts[axis], sizes[axis] = start, length
        if width is not None:
            starts[1], sizes[1] = column, width
        return jax.lax.dynamic_slice(array, starts, sizes)

    return jax.jit(take)


@functools.cache
def _updater(axis: int) -> Any:
    def put(array: jax.Array, chunk: jax.Array, start: jax.Array, column: jax.Array) -> jax.Array:
        starts = [0] * array.ndim
        starts[axis] = start
        if array.ndim > 1 and axis == 0:
            starts[1] = column
        return jax.lax.dynamic_update_slice(array, chunk.astype(array.dtype), starts)

    return jax.jit(put, donate_argnums=0)


def host_chunk(chunk: jax.Array) -> np.ndarray:
    """A chunk on this host; a chunk spread over processes is gathered from all of them (each calls this)."""
    if not chunk.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(chunk, tiled=True))
    return np.asarray(jax.device_get(chunk))


def write(slab: Slab, path: Path, primary: bool) -> None:
    """Stream `slab` into the `.npy` file `path` (written by the primary process only; every process
    takes part in gathering an array spread over processes)."""
    array = slab.array
    shape, dtype = slab.shape, np.dtype(array.dtype)
    axis = chunk_axis(array)
    length = chunk_length(shape, axis, dtype.itemsize)
    take = _slicer(axis, length, slab.width)
    out = open(path, "wb") if primary else None
    try:
        if out is not None:
            np.lib.format.write_array_header_2_0(out, {"descr": np.lib.format.dtype_to_descr(dtype),
                                                       "fortran_order": False, "shape": shape})
        data_start = out.tell() if out is not None else 0
        done = 0  # indices of `axis` written
        for start in chunk_starts(shape[axis], length):
            chunk = host_chunk(take(array, np.int32(start), np.int32(slab.start)))
            if done > start:  # the last chunk, moved back over indices already written
                chunk = chunk[(slice(None),) * axis + (slice(done - start, None),)]
            if out is not None:
                inner = int(np.prod(shape[axis + 1:], dtype=np.int64)) * dtype.itemsize
                for lead in range(shape[0] if axis else 1):  # after a shard axis, each shard's rows are a run of the file
                    part = chunk[lead] if axis else chunk
                    if part.any():  # rows never written stay a hole of the file (a sparse file reads them as 0)
                        out.seek(data_start + (lead * shape[axis] + done) * inner)
                        out.write(np.ascontiguousarray(part).data)
            done = start + length
        if out is not None:
            out.truncate(data_start + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
    finally:
        if out is not None:
            out.close()


def open_saved(path: Path) -> SavedArray:
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(f)
        if fortran:
            raise ValueError(f"{path}: a Fortran-ordered array (this checkpoint was not written by jaxrl_fast)")
        offset, size = f.tell(), os.fstat(f.fileno()).st_size
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    if size < offset + nbytes:  # found here, at the restore, before a resume changes anything
        raise CheckpointDamaged(f"{path} ends early ({size:,d} bytes of {offset + nbytes:,d}): the checkpoint is damaged")
    return SavedArray(path, tuple(shape), np.dtype(dtype), offset)


def read_chunk(saved: SavedArray | np.ndarray, axis: int, start: int, length: int) -> np.ndarray:
    """Indices `start..start+length` of `axis` (0, or 1 after a shard axis) of a saved array, read
    from its file alone (or sliced from an array a checkpoint before streaming held)."""
    index = (slice(None),) * axis + (slice(start, start + length),)
    if isinstance(saved, np.ndarray):
        return saved[index]
    inner = int(np.prod(saved.shape[axis + 1:], dtype=np.int64)) * saved.dtype.itemsize
    shape = list(saved.shape)
    shape[axis] = length
    out = np.empty(shape, saved.dtype)
    with open(saved.path, "rb") as f:
        for lead in range(saved.shape[0] if axis else 1):
            f.seek(saved.offset + (lead * saved.shape[axis] + start) * inner)
            part = out[lead] if axis else out
            if f.readinto(part.data.cast("B")) != part.nbytes:
                raise CheckpointDamaged(f"{saved.path} ends early: the checkpoint is damaged")
    return out


class CheckpointDamaged(ValueError):
    pass


def fill(array: jax.Array, saved: SavedArray | np.ndarray, column: int = 0) -> jax.Array:
    """`array` (donated: use nothing else of it after) with `saved` streamed into it, at columns
    `column..` of its axis 1 when `saved` is one --num-seeds agent's block."""
    shape = tuple(saved.shape)
    fits = len(shape) == array.ndim and shape[0] == array.shape[0] and shape[2:] == array.shape[2:]
    if not fits or shape[1] + column > array.shape[1]:
        raise CheckpointDamaged(f"a saved array of shape {shape} does not fit {array.shape} at column {column}")
    axis = chunk_axis(array)
    length = chunk_length(shape, axis, saved.dtype.itemsize)
    put = _updater(axis)
    for start in chunk_starts(shape[axis], length):
        array = put(array, read_chunk(saved, axis, start, length), np.int32(start), np.int32(column))
    return array


class OrbaxItem(NamedTuple):
    save: type  # args of a save: StreamSave(arrays: dict[str, Slab])
    restore: type  # args of a restore: StreamRestore(), giving dict[str, SavedArray]


@functools.cache  # once per process: orbax's import takes a few tenths of a second a run need not wait for
def orbax_item() -> OrbaxItem:
    """The `streamed` item's orbax args, registered with their handler: one `.npy` per array, written
    into orbax's temporary directory (renamed with the rest of the checkpoint once every item is in)."""
    import orbax.checkpoint as ocp

    @dataclasses.dataclass
    class StreamSave(ocp.args.CheckpointArgs):
        arrays: dict[str, Slab]

    @dataclasses.dataclass
    class StreamRestore(ocp.args.CheckpointArgs):
        pass

    class StreamHandler(ocp.CheckpointHandler):
        def save(self, directory: Any, args: StreamSave) -> None:
            primary = jax.process_index() == 0
            if primary:
                Path(directory).mkdir(parents=True, exist_ok=True)
            for name, slab in args.arrays.items():
                write(slab, Path(directory) / f"{name}.npy", primary)

        def restore(self, directory: Any, args: StreamRestore | None = None) -> dict[str, SavedArray]:
            return {path.stem: open_saved(path) for path in sorted(Path(directory).glob("*.npy"))}

        def metadata(self, directory: Any) -> None:
            return None

        def finalize(self, directory: Any) -> None:
            pass

        def close(self) -> None:
            pass

    ocp.args.register_with_handler(StreamHandler, for_save=True)(StreamSave)
    ocp.args.register_with_handler(StreamHandler, for_restore=True)(StreamRestore)
    return OrbaxItem(StreamSave, StreamRestore)
