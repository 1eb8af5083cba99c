"""Running a suite and reporting it: which tasks a selection names (`select`), checking them before
anything trains (`check_tasks`), one `--num-seeds` training process per task (`run_suite`), and
each task's figures (`task_result`: final return IQM with its bootstrap 95% interval, time and steps
to the threshold), its curve (`draw_curve`) and the markdown table (`report_markdown`) that
`python -m jaxrl_fast.benchmark` (jaxrl_fast/cli/benchmark.py) writes into its output directory.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from jaxrl_fast.files import written_whole
from jaxrl_fast.outputs.run_dir import METRICS_FILE, SUMMARY_FILE
from jaxrl_fast.suites.tasks import SUITES, Task
from jaxrl_fast.types import ConfigError

PROG = "python -m jaxrl_fast.benchmark"
EVALS_PER_RUN = 20  # evaluations a task's budget is cut into


class BenchmarkError(ConfigError):
    pass


def select(suite: str, algos: Sequence[str] | None, envs: Sequence[str] | None) -> list[Task]:
    """The suite's tasks, narrowed to `algos` and `envs`; names outside the suite are refused."""
    if suite not in SUITES:
        raise BenchmarkError(f"--suite: unknown suite {suite!r}; choose from {', '.join(SUITES)}")
    tasks = SUITES[suite]
    for flag, wanted, have in (("--algos", algos, {t.algo for t in tasks}), ("--envs", envs, {t.env for t in tasks})):
        unknown = sorted(set(wanted or ()) - have)
        if unknown:
            raise BenchmarkError(f"{flag}: {', '.join(unknown)} not in the {suite} suite ({', '.join(sorted(have))})")
    chosen = [t for t in tasks if (not algos or t.algo in algos) and (not envs or t.env in envs)]
    if not chosen:
        raise BenchmarkError(f"no task of the {suite} suite has one of {', '.join(algos or [])} on one of {', '.join(envs or [])}")
    return chosen


def shortest_run(task: Task) -> int:
    """Env steps an off-policy task's preset needs to learn at all (its warm-up, then one iteration
    of the sync schedule, which the suites run); 1 for the rest."""
    import dataclasses

    from jaxrl_fast.config.plan import iteration_steps
    from jaxrl_fast.config.run import OFF_POLICY
    from jaxrl_fast.run.api import preset_config

    if task.algo not in OFF_POLICY:
        return 1
    steps, warmup = iteration_steps(dataclasses.replace(preset_config(task.env, task.algo), schedule="sync"))
    return warmup + steps


