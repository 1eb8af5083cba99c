import dataclasses
import json
import os
import subprocess
import sys

import jax
import pytest

from jaxrl_fast.calibration import measure as calibration
from jaxrl_fast.calibration.choose import (
    choose_off_policy,
    choose_on_policy,
    choose_schedule,
    choose_threads,
    per_step_seconds,
    with_inference,
)
from jaxrl_fast.calibration.measure import Measurement
from jaxrl_fast.cli.train import main
from jaxrl_fast.config.checks import validate
from jaxrl_fast.config.plan import make_plan
from jaxrl_fast.engine.placement import Placement
from jaxrl_fast.env.envpool import make_pool
from support import make_config, resolved

LONG = 50_000_000  # env steps of a run long enough that calibration may spend its whole budget


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "jaxrl_fast" / "calibration"


def test_a_short_run_measures_envpool_once_and_keeps_the_presets_sizes(cache, tmp_path, capsys):
    config = make_config("CartPole-v1", "ppo", schedule="sync")  # the preset: 100,000 steps
    result = calibration.calibrate(config, resolved(config).placement, budget_s=30.0)
    assert result.bound_s > 0
    assert result.budget_s == pytest.approx(calibration.RUN_SHARE * result.bound_s) and result.budget_s < 30.0
    # EnvPool alone at the preset's num_envs (its thread counts too if the bound allows 0.4 s more),
    # no program: a rollout and an update cost seconds, this run's bound is about a second
    assert {row["num_envs"] for row in result.envpool} == {8} and not result.acting and not result.learning
    assert dataclasses.replace(result.apply(config), num_threads=0) == config  # threads alone may change
    assert "kept (the run is too short" in result.reason
    assert any(note.startswith("update num_envs=8") for note in result.skipped)

    # `train --calibrate` reuses the cached pass (the key holds the run's length and whether the pass may
    # choose the schedule: here it is named) and records it in config.json
    run_dir = tmp_path / "run"
    code = main(["--calibrate", "--schedule", "sync", "--total-steps", str(config.total_steps), "--eval-interval", "0",
                 "--eval-episodes", "1", "--run-dir", str(run_dir), "--progress", "off", "--target-return", "0"])
    assert code == 0
    written = json.loads((run_dir / "config.json").read_text())
    assert written["calibration"]["choice"] == result.choice and written["calibration"]["cached"]
    assert written["train_config"]["num_envs"] == config.num_envs
    assert "choice:" in capsys.readouterr().err


@pytest.mark.slow
def test_ppo_calibration_splits_the_presets_batch_and_keeps_it(cache):
    config = make_config("CartPole-v1", "ppo", schedule="sync", total_steps=LONG)
    result = calibration.calibrate(config, resolved(config).placement, budget_s=12.0)
    # No wall-clock bound here: how the budget stops measurements is tested with a fake clock
    # (test_measurements_run_while_the_budget_allows_them and below); a busy machine overran 2x once.
    batch = config.num_envs * config.ppo.num_steps
    # the preset's rollout first, then 16 x 16 if the budget allowed it (on a busy machine it may not)
    assert [(row["num_envs"], row["num_steps"]) for row in result.acting] in ([(8, 32)], [(8, 32), (16, 16)])
    assert [row["num_envs"] for row in result.learning] == [8]  # one update: every split has the same batch
    assert [c["num_envs"] for c in result.candidates] == [row["num_envs"] for row in result.acting]
    applied = result.apply(config)
    validate(applied)
    assert applied.num_envs * applied.ppo.num_steps == batch
    assert (applied.ppo.num_minibatches, applied.ppo.update_epochs) == (config.ppo.num_minibatches,
                                                                       config.ppo.update_epochs)
    assert 0 <= result.choice["num_threads"] <= max(os.cpu_count(), 1)
    assert len(list(cache.glob("*.json"))) == 1
    again = calibration.calibrate(config, resolved(config).placement, budget_s=12.0)
    assert again.cached and again.choice == result.choice


