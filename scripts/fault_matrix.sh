#!/usr/bin/env bash
# Fault matrix: injects every --inject fault once into a short smoke run of the real binary
# and checks that the detector meant for it fired, attributed to the expected ROCm component at
# the expected step, and that the exit code is the documented one. Two-rank rows launch two
# processes on this host (Gloo on CPU), as torchrun would.
#   scripts/fault_matrix.sh                  # build/rocm-conformance-llm
#   RCL_BINARY=path/to/rocm-conformance-llm scripts/fault_matrix.sh
#   RCL_FAULT_MATRIX_OUT=matrix.md scripts/fault_matrix.sh   # write elsewhere ("-": no file)
#   RCL_DEVICE=gpu scripts/fault_matrix.sh                  # on the GPU (scripts/gpu/run.sh)
# With RCL_GPU_COUNT (run.sh sets it), rows with more ranks than GPUs are listed as not run: the
# ranks of a GPU build meet in c10d's NCCL group (RCCL on ROCm), which takes one GPU per rank.
# Then the faults below libtorch, which the tool does not inject itself: a BLAS that corrupts one
# GEMM shape (tests/shim/blas_fault_shim.c through LD_PRELOAD: build/tests/libblas_fault_shim.so,
# or RCL_BLAS_SHIM), a process holding memory beside the run, a SIGSTOPped rank.
# Every row gives the detection latency: the first finding's step minus the injection step.
# Prints a markdown table and "N passed, M failed", and writes both, under a header saying when,
# on what machine, with which binary and libtorch they were produced, to
# docs/generated/fault-matrix.md (or RCL_FAULT_MATRIX_OUT). Exits 1 when any row failed.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
binary="${RCL_BINARY:-$repo/build/rocm-conformance-llm}"
shim="${RCL_BLAS_SHIM:-$(dirname "$binary")/tests/libblas_fault_shim.so}"
out="${RCL_FAULT_MATRIX_OUT:-$repo/docs/generated/fault-matrix.md}"
[[ -x "$binary" ]] || { echo "no binary at $binary (build first, or set RCL_BINARY)" >&2; exit 2; }
work="$(mktemp -d)"
# RCL_FAULT_MATRIX_KEEP=DIR: every run's logs and reports are copied there (the GPU run keeps them).
trap '[[ -n "${RCL_FAULT_MATRIX_KEEP:-}" ]] && mkdir -p "$RCL_FAULT_MATRIX_KEEP" && cp -r "$work"/. "$RCL_FAULT_MATRIX_KEEP"/; rm -rf "$work"' EXIT
started_at="$(date -u '+%Y-%m-%d %H:%M UTC')"
started_s=$SECONDS
# One intra-op thread: timing detectors judge step times, which a 2-core machine's own
# oversubscription would blur.
common=(--preset smoke --device "${RCL_DEVICE:-cpu}" --set num_threads=1 --set eval_interval=0)
rng_replay=(--stress rng --set replay_check_interval=10)