def task_settings(task: Task, num_seeds: int, budget_scale: float, run_dir: Path) -> dict:
    """A task's settings over its preset: the published budget (scaled, never below what one
    learning iteration needs: an off-policy warm-up and one iteration), its seeds, its directory."""
    steps = max(1, round(task.budget * budget_scale), shortest_run(task))
    return {"num_seeds": num_seeds, "total_steps": steps, "eval_interval": max(1, steps // EVALS_PER_RUN),
            "run_dir": run_dir, "progress": "plain"}


def train_args(task: Task, num_seeds: int, budget_scale: float, run_dir: Path) -> list[str]:
    """The `python -m jaxrl_fast.train` flags of a task (`task_settings` as flags)."""
    settings = task_settings(task, num_seeds, budget_scale, run_dir)
    return ["--env", task.env, "--algo", task.algo, *[item for name, value in settings.items()
                                                      for item in (f"--{name.replace('_', '-')}", str(value))]]


def check_tasks(tasks: list[Task], num_seeds: int, budget_scale: float, out: Path) -> None:
    """Every task through the checks a run makes before it needs a device (validation, the env's
    spec, the run directory), before the first one trains."""
    from jaxrl_fast.config.overrides import with_overrides
    from jaxrl_fast.run.api import preset_config
    from jaxrl_fast.run.resolve import check_inputs

    for task in tasks:
        try:
            settings = task_settings(task, num_seeds, budget_scale, out / task.name)
            check_inputs(with_overrides(preset_config(task.env, task.algo), settings))
        except ConfigError as error:
            raise BenchmarkError(f"{task.name}: {error}") from None


def first_reach(evals: list[dict], threshold: float | None) -> dict | None:
    """The first evaluation line whose mean reaches `threshold`."""
    if threshold is None:
        return None
    return next((line for line in evals if line["eval_return_mean"] >= threshold), None)


def task_result(task: Task, run_dir: Path, wall_s: float, returncode: int) -> dict:
    """A task's figures from its run directory (the aggregate summary and each seed's evaluations)."""
    from jaxrl_fast.outputs.aggregate import aggregate
    from jaxrl_fast.outputs.metrics import read_metrics
    from jaxrl_fast.outputs.run_dir import seed_run_dirs

    result = {"task": task.name, "env": task.env, "algo": task.algo, "wall_s": wall_s, "returncode": returncode,
              "threshold": task.threshold, "reference": task.reference._asdict() if task.reference else None}
    summary_path = run_dir / SUMMARY_FILE
    if not summary_path.exists():
        return dict(result, error="the run wrote no summary.json")
    summary = json.loads(summary_path.read_text())
    evals = [[line for line in read_metrics(seed / METRICS_FILE) if "eval_return_mean" in line]
             for seed in seed_run_dirs(run_dir)]
    reached = [first_reach(lines, task.threshold) for lines in evals]
    curve = []  # at each evaluation step of any seed: the mean of every seed's latest evaluation, and its interval
    for step in sorted({line["step"] for lines in evals for line in lines}):
        latest = [[line["eval_return_mean"] for line in lines if line["step"] <= step][-1:] for lines in evals]
        if all(latest):  # the evaluator skips a request while it is busy: seeds are not evaluated at the same steps
            stats = aggregate([values[0] for values in latest])
            curve.append({"step": step, "mean": stats["mean"], "ci95": stats["mean_ci95"]})
    times = [line["wall_s"] for line in reached if line is not None]
    result.update({
        "num_seeds": summary["num_seeds"],
        "steps": summary["steps"],
        "final": summary["final_eval_return"],
        "train_s": summary["train_s"],
        "sps": summary["sps"],
        "reached": sum(line is not None for line in reached),
        "time_to_threshold_s": [line["wall_s"] if line else None for line in reached],
        "steps_to_threshold": [line["step"] if line else None for line in reached],
        "median_time_to_threshold_s": statistics.median(times) if len(times) == len(reached) else None,
        "curve": curve,
    })
    if "error" in summary:
        result["error"] = summary["error"]
    return result


def draw_curve(result: dict, path: Path) -> None:
    """The mean evaluation return over the seeds with its 95% interval, and the reference line."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 4), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    points = result.get("curve") or []
    steps = [p["step"] for p in points]
    ax.plot(steps, [p["mean"] for p in points], label=f"jaxrl_fast {result['algo']} (mean of {result.get('num_seeds', '?')} seeds)")
    ax.fill_between(steps, [p["ci95"][0] for p in points], [p["ci95"][1] for p in points], alpha=0.25, label="95% interval")
    reference = result.get("reference")
    if reference:
        ax.axhline(reference["value"], color="black", linestyle="--", linewidth=1, label=f"published: {reference['source_short']}")
    if result.get("threshold") is not None:
        ax.axhline(result["threshold"], color="grey", linestyle=":", linewidth=1, label="threshold")
    ax.set_xlabel("env steps")
    ax.set_ylabel("evaluation return")
    ax.set_title(f"{result['algo']} on {result['env']}")
    ax.legend(fontsize=7, loc="lower right")
    figure.tight_layout()
    with written_whole(path) as partial:
        figure.savefig(partial, format="png")


def fmt(value: float | None, digits: int | None = None) -> str:
    """A return as the tables print it: one decimal, three below 10 in size (MiniGrid scores 0-1)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if digits is None:
        digits = 3 if abs(value) < 10 else 1
    return f"{value:,.{digits}f}"


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} s"


