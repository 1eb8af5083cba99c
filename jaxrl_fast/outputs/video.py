"""Videos of evaluation episodes: which envs can render here, and an mp4 writer fed frame by frame.

What EnvPool 1.2.5 renders (`render_mode="rgb_array"`, `pool.render(env_ids=[i])`, measured on
a headless x86-64 Linux machine): classic control and Box2D tasks, in software, with nothing
else installed (CartPole-v1 600x400, Pendulum-v1 500x500); MuJoCo tasks (HalfCheetah-v4
480x480) through EGL only, which needs the system's `libEGL.so.1` (Debian/Ubuntu `libegl1`)
and an EGL implementation: Mesa's (`libegl-mesa0`, software rendering, no GPU needed) or the
NVIDIA driver's. EnvPool ignores `MUJOCO_GL` and has no OSMesa path. The toy-text tasks do not
render at all ("render not implemented for this environment").

Two hazards decide the shape of this module:

* MuJoCo's renderer finds OpenGL functions only in libraries that were loaded into the
  process's global namespace *before* EnvPool's MuJoCo module was (EnvPool loads its own EGL
  privately). Otherwise MuJoCo calls its fatal-error handler ("an OpenGL platform library has
  not been loaded", or "gladLoadGL error", by load order) and the process exits. So
  `import jaxrl_fast` calls `preload_egl()`, before anything of ours imports EnvPool; it costs a
  few milliseconds and touches no display or GPU.
* That exit cannot be caught. So whether an env renders is asked of a child process
  (`check_video_support`) before a run starts, and a run whose env cannot render is refused then.

Frames are piped to ffmpeg (the binary shipped by the optional `imageio-ffmpeg` package) as
they are rendered, so memory stays at one frame whatever the episode's length; the video is
written under a temporary name and renamed when complete. ffmpeg is started directly rather
than through imageio-ffmpeg's writer, whose `preexec_fn` forks Python code in a process whose
JAX threads are running (JAX warns of a deadlock); `start_new_session` does the same job (Ctrl-C
in the terminal does not reach ffmpeg) without it.
"""

from __future__ import annotations

import ctypes
import functools
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from jaxrl_fast.files import partial_path
from jaxrl_fast.outputs.run_dir import VIDEO_DIR
from jaxrl_fast.types import ConfigError

log = logging.getLogger(__name__)

VIDEO_FPS = 30  # EnvPool gives no per-task frame rate; one rate keeps every video playable
INSTALL_HINT = "pip install 'jaxrl_fast[video]' (or: pip install imageio-ffmpeg)"
EGL_HINT = ("MuJoCo renders through EGL: install libEGL and an EGL implementation, e.g. "
            "`apt-get install libegl1 libegl-mesa0` (software rendering, no GPU needed) or the NVIDIA driver")
PROBE_TIMEOUT_S = 120
ENCODE_TIMEOUT_S = 120  # for ffmpeg to finish a file once its last frame is sent


class VideoError(ConfigError):
    """Videos were asked for but cannot be made here; raised before a run starts."""


def video_path(run_dir: Path, step: int) -> Path:
    """Where the video of the evaluation at `step` goes: RUN_DIR/videos/step_<step>.mp4."""
    return Path(run_dir) / VIDEO_DIR / f"step_{step:010d}.mp4"


def drop_videos_after(run_dir: Path, step: int) -> list[Path]:
    """Remove the videos of evaluations past `step` (a resumed run redoes those steps, and films them
    again as their metrics lines are logged again); the paths removed."""
    late = [path for path in (Path(run_dir) / VIDEO_DIR).glob("step_*.mp4")
            if path.stem.removeprefix("step_").isdigit() and int(path.stem.removeprefix("step_")) > step]
    for path in late:
        path.unlink(missing_ok=True)
    return late


_egl_problem: str | None = "preload_egl() has not run"  # why MuJoCo cannot render in this process


