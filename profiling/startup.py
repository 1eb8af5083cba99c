"""Where a training run's start-up goes, from the process's creation to the target return.

    python profiling/startup.py                                  # PPO CartPole-v1 to 475, the peers' protocol
    python profiling/startup.py --cache cold --out startup.json  # an empty compilation cache
    python profiling/startup.py --cache warm                     # a cache filled by one run before
    python profiling/startup.py -- --algo sac --env Pendulum-v1 --target-return -200 --eval-interval 1000

Runs one training process (this script in child mode under `python -X importtime`) and prints,
as seconds since the process was created (`jaxrl_fast.outputs.metrics.PROCESS_START`, what psutil's
`create_time` gives): the interpreter's start, the imports by group (self time summed from
`-X importtime`, which adds its own overhead), each EnvPool pool built, each program compiled
(XLA compile seconds, from JAX's monitoring spans, and whether the persistent cache served it),
the first training call, the first evaluation and the time to the target.

`--cache`: `user` (default) the configured cache as is; `cold` an empty temporary cache;
`warm` a temporary cache that one identical run filled first; `off` `--no-compile-cache`.
Train arguments after `--` replace the default PPO CartPole ones (`--run-dir` and `--progress`
are added when missing).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

PPO_CARTPOLE = ["--algo", "ppo", "--env", "CartPole-v1", "--target-return", "475", "--eval-interval", "5000",
                "--eval-episodes", "10"]
CACHE_DIR_ENV = "JAXRL_FAST_COMPILE_CACHE_DIR"
IMPORT_GROUPS = {  # top-level package -> group; anything else is "other"
    "jax": "jax", "jaxlib": "jax", "ml_dtypes": "jax", "opt_einsum": "jax", "scipy": "jax",
    "flax": "flax/optax/chex", "optax": "flax/optax/chex", "chex": "flax/optax/chex",
    "envpool": "envpool", "gymnasium": "envpool", "jaxrl_fast": "jaxrl_fast", "orbax": "orbax",
    "tensorboardX": "tensorboardX", "google": "tensorboardX", "matplotlib": "matplotlib", "PIL": "matplotlib",
    "tyro": "tyro", "rich": "rich", "numpy": "numpy",
}
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
TRACE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration")


# --------------------------------------------------------------------------------------------
# The child: the training run, instrumented.


def instrument(start: float) -> dict:
    """Listen to JAX's compile spans and cache hits, and time every EnvPool pool built."""
    import threading

    from jax import monitoring

    import jaxrl_fast.env.envpool as env

    record: dict = {"compiles": [], "trace_lower_s": 0.0, "pools": []}
    local = threading.local()

    def on_event(name: str, **_: object) -> None:
        if name == "/jax/compilation_cache/cache_hits":
            local.hit = True

    def on_span(name: str, begin: float, end: float, **kw: object) -> None:
        if name == COMPILE_EVENT:
            record["compiles"].append({"program": str(kw.get("fun_name")), "start": begin - start,
                                       "seconds": end - begin, "cache_hit": getattr(local, "hit", False),
                                       "thread": threading.current_thread().name})
            local.hit = False
        elif name in TRACE_EVENTS:
            record["trace_lower_s"] += end - begin

    monitoring.register_event_listener(on_event)
    monitoring.register_event_time_span_listener(on_span)
    make_pool = env.make_pool

    def timed_make_pool(env_id: str, num_envs: int, *args: object, **kw: object) -> object:
        begin = time.time()
        pool = make_pool(env_id, num_envs, *args, **kw)
        record["pools"].append({"num_envs": num_envs, "start": begin - start, "seconds": time.time() - begin})
        return pool

    env.make_pool = timed_make_pool  # modules that imported the name before this keep the original
    return record


def process_created() -> float:
    try:
        import psutil
    except ImportError:
        from jaxrl_fast.outputs.metrics import process_start_time

        return process_start_time()
    return psutil.Process(os.getpid()).create_time()


def child(result_path: Path, train_args: list[str]) -> None:
    created = process_created()
    interpreter_s = time.time() - created
    record = instrument(created)
    from jaxrl_fast.cli.train import main
    from jaxrl_fast.outputs.metrics import PROCESS_START  # metrics.jsonl's clock (process creation since #13)

    status = main(train_args)
    record.update(interpreter_s=interpreter_s, status=status, main_returned_s=time.time() - created,
                  metrics_clock_offset_s=PROCESS_START - created)
    result_path.write_text(json.dumps(record))


# --------------------------------------------------------------------------------------------
# The parent: run the child, read what it and the run directory recorded.


def import_groups(importtime: str) -> dict[str, float]:
    """Self seconds of every import, summed by group (`-X importtime` lines)."""
    groups: dict[str, float] = defaultdict(float)
    for match in re.finditer(r"^import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)$", importtime, re.M):
        top = match.group(2).split(".")[0]
        groups[IMPORT_GROUPS.get(top, "other")] += int(match.group(1)) / 1e6
    return dict(sorted(groups.items(), key=lambda kv: -kv[1]))