# ranks | --inject | extra arguments | expected component | signature | step | exit code
# (rows with the same ranks, --inject and arguments share one run)
cases=(
  "1|nan@step=12|--steps 13|rocBLAS/hipBLASLt|nonfinite_loss|12|1"
  "1|nan@step=12|--steps 13|rocBLAS/hipBLASLt|nonfinite_also_fp32|12|1"
  "1|logits-nan-once@step=12|--steps 13|rocBLAS/hipBLASLt|nonfinite_loss|12|0"
  "1|logits-nan@step=12|--steps 13|rocBLAS/hipBLASLt|nonfinite_loss|12|1"
  "1|loss-spike@step=25|--steps 32|rocBLAS/hipBLASLt|loss_spike|25|0"
  "1|loss-spike@step=25|--steps 32|rocBLAS/hipBLASLt|grad_norm_spike|25|0"
  "1|grad-bitflip@step=20|--steps 21|rocBLAS/hipBLASLt|nonfinite_grad_norm|20|1"
  "1|slow-step@step=16=2|--steps 20|rocBLAS/hipBLASLt|step_time_cliff|16|0"
  "1|memory-leak=8MiB/step|--steps 25|ROCr allocator|memory_growth|25|0"
  "1|memory-leak=48MiB/step@step=11|${rng_replay[*]} --steps 12|ROCr allocator|memory_not_recovered_after_reload|10|0"
  "1|hang@step=8|--steps 20 --watchdog-timeout 2|HIP runtime|hang|8|3"
  "1|rng-skew@step=10|${rng_replay[*]} --steps 12|rocRAND|dropout_mask_not_reproducible|10|1"
  "1|rng-skew@step=10|${rng_replay[*]} --steps 12|rocRAND|replay_mismatch|11|1"
  "1|rng-skew-once@step=10|${rng_replay[*]} --steps 12|rocRAND|replay_mismatch|11|0"
  "1|gemm-corrupt|--steps 5 --set diagnostics.gemm_canary_interval=5|rocBLAS/hipBLASLt|gemm_wrong_result|5|1"
  "1|gemm-corrupt-once@step=5|--steps 5 --set diagnostics.gemm_canary_interval=5|rocBLAS/hipBLASLt|gemm_wrong_result|5|0"
  "1|attention-mask-corrupt|--steps 4 --set attention_probe_interval=4|AOTriton/CK attention|attention_backend_mismatch|4|1"
  "1|gemm-output-corrupt@step=5|--steps 6 --set diagnostics.gemm_checksums=all|rocBLAS/hipBLASLt|gemm_checksum_mismatch|5|0"
  "2|rng-skew@step=10@rank=1|${rng_replay[*]} --steps 12|rocRAND|dropout_mask_rank_mismatch|10|1"
  "2|hang@step=8@rank=1|--steps 20 --watchdog-timeout 3|RCCL|collective_hang|8|3"
  "2|slow-collective=3@step=30@rank=1|--stress comm --steps 31|RCCL|collective_latency_spike|30|0"
  "2|collective-corrupt@step=10@rank=1|--stress comm --steps 10 --set collective_check_interval=5|RCCL|collective_result_mismatch|10|1"
  "2|slow-all-to-all=1@step=15@rank=1|--stress comm --steps 15 --set collective_check_interval=5|RCCL|collective_slow|15|0"
  "2|collective-hang@step=10@rank=1|--stress comm --steps 20 --set collective_check_interval=5 --set collective_timeout_s=3|RCCL|collective_timeout|10|3"
)

# Faults below libtorch: name | how | extra arguments | expected component | signature ("-": no
# warn/fail finding at all) | injection step | exit code. The shim rows corrupt the QKV projection
# of the smoke model (1024 tokens x 64 -> 192: sgemm_ m=192 n=1024 k=64; fp32: a bf16 GEMM reaches
# BLAS on CPU only where it runs in float32, on a CPU without a native bf16 kernel). One call of that shape comes before step 1 (the GEMM canary's own), then two per step (one per
# layer, forward only): call 2s is step s's first. The shadow check's rotation (8 ops on smoke)
# looks at QKV at steps 2, 10, 18, ..., layer 0 and 1 in turn (step 10: layer 1, call 21).
below=(
  "shim NaN, from call 10|shim:nan:from:10|--steps 16|rocBLAS/hipBLASLt|gemm_shadow_mismatch|5|1"
  "shim large (1e6), from call 10|shim:large:from:10|--steps 16|rocBLAS/hipBLASLt|gemm_shadow_mismatch|5|1"
  "shim 1% relative, from call 10|shim:rel:from:10|--steps 16|rocBLAS/hipBLASLt|gemm_shadow_mismatch|5|1"
  "shim 1% relative, every 4th call from call 13 (intermittent)|shim:rel:every:13:4|--steps 24|rocBLAS/hipBLASLt|gemm_shadow_mismatch|6|1"
  "shim 1% relative, once at call 21|shim:rel:once:21|--steps 16|rocBLAS/hipBLASLt|gemm_shadow_mismatch|10|0"
  "shim large (1e6), once at call 10, every GEMM checksummed|shim:large:once:10|--steps 8 --set diagnostics.gemm_checksums=all|rocBLAS/hipBLASLt|gemm_checksum_mismatch|5|0"
  "shim 1% relative, once at call 11, every GEMM checksummed|shim:rel:once:11|--steps 8 --set diagnostics.gemm_checksums=all|rocBLAS/hipBLASLt|gemm_checksum_mismatch|5|0"
  "shim large (1e6), from call 10, rotating checksums (the default)|shim:large:from:10|--steps 16|rocBLAS/hipBLASLt|gemm_checksum_mismatch|5|1"
  "2 GiB held by another process|hog:2048|--steps 30|-|-|1|0"
  "rank 1 SIGSTOPped once step 7 is published|sigstop:7|--steps 40 --watchdog-timeout 3|RCCL|collective_hang|7|3"
)

