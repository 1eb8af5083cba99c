"""EnvPool's XLA handlers behind one target (and Python envs behind another), so that the
persistent compilation cache keeps the programs that step them.

EnvPool's FFI handlers find their pool through the custom call's `handle` attribute, the pool's
address in this process. XLA compiles attributes into the program, so every program that stepped
EnvPool was a new program in every process, and JAX's persistent cache never served one: each run
compiled its whole training loop again.

Here each pool gets a slot, a number counted from 0 in this process, and programs call the target
`jaxrl_fast_envpool` with the attribute `slot`. The target is a small C function
(`ffi_forward.c`) that calls EnvPool's handler for the slot with the same call frame, its
attributes replaced by `handle = <the pool's address>`; it adds no Python and no copy of the
data to a step. The same configuration in a new process builds its pools in the same order, traces
the same program, and loads it from the cache. Were the order to differ, each process still calls
its own pools: a program names a slot, and a process compiles or loads only programs it traced
over its own slots, so a different order costs a compilation, never a wrong pool.

The C function is compiled once per jaxlib version with the system's C compiler (`$CC`, else
`cc`), against the header jaxlib ships (`jax.ffi.include_dir()`), into
`${XDG_CACHE_HOME:-~/.cache}/jaxrl_fast/ffi/`. Without a compiler, or with
`JAXRL_FAST_FFI_FORWARD=0`, EnvPool's handlers are called directly, as before (`forwarder()` is
None), and such programs are compiled every run.

The library also holds the target `jaxrl_fast_host` for envs stepped in Python (the Gymnasium
backend): a program calls it with the attribute `slot`, and the C function hands the call's
buffers to the Python step registered for that slot (`Forwarder.host_slot`), through one ctypes
callback that takes the GIL. So those programs too name a number, not an object of this process,
and JAX's cache and the program store keep them; without the library they go through
`io_callback`, which neither keeps.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import hashlib
import os
import subprocess
import threading
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jaxlib
from jax import ffi

from jaxrl_fast.files import written_whole

__all__ = ["FORWARD_VARIABLE", "HOST_TARGET", "TARGET", "Forwarder", "forwarder"]

FORWARD_VARIABLE = "JAXRL_FAST_FFI_FORWARD"  # "0": call EnvPool's handlers directly
TARGET = "jaxrl_fast_envpool"
HOST_TARGET = "jaxrl_fast_host"
# (slot, args' data pointers, results' data pointers, message buffer, its size) -> 0, or 1 after writing why
_HostCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p),
                                 ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_int64)
HostStep = Callable[[Any, Any], None]  # (args' data pointers, results' data pointers): reads the args, writes the results
SOURCE = Path(__file__).with_suffix(".c")

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype, _capsule_name.argtypes = ctypes.c_char_p, [ctypes.py_object]


def _pointer(capsule: Any) -> int | None:
    return None if capsule is None else _capsule_pointer(capsule, _capsule_name(capsule))


class Forwarder:
    """The compiled forwarder of this process: `slot(cpu_capsule, gpu_capsule, address)` gives a
    pool's handlers a slot (and registers the target the first time a platform is seen)."""

    def __init__(self, library: ctypes.CDLL):
        self.library = library
        library.jaxrl_fast_forward_set.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        library.jaxrl_fast_forward_set.restype = ctypes.c_int
        self.max_slots = library.jaxrl_fast_forward_max_slots()
        self.next_slot, self.registered, self.lock = 0, set(), threading.Lock()
        self.host_steps: list[HostStep] = []
        self._host_callback = None  # kept alive while the library may call it

    def host_slot(self, step: HostStep) -> int:
        """A new slot of the host target for `step` (and the target registered the first time)."""
        with self.lock:
            if self._host_callback is None:
                self._host_callback = _HostCallback(self._call_host)
                self.library.jaxrl_fast_host_set.argtypes = [_HostCallback]
                self.library.jaxrl_fast_host_set(self._host_callback)
                ffi.register_ffi_target(HOST_TARGET, ffi.pycapsule(self.library.jaxrl_fast_host_cpu), platform="cpu",
                                        api_version=1)
            self.host_steps.append(step)
            return len(self.host_steps) - 1

    def _call_host(self, slot: int, args: Any, rets: Any, message: int, size: int) -> int:
        try:
            self.host_steps[slot](args, rets)
            return 0
        except BaseException as error:  # noqa: BLE001 - it crosses into XLA as the call's error, never lost
            text = f"{type(error).__name__}: {error}\n{''.join(traceback.format_tb(error.__traceback__)[-3:])}"
            data = text.encode(errors="replace")[:size - 1].decode(errors="ignore").encode() + b"\0"  # whole characters
            ctypes.memmove(message, data, len(data))
            note_host_error(error)
            return 1

    def slot(self, cpu_capsule: Any, gpu_capsule: Any, address: int) -> int | None:
        """A new slot for one pool's entry point (None when every slot is taken)."""
        with self.lock:
            if self.next_slot >= self.max_slots:
                return None
            slot, self.next_slot = self.next_slot, self.next_slot + 1
            if self.library.jaxrl_fast_forward_set(slot, _pointer(cpu_capsule), _pointer(gpu_capsule), address) != 0:
                return None
            for platform, capsule in (("cpu", cpu_capsule), ("gpu", gpu_capsule)):
                if capsule is not None and platform not in self.registered:
                    function = getattr(self.library, f"jaxrl_fast_forward_{platform}")
                    ffi.register_ffi_target(TARGET, ffi.pycapsule(function), platform=platform, api_version=1)
                    self.registered.add(platform)
            return slot


