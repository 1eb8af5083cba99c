"""jaxrl_fast: EnvPool's C++ batched environments streaming into jitted JAX learner steps."""

__version__ = "0.1.0"

from jaxrl_fast.outputs.video import preload_egl as _preload_egl

# Before anything imports EnvPool: MuJoCo can render (videos) only if EGL was loaded first.
_preload_egl()


def load_policy(run_dir, step=None):
    """The deterministic policy saved in a run directory, as a callable observations -> actions.

    See `jaxrl_fast.outputs.checkpoint.load_policy`; imported here lazily so that `import jaxrl_fast`
    stays light."""
    from jaxrl_fast.outputs.checkpoint import load_policy as load

    return load(run_dir, step)
