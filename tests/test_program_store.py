"""The store of compiled programs (`engine.program_store`): a later run of the same configuration
loads the fused loop's executable instead of tracing and compiling it; anything that could change
the program is another entry; a damaged entry is compiled again; an executable that JAX's cache
served is never stored. Whole runs through it: tests/test_compile_cache.py."""

import dataclasses
import logging
import os
import re
import uuid
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_fast.config.run import TrainConfig
from jaxrl_fast.engine import program_store
from jaxrl_fast.engine.program_store import (
    ABANDONED_PARTIAL_S,
    SERVED_NOTE_S,
    SUFFIX,
    ProgramStore,
    prune,
    run_identity,
)
from jaxrl_fast.files import partial_path


def fresh_program():
    """A jitted program no earlier test compiled (its constant is new), so XLA compiles it here
    rather than JAX's session cache serving it; it donates its first argument, as the loops do."""
    constant = float(uuid.uuid4().int % 2**40) / 2**20

    def step(state, n):
        return {"x": state["x"] * 2.0 + constant + n}, state["x"].sum()

    return jax.jit(step, donate_argnums=0), constant


def args():
    """A loop's arguments: the state committed to its device (the store keeps only placed programs)."""
    return jax.device_put({"x": jnp.arange(6.0).reshape(2, 3)}, jax.devices()[0]), jnp.float32(1.0)


class NeverLowered:
    """Stands for a jitted program that must not be traced: the store has to load it."""

    def lower(self, *args):
        raise AssertionError("traced and lowered although the program was stored")


def without_metadata(hlo):
    """A compiled program's text without its source locations (where it was traced from)."""
    return re.sub(r"metadata=\{[^}]*\}|line=\d+ end_line=\d+", "", hlo)


def entries(directory):
    return sorted(directory.glob(f"*{SUFFIX}"))


def test_a_stored_program_is_loaded_by_a_later_run_without_tracing_and_computes_the_same(tmp_path):
    program, constant = fresh_program()
    first = ProgramStore(tmp_path, "identity").compile("loop", program, args())
    assert len(entries(tmp_path)) == 1
    loaded = ProgramStore(tmp_path, "identity").compile("loop", NeverLowered(), args())
    expected_state, expected_sum = first(*args())
    state, total = loaded(*args())
    np.testing.assert_allclose(np.asarray(state["x"]), np.arange(6.0).reshape(2, 3) * 2 + constant + 1, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(state["x"]), np.asarray(expected_state["x"]))
    assert float(total) == float(expected_sum) == 15.0


def test_another_identity_name_or_shape_is_another_entry(tmp_path):
    program, _ = fresh_program()
    ProgramStore(tmp_path, "identity").compile("loop", program, args())
    assert len(entries(tmp_path)) == 1
    for store, name, call_args in [(ProgramStore(tmp_path, "other"), "loop", args()),
                                   (ProgramStore(tmp_path, "identity"), "init", args()),
                                   (ProgramStore(tmp_path, "identity"), "loop", (jax.device_put({"x": jnp.ones((3, 3))}, jax.devices()[0]),
                                                                   jnp.float32(1)))]:
        with pytest.raises(AssertionError, match="traced and lowered"):
            store.compile(name, NeverLowered(), call_args)


def test_a_damaged_entry_warns_and_is_compiled_again(tmp_path, caplog):
    program, constant = fresh_program()
    ProgramStore(tmp_path, "identity").compile("loop", program, args())
    (entry,) = entries(tmp_path)
    entry.write_bytes(b"not an executable")
    with caplog.at_level(logging.WARNING, logger="jaxrl_fast.engine.program_store"):
        again = ProgramStore(tmp_path, "identity").compile("loop", program, args())
    assert "could not be loaded" in caplog.text and not entry.exists()  # warned once, not at every run
    state, _ = again(*args())
    assert float(state["x"][0, 0]) == pytest.approx(constant + 1)


def test_nothing_is_stored_without_an_identity_nor_what_jax_caches_returned(tmp_path):
    ProgramStore(tmp_path / "none", None).compile("loop", fresh_program()[0], args())
    assert not (tmp_path / "none").exists()
    uncommitted = ({"x": jnp.ones((2, 3))}, jnp.float32(1.0))  # nothing says where the program runs
    ProgramStore(tmp_path / "unplaced", "identity").compile("loop", fresh_program()[0], uncommitted)
    assert not (tmp_path / "unplaced").exists()
    program, _ = fresh_program()
    # The same program in another store: XLA compiled it for "a"; for "b", JAX's in-memory cache
    # returns it, an executable that may be stored without its code.
    ProgramStore(tmp_path / "a", "identity").compile("loop", program, args())
    assert len(entries(tmp_path / "a")) == 1
    ProgramStore(tmp_path / "b", "identity").compile("loop", program, args())
    assert not entries(tmp_path / "b")


