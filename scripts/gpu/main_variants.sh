#!/usr/bin/env bash
# Where the GPU main job (`--stress all` on `small`) spends its first steps: runs stress-mode
# subsets with one micro-batch per step, and while each runs samples the GPU's utilisation and
# the busiest threads. Stress modes only raise knobs (a --set cannot take one
# back), so the variants are subsets of modes. Keeps each run in $results/variants/NAME.
#   bash scripts/gpu/main_variants.sh BINARY RESULTS SECONDS_PER_VARIANT SUBSET...
set -uo pipefail
binary=$1 results=$2/variants limit=$3; shift 3
mkdir -p "$results"
for modes in "$@"; do
  name=${modes//,/-}
  dir=$results/$name start=$SECONDS
  "$binary" --device gpu --preset small --stress "$modes" --steps 3 \
    --set stress_profile.memory.min_grad_accum_steps=1 --output-dir "$dir" --overwrite >"$dir.log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null && ((SECONDS - start < limit)); do
    sleep 15
    { echo "--- +$((SECONDS - start)) s"; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
      ps -L -o tid,pcpu,comm -p "$pid" | sort -k2 -nr | head -n 4
    } >>"$dir.samples" 2>&1
  done
  kill -INT "$pid" 2>/dev/null; sleep 20; kill -KILL "$pid" 2>/dev/null; wait "$pid"
  echo "$modes: exit $? after $((SECONDS - start)) s; step times:" \
    "$(python3 -c 'import json,sys
print([round(json.loads(l)["step_time_s"],3) for l in open(sys.argv[1]) if "step_time_s" in l])' "$dir/metrics.jsonl" 2>&1 | tail -n1)"
done