@pytest.mark.slow
def test_off_policy_calibration_keeps_envs_update_batch_and_utd(cache):
    config = make_config("Pendulum-v1", "sac", schedule="async", num_envs=8, total_steps=LONG)
    result = calibration.calibrate(config, resolved(config).placement, budget_s=15.0)
    applied = result.apply(config)
    validate(applied)
    assert applied.num_envs == 8 and applied.sac == config.sac
    # the async actors' EnvPool async mode was measured at the preset's num_envs, and chosen only if it paid
    async_mode = [row for row in result.acting if row.get("env_batch", row["num_envs"]) < row["num_envs"]]
    assert {row["env_batch"] for row in async_mode} == {4, 2}
    assert result.choice["env_batch_size"] in {8, 4, 2}
    assert applied.env_batch_size == (result.choice["env_batch_size"] if result.choice["env_batch_size"] < 8 else 0)


@pytest.mark.slow
def test_under_auto_a_long_on_policy_run_times_acting_beside_learning_and_the_run_takes_the_choice(cache, tmp_path):
    """`--schedule auto` with `--calibrate`: the pass times the preset's rollout and update dispatched
    together on the devices `concurrent` would take, chooses sync or concurrent by the rule, and the
    resolved run takes that schedule, its placement and calibration's reason. A named schedule is
    never changed, and its pass is cached apart."""
    from jaxrl_fast.run.resolve import check_inputs, on_devices, place

    auto = make_config("CartPole-v1", "ppo", total_steps=LONG, calibrate=True, calibration_budget_s=16.0,
                       eval_interval=0)
    inputs = check_inputs(auto, run_dir=False)
    assert inputs.config.schedule == "sync" and inputs.schedule_reason  # auto's rule, before calibration
    run = on_devices(inputs, run_dir=False)
    result = run.calibration
    assert [(r["num_envs"], r["num_steps"]) for r in result.overlap] == [(8, 32)]
    chosen, why, _ = choose_schedule(result.acting, result.learning, result.overlap, preset_envs=8)
    assert result.choice["schedule"] == run.config.schedule == chosen
    assert run.schedule_reason == f"calibration: {why}" == f"calibration: {result.schedule_reason}"
    sync = dataclasses.replace(inputs.config, schedule="sync")
    assert run.placement == place(dataclasses.replace(sync, schedule=chosen))

    again = calibration.calibrate(sync, place(sync), budget_s=16.0)  # --schedule sync, named
    assert not again.cached and again.overlap == [] and "schedule" not in again.choice
    assert len(list(cache.glob("*.json"))) == 2


@pytest.mark.slow
def test_a_run_whose_calibration_takes_concurrent_runs_concurrent_on_its_devices(cache, monkeypatch):
    """On two cores acting beside learning does not pay, so the rule's margin is set to 0 here: the
    resolved run then takes `concurrent`, its placement (the learner on the second CPU device) and
    its plan (one warm iteration), and a second resolution takes the same from the cached pass."""
    from jaxrl_fast.calibration import choose
    from jaxrl_fast.run.resolve import check_inputs, on_devices, place

    monkeypatch.setattr(choose, "SCHEDULE_MARGIN", 0.0)
    auto = make_config("CartPole-v1", "ppo", total_steps=LONG, calibrate=True, calibration_budget_s=16.0,
                       eval_interval=0)
    for cached in (False, True):
        inputs = check_inputs(auto, run_dir=False)
        run = on_devices(inputs, run_dir=False)
        assert run.calibration.cached == cached and run.config.schedule == "concurrent"
        assert run.placement == place(dataclasses.replace(inputs.config, schedule="concurrent"))
        assert run.placement.learner != run.placement.acting and run.plan.warm_iterations == 1
        assert run.schedule_reason.startswith("calibration: concurrent: acting beside learning iterated")


