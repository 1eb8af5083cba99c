import atexit
import logging
import os
import shutil
import tempfile

# Two XLA CPU devices, so that tests exercise the actor/critic split on a machine without GPUs.
# It must be set before JAX initialises its backends.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

# One compilation cache for the whole session, in-process, in the CLI subprocesses and in the
# pytest-xdist workers (each inherits the variables the first process set): tests never write to
# the user's cache, and programs that several tests compile are compiled once. The process that
# made the directory removes it. Tests of the cache itself point the variable at their own.
if "JAXRL_FAST_TEST_SESSION_CACHE" not in os.environ:
    os.environ["JAXRL_FAST_TEST_SESSION_CACHE"] = tempfile.mkdtemp(prefix="jaxrl-fast-test-xla-")
    atexit.register(shutil.rmtree, os.environ["JAXRL_FAST_TEST_SESSION_CACHE"], ignore_errors=True)
SESSION_COMPILE_CACHE = os.environ["JAXRL_FAST_TEST_SESSION_CACHE"]
os.environ["JAXRL_FAST_COMPILE_CACHE_DIR"] = SESSION_COMPILE_CACHE

from jaxrl_fast.engine import compile_cache  # noqa: E402  (after the variable it reads)
from jaxrl_fast.outputs.video import preload_egl  # noqa: E402

compile_cache.enable()
preload_egl()  # the video tests film MuJoCo in this process: EGL must load before any test loads EnvPool

logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)  # "Unable to initialize backend 'tpu'"


import dataclasses  # noqa: E402

import pytest  # noqa: E402


def pytest_collection_modifyitems(items):
    """Tests marked slow first (each file's order kept): with two workers, the last test running
    while the other worker waits is then a short one."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def ppo_2048_run(tmp_path_factory):
    """One PPO CartPole-v1 run of 2,048 steps (a log line every 512, its one checkpoint at the end, a
    final evaluation), trained once for every test that needs a finished run: use `ppo_2048`."""
    from support import make_config, train

    config = make_config(run_dir=tmp_path_factory.mktemp("shared") / "ppo_2048", progress="off", total_steps=2048,
                         log_interval=512, eval_interval=0)
    train(config)
    return config


@pytest.fixture
def ppo_2048(ppo_2048_run, tmp_path):
    """The shared run's config, its directory copied into this test's: the test may resume, extend or break it."""
    run_dir = tmp_path / "run"
    shutil.copytree(ppo_2048_run.run_dir, run_dir)
    return dataclasses.replace(ppo_2048_run, run_dir=run_dir)
