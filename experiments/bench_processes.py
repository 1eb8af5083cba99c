"""One process against two at equal total envs, on this machine: training steps/s of the same run as
a plain single-device process, one process data-parallel over two XLA CPU devices, and two
processes of one device each joined by `jax.distributed` over loopback (`jaxrl_fast.launch`).

    python experiments/bench_processes.py --tasks ppo_cartpole,sac_pendulum --rounds 2

Steps/s is `summary.json`'s (environment steps over the seconds inside training calls: start-up,
compilation and evaluation are left out). Arms alternate within each round, so that a change in
the machine's load falls on all of them. Also measured: the time of one all-reduce between the
two processes (a jitted loop of 1,000 `pmean`s of 10 and 10,000 floats), the cost the
data-parallel program adds per optimizer step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TASKS = {  # the presets' sizes, a budget long enough that start-up is not what is timed
    "ppo_cartpole": ["--algo", "ppo", "--env", "CartPole-v1", "--total-steps", "102400", "--num-envs", "8"],
    "sac_pendulum": ["--algo", "sac", "--env", "Pendulum-v1", "--total-steps", "12000", "--num-envs", "2",
                     "--sac.learning-starts", "2000"],
}
ARMS = {
    "one_process": ([sys.executable, "-m", "jaxrl_fast.train"], "--xla_force_host_platform_device_count=1"),
    "one_process_two_devices": ([sys.executable, "-m", "jaxrl_fast.train", "--data-parallel"],
                                "--xla_force_host_platform_device_count=2"),
    "two_processes": ([sys.executable, "-m", "jaxrl_fast.launch", "--num-processes", "2", "--"], ""),
}


def timed(arm: str, task: str, run_dir: Path) -> dict:
    command, xla_flags = ARMS[arm]
    env = dict(os.environ, XLA_FLAGS=xla_flags, PYTHONWARNINGS="ignore")
    begin = time.perf_counter()
    subprocess.run([*command, *TASKS[task], "--eval-interval", "0", "--run-dir", str(run_dir), "--progress", "off"],
                   check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"sps": summary["sps"], "wall_s": time.perf_counter() - begin, "final": summary["final_eval_return_mean"]}


def allreduce_worker(process_id: int, port: int, size: int) -> None:
    """One of two processes timing 1,000 all-reduces of `size` floats; process 0 prints microseconds per one."""
    import jax

    jax.distributed.initialize(f"127.0.0.1:{port}", 2, process_id, cluster_detection_method="deactivate",
                               initialization_timeout=60)
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices()), ("d",))
    loop = jax.jit(jax.shard_map(lambda x: jax.lax.fori_loop(0, 1000, lambda i, v: jax.lax.pmean(v * 1.0001, "d"), x),
                                 mesh=mesh, in_specs=PartitionSpec("d"), out_specs=PartitionSpec("d"), check_vma=False))
    x = jax.make_array_from_process_local_data(NamedSharding(mesh, PartitionSpec("d")), np.ones((1, size), np.float32))
    loop(x).block_until_ready()
    begin = time.perf_counter()
    loop(x).block_until_ready()
    if process_id == 0:
        print((time.perf_counter() - begin) / 1000 * 1e6)


def allreduce_us(size: int) -> float:
    from jaxrl_fast.cli.launch import free_port

    port = free_port()
    env = dict(os.environ, XLA_FLAGS="", JAX_PLATFORMS="cpu")
    workers = [subprocess.Popen([sys.executable, __file__, "--allreduce-worker", str(i), str(port), str(size)],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for i in range(2)]
    outputs = [worker.communicate(timeout=300)[0] for worker in workers]
    return float(outputs[0].split()[-1])  # after gloo's own line


def main() -> None:
    if sys.argv[1:2] == ["--allreduce-worker"]:
        allreduce_worker(*map(int, sys.argv[2:5]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="ppo_cartpole,sac_pendulum")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("experiments/results/bench_processes.json"))
    args = parser.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    results = {}
    with tempfile.TemporaryDirectory() as runs:
        for task in args.tasks.split(","):
            samples: dict[str, list[dict]] = {arm: [] for arm in ARMS}
            for round_ in range(args.rounds):
                for arm in ARMS:
                    samples[arm].append(timed(arm, task, Path(runs) / f"{task}_{arm}_{round_}"))
            results[task] = {arm: {"sps_median": statistics.median(s["sps"] for s in runs_),
                                   "wall_s_median": statistics.median(s["wall_s"] for s in runs_), "runs": runs_}
                             for arm, runs_ in samples.items()}
            print(task, {arm: round(r["sps_median"]) for arm, r in results[task].items()}, flush=True)
    allreduce = {f"{size}_floats_us": statistics.median(allreduce_us(size) for _ in range(3)) for size in (10, 10_000)}
    print("all-reduce between two processes:", allreduce, flush=True)
    record = {"command": "python " + " ".join(sys.argv), "started": started, "cpu_count": os.cpu_count(),
              "load_average_end": os.getloadavg(), "results": results, "allreduce": allreduce}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