def test_what_jax_persistent_cache_serves_twice_is_compiled_again_under_its_own_key_and_stored(tmp_path, monkeypatch):
    """An entry that is missing while JAX's cache holds its program (an edit of jaxrl_fast, an
    upgrade, a pruned entry): JAX's cache serves an executable that cannot be stored, and every later
    run would trace and lower the program again. The first run that meets this notes it; the second
    compiles the program once more, under a key of JAX's cache of its own (the same instructions),
    and stores that."""
    program, constant = fresh_program()
    first = ProgramStore(tmp_path / "a", "identity").compile("loop", program, args())
    salts = []
    compile_once = program_store._compile
    monkeypatch.setattr(program_store, "_compile", lambda lowered, salt=None: (salts.append(salt), compile_once(lowered, salt))[1])
    jax.clear_caches()  # JAX's persistent cache (on in the tests) serves what follows
    ProgramStore(tmp_path / "b", "identity").compile("loop", program, args())
    assert salts == [None] and not entries(tmp_path / "b")  # served, noted
    assert len(list((tmp_path / "b").glob("*.served"))) == 1
    jax.clear_caches()
    again = ProgramStore(tmp_path / "b", "identity").compile("loop", program, args())
    (entry,) = entries(tmp_path / "b")
    assert salts[:2] == [None, None] and salts[2].startswith(entry.stem) and not list((tmp_path / "b").glob("*.served"))
    assert without_metadata(again.as_text()) == without_metadata(first.as_text())
    loaded = ProgramStore(tmp_path / "b", "identity").compile("loop", NeverLowered(), args())
    np.testing.assert_array_equal(np.asarray(loaded(*args())[0]["x"]), np.asarray(first(*args())[0]["x"]))
    assert float(loaded(*args())[0]["x"][0, 0]) == pytest.approx(constant + 1)
    # lost again, with JAX's cache now holding the salted program too: stored again the same way
    entry.unlink()
    for _ in range(2):
        jax.clear_caches()
        ProgramStore(tmp_path / "b", "identity").compile("loop", program, args())
    assert len(entries(tmp_path / "b")) == 1 and salts[3:5] == [None, None] and salts[5] != salts[2]


def test_a_store_it_cannot_write_takes_what_jax_cache_serves(tmp_path, monkeypatch):
    """A note it cannot write, or cannot remove (a store that became read-only), fails nothing: the
    program JAX's cache served runs."""
    program, _ = fresh_program()
    ProgramStore(tmp_path / "a", "identity").compile("loop", program, args())

    def refused(self, *args, **kwargs):
        raise PermissionError(f"read-only: {self}")

    for noted in (False, True):
        store = tmp_path / f"b{noted}"
        if noted:  # a run before the store became read-only noted the program
            jax.clear_caches()
            ProgramStore(store, "identity").compile("loop", program, args())
            assert len(list(store.glob("*.served"))) == 1
        with monkeypatch.context() as m:
            m.setattr(Path, "write_bytes", refused)
            m.setattr(Path, "unlink", refused)
            m.setattr(Path, "mkdir", refused)
            jax.clear_caches()
            compiled = ProgramStore(store, "identity").compile("loop", program, args())
        assert float(compiled(*args())[1]) == 15.0 and (not store.exists() or not entries(store))


@dataclasses.dataclass
class Env:
    program_key: str | None
    spec: str = "spec"


class Placement:
    def describe(self):
        return {"mode": "single"}


