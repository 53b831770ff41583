#!/usr/bin/env bash
# The CPU benchmark in the libtorch 2.x lane (its targets: C++ >= 1.2x the Python
# peer on smoke fp32, >= 1.0x on cpu-medium bf16, same machine, same run). The Python peer needs
# python3-torch, which only the sid root has: this builds the binary there (build-libtorch2/,
# as scripts/test_libtorch2.sh does) and runs bench/run_bench.py inside the root against that
# binary and sid's torch 2.14, writing bench/results-libtorch2.md.
#   bash bench/run_bench_libtorch2.sh            # as root, on Debian 12
# RCL_BENCH_ARGS adds run_bench.py arguments; RCL_BENCH_NOTE replaces the note under the title
# (by default: measured on a shared machine, under load).
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/sid_root.sh
source scripts/sid_root.sh

t1=$(date +%s)
in_root cmake -S /src -B /src/build-libtorch2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DRCL_BUILD_TESTS=ON >/dev/null
in_root cmake --build /src/build-libtorch2 -j"${RCL_JOBS:-2}" --target rocm-conformance-llm
log "binary built in $(( $(date +%s) - t1 )) s"

note=${RCL_BENCH_NOTE:-"Measured under load: this machine's 2 cores were shared with other jobs (builds and test suites) during the run; the others' CPU column says how much. Read the ratios, not the absolute figures."}
# shellcheck disable=SC2086  # RCL_BENCH_ARGS: extra run_bench.py arguments
in_root python3 /src/bench/run_bench.py --binary /src/build-libtorch2/rocm-conformance-llm \
  --output /src/bench/results-libtorch2.md --note "$note" ${RCL_BENCH_ARGS:-}
log "wrote bench/results-libtorch2.md (libtorch $torch_version)"