@pytest.mark.slow
def test_a_named_concurrent_schedule_is_calibrated_as_it_is(cache):
    """No overlap is measured (the schedule is not calibration's to choose); its splits are predicted
    under concurrent from the rollouts and the update alone."""
    config = make_config("CartPole-v1", "ppo", schedule="concurrent", total_steps=LONG)
    result = calibration.calibrate(config, resolved(dataclasses.replace(config, calibrate=False)).placement,
                                   budget_s=12.0)
    assert result.overlap == [] and "schedule" not in result.choice and result.schedule_reason is None
    assert result.apply(config).schedule == "concurrent"


def test_only_an_on_policy_run_whose_schedule_auto_chose_may_have_it_chosen_by_calibration():
    from jaxrl_fast.run.resolve import concurrent_placement

    ppo, sac = make_config("CartPole-v1", "ppo", schedule="sync"), make_config("Pendulum-v1", "sac", schedule="sync")
    assert concurrent_placement(ppo, "sync: one fused program") is not None
    assert concurrent_placement(ppo, None) is None  # --schedule sync, named
    assert concurrent_placement(sac, "sync: one fused program") is None  # off-policy keeps auto's rule
    # a --profile window of all 16 calls: concurrent's warm iteration leaves 15, so it is not a candidate
    window = dataclasses.replace(ppo, total_steps=4096, log_interval=256, eval_interval=0, profile=True,
                                 profile_start=0, profile_calls=16)
    assert make_plan(window, 1).calls == 16 and concurrent_placement(window, "sync") is None


def test_under_auto_a_short_run_keeps_autos_schedule_and_says_calibration_did_not_measure_it(cache, tmp_path):
    from jaxrl_fast.run.resolve import check_inputs, on_devices

    config = make_config("CartPole-v1", "ppo", calibrate=True, eval_interval=0)
    run = on_devices(check_inputs(config, run_dir=False), run_dir=False)
    assert run.config.schedule == "sync" and run.calibration.overlap == []
    assert run.schedule_reason.endswith("(calibration's budget left no time to measure acting beside learning)")


@pytest.mark.slow
def test_a_cached_choice_is_never_taken_by_a_run_that_bounds_or_changes_it_otherwise():
    sac = make_config("Pendulum-v1", "sac", schedule="async")
    key = calibration.cache_key(sac)
    assert key == calibration.cache_key(dataclasses.replace(sac, run_dir="elsewhere", seed=3))  # what it does not read
    for change in [dict(policy_lag=8, max_policy_lag=8), dict(num_actors=2), dict(env_batch_size=4), dict(num_threads=1),
                   dict(env_kwargs=("max_episode_steps=100",))]:
        assert calibration.cache_key(dataclasses.replace(sac, **change)) != key, change
    # a pass's thread count does not replace one the run was given
    chosen = calibration.Calibration.__new__(calibration.Calibration)
    chosen.choice = {"num_threads": 2, "num_envs": sac.num_envs, "env_batch_size": sac.num_envs}
    assert chosen.apply(dataclasses.replace(sac, num_threads=1)).num_threads == 1
    assert chosen.apply(sac).num_threads == 2


def test_recalibrate_measures_again(cache):
    config = make_config("CartPole-v1", "ppo", schedule="sync", num_envs=4)
    first = calibration.calibrate(config, resolved(config).placement, budget_s=6.0)
    second = calibration.calibrate(config, resolved(config).placement, budget_s=6.0, recalibrate=True)
    assert not first.cached and not second.cached


