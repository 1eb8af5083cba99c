"""DQN CartPole-v1's speed by network width: env steps/s of the fused `sync` loop (the preset: 8
envs, four updates of batch 64 every eight env steps) and milliseconds per gradient update alone
(the same updates scanned over the loop's filled buffer, no environment), one width after another
in one process, `--repeats` rounds of them (a round times 6,144 env steps, so the loop's rate is
noisy), kept with the machine, date and command in `--out`.

    python experiments/bench_dqn_widths.py                      # 256x256, 128x128, 64x64 (the preset)
    python experiments/bench_dqn_widths.py --widths 256 32 --repeats 1 --out /tmp/widths.json

DQN's time to 475 is mostly training (docs/results.md): this says how much of it the network's
width costs. What a width does to learning is `experiments/learning_margins.py --cases
dqn_cartpole --extra "--dqn.hidden-sizes W W"`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from offpolicy_loops import CALL, preset_loop
from record import write_record

RESULTS = Path(__file__).parent / "results"


def measure(width: int, calls: int, updates: int) -> dict:
    loop = preset_loop("CartPole-v1", "dqn", "classic_control", hidden_sizes=(width, width)).warm()
    sps = loop.steps_per_s(calls)
    update_ms = loop.seconds_per_update(updates) * 1e3
    loop.env.pool.close()
    return {"hidden_sizes": [width, width], "env_steps_per_s": round(sps), "update_ms": round(update_ms, 3),
            "updates_per_iteration": loop.plan.updates_per_iteration, "env_steps_per_iteration": loop.loop.steps_per_iteration}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[256, 128, 64])
    parser.add_argument("--calls", type=int, default=12, help=f"timed calls of {CALL} loop iterations")
    parser.add_argument("--updates", type=int, default=512, help="updates timed alone")
    parser.add_argument("--repeats", type=int, default=3, help="rounds over the widths")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_dqn_widths.json")
    args = parser.parse_args()
    if min(args.calls, args.updates, args.repeats, *args.widths) < 1:
        parser.error("--widths, --calls, --updates and --repeats must be positive")
    rows = []
    for round_ in range(args.repeats):
        for width in args.widths:
            rows.append({"round": round_, **measure(width, args.calls, args.updates)})
            print(json.dumps(rows[-1]), flush=True)
    write_record(args.out, {"rows": rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
