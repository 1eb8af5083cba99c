import json
import os
import subprocess
import sys

import pytest

from jaxrl_fast.calibration import measure as calibration
from jaxrl_fast.calibration.choose import (
    best_threads,
    choose_off_policy,
    choose_on_policy,
    per_step_seconds,
    with_inference,
)
from jaxrl_fast.calibration.measure import Measurement
from jaxrl_fast.cli.train import main
from jaxrl_fast.config.checks import validate
from jaxrl_fast.config.run import algo_config
from support import make_config, resolved


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "jaxrl_fast" / "calibration"


@pytest.mark.slow
def test_ppo_calibration_picks_valid_sizes_within_budget_and_caches_them(cache, tmp_path, capsys):
    config = make_config("CartPole-v1", "ppo", schedule="sync")  # what `train` resolves auto to
    result = calibration.calibrate(config, resolved(config).placement, budget_s=12.0)
    assert result.elapsed_s <= 12.0 * 1.25  # the budget is planned from measured costs; one step may overrun a little
    assert result.envpool and result.acting and result.learning and result.candidates
    choice = result.choice
    assert choice["num_envs"] in [c["num_envs"] for c in result.candidates]
    assert 1 <= choice["num_threads"] <= max(os.cpu_count(), 1)
    applied = result.apply(config)
    validate(applied)  # minibatches divide the new batch
    assert applied.ppo.num_steps == config.ppo.num_steps and applied.ppo.num_minibatches == config.ppo.num_minibatches
    assert len(list(cache.glob("*.json"))) == 1

    again = calibration.calibrate(config, resolved(config).placement, budget_s=12.0)
    assert again.cached and again.choice == choice

    # `train --calibrate` reuses the cached measurement and records the choice in config.json
    run_dir = tmp_path / "run"
    code = main(["--calibrate", "--total-steps", "4096", "--eval-interval", "0", "--eval-episodes", "1",
                 "--run-dir", str(run_dir), "--progress", "off"])
    assert code == 0
    written = json.loads((run_dir / "config.json").read_text())
    assert written["calibration"]["choice"] == choice and written["train_config"]["num_envs"] == choice["num_envs"]
    assert "choice:" in capsys.readouterr().err


@pytest.mark.slow
def test_off_policy_calibration_keeps_samples_consumed_per_env_step(cache):
    config = make_config("Pendulum-v1", "sac", schedule="async", num_envs=8)
    result = calibration.calibrate(config, resolved(config).placement, budget_s=15.0)
    assert result.elapsed_s <= 15.0 * 1.25
    choice = result.choice
    hyper = algo_config(config)
    assert choice["batch_size"] in (hyper.batch_size, 2 * hyper.batch_size, 4 * hyper.batch_size)
    assert choice["utd_ratio"] * choice["batch_size"] == pytest.approx(hyper.utd_ratio * hyper.batch_size)
    applied = result.apply(config)
    validate(applied)
    assert applied.num_envs == choice["num_envs"] and applied.sac.batch_size == choice["batch_size"]
    assert any(row["size"] == f"batch {hyper.batch_size}" for row in result.learning)
    # the async actors' EnvPool async mode was measured at the preset's num_envs, and chosen only if it paid
    async_mode = [row for row in result.acting if row.get("env_batch", row["num_envs"]) < row["num_envs"]]
    assert {row["env_batch"] for row in async_mode if row["num_envs"] == 8} == {4, 2}
    assert choice["env_batch_size"] in {choice["num_envs"]} | {row["env_batch"] for row in async_mode
                                                                if row["num_envs"] == choice["num_envs"]}
    assert applied.env_batch_size == (choice["env_batch_size"] if choice["env_batch_size"] < choice["num_envs"] else 0)


@pytest.mark.slow
def test_recalibrate_measures_again(cache):
    config = make_config("CartPole-v1", "ppo", schedule="sync", num_envs=4)
    first = calibration.calibrate(config, resolved(config).placement, budget_s=6.0)
    second = calibration.calibrate(config, resolved(config).placement, budget_s=6.0, recalibrate=True)
    assert not first.cached and not second.cached


# -- choosing, on hand-written rows (no JAX runs) ------------------------------------------------
FAST = 1e-9  # seconds per update or per env step that never sets the pace


