import dataclasses
import json
import os

import pytest

from jaxrl_fast import calibrate as calibration
from jaxrl_fast.config import algo_config
from jaxrl_fast.presets import resolve_defaults
from jaxrl_fast.train import main, validate


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "jaxrl_fast" / "calibration"


def test_ppo_calibration_picks_valid_sizes_within_budget_and_caches_them(cache, tmp_path, capsys):
    config = resolve_defaults("CartPole-v1", "ppo", "classic_control")
    result = calibration.calibrate(config, budget_s=12.0)
    assert result.elapsed_s <= 12.0 * 1.25  # the budget is planned from measured costs; one step may overrun a little
    assert result.envpool and result.acting and result.learning and result.candidates
    choice = result.choice
    assert choice["num_envs"] in [c["num_envs"] for c in result.candidates]
    assert 1 <= choice["num_threads"] <= max(os.cpu_count(), 1)
    applied = result.apply(config)
    validate(applied)  # minibatches divide the new batch
    assert applied.ppo.num_steps == config.ppo.num_steps and applied.ppo.num_minibatches == config.ppo.num_minibatches
    assert len(list(cache.glob("*.json"))) == 1

    again = calibration.calibrate(config, budget_s=12.0)
    assert again.cached and again.choice == choice

    # `train --calibrate` reuses the cached measurement and records the choice in config.json
    run_dir = tmp_path / "run"
    code = main(["--calibrate", "--total-steps", "4096", "--eval-interval", "0", "--eval-episodes", "1",
                 "--run-dir", str(run_dir), "--progress", "off"])
    assert code == 0
    written = json.loads((run_dir / "config.json").read_text())
    assert written["calibration"]["choice"] == choice and written["num_envs"] == choice["num_envs"]
    assert "choice:" in capsys.readouterr().err


def test_off_policy_calibration_keeps_samples_consumed_per_env_step(cache):
    config = dataclasses.replace(resolve_defaults("Pendulum-v1", "sac", "classic_control"), schedule="async", num_envs=8)
    result = calibration.calibrate(config, budget_s=15.0)
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


def test_recalibrate_measures_again(cache):
    config = dataclasses.replace(resolve_defaults("CartPole-v1", "ppo", "classic_control"), num_envs=4)
    first = calibration.calibrate(config, budget_s=6.0)
    second = calibration.calibrate(config, budget_s=6.0, recalibrate=True)
    assert not first.cached and not second.cached
