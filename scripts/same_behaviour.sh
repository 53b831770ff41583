#!/usr/bin/env bash
# Does a refactor change what the tool computes? Runs one fixed set of CPU runs with two builds
# and compares, bit for bit, every step's loss in metrics.jsonl and the findings and verdict in
# report.json: every stress mode alone and `all` on smoke, an injected NaN, a checkpointed run
# and its resume from the middle, a 2-rank and a 4-rank `--stress comm` run (tensor pairs, experts)
# and a 2-rank FSDP run (127.0.0.1).
#   bash scripts/same_behaviour.sh OLD_BINARY NEW_BINARY     # exit 0: identical, 1: they differ
# Both builds must run on this machine; each set takes a few minutes on 2 cores.
set -uo pipefail

# runs BINARY OUT: the fixed set, then OUT/summary.txt (per run: exit code, losses, findings).
runs() {
  local bin=$1 out=$2 port=$((29500 + RANDOM % 1000))
  local common=(--preset smoke --seed 7 --steps 16 --set training.num_threads=1)
  rm -rf "$out" && mkdir -p "$out"
  one() { local name=$1; shift; "$bin" "${common[@]}" --output-dir "$out/$name" "$@" >"$out/$name.log" 2>&1; echo $? >"$out/$name.rc"; }
  # ranks N NAME ARGS...: one run of N local ranks over 127.0.0.1 (Gloo), each rank its own files.
  ranks() {
    local n=$1 name=$2 rank; shift 2; port=$((port + 1))
    for ((rank = 0; rank < n; rank++)); do
      RANK=$rank WORLD_SIZE=$n LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        timeout 300 "$bin" "${common[@]}" "$@" --output-dir "$out/$name" >"$out/$name-$rank.log" 2>&1 &
    done
    wait
  }
  one mode-none
  for mode in gemm rng comm memory fusion attention all; do one "mode-$mode" --stress "$mode"; done
  one fault-nan --stress gemm --inject nan@step=6
  one ckpt-full --checkpoint-interval 8
  one ckpt-resumed --resume "$out/ckpt-full/checkpoints/step-00000008"
  ranks 2 comm2 --stress comm
  # Four ranks: the comm mode splits tensor-parallel pairs and shards experts over the replicas.
  ranks 4 comm4 --stress comm
  ranks 2 fsdp2 --set training.data_parallel=fsdp
  /usr/bin/python3 - "$out" <<'PY'
import json, pathlib, sys
out, lines = pathlib.Path(sys.argv[1]), []
for run in sorted(p for p in out.iterdir() if p.is_dir()):
    rc = out / f"{run.name}.rc"
    rc = rc.read_text().strip() if rc.exists() else "-"
    for metrics in sorted(run.glob("metrics*.jsonl")):
        losses = [json.loads(line)["loss"] for line in metrics.read_text().splitlines() if line.strip()]
        lines.append(f"{run.name} {metrics.name} exit={rc} losses={losses!r}")
    for report in sorted(run.glob("report*.json")):
        r = json.loads(report.read_text())
        found = sorted((f["signature"], f["component"], f["severity"], f["step"], f["rank"], f.get("classification"))
                       for f in r.get("findings", []))
        lines.append(f"{run.name} {report.name} verdict={r.get('verdict')} findings={found}")
(out / "summary.txt").write_text("\n".join(lines) + "\n")
PY
}

[[ $# -eq 2 && -x $1 && -x $2 ]] || { echo "usage: $0 OLD_BINARY NEW_BINARY (both executable)" >&2; exit 2; }
work=$(mktemp -d /tmp/rcl-same-behaviour.XXXXXX)
runs "$1" "$work/old"
runs "$2" "$work/new"
if diff "$work/old/summary.txt" "$work/new/summary.txt"; then
  echo "same behaviour: $(wc -l <"$work/new/summary.txt") lines of losses and findings identical ($work)"
else
  echo "behaviour differs (above: < old, > new; runs in $work)"
  exit 1
fi
