import threading
import time

import jax
import jax.numpy as jnp

from jaxrl_fast.engine.timing import PhaseClock, intersection_length, union


@jax.jit
def busy(x):
    return jax.lax.fori_loop(0, 200, lambda _, y: jnp.tanh(y @ y.T), x)


def watchers() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("phase-clock-")]


def test_watched_programs_are_timed_in_dispatch_order_without_double_counting(monkeypatch):
    monkeypatch.setattr(PhaseClock, "WATCHER_IDLE_S", 0.2)
    clock = PhaseClock()
    x = jnp.ones((64, 64)) / 64
    jax.block_until_ready(busy(x))  # compiled before the clock starts
    threads = threading.active_count()
    begin = time.perf_counter()
    for _ in range(5):  # queued back to back: each starts when the one before ends
        dispatched = time.perf_counter()
        x = busy(x)
        clock.watch("update", dispatched, x)
    assert threading.active_count() - threads <= 1  # one thread waits for them all, in order
    summary = clock.summary()  # waits for every watch made so far
    wall = time.perf_counter() - begin
    assert 0 < summary["timing/update_s"] <= wall
    assert summary["timing/overlap_s"] == 0.0  # no env phase
    assert clock.summary()["timing/overlap_s"] == 0.0 and "timing/update_s" not in clock.summary()

    time.sleep(0.6)  # idle: the phase's watcher thread ends, and the next watch starts another
    assert "phase-clock-update" not in watchers()
    clock.watch("update", time.perf_counter(), busy(x))
    assert clock.summary()["timing/update_s"] > 0


def test_union_and_intersection():
    a = union([(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)])
    assert a == [(0.0, 2.0), (3.0, 4.0)]
    assert intersection_length(a, [(1.5, 3.5)]) == 1.0
