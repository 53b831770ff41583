#!/usr/bin/env bash
# Every test lane, as CI runs them (as root, on Debian 12):
#   layers:     scripts/check_layers.py (no include of a layer above the includer's)
#   host lane:  Debian 12's libtorch 1.13 (scripts/setup.sh --with-tests, then ctest)
#   wheel lane: the libtorch of PyPI's torch 2.11.0 wheel (the GPU machine's; a CUDA build, with
#               the system CUDA toolkit), every GPU-only source compiled, the suite run on the CPU
#               (scripts/wheel/test.sh; its virtual environment is cached)
# The batteries that do not depend on the libtorch version run in one lane only: ctest label
# host_lane (clean batteries, host contention, the fault matrix, Slurm) or wheel_lane (the
# launchers, with the GPU machine's torchrun); each lane leaves out the other's (tests/CMakeLists.txt).
# Prints tests passed/failed and minutes per lane; exits non-zero if any lane fails.
#   bash scripts/test_all.sh
set -uo pipefail
cd "$(dirname "$0")/.."

# ccache hits across clones (CI and a developer's checkouts build the same sources elsewhere).
# The targets use a precompiled header, which ccache caches only with this sloppiness.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$(pwd)")}
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros}

logs=$(mktemp -d /tmp/rcl-test-all.XXXXXX)
names=() results=() minutes=() counts=()

# run_lane NAME COMMAND...: runs it with its output on the console and in a log.
run_lane() {
  local name=$1; shift
  local log="$logs/$name.log" start rc summary failed
  echo "================ lane $name: $* ================"
  start=$(date +%s)
  "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  summary=$(grep -E '^[0-9]+% tests passed' "$log" | tail -n1)
  names+=("$name")
  results+=("$([[ $rc -eq 0 ]] && echo PASS || echo "FAIL (exit $rc)")")
  minutes+=("$(awk -v s=$(( $(date +%s) - start )) 'BEGIN {printf "%.1f", s / 60}')")
  # A lane without ctest (the layer check) is summarised by its last line.
  [[ -z "$summary" && $rc -eq 0 ]] && summary=$(tail -n1 "$log")
  # The failed tests by name, so a summary read alone (CI shows the log's tail) says what to look at.
  failed=$(sed -n '/^The following tests FAILED:/,/^Errors while running CTest/p' "$log" | grep -E '^\s+[0-9]+ - ' |
    sed -E 's/^\s+[0-9]+ - //; s/ +(#|\().*$//' | paste -sd, -)
  [[ -n "$failed" ]] && summary+="; failed: $failed"
  counts+=("${summary:-no ctest summary (build or setup failed: see $log)}")
  return "$rc"
}

host_lane() {
  bash scripts/setup.sh --with-tests && ctest --test-dir build --output-on-failure -j2 --timeout 900 -LE wheel_lane
}

status=0
# The layers first: a file that includes a layer above its own fails here in seconds, naming it.
run_lane layers /usr/bin/python3 scripts/check_layers.py || status=1
run_lane host-libtorch1.13 host_lane || status=1
run_lane wheel-libtorch2.11 env RCL_CTEST_ARGS="-LE host_lane ${RCL_CTEST_ARGS:-}" bash scripts/wheel/test.sh || status=1

echo "================ summary ================"
# The machine every figure of this summary is from (README.md quotes it): instruction sets, libtorch, date.
versions=$(cat build/libtorch-version.txt build-wheel/libtorch-version.txt 2>/dev/null | paste -sd/ -)
/usr/bin/python3 -c 'import sys; sys.path.insert(0, "bench"); import machine; print("machine:", machine.machine_line(sys.argv[1]))' \
  "${versions:-unknown}"
printf 'total %.1f min\n' "$(awk -v s=$SECONDS 'BEGIN {print s / 60}')"
for i in "${!names[@]}"; do
  printf '%-18s %-14s %5s min  %s\n' "${names[i]}" "${results[i]}" "${minutes[i]}" "${counts[i]}"
done
echo "logs: $logs"
exit "$status"