# Runs one case; prints "exit_code" and leaves the reports in $1.
run_case() {
  local dir="$1" ranks="$2" inject="$3" extra="$4"
  # shellcheck disable=SC2206  # extra holds several words on purpose
  local args=("${common[@]}" $extra --inject "$inject" --output-dir "$dir")
  if [[ "$ranks" == 1 ]]; then
    "$binary" "${args[@]}" >"$dir.log" 2>&1
    echo $?
    return
  fi
  local port=$((20000 + RANDOM % 20000)) pids=() codes=() r
  for ((r = 0; r < ranks; r++)); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$binary" "${args[@]}" >"$dir.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do wait "${pids[$r]}"; codes+=($?); done
  echo "${codes[0]}"  # rank 0's verdict; every rank's report is read below
}

# Runs one fault below libtorch; prints "exit_code" and leaves the reports in $1.
run_below() {
  local dir="$1" how="$2" extra="$3" mode schedule call every
  # shellcheck disable=SC2206  # extra holds several words on purpose
  local args=("${common[@]}" $extra --output-dir "$dir")
  case "$how" in
    shim:*)
      IFS=: read -r _ mode schedule call every <<<"$how"
      [[ -f "$shim" ]] || { echo "no BLAS shim at $shim (build the tests, or set RCL_BLAS_SHIM)" >&2; echo 2; return; }
      LD_PRELOAD="$shim" RCL_SHIM_M=192 RCL_SHIM_N=1024 RCL_SHIM_K=64 RCL_SHIM_MODE="$mode" \
        RCL_SHIM_SCHEDULE="$schedule" RCL_SHIM_CALL="$call" RCL_SHIM_EVERY="${every:-10}" \
        "$binary" "${args[@]}" >"$dir.log" 2>&1
      echo $? ;;
    hog:*)
      # Pages written, so they are resident, not merely reserved.
      python3 -c "import time; b = b'x' * (${how#hog:} << 20); print('held', flush=True); time.sleep(3600)" \
        >"$dir.hog" 2>&1 &
      local hog=$!
      until grep -q held "$dir.hog" 2>/dev/null || ! kill -0 $hog 2>/dev/null; do sleep 0.2; done
      "$binary" "${args[@]}" >"$dir.log" 2>&1
      echo $?
      kill $hog 2>/dev/null
      wait $hog 2>/dev/null ;;
    sigstop:*)
      local at="${how#sigstop:}" port=$((20000 + RANDOM % 20000)) pids=() r code
      for r in 0 1; do
        RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
          "$binary" "${args[@]}" >"$dir.rank$r.log" 2>&1 &
        pids+=($!)
      done
      # Stop rank 1 once rank 0 has published step $at (its metrics.jsonl line). Step lines are
      # published one step late, so rank 0 then hangs in a collective of step $at or a later one.
      until [[ "$(cat "$dir/metrics.jsonl" 2>/dev/null | wc -l)" -ge $at ]] ||
        ! kill -0 "${pids[1]}" 2>/dev/null; do sleep 0.05; done
      kill -STOP "${pids[1]}" 2>/dev/null
      wait "${pids[0]}"
      code=$?
      kill -KILL "${pids[1]}" 2>/dev/null
      wait "${pids[1]}" 2>/dev/null
      echo "$code" ;;
  esac
}