def preload_egl() -> None:
    """Load the system's libEGL into the global namespace, if EnvPool's MuJoCo module is not loaded yet:
    a run that films calls it first (`jaxrl_fast.train`, the CLI), since MuJoCo binds its renderer when
    EnvPool loads it."""
    global _egl_problem
    if _egl_problem is None:
        return
    if "envpool.mujoco" in sys.modules:
        _egl_problem = ("EnvPool's MuJoCo was loaded in this process before its first run that films; film in a new "
                        "process (or call jaxrl_fast.outputs.video.preload_egl() before anything loads EnvPool)")
        return
    try:
        ctypes.CDLL("libEGL.so.1", mode=ctypes.RTLD_GLOBAL)
        _egl_problem = None
    except OSError as error:
        _egl_problem = f"{EGL_HINT} ({error})"


def enable_rendering(family: str) -> None:
    """Raise VideoError if this process cannot render `family` safely (MuJoCo without EGL loaded first)."""
    if family == "mujoco" and _egl_problem is not None:
        raise VideoError(f"MuJoCo cannot render in this process: {_egl_problem}")


def render_pool(env_id: str, num_envs: int, seed: int, **options: Any) -> Any:
    """A synchronous EnvPool whose envs can be rendered to RGB arrays."""
    from jaxrl_fast.env.envpool import make_pool
    from jaxrl_fast.env.ids import env_family

    enable_rendering(env_family(env_id))
    return make_pool(env_id, num_envs=num_envs, num_threads=1, seed=seed, render_mode="rgb_array", **options)


def render_frame(pool: Any, env_index: int = 0) -> np.ndarray:
    """The current frame of one env of a render pool: uint8 [height, width, 3]."""
    return np.asarray(pool.render(env_ids=[env_index])[0])


def probe_frame_shape(env_id: str) -> tuple[int, ...]:
    """Render one frame of `env_id` in this process (may exit the process on a MuJoCo GL failure)."""
    pool = render_pool(env_id, num_envs=1, seed=0)
    try:
        pool.reset()
        return tuple(render_frame(pool).shape)
    finally:
        pool.close()


def check_encoder() -> None:
    try:
        import imageio_ffmpeg  # noqa: F401
    except ImportError:
        raise VideoError(f"--video-interval writes mp4 videos with imageio-ffmpeg, which is not installed: {INSTALL_HINT}") from None


@functools.cache
def check_video_support(env_id: str) -> tuple[int, ...]:
    """Raise VideoError unless videos of `env_id` can be recorded here; returns the frame shape.

    The render test runs in a child process, since a failing OpenGL setup ends the process that
    tries it. Cached per env id: the CLI and the trainer both ask."""
    from jaxrl_fast.env.ids import env_family

    check_encoder()
    try:
        enable_rendering(env_family(env_id))  # this process too must be able to, not only a fresh child
        child = subprocess.run([sys.executable, "-m", "jaxrl_fast.outputs.video", env_id], capture_output=True, text=True,
                               timeout=PROBE_TIMEOUT_S)
    except VideoError as error:
        raise VideoError(f"--video-interval: {env_id} cannot be rendered here ({error})") from None
    except subprocess.TimeoutExpired:
        raise VideoError(f"--video-interval: rendering one frame of {env_id} took over {PROBE_TIMEOUT_S} s") from None
    lines = child.stdout.strip().splitlines()
    if child.returncode == 0 and lines:
        return tuple(json.loads(lines[-1]))
    reason = _last_error_line(child.stderr + child.stdout) or f"the render test exited with status {child.returncode}"
    hint = f"; {EGL_HINT}" if ("OpenGL" in reason or "EGL" in reason) and EGL_HINT not in reason else ""
    raise VideoError(f"--video-interval: {env_id} cannot be rendered here ({reason}){hint}")


def _last_error_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and "Warning" not in line and "logger.warn" not in line]
    return lines[-1] if lines else ""


