"""EnvPool's handlers through the C forwarder: the same steps as calling them directly, programs
that name a slot rather than the pool's address (what lets the persistent cache keep them), and a
direct fallback, with a warning, where the forwarder cannot be built."""

import json
import os
import subprocess
import sys
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxrl_fast.env import ffi_forward
from jaxrl_fast.env.envpool import make_xla_env


def build(env_id, forwarded, num_envs=3, seed=7):
    with mock.patch.object(ffi_forward, "forwarder", ffi_forward.forwarder if forwarded else lambda: None):
        return make_xla_env(env_id, num_envs, 1, seed)


def rollout_program(env, actions):
    def run(handle):
        def body(handle, action):
            handle, step = env.step(handle, action)
            return handle, (step.obs, step.reward, step.terminated, step.truncated)

        return lax.scan(body, handle, actions)

    return jax.jit(run)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_forwarded_steps_are_the_direct_steps_and_only_their_programs_name_no_address(env_id):
    results, texts = [], []
    for forwarded in (True, False):
        env = build(env_id, forwarded)
        assert (env.program_key is not None) == forwarded
        env.reset()
        n = env.spec.num_envs
        actions = (jnp.arange(600 * n).reshape(600, n) % 2 if env.spec.discrete else
                   jnp.sin(jnp.arange(600 * n, dtype=jnp.float32)).reshape(600, n, 1) * 2)
        program = rollout_program(env, actions.astype(jnp.int32 if env.spec.discrete else jnp.float32))
        texts.append(program.lower(jnp.asarray(env.handle)).as_text())
        results.append(jax.device_get(program(jnp.asarray(env.handle))[1]))
        address = str(int.from_bytes(env.handle.tobytes(), sys.byteorder))
        assert (address in texts[-1]) != forwarded
        env.pool.close()
    for forwarded, direct in zip(*results):
        np.testing.assert_array_equal(forwarded, direct)
    assert results[0][2].any() or results[0][3].any()  # episodes ended: auto-resets went through too
    assert ffi_forward.TARGET in texts[0] and ffi_forward.TARGET not in texts[1]


FALLBACK = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from jaxrl_fast.env.envpool import make_xla_env
    import jax, jax.numpy as jnp
    env = make_xla_env("CartPole-v1", 2, 1, 0)
    env.reset()
    handle, step = jax.jit(env.step)(jnp.asarray(env.handle), jnp.zeros(2, jnp.int32))
print(json.dumps({"cacheable": env.program_key is not None, "obs": step.obs.shape[0],
                  "warnings": [str(w.message) for w in caught if "jaxrl_fast" in str(w.message)]}))
"""


@pytest.mark.parametrize("setting", ["no compiler", "turned off"])
def test_without_the_forwarder_envpool_is_called_directly(tmp_path, setting):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    env.update({"CC": str(tmp_path / "no-such-cc")} if setting == "no compiler" else {ffi_forward.FORWARD_VARIABLE: "0"})
    proc = subprocess.run([sys.executable, "-c", FALLBACK], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["cacheable"] is False and out["obs"] == 2
    if setting == "no compiler":  # said once, with why
        assert len(out["warnings"]) == 1 and "compiled every run" in out["warnings"][0], out["warnings"]
    else:
        assert out["warnings"] == []
    assert not list((tmp_path / "cache").rglob("*.so"))


def test_each_entry_point_of_a_pool_takes_a_slot_of_the_one_forwarder_built_in_the_cache_directory():
    forwarder = ffi_forward.forwarder()
    assert forwarder is not None and forwarder is ffi_forward.forwarder()
    before = forwarder.next_slot
    env = build("CartPole-v1", True)
    assert forwarder.next_slot == before + 2  # one slot for `send`, one for `recv`
    env.pool.close()
    assert ffi_forward._build_paths().library.is_file()


def test_the_forwarder_source_ships_with_the_package():
    """An installed wheel compiles the same C file an editable install does."""
    import tomllib
    from pathlib import Path

    setuptools = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert ffi_forward.SOURCE.is_file() and ffi_forward.SOURCE.parent.name == "env"
    assert "*.c" in setuptools["package-data"]["jaxrl_fast.env"]


def test_threads_that_ask_at_once_share_one_forwarder(tmp_path):
    """Two forwarders would hand out the same slots of the C library's one table. In an empty cache
    directory the first call compiles the C file (a window of a good part of a second), and a barrier
    releases every thread into it at once: without the lock each would build its own."""
    code = ("import concurrent.futures, json, threading\nfrom jaxrl_fast.env import ffi_forward\n"
            "barrier = threading.Barrier(8)\n"
            "def ask(_):\n    barrier.wait(timeout=60)\n    return id(ffi_forward.forwarder())\n"
            "with concurrent.futures.ThreadPoolExecutor(8) as pool:\n"
            "    got = list(pool.map(ask, range(8)))\n"
            "print(json.dumps({'distinct': len(set(got)), 'none': ffi_forward.forwarder() is None}))")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"distinct": 1, "none": False}, proc.stderr
    assert len(list((tmp_path / "cache").rglob("*.so"))) == 1  # one library, no temporary file left