FEW_SEEDS = 5  # below this, the IQM cuts nothing but ties (n = 4: the median) and the interval is the seeds' range


def report_markdown(results: list[dict], header: dict) -> str:
    lines = [f"# Benchmark: {header['suite']} suite", "",
             f"`{header['command']}`, {header['started']}, {header['machine']}; {header['num_seeds']} seeds per task, "
             f"budgets x {header['budget_scale']:g} of the published ones.", "",
             "| task | steps | final return IQM [95% CI] | mean | reached threshold | median time to it | wall-clock "
             "| published | source |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        ref = r.get("reference")
        final = r.get("final") or {}
        published = f"{fmt(ref['value'])}" + (f" ± {fmt(ref['std'])}" if ref and ref.get("std") is not None else "") + \
            (f" @ {ref['steps']:,d}" if ref and ref.get("steps") else "") if ref else "-"
        reached = f"{r.get('reached', 0)}/{r.get('num_seeds', '?')} (≥ {fmt(r['threshold'])})" if r["threshold"] is not None else "-"
        ci = final.get("iqm_ci95")
        lines.append(
            f"| {r['algo']} {r['env']} | {r.get('steps', 0):,d} | {fmt(final.get('iqm'))}"
            + (f" [{fmt(ci[0])}, {fmt(ci[1])}]" if ci else "")
            + f" | {fmt(final.get('mean'))} | {reached} | {seconds(r.get('median_time_to_threshold_s'))} | {seconds(r['wall_s'])} "
            f"| {published} | {ref['source'] if ref else '-'} |")
        if r.get("error"):
            lines.append(f"| ↳ error | {r['error']} | | | | | | | |")
    lines += ["", "Time to threshold: seconds from the task's process start to the first evaluation (10 episodes, "
              "acted as the task's preset evaluates) whose mean reaches it; the median is over the seeds, and only when every seed reached it."]
    if header["num_seeds"] < FEW_SEEDS:
        lines += ["", f"With {header['num_seeds']} seeds the IQM is " + ("the median" if header["num_seeds"] == 4 else
                  "the mean") + " of the seeds' returns, and the bootstrap interval is close to their range (it cannot "
                  f"leave it): read the bracket as the seeds' spread, not a confidence interval ({FEW_SEEDS}+ seeds for one)."]
    return "\n".join(lines) + "\n"


def run_suite(tasks: list[Task], num_seeds: int, budget_scale: float, out: Path, header: dict) -> list[dict]:
    results = []
    for task in tasks:
        run_dir = out / task.name
        begin = time.time()
        proc = subprocess.run([sys.executable, "-m", "jaxrl_fast.train", *train_args(task, num_seeds, budget_scale, run_dir)],
                              stdout=subprocess.DEVNULL, stderr=None)
        result = task_result(task, run_dir, time.time() - begin, proc.returncode)
        draw_curve(result, out / f"{task.name}.png")
        results.append(result)
        with written_whole(out / "results.json") as partial:  # after every task
            partial.write_text(json.dumps(dict(header, results=results), indent=2) + "\n")
        with written_whole(out / "report.md") as partial:
            partial.write_text(report_markdown(results, header))
        reached = (f"{result.get('reached', 0)}/{num_seeds} seeds reached the threshold" if task.threshold is not None
                   else "no threshold")
        print(f"{task.name}: final IQM {fmt((result.get('final') or {}).get('iqm'))}, {reached}, {result['wall_s']:.0f} s",
              flush=True)
    return results


def machine_text() -> str:
    import platform

    from jaxrl_fast.engine.placement import describe_devices

    return f"{platform.machine()}, {os.cpu_count()} cores, devices {', '.join(describe_devices())}"