class Mp4Writer:
    """An H.264 mp4 (yuv420p: what browsers and players take) fed with RGB frames through ffmpeg's stdin."""

    def __init__(self, path: Path, width: int, height: int, fps: int):
        import imageio_ffmpeg

        self.size = (width, height)
        self._log = tempfile.TemporaryFile()  # ffmpeg's complaints, read back only on failure
        command = [
            imageio_ffmpeg.get_ffmpeg_exe(), "-y", "-loglevel", "error",
            "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}", "-r", str(fps), "-i", "-",
            "-an", "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2",  # yuv420p needs even sides; the tasks' frames have them
            "-c:v", "libx264", "-pix_fmt", "yuv420p", "-preset", "veryfast", "-threads", "1",  # training owns the cores
            "-f", "mp4", str(path),
        ]
        self._process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._log,
                                         start_new_session=True)

    def write(self, frame: np.ndarray) -> None:
        """Append one uint8 [height, width, 3] frame."""
        if frame.shape != (self.size[1], self.size[0], 3):
            raise ValueError(f"frame of shape {frame.shape} in a {self.size[0]}x{self.size[1]} video")
        self._process.stdin.write(np.ascontiguousarray(frame, np.uint8).tobytes())

    def close(self) -> None:
        """Finish the file; raise if ffmpeg failed or did not finish in time."""
        try:
            self._process.stdin.close()
            status = self._process.wait(ENCODE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            raise RuntimeError(f"ffmpeg did not finish within {ENCODE_TIMEOUT_S} s") from None
        finally:
            self._log.seek(0)
            message = self._log.read().decode(errors="replace").strip()
            self._log.close()
        if status != 0:
            raise RuntimeError(f"ffmpeg exited with status {status}: {message[-500:]}")

    def abort(self) -> None:
        self._process.kill()
        self._process.wait()
        self._log.close()


class EpisodeRecorder:
    """Streams the frames of one env of a render pool into an mp4 at `path`.

    `capture()` renders the current frame and pipes it to ffmpeg. The first failure (rendering
    or encoding) is logged and stops the recording; it never raises, so an evaluation goes on
    without its video. `finish()` closes the video and returns its path, or None on failure
    (or when `keep=False`); a video appears under its name only when complete.
    """

    def __init__(self, pool: Any, path: Path, fps: int = VIDEO_FPS):
        self._pool = pool
        self._path = Path(path)
        self._partial = partial_path(self._path)  # renamed onto the path by `finish`
        self._fps = fps
        self._writer: Mp4Writer | None = None
        self.frames = 0
        self.error: str | None = None

    def capture(self) -> None:
        if self.error is not None:
            return
        try:
            frame = np.asarray(render_frame(self._pool, 0), dtype=np.uint8)
            if self._writer is None:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                self._writer = Mp4Writer(self._partial, frame.shape[1], frame.shape[0], self._fps)
            self._writer.write(frame)
            self.frames += 1
        except Exception as error:  # a video must never take the evaluation down
            self._fail(error)

    def finish(self, keep: bool = True) -> Path | None:
        try:
            if self._writer is not None:
                writer, self._writer = self._writer, None
                if keep:
                    writer.close()  # waits for ffmpeg to finish the file
                else:
                    writer.abort()
            if keep and self.error is None and self.frames:
                os.replace(self._partial, self._path)
                return self._path
        except Exception as error:
            self._fail(error)
        self._partial.unlink(missing_ok=True)
        return None

    def _fail(self, error: BaseException) -> None:
        self.error = f"{type(error).__name__}: {error}"
        log.error("video %s failed after %d frames: %s", self._path.name, self.frames, self.error)
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.abort()
            except Exception:  # ffmpeg already gone; nothing more to save
                pass


def read_video(path: Path) -> tuple[tuple[int, int], int]:
    """((width, height), frame count) of a video, decoded back with ffmpeg (for tests and checks).

    Every frame is decoded and hashed (ffmpeg's framemd5 muxer: one line per frame), so a file
    that does not decode to the end fails here."""
    import imageio_ffmpeg

    decoded = subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-hide_banner", "-i", str(path), "-map", "0:v:0",
                              "-f", "framemd5", "-"], capture_output=True, text=True, check=True)
    size = re.search(r"Stream #0:\d+.*: Video: .*?, (\d+)x(\d+)", decoded.stderr)
    if size is None:
        raise ValueError(f"{path}: ffmpeg reports no video stream")
    frames = sum(1 for line in decoded.stdout.splitlines() if line and not line.startswith("#"))
    return (int(size[1]), int(size[2])), frames


if __name__ == "__main__":  # `python -m jaxrl_fast.outputs.video ENV_ID`: the child process of check_video_support
    import warnings

    warnings.filterwarnings("ignore")
    from jaxrl_fast.outputs import video  # the package's module (whose EGL state counts), not this __main__ copy

    video.preload_egl()  # before EnvPool loads MuJoCo, as a run that films does
    print(json.dumps(list(video.probe_frame_shape(sys.argv[1]))))