def test_the_run_identity_ignores_only_what_never_reaches_a_program():
    config = TrainConfig(algo="ppo", env="CartPole-v1")
    identity = run_identity(config, Env("envpool-slots-0-1"), "plan", Placement())
    host_only = dataclasses.replace(config, seed=7, run_dir="elsewhere", progress="off", target_return=100.0,
                                    eval_episodes=3, eval_epsilon=0.1, eval_policy="sampled", video_interval=10_000, checkpoint_interval=5_000,
                                    keep_checkpoints=2, calibration_budget_s=9.0)
    assert identity == run_identity(host_only, Env("envpool-slots-0-1"), "plan", Placement())
    changed = [dataclasses.replace(config, num_envs=config.num_envs * 2),
               dataclasses.replace(config, num_seeds=2), dataclasses.replace(config, env_kwargs=("gravity=9.0",)),
               dataclasses.replace(config, ppo=dataclasses.replace(config.ppo, learning_rate=0.5))]
    assert all(run_identity(c, Env("envpool-slots-0-1"), "plan", Placement()) != identity for c in changed)
    assert run_identity(config, Env("envpool-slots-1-2"), "plan", Placement()) != identity  # other pools' slots
    assert run_identity(config, Env("envpool-slots-0-1"), "other plan", Placement()) != identity
    assert run_identity(config, Env(None), "plan", Placement()) is None  # a step naming this process's objects


def test_a_program_placed_on_another_device_is_stored_and_loaded_there(tmp_path):
    """The off-policy loop's call: the state committed to the acting device, the count an
    uncommitted scalar (which goes where the state is)."""
    device = jax.devices()[-1]
    program, constant = fresh_program()
    state = lambda: jax.device_put({"x": jnp.arange(6.0).reshape(2, 3)}, device)  # noqa: E731
    ProgramStore(tmp_path, "identity").compile("loop", program, (state(), jnp.float32(1.0)))
    assert len(entries(tmp_path)) == 1
    loaded = ProgramStore(tmp_path, "identity").compile("loop", NeverLowered(), (state(), jnp.float32(1.0)))
    out, _ = loaded(state(), jnp.float32(1.0))
    assert out["x"].devices() == {device}
    assert float(out["x"][0, 1]) == pytest.approx(2.0 + constant + 1)


def test_pruning_removes_the_least_recently_used_entries_beyond_the_budget(tmp_path):
    now = 1_000_000.0

    def write(name, size, age_s):
        path = tmp_path / name
        path.write_bytes(b"x" * size)
        os.utime(path, (now - age_s, now - age_s))
        return path

    oldest, old, recent, newest = (write(f"{n}{SUFFIX}", 100, age) for n, age in
                                   (("oldest", 400), ("old", 300), ("recent", 200), ("newest", 100)))
    stale_partial = write(partial_path(tmp_path / f"run{SUFFIX}").name, 50, ABANDONED_PARTIAL_S + 1)
    live_partial = write(partial_path(tmp_path / f"run{SUFFIX}").name, 50, 1)  # another run's write in progress
    other = write("notes.txt", 1000, 10_000)
    stale_note, fresh_note = write("gone.served", 0, SERVED_NOTE_S + 1), write("back.served", 0, 1_000)
    (tmp_path / f"folder{SUFFIX}").mkdir()  # not an entry, whatever its name
    removed = prune(tmp_path, 250, keep=oldest, now=now)
    assert set(removed) == {old, recent, stale_partial, stale_note}  # 400 -> 200 bytes; the entry just written stays
    assert all(p.exists() for p in (oldest, newest, live_partial, other, fresh_note, tmp_path / f"folder{SUFFIX}"))
    assert prune(tmp_path, 250, now=now) == [] and prune(tmp_path / "missing", 0) == []


def test_pruning_leaves_what_it_cannot_remove_and_never_fails(tmp_path, monkeypatch):
    for name in ("a", "b"):
        (tmp_path / f"{name}{SUFFIX}").write_bytes(b"x" * 100)
    real_unlink = type(tmp_path).unlink

    def unlink(path, missing_ok=False):
        if path.name.startswith("a"):
            raise PermissionError(13, "Permission denied", str(path))
        real_unlink(path, missing_ok=missing_ok)

    monkeypatch.setattr(type(tmp_path), "unlink", unlink)
    assert prune(tmp_path, 0) == [tmp_path / f"b{SUFFIX}"]
    assert [p.name for p in entries(tmp_path)] == [f"a{SUFFIX}"]


def test_storing_prunes_the_store_to_its_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(program_store, "MAX_STORE_BYTES", 1)  # room for the newest entry alone
    program, _ = fresh_program()
    ProgramStore(tmp_path, "identity").compile("loop", program, args())
    (first,) = entries(tmp_path)
    other, _ = fresh_program()
    ProgramStore(tmp_path, "other").compile("loop", other, args())
    (kept,) = entries(tmp_path)
    assert kept != first