# Reads every rank's report: "detected attributed first_step classification" for the signature
# (signature "-": detected means no warn/fail finding at all). Attributed: the expected component
# at the expected step or, with a window, within `window` steps after it.
judge() {
  python3 - "$@" <<'EOF'
import glob, json, sys
dir_, component, signature, step, window = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
findings = []
for path in sorted(glob.glob(dir_ + "/report*.json")):
    findings += json.load(open(path))["findings"]
if signature == "-":
    clean = "yes" if not [f for f in findings if f["severity"] in ("warn", "fail")] else "no"
    print(clean, clean, "-", "-")
    sys.exit()
found = sorted((f for f in findings if f["signature"] == signature), key=lambda f: f["step"])
attributed = any(f["component"] == component and step <= f["step"] <= step + window for f in found)
first = found[0] if found else {}
print("yes" if found else "no", "yes" if attributed else "no", first.get("step", "-"),
      first.get("classification") or "-")
EOF
}

table="$work/table.md"
{
  echo "| fault (\`--inject\`) | ranks | run (smoke preset, plus) | expected component / signature @ step | detected? | attributed correctly? | latency (steps) | classification | exit code (expected) |"
  echo "|---|---|---|---|---|---|---|---|---|"
} >"$table"
cat "$table"
passed=0
failed=0
score() {  # detected attributed exit_code expected_exit
  if [[ "$1" == yes && "$2" == yes && "$3" == "$4" ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
}
latency() {  # first finding's step, injection step
  if [[ "$1" =~ ^[0-9]+$ ]]; then echo $(($1 - $2)); else echo "-"; fi
}
# too_few_gpus RANKS: true (and says so) when a GPU run of RANKS ranks cannot have a GPU per rank.
too_few_gpus() {
  [[ "${RCL_DEVICE:-cpu}" != cpu && -n "${RCL_GPU_COUNT:-}" && "$1" -gt "$RCL_GPU_COUNT" ]] || return 1
  echo "not run: $1 ranks need $1 GPUs (one per rank in c10d's NCCL group), this machine has $RCL_GPU_COUNT"
}
declare -A run_dir run_exit
for i in "${!cases[@]}"; do
  IFS='|' read -r ranks inject extra component signature step expected_exit <<<"${cases[$i]}"
  if why=$(too_few_gpus "$ranks"); then
    echo "| \`$inject\` | $ranks | \`$extra\` | $component / \`$signature\` @ $step | $why | - | - | - | - |" | tee -a "$table"
    continue
  fi
  key="$ranks|$inject|$extra"
  if [[ -z "${run_dir[$key]:-}" ]]; then
    run_dir[$key]="$work/run$i"
    mkdir -p "${run_dir[$key]}"
    run_exit[$key]="$(run_case "${run_dir[$key]}" "$ranks" "$inject" "$extra")"
  fi
  dir="${run_dir[$key]}"
  exit_code="${run_exit[$key]}"
  read -r detected attributed first classification <<<"$(judge "$dir" "$component" "$signature" "$step" 0)"
  injected=1
  [[ "$inject" =~ @step=([0-9]+) ]] && injected="${BASH_REMATCH[1]}"
  score "$detected" "$attributed" "$exit_code" "$expected_exit"
  echo "| \`$inject\` | $ranks | \`$extra\` | $component / \`$signature\` @ $step | $detected | $attributed | $(latency "$first" "$injected") | $classification | $exit_code ($expected_exit) |" |
    tee -a "$table"
done
{
  echo
  echo "Below libtorch (not \`--inject\`); attributed: the expected component within 10 steps of the injection."
  echo
  echo "| fault | run (smoke preset, plus) | expected component / signature, injected @ step | detected? | attributed correctly? | latency (steps) | classification | exit code (expected) |"
  echo "|---|---|---|---|---|---|---|---|"
} | tee -a "$table"
for i in "${!below[@]}"; do
  IFS='|' read -r name how extra component signature step expected_exit <<<"${below[$i]}"
  if [[ "$how" == shim:* && "${RCL_DEVICE:-cpu}" != cpu ]]; then
    # LD_PRELOAD reaches the host BLAS only: a GPU's GEMMs never pass through the shim.
    echo "| $name | \`$extra\` | not applicable on a GPU: the shim corrupts host BLAS calls only | - | - | - | - | - |" |
      tee -a "$table"
    continue
  fi
  if [[ "$how" == sigstop:* ]] && why=$(too_few_gpus 2); then
    echo "| $name | \`$extra\` | $why | - | - | - | - | - |" | tee -a "$table"
    continue
  fi
  dir="$work/below$i"
  mkdir -p "$dir"
  exit_code="$(run_below "$dir" "$how" "$extra")"
  read -r detected attributed first classification <<<"$(judge "$dir" "$component" "$signature" "$step" 10)"
  score "$detected" "$attributed" "$exit_code" "$expected_exit"
  expected="$component / \`$signature\` @ $step"
  [[ "$signature" == - ]] && expected="no warn/fail finding (not the stack's fault)"
  echo "| $name | \`$extra\` | $expected | $detected | $attributed | $(latency "$first" "$step") | $classification | $exit_code ($expected_exit) |" |
    tee -a "$table"
done
echo
echo "$passed passed, $failed failed"

# The file: a header naming what produced it, then the table and the count.
if [[ "$out" != - ]]; then
  # libtorch version and build kind as the binary itself reported them (report.json's environment).
  libtorch="$(python3 - "$work" <<'EOF'
import glob, json, sys
for path in sorted(glob.glob(sys.argv[1] + "/run*/report.json")):
    try:
        env = json.load(open(path))["environment"]
    except (OSError, ValueError, KeyError):
        continue
    print(f"libtorch {env.get('libtorch_version', '?')} ({env.get('libtorch_build', '?')} build), "
          f"BLAS {env.get('blas', '?')}")
    break
else:
    print("libtorch version unknown (no report.json was written)")
EOF
)"
  commit="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  if [[ -n "$(git -C "$repo" status --porcelain -- rocm_conformance_llm CMakeLists.txt cmake 2>/dev/null)" ]]; then
    commit="$commit, with uncommitted changes to the sources"
  fi
  cpu="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)"
  binary_sha="$(sha256sum "$binary" | cut -c1-12)"
  binary_built="$(date -u -r "$binary" '+%Y-%m-%d %H:%M UTC')"
  binary_note=""
  [[ -n "${RCL_BINARY:-}" ]] && binary_note=", from RCL_BINARY: not necessarily built from that HEAD"
  mkdir -p "$(dirname "$out")"
  {
    echo "# Fault matrix (generated)"
    echo
    echo "Written by \`scripts/fault_matrix.sh\` (do not edit by hand: run it again)."
    echo
    echo "- produced: $started_at, in $((SECONDS - started_s)) s"
    echo "- machine: $(nproc) CPU core(s), ${cpu:-unknown CPU}"
    echo "- repository HEAD when run: $commit"
    echo "- binary: \`$binary\` (built $binary_built, sha256 $binary_sha...)$binary_note"
    echo "- $libtorch"
    echo
    echo "All runs: \`${common[*]}\` plus the arguments shown; rows with the same arguments share one run."
    echo
    cat "$table"
    echo
    echo "$passed passed, $failed failed."
  } >"$out.tmp" && mv "$out.tmp" "$out"
  echo "wrote $out"
fi
[[ "$failed" == 0 ]]