def run_phases(run_dir: Path, offset: float) -> dict:
    """First training line, first evaluation and the summary's times, in seconds since process
    creation (`offset`: when metrics.jsonl's clock started, after the process's creation)."""
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    summary = json.loads((run_dir / "summary.json").read_text())
    first_train = next((line for line in lines if "sps" in line), None)
    first_eval = next((line for line in lines if "eval_return_mean" in line), None)
    shift = lambda value: None if value is None else value + offset  # noqa: E731
    return {
        "first_training_call_done_s": shift(first_train and first_train["wall_s"]),
        "first_evaluation_done_s": shift(first_eval and first_eval["wall_s"]),
        "first_evaluation_return": first_eval and first_eval["eval_return_mean"],
        "time_to_target_s": shift(summary.get("time_to_target_s")),
        "target_step": summary.get("target_step"),
        "wall_s": shift(summary["wall_s"]),
        "compile_s (first call)": summary["compile_s"],
        "train_s": summary["train_s"],
    }


def with_run_args(train_args: list[str], run_dir: Path) -> list[str]:
    extra = [] if "--run-dir" in train_args else ["--run-dir", str(run_dir)]
    return train_args + extra + ([] if "--progress" in train_args else ["--progress", "off"])


def run_child(train_args: list[str], work: Path, env: dict[str, str]) -> dict:
    """One instrumented training process; its record, import groups and run phases."""
    run_dir, result = work / f"run-{time.time_ns()}", work / f"child-{time.time_ns()}.json"
    args = with_run_args(train_args, run_dir)
    command = [sys.executable, "-X", "importtime", __file__, "--child", str(result), "--", *args]
    begin = time.time()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0 or not result.exists():
        sys.exit(f"the training process failed ({done.returncode}):\n{done.stderr[-4000:]}")
    record = json.loads(result.read_text())
    record["process_s (Popen to exit)"] = time.time() - begin
    record["imports_s"] = import_groups(done.stderr)
    record["phases"] = run_phases(Path(args[args.index("--run-dir") + 1]), record["metrics_clock_offset_s"])
    record["train_args"] = args
    return record


def print_report(record: dict, cache: str) -> None:
    out = sys.stdout.write
    out(f"train args: {' '.join(record['train_args'])}   (compilation cache: {cache})\n")
    out(f"{'interpreter start':<34}{record['interpreter_s']:8.2f} s\n")
    imports = record["imports_s"]
    out(f"{'imports (self time, -X importtime)':<34}{sum(imports.values()):8.2f} s  "
        + ", ".join(f"{k} {v:.2f}" for k, v in imports.items() if v >= 0.01) + "\n")
    for pool in record["pools"]:
        out(f"{'EnvPool pool of ' + str(pool['num_envs']):<34}{pool['seconds']:8.2f} s  at {pool['start']:.2f} s\n")
    compiles = record["compiles"]
    hits = sum(c["cache_hit"] for c in compiles)
    out(f"{'XLA compilation, summed':<34}{sum(c['seconds'] for c in compiles):8.2f} s  {len(compiles)} programs, "
        f"{hits} from the cache; tracing and lowering {record['trace_lower_s']:.2f} s\n")
    for c in sorted(compiles, key=lambda c: -c["seconds"])[:12]:
        out(f"    {c['program'][:40]:<42}{c['seconds']:6.2f} s  at {c['start']:5.2f} s"
            f"{'  (cache)' if c['cache_hit'] else ''}  [{c['thread']}]\n")
    for key, value in record["phases"].items():
        if isinstance(value, float):
            out(f"{key:<34}{value:8.2f}{' s' if key.endswith('_s') or '_s ' in key else ''}\n")
    out(f"{'process, Popen to exit':<34}{record['process_s (Popen to exit)']:8.2f} s\n")


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    train_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", choices=("user", "cold", "warm", "off"), default="user")
    parser.add_argument("--out", type=Path, help="write the breakdown as JSON here")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(own), train_args or list(PPO_CARTPOLE)


def main(argv: list[str] | None = None) -> None:
    args, train_args = parse(sys.argv[1:] if argv is None else argv)
    if args.child is not None:
        return child(args.child, train_args)
    with tempfile.TemporaryDirectory(prefix="jaxrl-startup-") as tmp:
        work, env = Path(tmp), dict(os.environ)
        if args.cache in ("cold", "warm"):
            env[CACHE_DIR_ENV] = str(work / "xla")
        if args.cache == "off":
            train_args = train_args + ["--no-compile-cache"]
        if args.cache == "warm":
            run_child(train_args, work, env)  # fills the cache
        record = run_child(train_args, work, env)
    record["cache"] = args.cache
    print_report(record, args.cache)
    if args.out:
        args.out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