def test_the_calibrate_command_takes_trains_flags_measures_the_runs_envs_and_says_where_it_cached(
        cache, tmp_path, monkeypatch, capsys):
    """`python -m jaxrl_fast.calibrate` calibrates the run `train` would make of the same flags:
    every pool it measures is made with the run's --env-kwargs, at a given --num-threads (no other
    count is tried), and a cache it cannot write is said, not claimed."""
    from jaxrl_fast.cli.calibrate import main as calibrate_main

    pools = []

    def made(env_id, num_envs, num_threads, seed, batch_size=0, **options):  # the real pool, its arguments noted
        pools.append((num_envs, num_threads, options))
        return make_pool(env_id, num_envs, num_threads, seed, batch_size, **options)

    monkeypatch.setattr(calibration, "make_pool", made)
    flags = ["--env", "CartPole-v1", "--algo", "ppo", "--schedule", "sync", "--num-envs", "4", "--ppo.num-steps", "64",
             "--num-threads", "1", "--env-kwargs", "max_episode_steps=100", "--total-steps", "20000"]
    assert calibrate_main(flags) == 0
    out, err = capsys.readouterr()
    assert pools and all(p == (4, 1, {"max_episode_steps": 100}) for p in pools), pools
    assert "--num-threads 1 as given" in out  # the table and its reason
    (entry,) = cache.glob("*.json")
    assert out.splitlines()[-1] == f"cached in {entry}"
    saved = json.loads(entry.read_text())
    assert saved["choice"]["num_envs"] == 4 and saved["choice"]["num_threads"] == 0
    monkeypatch.setenv("XDG_CACHE_HOME", str(entry))  # a file where the cache's folder would be: unwritable
    assert calibrate_main(flags) == 0
    out, err = capsys.readouterr()
    assert "could not cache" in out and out.splitlines()[-1].startswith("not cached")
    assert calibrate_main(["--resume", str(tmp_path)]) == 2
    assert "--resume" in capsys.readouterr().err


