"""The persistent compilation cache: on by default, in the configured directory, hit by a second
process, off with --no-compile-cache, harmless when its directory cannot be written, and shared
safely by two runs at once. Cache hits are counted from JAX's monitoring events, never timed."""

import json
import os
import subprocess
import sys

import pytest

from jaxrl_fast.cli.train import parse_args
from jaxrl_fast.config.run import TrainConfig, run_dict
from jaxrl_fast.engine import compile_cache

# Trains through the CLI's main() and prints JAX's compilation-cache event counts as JSON, with the
# programs XLA compiled (those the cache did not serve) and those JAX lowered, from its compile spans.
DRIVER = """
import collections, json, sys, threading
from jax import monitoring
events, compiled, lowered, local = collections.Counter(), [], [], threading.local()
def on_event(name, **kw):
    events.update([name])
    if name == "/jax/compilation_cache/cache_hits":
        local.hit = True
def on_span(name, begin, end, **kw):
    if name == "/jax/core/compile/jaxpr_to_mlir_module_duration":
        lowered.append(str(kw.get("fun_name")))
    if name == "/jax/core/compile/backend_compile_duration":
        if not getattr(local, "hit", False):
            compiled.append(str(kw.get("fun_name")))
        local.hit = False
monitoring.register_event_listener(on_event)
monitoring.register_event_time_span_listener(on_span)
from jaxrl_fast.cli.train import main
status = main(sys.argv[1:])
print(json.dumps({"status": status, "hits": events["/jax/compilation_cache/cache_hits"],
                  "writes": events["/jax/compilation_cache/cache_misses"], "compiled": compiled, "lowered": lowered}))
"""
SHORT_RUN = ("--algo", "ppo", "--env", "CartPole-v1", "--total-steps", "1024", "--log-interval", "512",
             "--eval-interval", "0", "--eval-episodes", "2", "--progress", "off")


def start(run_dir, cache_dir, *extra):
    env = dict(os.environ, PYTHONWARNINGS="ignore", JAXRL_FAST_COMPILE_CACHE_DIR=str(cache_dir))
    return subprocess.Popen([sys.executable, "-c", DRIVER, *SHORT_RUN, "--run-dir", str(run_dir), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finish(proc):
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1]), err


def train(run_dir, cache_dir, *extra):
    return finish(start(run_dir, cache_dir, *extra))


def assert_loaded_by_a_second_run(tmp_path, cache, flags, programs):
    """A second run of `flags` on `cache` (the first ran in tmp_path/a) compiles nothing, lowers none
    of `programs`, and ends with the first run's final evaluation (deterministic)."""
    second, _ = train(tmp_path / "b", cache, *flags)
    assert second["hits"] > 0 and second["compiled"] == [], second["compiled"]
    assert not programs & set(second["lowered"]), second["lowered"]
    summaries = [json.loads((tmp_path / run / "summary.json").read_text()) for run in "ab"]
    assert summaries[0]["final_eval_return_mean"] is not None
    assert summaries[0]["final_eval_return_mean"] == summaries[1]["final_eval_return_mean"]


def entries(cache_dir):
    return sorted(p.name for p in cache_dir.rglob("*-cache"))


def test_the_cache_directory_comes_from_the_variable_else_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("JAXRL_FAST_COMPILE_CACHE_DIR", str(tmp_path / "mine"))
    assert compile_cache.cache_dir("0.10.2") == tmp_path / "mine" / "jax-0.10.2"
    monkeypatch.delenv("JAXRL_FAST_COMPILE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compile_cache.cache_dir("0.10.2") == tmp_path / "xdg" / "jaxrl_fast" / "xla" / "jax-0.10.2"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert compile_cache.cache_dir("1.0") == tmp_path / "home" / ".cache" / "jaxrl_fast" / "xla" / "jax-1.0"


def test_an_unwritable_directory_is_reported_not_raised(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert compile_cache.writable_dir(blocker / "xla") is not None
    assert compile_cache.writable_dir(tmp_path / "xla") is None


def test_resume_takes_the_cache_setting_from_its_own_command_line(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"train_config": run_dict(TrainConfig(run_dir=tmp_path))}))
    assert parse_args(["--resume", str(tmp_path)]).compile_cache
    assert not parse_args(["--resume", str(tmp_path), "--no-compile-cache"]).compile_cache


# One small program through `enable`'s cache; prints JAX's warnings and its cache hits as JSON.
SMALL_PROGRAM = """
import json, warnings
from jax import monitoring
hits = []
monitoring.register_event_listener(lambda name, **kw: hits.append(name) if name.endswith("cache_hits") else None)
from jaxrl_fast.engine import compile_cache
compile_cache.enable()
import jax, jax.numpy as jnp
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    jax.jit(lambda x: jnp.sin(x) * 3 + jnp.cos(x) ** 2)(jnp.ones(7)).block_until_ready()
print(json.dumps({"warnings": [str(w.message) for w in caught], "hits": len(hits)}))
"""