def test_choosing_imports_no_jax():
    code = "import sys, jaxrl_fast.calibration.choose; assert 'jax' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_on_policy_picks_the_fewest_envs_within_5_percent_of_the_best():
    acting = [dict(num_envs=4, num_threads=1, rollout_sps=1000.0), dict(num_envs=8, num_threads=2, rollout_sps=1920.0),
              dict(num_envs=16, num_threads=2, rollout_sps=2000.0)]
    learning = [dict(num_envs=n, update_s=FAST) for n in (4, 8, 16)]
    choice, reason, candidates = choose_on_policy(acting, learning, "concurrent", rollout_length=10, num_minibatches=2)
    assert choice == dict(num_envs=8, num_threads=2, env_batch_size=8, minibatch_size=40)
    assert [c["num_envs"] for c in candidates] == [4, 8, 16]
    assert "8 envs is the fewest within 5%" in reason
    # 5.5% slower than the best is not flat: the best one wins
    acting[1]["rollout_sps"] = 1890.0
    assert choose_on_policy(acting, learning, "concurrent", 10, 2)[0]["num_envs"] == 16


def test_sync_adds_acting_and_learning_while_concurrent_and_async_take_the_slower():
    acting = [dict(num_envs=8, num_threads=1, rollout_sps=80.0)]  # a rollout of 10 x 8 steps: 1 s
    learning = [dict(num_envs=8, update_s=0.5)]
    assert choose_on_policy(acting, learning, "sync", 10, 1)[2][0]["trained_sps"] == pytest.approx(80 / 1.5)
    assert choose_on_policy(acting, learning, "concurrent", 10, 1)[2][0]["trained_sps"] == pytest.approx(80 / 1.0)
    assert per_step_seconds(1.0, 0.5, "sync") == 1.5
    assert per_step_seconds(1.0, 0.5, "concurrent") == per_step_seconds(1.0, 0.5, "async") == 1.0
    # off-policy: seconds per env step, learning = utd_ratio x batch_size / size x update_s
    off_acting = [dict(num_envs=8, num_threads=1, rollout_sps=1000.0)]
    off_learning = [dict(batch_size=256, update_s=2e-3, device="cpu:0")]
    sync = choose_off_policy(off_acting, off_learning, "sync", batch_size=256, utd_ratio=0.5)[2][0]
    concurrent = choose_off_policy(off_acting, off_learning, "concurrent", batch_size=256, utd_ratio=0.5)[2][0]
    assert sync["trained_sps"] == pytest.approx(1 / (1e-3 + 1e-3))
    assert concurrent["trained_sps"] == pytest.approx(1 / 1e-3)


@pytest.mark.parametrize("speedup, taken", [(1.2, False), (1.3, True)])
def test_a_larger_update_batch_is_taken_only_when_25_percent_faster_with_utd_times_batch_kept(speedup, taken):
    acting = [dict(num_envs=8, num_threads=1, rollout_sps=1 / FAST)]
    # a 512 batch at half the updates: seconds per env step 0.5 x update_s, against 1 x 2e-3 at 256
    learning = [dict(batch_size=256, update_s=2e-3, device="cpu:0"),
                dict(batch_size=512, update_s=2 * 2e-3 / speedup, device="cpu:0"),
                dict(batch_size=512, update_s=FAST, device="cpu:1")]  # two learner devices: the slower sets the pace
    choice, reason, candidates = choose_off_policy(acting, learning, "concurrent", batch_size=256, utd_ratio=1.0)
    assert choice["batch_size"] == (512 if taken else 256)
    assert ("faster than the preset's 256" in reason) == taken
    for c in [choice, *candidates]:
        assert c["utd_ratio"] * c["batch_size"] == pytest.approx(256.0)
    assert {c["batch_size"]: round(c["trained_sps"]) for c in candidates} == {256: 500, 512: round(500 * speedup)}


@pytest.mark.parametrize("async_sps, env_batch", [(1050.0, 8), (1150.0, 2)])
def test_envpool_async_mode_is_taken_only_when_10_percent_faster(async_sps, env_batch):
    acting = [dict(num_envs=8, num_threads=2, rollout_sps=1000.0),
              dict(num_envs=8, num_threads=2, env_batch=4, rollout_sps=1020.0),
              dict(num_envs=8, num_threads=2, env_batch=2, rollout_sps=async_sps)]
    learning = [dict(batch_size=256, update_s=FAST, device="cpu:0")]
    choice, reason, _ = choose_off_policy(acting, learning, "async", batch_size=256, utd_ratio=1.0)
    assert choice["env_batch_size"] == env_batch and choice["num_threads"] == 2
    assert ("EnvPool's async mode) acts" in reason) == (env_batch < 8)