def test_each_split_is_timed_at_the_threads_a_run_of_its_size_takes(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    ppo = make_config("CartPole-v1", "ppo", schedule="sync", num_envs=2, ppo=dict(num_steps=128))  # batch 256
    timed = {m.args["num_envs"]: m.args["num_threads"] for m in calibration.on_policy_plan(ppo, 0) if m.kind == "acting"}
    assert timed == {2: 2, 4: 4, 8: 8, 16: 8}  # EnvPool's default at each size: one thread per env, up to the cores
    assert set(calibration.on_policy_plan(ppo, 1)[i].args["num_threads"] for i in (0, 2, 3, 4)) == {1}  # given/chosen
    given = dataclasses.replace(ppo, num_threads=1)
    assert calibration.threads_plan(given) == [] and calibration.threads_plan(ppo) != []
    # a given --env-batch-size leaves the async actors nothing to choose, and stays
    sac = make_config("Pendulum-v1", "sac", schedule="async", num_envs=8)
    assert calibration.off_policy_plan_of_measurements(dataclasses.replace(sac, env_batch_size=4), 0) == []
    choice, reason, _ = choose_off_policy([], [], "async", num_envs=8, cpus=2, given_env_batch=4)
    assert choice["env_batch_size"] == 4 and "env batch 4 as given" in reason


def test_a_split_at_envpools_default_threads_names_the_count_it_was_timed_at():
    learning = [dict(num_envs=1, update_s=FAST)]
    acting = [dict(num_envs=1, num_steps=256, num_threads=1, rollout_sps=1000.0),
              dict(num_envs=4, num_steps=64, num_threads=2, rollout_sps=2000.0)]
    envpool = [dict(num_envs=1, num_threads=1, batch_size=1, env_sps=5000.0)]
    choice, reason, _ = choose_on_policy(acting, learning, envpool, "sync", 256, 1, 2)
    assert choice == dict(num_envs=4, num_steps=64, num_threads=0)  # 0: the run takes EnvPool's default at 4 envs
    assert "EnvPool's default 1 threads (no other count measured), 2 at 4 envs" in reason
    choice, reason, _ = choose_on_policy(acting, learning, envpool, "sync", 256, 1, 2, given_threads=1)
    assert choice["num_threads"] == 0 and "--num-threads 1 as given" in reason and "at 4 envs" not in reason

# -- choosing, on hand-written rows (no JAX runs) ------------------------------------------------
FAST = 1e-9  # seconds per update or per env step that never sets the pace


def test_choosing_imports_no_jax():
    code = "import sys, jaxrl_fast.calibration.choose; assert 'jax' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


def rollouts(*sps_by_envs, batch=256):
    return [dict(num_envs=n, num_steps=batch // n, num_threads=2, rollout_sps=sps) for n, sps in sps_by_envs]


def test_on_policy_splits_the_batch_only_when_10_percent_faster_and_then_nearest_the_preset():
    learning = [dict(num_envs=8, update_s=FAST)]
    # 16 envs 1.08x the preset: kept
    choice, reason, candidates = choose_on_policy(rollouts((8, 1000.0), (16, 1080.0)), learning, [], "sync", 256, 8, 2)
    assert choice == dict(num_envs=8, num_steps=32, num_threads=0)  # 0: EnvPool's default (no envpool rows here)
    assert "the preset's 8 envs x 32 steps kept" in reason and "batch 256, minibatch count and epochs kept" in reason
    assert [(c["num_envs"], c["num_steps"]) for c in candidates] == [(8, 32), (16, 16)]
    # 32 envs the fastest, 16 within 5% of it: 16, the nearer the preset's split
    acting = rollouts((8, 1000.0), (16, 1200.0), (32, 1250.0))
    choice, reason, _ = choose_on_policy(acting, learning, [], "sync", 256, 8, 2)
    assert choice == dict(num_envs=16, num_steps=16, num_threads=0)
    assert "16 envs x 16 steps predicted 1.20x the preset's 8 x 32" in reason
    acting[1]["rollout_sps"] = 1150.0  # 8% slower than 32 envs: not flat, the fastest wins
    assert choose_on_policy(acting, learning, [], "sync", 256, 8, 2)[0]["num_envs"] == 32


def test_on_policy_keeps_the_preset_when_its_rollout_or_update_went_unmeasured():
    envpool = [dict(num_envs=8, num_threads=2, batch_size=8, env_sps=1e5)]
    choice, reason, candidates = choose_on_policy([], [], envpool, "sync", 256, 8, 2)
    assert choice == dict(num_envs=8, num_steps=32, num_threads=0) and candidates == []
    assert "the run is too short" in reason
    choice, _, _ = choose_on_policy(rollouts((8, 1000.0), (16, 5000.0)), [], envpool, "sync", 256, 8, 2)
    assert choice["num_envs"] == 8


def test_sync_adds_acting_and_learning_while_concurrent_and_async_take_the_slower():
    acting = rollouts((8, 256.0))  # a rollout of 32 x 8 steps: 1 s
    learning = [dict(num_envs=8, update_s=0.5)]
    assert choose_on_policy(acting, learning, [], "sync", 256, 8, 2)[2][0]["trained_sps"] == pytest.approx(256 / 1.5)
    assert choose_on_policy(acting, learning, [], "concurrent", 256, 8, 2)[2][0]["trained_sps"] == pytest.approx(256)
    assert per_step_seconds(1.0, 0.5, "sync") == 1.5
    assert per_step_seconds(1.0, 0.5, "concurrent") == per_step_seconds(1.0, 0.5, "async") == 1.0


@pytest.mark.parametrize("together_s, schedule", [(1.35, "sync"), (1.25, "concurrent")])
def test_concurrent_is_chosen_only_when_acting_beside_learning_iterates_15_percent_faster(together_s, schedule):
    acting = rollouts((8, 256.0))  # the preset's rollout of 32 x 8 steps: 1 s alone
    learning, overlap = [dict(num_envs=8, update_s=0.5)], [dict(num_envs=8, num_steps=32, iteration_s=together_s)]
    chosen, reason, efficiency = choose_schedule(acting, learning, overlap, preset_envs=8)
    assert chosen == schedule and reason.startswith(schedule + ":")
    assert "rollout 1000.0 ms and update 500.0 ms alone" in reason and efficiency == pytest.approx(together_s)
    # the splits are then predicted under the chosen schedule, beside each other at the measured efficiency
    trained = choose_on_policy(acting, learning, [], chosen, 256, 8, 2, efficiency)[2][0]["trained_sps"]
    assert trained == pytest.approx(256 / (1.5 if chosen == "sync" else together_s))
    with pytest.raises(ValueError):
        choose_schedule(acting, learning, [], preset_envs=8)


@pytest.mark.parametrize("async_sps, env_batch", [(1050.0, 8), (1150.0, 2)])
def test_envpool_async_mode_is_taken_only_when_10_percent_faster(async_sps, env_batch):
    acting = [dict(num_envs=8, num_threads=2, rollout_sps=1000.0),
              dict(num_envs=8, num_threads=2, env_batch=4, rollout_sps=1020.0),
              dict(num_envs=8, num_threads=2, env_batch=2, rollout_sps=async_sps)]
    choice, reason, _ = choose_off_policy(acting, [], "async", num_envs=8, cpus=2)
    assert choice["env_batch_size"] == env_batch and choice["num_envs"] == 8
    assert ("EnvPool's async mode) acts" in reason) == (env_batch < 8)
    assert "num_envs, update batch and utd_ratio kept" in reason
    # the other schedules have no actors to give an env batch
    assert choose_off_policy(acting, [], "sync", num_envs=8, cpus=2)[0]["env_batch_size"] == 8


@pytest.mark.parametrize("one_thread_sps, threads", [(1.05e5, 2), (1.15e5, 1)])
def test_another_thread_count_is_taken_only_when_10_percent_faster_than_envpools_default(one_thread_sps, threads):
    envpool = [dict(num_envs=8, num_threads=2, batch_size=8, env_sps=1e5),
               dict(num_envs=8, num_threads=1, batch_size=8, env_sps=one_thread_sps),
               dict(num_envs=8, num_threads=2, batch_size=4, env_sps=9e5)]  # async mode: not a thread choice
    assert choose_threads(envpool, 8, cpus=2)[0] == (threads if threads != 2 else 0)  # 0: the run keeps its count
    assert choose_threads(envpool[:1], 8, cpus=2) == (0, "EnvPool's default 2 threads (no other count measured)")
    assert choose_threads([], 8, cpus=2)[0] == 0


def test_inference_is_the_rollout_less_envpool_alone_at_the_same_threads():
    envpool = [dict(num_envs=8, num_threads=1, batch_size=8, env_sps=4000.0),
               dict(num_envs=8, num_threads=2, batch_size=8, env_sps=8000.0)]
    acting = with_inference([dict(num_envs=8, num_threads=2, rollout_sps=4000.0),
                             dict(num_envs=8, num_threads=2, env_batch=4, rollout_sps=5000.0),
                             dict(num_envs=16, num_threads=2, rollout_sps=4000.0)], envpool)
    assert acting[0]["inference_us_per_step"] == pytest.approx((8 / 4000 - 8 / 8000) * 1e6)
    assert "inference_us_per_step" not in acting[1] and "inference_us_per_step" not in acting[2]


# -- the plan of measurements --------------------------------------------------------------------
def test_measurements_run_while_the_budget_allows_them():
    def fake(**args):
        return [dict(args)]

    plan = [Measurement("update", dict(batch_size=256)), Measurement("acting", dict(num_envs=8))]
    rows, skipped = calibration.run_measurements(plan, {"update": fake, "acting": fake}, calibration.Budget(0.0))
    assert rows == {"update": [], "acting": []}
    assert skipped == ["update batch_size=256 (budget)", "acting num_envs=8 (budget)"]
    rows, skipped = calibration.run_measurements(plan, {"update": fake, "acting": fake}, calibration.Budget(1e6))
    assert rows == {"update": [{"batch_size": 256}], "acting": [{"num_envs": 8}]} and skipped == []


def test_the_plans_measure_the_presets_sizes_first_and_keep_the_batch():
    ppo = make_config("CartPole-v1", "ppo", schedule="sync")  # 8 envs x 32 steps
    plan = calibration.on_policy_plan(ppo, threads=2)
    assert [(m.kind, m.args.get("num_envs"), m.args.get("num_steps")) for m in plan] == [
        ("acting", 8, 32), ("update", 8, None), ("acting", 16, 16)]  # 32 envs would roll out 8 < 16 steps
    pqn = make_config("CartPole-v1", "pqn", schedule="sync")  # 32 envs x 64 steps
    assert calibration.split_sizes(pqn) == [32, 64, 128]
    assert [m.args["num_envs"] for m in calibration.on_policy_plan(pqn, 2) if m.kind == "acting"] == [32, 64, 128]
    sac = make_config("Pendulum-v1", "sac", schedule="async", num_envs=8)
    assert [m.kind for m in calibration.off_policy_plan_of_measurements(sac, 1)] == ["acting", "async_mode"]
    assert calibration.off_policy_plan_of_measurements(make_config("Pendulum-v1", "sac", schedule="sync"), 1) == []
    assert [m.args["num_threads"] for m in calibration.threads_plan(ppo)] == [1, 2]
    # under auto: the overlap after the preset's update, optional; the update alone on concurrent's
    # learner first where that is another device
    cpu0, cpu1 = jax.devices("cpu")[:2]
    one = calibration.on_policy_plan(ppo, 2, Placement("single", cpu0, (cpu0,), (cpu0,), cpu0, cpu0), cpu0)
    assert [(m.kind, m.optional) for m in one] == [("acting", False), ("update", False), ("overlap", True),
                                                  ("acting", False)]
    two = calibration.on_policy_plan(ppo, 2, Placement("single", cpu0, (cpu0,), (cpu0,), cpu1, cpu0), cpu0)
    assert [m.kind for m in two] == ["acting", "update", "update", "overlap", "acting"]
    assert two[2].args["device"] == cpu1 and two[2].then == ("overlap",) and two[3].args["learner"] == cpu1


def test_an_optional_measurement_that_does_not_fit_is_left_out_and_the_plan_goes_on():
    def fake(**args):
        return [dict(args)]

    budget = calibration.Budget(2.5)
    budget.cost.update(acting=2.0, update=1.0)  # an overlap is expected to cost both: 3 s
    plan = [Measurement("overlap", dict(num_envs=8), optional=True), Measurement("acting", dict(num_envs=16))]
    rows, skipped = calibration.run_measurements(plan, {"acting": fake, "update": fake, "overlap": fake}, budget)
    assert rows == {"acting": [{"num_envs": 16}], "update": [], "overlap": []}
    assert skipped == ["overlap num_envs=8 (budget)"]


def test_a_rollout_starts_only_when_its_update_fits_too():
    def fake(**args):
        return [dict(args)]

    budget = calibration.Budget(5.0)
    budget.cost.update(acting=2.0, update=4.0)  # each fits alone, not both
    plan = [Measurement("acting", dict(num_envs=16), then=("update",)), Measurement("update", dict(num_envs=16))]
    rows, skipped = calibration.run_measurements(plan, {"acting": fake, "update": fake}, budget)
    assert rows == {"acting": [], "update": []} and len(skipped) == 2
    # and once it started, its update follows it even when the rollout cost more than expected
    def slow_acting(**args):
        budget.start -= 10.0  # ten seconds went by
        return [dict(args)]

    budget = calibration.Budget(7.0)
    budget.cost.update(acting=2.0, update=4.0)
    plan = [*plan, Measurement("acting", dict(num_envs=32))]
    rows, skipped = calibration.run_measurements(plan, {"acting": slow_acting, "update": fake}, budget)
    assert rows == {"acting": [{"num_envs": 16}], "update": [{"num_envs": 16}]}
    assert skipped == ["acting num_envs=32 (budget)"]
