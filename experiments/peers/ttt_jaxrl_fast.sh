#!/usr/bin/env bash
# Time-to-threshold of jaxrl_fast under the peers' protocol (experiments/peers/README.md): one fresh process per seed, clock from
# process start (summary.json time_to_target_s), deterministic eval of 10 episodes every N env steps.
# Usage: PY=<venv python with jaxrl_fast installed> bash experiments/peers/ttt_jaxrl_fast.sh [SEEDS] [OUTDIR]
# Prints one JSON line per task: {"task", "seeds", "ttt_s": [...], "median_s", "steps": [...]} (steps: the
# evaluation's that reached the threshold, summary.json's target_step). Each seed runs cold: a compilation
# cache and XDG cache of its own, empty (ttt_side_by_side.py's cold arm).
set -u
PY=${PY:-python}
SEEDS=${1:-0,1,2,3}
OUT=${2:-$(mktemp -d)}
mkdir -p "$OUT"
task() {  # name, then train args
  local name=$1; shift
  local ttts=() steps=()
  for s in ${SEEDS//,/ }; do
    local run="$OUT/$name-$s"; rm -rf "$run" "$run.cache"; mkdir -p "$run.cache"
    ( cd "$OUT" && JAXRL_FAST_COMPILE_CACHE_DIR="$run.cache" XDG_CACHE_HOME="$run.cache/xdg" \
      "$PY" -m jaxrl_fast.train --run-dir "$run" --seed "$s" --progress off "$@" ) > "$run.log" 2>&1
    ttts+=("$("$PY" -c "import json;d=json.load(open('$run/summary.json'));print(d.get('time_to_target_s','null'))" 2>/dev/null || echo null)")
    steps+=("$("$PY" -c "import json;d=json.load(open('$run/summary.json'));print(d.get('target_step','null'))" 2>/dev/null || echo null)")
  done
  "$PY" - "$name" "$SEEDS" "${ttts[*]}" "${steps[*]}" <<'PYEOF'
import json, statistics, sys
name, seeds, t, s = sys.argv[1:5]
t = [None if x == "null" else float(x) for x in t.split()]
ok = [x for x in t if x is not None]
print(json.dumps({"task": name, "seeds": seeds, "ttt_s": t, "steps": s.split(),
                  "median_s": statistics.median(ok) if len(ok) == len(t) else None,
                  "reached": f"{len(ok)}/{len(t)}"}))
PYEOF
}
task ppo_cartpole --algo ppo --env CartPole-v1 --target-return 475 --eval-interval 5000 --eval-episodes 10
task sac_pendulum --algo sac --env Pendulum-v1 --target-return -200 --eval-interval 1000 --eval-episodes 10
task dqn_cartpole --algo dqn --env CartPole-v1 --target-return 475 --eval-interval 2500 --eval-episodes 10
task pqn_cartpole --algo pqn --env CartPole-v1 --target-return 475 --eval-interval 2500 --eval-episodes 10