def test_thread_choice_and_inference_come_from_the_envpool_rows():
    envpool = [dict(num_envs=8, num_threads=1, batch_size=8, env_sps=4000.0),
               dict(num_envs=8, num_threads=2, batch_size=8, env_sps=8000.0),
               dict(num_envs=8, num_threads=2, batch_size=4, env_sps=9000.0)]  # async mode: not a thread choice
    assert best_threads(envpool) == {8: 2}
    acting = with_inference([dict(num_envs=8, num_threads=2, rollout_sps=4000.0),
                             dict(num_envs=8, num_threads=2, env_batch=4, rollout_sps=5000.0)], envpool)
    assert acting[0]["inference_us_per_step"] == pytest.approx((8 / 4000 - 8 / 8000) * 1e6)
    assert "inference_us_per_step" not in acting[1]


# -- the plan of measurements --------------------------------------------------------------------
def test_essential_measurements_are_taken_even_with_an_exhausted_budget():
    def fake(**args):
        return [dict(args)]

    plan = [Measurement("update", dict(batch_size=256), essential=True), Measurement("update", dict(batch_size=512)),
            Measurement("acting", dict(num_envs=8), essential=True), Measurement("acting", dict(num_envs=16))]
    rows, skipped = calibration.run_measurements(plan, {"update": fake, "acting": fake}, calibration.Budget(0.0))
    assert rows == {"update": [{"batch_size": 256}], "acting": [{"num_envs": 8}]}
    assert skipped == ["update batch_size=512 (budget)", "acting num_envs=16 (budget)"]
    # with time to spare every one runs, except one that may start only in a share of the budget already spent
    late = Measurement("acting", dict(num_envs=32), before=0.0)
    rows, skipped = calibration.run_measurements([*plan, late], {"update": fake, "acting": fake}, calibration.Budget(1e6))
    assert len(rows["update"]) == 2 and len(rows["acting"]) == 2 and skipped == ["acting num_envs=32 (budget)"]


def test_the_plans_state_the_presets_sizes_as_essential():
    ppo = make_config("CartPole-v1", "ppo", schedule="sync")
    plan = calibration.on_policy_plan(ppo, {4: 1, ppo.num_envs: 2, 16: 2})
    assert {(m.kind, m.args.get("num_envs")) for m in plan if m.essential} == {("acting", ppo.num_envs),
                                                                               ("update", ppo.num_envs)}
    assert plan[0].args["num_envs"] == ppo.num_envs  # measured first
    sac = make_config("Pendulum-v1", "sac", schedule="async", num_envs=8)
    plan = calibration.off_policy_plan_of_measurements(sac, {4: 1, 8: 1, 16: 2}, devices=["d0", "d1"])
    batch = algo_config(sac).batch_size
    essential = [(m.kind, m.args.get("num_envs", m.args.get("batch_size"))) for m in plan if m.essential]
    assert essential == [("update", batch), ("update", batch), ("acting", 8), ("async_mode", 8)]
    assert {m.args["batch_size"] for m in plan if m.kind == "update"} == {batch, 2 * batch, 4 * batch}
    assert all(not m.essential for m in calibration.envpool_plan(sac, [4, 16]))
    assert {m.args["num_envs"] for m in calibration.envpool_plan(sac, [4, 8, 16]) if m.essential} == {8}


def test_a_rollout_starts_only_when_its_update_fits_too():
    def fake(**args):
        return [dict(args)]

    budget = calibration.Budget(5.0)
    budget.cost.update(acting=2.0, update=4.0)  # each fits alone, not both
    plan = [Measurement("acting", dict(num_envs=16), then=("update",)), Measurement("update", dict(num_envs=16))]
    rows, skipped = calibration.run_measurements(plan, {"acting": fake, "update": fake}, budget)
    assert rows == {"acting": [], "update": []} and len(skipped) == 2