def test_a_loaded_entry_counts_as_used_and_outlives_older_ones(tmp_path):
    program, _ = fresh_program()
    ProgramStore(tmp_path, "identity").compile("loop", program, args())
    (loaded,) = entries(tmp_path)
    other, _ = fresh_program()
    ProgramStore(tmp_path, "other").compile("loop", other, args())
    (unused,) = set(entries(tmp_path)) - {loaded}
    for path, age in ((loaded, 200), (unused, 100)):  # the entry to be loaded is the older one
        os.utime(path, (path.stat().st_mtime - age,) * 2)
    ProgramStore(tmp_path, "identity").compile("loop", NeverLowered(), args())
    assert loaded.stat().st_mtime > unused.stat().st_mtime
    assert prune(tmp_path, loaded.stat().st_size) == [unused]


def test_a_program_compiled_ahead_from_shapes_is_what_its_first_call_runs_and_a_later_run_loads(tmp_path):
    import concurrent.futures

    from jaxrl_fast.engine.program_store import placed_shapes

    program, constant = fresh_program()
    state, n = args()
    lazy = ProgramStore(tmp_path, "identity").lazy("loop", program)
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        lazy.ahead(executor, placed_shapes(jax.eval_shape(lambda: state), jax.devices()[0]),
                   jax.ShapeDtypeStruct((), jnp.float32))
    lazy.jitted = NeverLowered()  # the call runs what was compiled ahead, and compiles nothing itself
    out, total = lazy(state, n)
    np.testing.assert_allclose(np.asarray(out["x"]), np.arange(6.0).reshape(2, 3) * 2 + constant + 1, rtol=1e-6)
    assert float(total) == 15.0 and len(entries(tmp_path)) == 1
    later = ProgramStore(tmp_path, "identity").lazy("loop", NeverLowered())  # a warm start, ahead the same way
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        later.ahead(executor, placed_shapes(jax.eval_shape(lambda: args()[0]), jax.devices()[0]),
                    jax.ShapeDtypeStruct((), jnp.float32))
    assert float(later(*args())[1]) == 15.0


def test_a_failed_compile_from_shapes_falls_back_to_the_real_arguments(tmp_path, caplog):
    import concurrent.futures

    program, constant = fresh_program()
    state, n = args()
    lazy = ProgramStore(tmp_path, "identity").lazy("loop", program)
    with concurrent.futures.ThreadPoolExecutor(1) as executor:  # a state of another structure: its trace fails
        lazy.ahead(executor, jax.ShapeDtypeStruct((2, 3, 4), jnp.float32), jax.ShapeDtypeStruct((), jnp.float32))
    with caplog.at_level(logging.WARNING, logger="jaxrl_fast.engine.program_store"):
        out, total = lazy(state, n)
    np.testing.assert_allclose(np.asarray(out["x"]), np.arange(6.0).reshape(2, 3) * 2 + constant + 1, rtol=1e-6)
    assert float(total) == 15.0 and "compile from its arguments' shapes failed" in caplog.text


def test_ahead_returns_once_the_program_is_lowered_and_compiles_it_beside_the_caller(tmp_path, monkeypatch):
    """The caller traces its own programs (`init`'s, the warm-up's) only after the loop is traced
    and lowered alone, holding the GIL; XLA's compile of it, which does not, goes on beside them."""
    import concurrent.futures
    import threading

    from jaxrl_fast.engine.program_store import placed_shapes

    traced, compile_may_end = [], threading.Event()
    real_compile = program_store._compile

    def held_compile(lowered, salt=None):
        assert compile_may_end.wait(timeout=60)
        return real_compile(lowered, salt)

    monkeypatch.setattr(program_store, "_compile", held_compile)
    constant = float(uuid.uuid4().int % 2**40) / 2**20

    def step(state, n):
        traced.append(threading.current_thread().name)
        return {"x": state["x"] * 2.0 + constant + n}, state["x"].sum()

    state, n = args()
    lazy = ProgramStore(tmp_path, "identity").lazy("loop", jax.jit(step, donate_argnums=0))
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ahead") as executor:
        lazy.ahead(executor, placed_shapes(jax.eval_shape(lambda: state), jax.devices()[0]),
                   jax.ShapeDtypeStruct((), jnp.float32))
        try:
            assert len(traced) == 1 and traced[0].startswith("ahead")  # lowered on the executor before ahead returned
            assert not lazy.pending.done()  # and still compiling
        finally:
            compile_may_end.set()
        out, total = lazy(state, n)
    np.testing.assert_allclose(np.asarray(out["x"]), np.arange(6.0).reshape(2, 3) * 2 + constant + 1, rtol=1e-6)
    assert float(total) == 15.0 and len(traced) == 1