class _Build(NamedTuple):
    library: Path
    compiler: str

    def command(self, output: Path) -> list[str]:
        return [self.compiler, "-O2", "-std=c11", "-shared", "-fPIC", f"-I{ffi.include_dir()}", str(SOURCE),
                "-o", str(output)]


def _build_paths() -> _Build:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jaxrl_fast" / "ffi"
    source = SOURCE.read_bytes()
    header = Path(ffi.include_dir()) / "xla" / "ffi" / "api" / "c_api.h"
    digest = hashlib.sha256(source + header.read_bytes()).hexdigest()[:16]
    library = base / f"forward-jaxlib-{jaxlib.__version__}-{digest}.so"
    return _Build(library, os.environ.get("CC") or "cc")


def _compile(build: _Build) -> None:
    """Into a temporary file beside the library, then renamed: runs building at once never read half a file."""
    build.library.parent.mkdir(parents=True, exist_ok=True)
    with written_whole(build.library) as partial:
        subprocess.run(build.command(partial), check=True, capture_output=True, text=True, timeout=120)


_building = threading.Lock()


_host_errors: collections.deque = collections.deque(maxlen=8)  # (text, error) of host steps that raised, newest last
_host_errors_lock = threading.Lock()


def note_host_error(error: BaseException) -> None:
    """Keep what a host step (this target's, or an `io_callback`'s) raised: XLA hands the caller
    only its text, and cut at the target's message buffer. A few, the newest: a failing step stops
    the program that called it (several actors' programs may fail at once)."""
    with _host_errors_lock:
        _host_errors.append((error_key(error), error))


def error_key(error: BaseException) -> str:
    """What of an error's text every carrier of it keeps: the start of its first line."""
    return (f"{type(error).__name__}: {error}".splitlines() or [""])[0][:200]


def host_error_behind(failure: BaseException) -> BaseException:
    """The exception a host step raised, where `failure` is XLA's error carrying its text (the
    env's own, with its type and traceback), taken once; else `failure`."""
    text = str(failure)
    with _host_errors_lock:
        for entry in reversed(_host_errors):
            if entry[0] and entry[0] in text:
                _host_errors.remove(entry)
                return entry[1]
    return failure


def forwarder() -> Forwarder | None:
    """This process's forwarder, compiled on first use; None where it is turned off or cannot be built.
    One per process, whichever thread asks first: the C library's slots are one table."""
    with _building:
        return _the_forwarder()


@functools.lru_cache(maxsize=None)
def _the_forwarder() -> Forwarder | None:
    if os.environ.get(FORWARD_VARIABLE, "1") == "0":
        return None
    try:
        build = _build_paths()
        if not build.library.exists():
            _compile(build)
        return Forwarder(ctypes.CDLL(str(build.library)))
    except (OSError, subprocess.SubprocessError) as error:
        detail = getattr(error, "stderr", None) or error
        warnings.warn(f"jaxrl_fast: EnvPool's steps are called directly and Gymnasium's through io_callback, and "
                      f"their programs compiled every run; the forwarder that lets the compilation cache keep them "
                      f"could not be built ({str(detail).strip()[:300]})",
                      stacklevel=2)
        return None
