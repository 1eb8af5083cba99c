"""`python -m jaxrl_fast.benchmark`: a tiny suite run writes its report with the references beside
our returns; bad input is refused before anything trains."""

import importlib.util
import json

import pytest

from jaxrl_fast.cli.benchmark import main
from jaxrl_fast.suites.report import check_tasks
from jaxrl_fast.suites.tasks import SUITES


def test_every_suite_task_is_a_run_the_trainer_accepts(tmp_path):
    """Each task's flags (env id, algorithm, budget, preset) pass the trainer's own validation."""
    for suite, tasks in SUITES.items():
        if suite == "minatar" and importlib.util.find_spec("gymnax") is None:
            continue  # the jax-envs extra: the 3.11 lane installs it
        check_tasks(tasks, num_seeds=4, budget_scale=1.0, out=tmp_path / suite)
        source = {"atari": "CleanRL", "procgen": "CleanRL", "dm_control": "TD-MPC2",
                  "minatar": "gymnax-blines"}.get(suite, "rl-baselines3-zoo")
        assert all(task.reference.source.startswith(source) for task in tasks)
    # a small budget scale still gives each off-policy task its warm-up and one iteration (TD3 Pendulum-v1:
    # 1,000 steps at 0.05, its warm-up alone; once refused, and with it the whole suite)
    check_tasks(SUITES["classic"], num_seeds=2, budget_scale=0.05, out=tmp_path / "small")
    assert not any(tmp_path.iterdir())  # nothing is written before a task trains
    # a task's name is its run directory's and its curve's file name: no `:` (gymnax:) nor `/`
    assert not [t.name for tasks in SUITES.values() for t in tasks if set(t.name) & set(":/\\")]


def test_returns_below_ten_keep_three_decimals_in_the_report():
    """MiniGrid's scores (0-1) and the zoo's 0.964 +- 0.006 stay readable; larger returns keep one decimal."""
    from jaxrl_fast.suites.report import fmt

    assert [fmt(0.964), fmt(0.006), fmt(-3.25), fmt(242.119), fmt(-1234.56), fmt(None), fmt(float("nan"))] == [
        "0.964", "0.006", "-3.250", "242.1", "-1,234.6", "-", "-"]


@pytest.mark.slow
def test_a_short_suite_run_writes_results_report_and_curves(tmp_path):
    out = tmp_path / "bench"
    assert main(["--suite", "classic", "--algos", "ppo", "--envs", "CartPole-v1", "--num-seeds", "2",
                 "--budget-scale", "0.05", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    task, = results["results"]
    assert task["env"] == "CartPole-v1" and task["algo"] == "ppo" and task["num_seeds"] == 2
    assert task["steps"] <= 5_000 and len(task["final"]["per_seed"]) == 2
    assert task["final"]["iqm_ci95"][0] <= task["final"]["iqm"] <= task["final"]["iqm_ci95"][1]
    assert task["curve"] and task["curve"][-1]["step"] == task["steps"]  # through the final evaluations
    report = (out / "report.md").read_text()
    assert "ppo CartPole-v1" in report and task["reference"]["source"] in report
    assert "With 2 seeds the IQM is the mean" in report  # and its bracket is their spread, not a confidence interval
    assert (out / f"{task['task']}.png").stat().st_size > 0
    assert (out / task["task"] / "seed_1" / "summary.json").exists()  # the task's run directory


@pytest.mark.parametrize("args, message", [
    (["--suite", "nope"], "--suite: unknown suite 'nope'"),
    (["--suite", "classic", "--envs", "HalfCheetah-v4"], "--envs: HalfCheetah-v4 not in the classic suite"),
    (["--suite", "classic", "--algos", "sac", "--envs", "CartPole-v1"], "no task of the classic suite"),
    (["--suite", "classic", "--budget-scale", "0"], "--budget-scale must be in (0, 1]"),
    (["--suite", "classic", "--num-seeds", "1"], "--num-seeds must be at least 2"),
    (["--suite", "atari", "--algos", "dqn"], "--algos: dqn not in the atari suite"),
])
def test_bad_input_is_refused_before_anything_trains(tmp_path, capsys, args, message):
    assert main([*args, "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