def test_an_entry_cut_short_is_rewritten_by_the_next_run_that_compiles_it(tmp_path):
    """JAX skips a write when the entry's file exists, so an entry cut short (a run killed while
    writing it) would be warned about and recompiled by every run after. The run that meets it
    replaces it; the run after loads every program."""
    env = dict(os.environ, JAXRL_FAST_COMPILE_CACHE_DIR=str(tmp_path))

    def run():
        out = subprocess.run([sys.executable, "-c", SMALL_PROGRAM], env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    assert run() == {"warnings": [], "hits": 0}
    written = {p: p.stat().st_size for p in tmp_path.rglob("*-cache")}
    assert written
    for path in written:
        os.truncate(path, 40)
    met = run()
    assert met["hits"] == 0 and len(met["warnings"]) >= 1, met
    assert all("persistent compilation cache" in w for w in met["warnings"]), met
    assert {p: p.stat().st_size > 40 for p in tmp_path.rglob("*-cache")} == dict.fromkeys(written, True)
    assert run() == {"warnings": [], "hits": len(written)}
    assert not list(tmp_path.rglob("*.partial"))  # each write landed through its rename


def test_a_partial_write_left_by_a_killed_run_is_swept_once_it_is_old(tmp_path):
    old, fresh = tmp_path / ".jit_f-1-cache.a.partial", tmp_path / ".jit_f-1-cache.b.partial"
    for path in (old, fresh):
        path.write_bytes(b"x")
    os.utime(old, (0, 0))  # a write no run is still making
    compile_cache.sweep_partials(tmp_path)
    assert not old.exists() and fresh.exists()  # a fresh one may be another run's, about to be renamed


SAC_RUN = ("--algo", "sac", "--env", "Pendulum-v1", "--total-steps", "600", "--sac.learning-starts", "256")
GYM_RUN = ("--env", "gym:CartPole-v1")  # Python envs, stepped through `ffi_forward`'s host target


@pytest.mark.slow
def test_a_loop_that_jax_cache_holds_and_the_store_lost_is_stored_again_then_loaded(tmp_path):
    """The store's entries gone while JAX's cache keeps the programs (as after an edit of jaxrl_fast
    or an upgrade, whose new keys miss): the next run takes the loop from JAX's cache, as before; the
    one after compiles it once more, under a key of JAX's cache of its own, and stores it; the next
    loads it whole. The same evaluation throughout."""
    import shutil

    cache = tmp_path / "xla"
    train(tmp_path / "a", cache)
    (programs,) = cache.glob("programs-jax-*")
    shutil.rmtree(programs)
    served, _ = train(tmp_path / "b", cache)
    assert "jit(run)" in served["lowered"] and served["compiled"] == [], served
    assert not list(programs.glob("sync-*.executable"))
    compiled, _ = train(tmp_path / "c", cache)
    assert "jit(run)" in compiled["compiled"], compiled
    assert sorted(p.name.split("-")[1] for p in programs.glob("sync-*.executable")) == ["init", "run"]
    loaded, _ = train(tmp_path / "d", cache)
    assert loaded["compiled"] == [] and "jit(run)" not in loaded["lowered"], loaded
    returns = [json.loads((tmp_path / run / "summary.json").read_text())["final_eval_return_mean"] for run in "abcd"]
    assert returns[0] is not None and len(set(returns)) == 1


@pytest.mark.slow
@pytest.mark.parametrize("extra", [(), SAC_RUN, GYM_RUN], ids=["ppo", "sac", "ppo-gymnasium"])
def test_on_by_default_written_to_the_configured_directory_and_hit_by_a_second_process(tmp_path, extra):
    cache = tmp_path / "xla"
    first, _ = train(tmp_path / "a", cache, *extra)
    assert first["writes"] > 0 and first["hits"] == 0
    assert "jit(run)" in first["compiled"]  # the training loop, EnvPool's (or the Python envs') steps inside it
    written = entries(cache)
    assert written and all(p.parent.name.startswith("jax-") for p in cache.rglob("*-cache"))  # one directory per JAX version
    loop = "offpolicy" if extra == SAC_RUN else "sync"
    assert sorted(p.name.split("-")[1] for p in cache.glob(f"programs-jax-*/{loop}-*.executable")) == ["init", "run"] + (
        ["warmup"] if extra == SAC_RUN else [])  # the fused loop's programs, stored (`engine.program_store`)
    # A target it never reaches and (PPO's 4 iterations; SAC's 344 end before 512) a checkpoint
    # midway: the host's alone (`HOST_ONLY_FIELDS`).
    second, _ = train(tmp_path / "b", cache, *extra, "--target-return", "1000000", "--checkpoint-interval", "512")
    # Every program, the loop that steps EnvPool (or Python's envs) too: its calls name a slot of
    # the process's forwarder (`env.ffi_forward`), not the pool's address (or a Python function). The loop's programs are loaded
    # whole, neither traced nor lowered.
    assert second["hits"] > 0 and second["compiled"] == [], second["compiled"]
    assert "jit(run)" in first["lowered"] and "jit(run)" not in second["lowered"], second["lowered"]
    summaries = [json.loads((tmp_path / run / "summary.json").read_text()) for run in "ab"]
    assert summaries[1]["final_eval_return_mean"] is not None
    assert summaries[0]["final_eval_return_mean"] == summaries[1]["final_eval_return_mean"]  # the same program, the same run


@pytest.mark.slow
def test_the_async_schedules_programs_are_stored_and_loaded_by_a_second_process(tmp_path):
    """SAC on a Gymnasium env takes `async` (`--schedule auto`): the learner's programs and the
    actor's are stored by the first run and loaded whole by the second, which compiles nothing."""
    cache, flags = tmp_path / "xla", ("--algo", "sac", "--env", "gym:Pendulum-v1", "--total-steps", "600",
                                      "--sac.learning-starts", "256")
    first, _ = train(tmp_path / "a", cache, *flags)
    assert json.loads((tmp_path / "a" / "config.json").read_text())["schedule"] == "async"
    assert sorted(p.name.rsplit("-", 1)[0] for p in cache.glob("programs-jax-*/async-*.executable")) == [
        "async-act-policy", "async-act-random", "async-actor-init", "async-add-block", "async-init", "async-learn"]
    assert "jit(_learn_step)" in first["compiled"]
    second, _ = train(tmp_path / "b", cache, *flags)
    assert second["hits"] > 0 and second["compiled"] == [], second["compiled"]
    assert not {"jit(_learn_step)", "jit(act_chunk)", "jit(add_block)", "jit(init)", "jit(actor_init)"} & set(second["lowered"]), second["lowered"]
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["final_eval_return_mean"] is not None


@pytest.mark.slow
def test_the_concurrent_schedules_programs_are_stored_and_loaded_by_a_second_process(tmp_path):
    """On-policy `concurrent` (with the learner on the second XLA CPU device of the tests'): the
    agent's and the env carry's init, the rollout and the update are stored by the first run and
    loaded whole by the second, which compiles nothing and ends where the first did."""
    cache, flags = tmp_path / "xla", ("--schedule", "concurrent")
    first, _ = train(tmp_path / "a", cache, *flags)
    assert json.loads((tmp_path / "a" / "config.json").read_text())["placement"]["learner"] == "cpu:1"
    assert sorted(p.name.rsplit("-", 1)[0] for p in cache.glob("programs-jax-*/concurrent-*.executable")) == [
        "concurrent-collect", "concurrent-env-init", "concurrent-init", "concurrent-update"]
    programs = {"jit(rollout)", "jit(update)", "jit(init)", "jit(env_init)"}
    assert programs <= set(first["compiled"]), first["compiled"]
    assert_loaded_by_a_second_run(tmp_path, cache, flags, programs)


@pytest.mark.slow
def test_the_host_driven_loops_programs_are_stored_and_loaded_by_a_second_process(tmp_path):
    """SAC with the actor and the critic on the tests' two XLA CPU devices (`--placement split`):
    the host dispatches `init`, acting, the buffer's writes and each role's update as programs. The
    first run stores them, the second loads them whole, compiles nothing and ends where the first did."""
    cache, flags = tmp_path / "xla", ("--algo", "sac", "--env", "Pendulum-v1", "--placement", "split",
                                      "--total-steps", "600", "--sac.learning-starts", "256")
    first, _ = train(tmp_path / "a", cache, *flags)
    assert json.loads((tmp_path / "a" / "config.json").read_text())["placement"]["critic"] == "cpu:1"
    assert sorted(p.name.rsplit("-", 1)[0] for p in cache.glob("programs-jax-*/host-*.executable")) == [
        "host-act-policy", "host-act-random", "host-actor", "host-add", "host-critic", "host-init"]
    programs = {"jit(init)", "jit(act_rows)", "jit(add_many)", "jit(critic_step)", "jit(actor_step)"}
    assert programs <= set(first["compiled"]), first["compiled"]
    assert_loaded_by_a_second_run(tmp_path, cache, flags, programs)


@pytest.mark.slow
def test_no_compile_cache_writes_nothing(tmp_path):
    result, _ = train(tmp_path / "run", tmp_path / "xla", "--no-compile-cache")
    assert result["writes"] == 0 and result["hits"] == 0
    assert not (tmp_path / "xla").exists()


@pytest.mark.slow
def test_an_unwritable_cache_directory_warns_and_trains(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result, err = train(tmp_path / "run", blocker / "xla")
    assert result["status"] == 0 and result["writes"] == 0 and result["hits"] == 0
    assert err.count("is not writable") == 1 and "--no-compile-cache" in err
    assert (tmp_path / "run" / "summary.json").exists()


@pytest.mark.slow
def test_two_runs_at_once_share_one_empty_cache(tmp_path):
    cache = tmp_path / "xla"
    procs = [start(tmp_path / f"run{i}", cache, "--seed", str(i)) for i in range(2)]
    for i, proc in enumerate(procs):
        result, err = finish(proc)
        assert result["status"] == 0 and "Traceback" not in err and "cache" not in err.lower(), err
        summary = json.loads((tmp_path / f"run{i}" / "summary.json").read_text())
        assert summary["steps"] == 1024 and summary["final_eval_return_mean"] > 0
    assert entries(cache)
