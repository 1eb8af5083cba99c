import atexit
import logging
import os
import shutil
import tempfile

# Two XLA CPU devices, so that tests exercise the actor/critic split on a machine without GPUs.
# It must be set before JAX initialises its backends.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

# One compilation cache for the whole session, in-process and in the CLI subprocesses (they inherit
# the variable): tests never write to the user's cache, and programs that several tests compile
# are compiled once. Tests of the cache itself point the variable at directories of their own.
SESSION_COMPILE_CACHE = tempfile.mkdtemp(prefix="jaxrl-fast-test-xla-")
atexit.register(shutil.rmtree, SESSION_COMPILE_CACHE, ignore_errors=True)
os.environ["JAXRL_FAST_COMPILE_CACHE_DIR"] = SESSION_COMPILE_CACHE

from jaxrl_fast.engine import compile_cache  # noqa: E402  (after the variable it reads)

compile_cache.enable()

logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)  # "Unable to initialize backend 'tpu'"
