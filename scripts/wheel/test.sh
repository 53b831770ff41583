#!/usr/bin/env bash
# The wheel lane: the project built against the libtorch inside PyPI's torch 2.11.0 wheel (the
# GPU machine's version; a CUDA 13.0 build) with the system CUDA toolkit, every source and test
# compiled (c10d's NCCL group and every TORCH_VERSION >= 2 / GPU branch included), then the
# whole suite run on the CPU, the HF parity test with PyPI's transformers. Nothing here runs CUDA.
#   bash scripts/wheel/test.sh             # as root on Debian 12, after scripts/setup.sh --with-tests
# The environment: scripts/wheel/env.sh (cached, keyed by its pins). The build dependencies are the
# GPU machine's carried ones (scripts/gpu/make_deps.sh, .gpudeps/: header-only spdlog and fmt, Gloo's
# headers the wheel lacks), so build-wheel/ runs there as it is: scripts/gpu/run.sh --carried.
# RCL_WHEEL_BUILD (default build-wheel/), RCL_JOBS (default 2), RCL_CTEST_ARGS (more ctest arguments).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
build=${RCL_WHEEL_BUILD:-build-wheel}
deps=${RCL_GPUDEPS:-.gpudeps}
jobs=${RCL_JOBS:-2}
log() { echo "wheel: $*"; }

t0=$SECONDS
# shellcheck source=scripts/wheel/env.sh
source scripts/wheel/env.sh
[[ -d "$deps/usr/include/CLI" ]] || bash scripts/gpu/make_deps.sh "$deps"
deps=$(realpath "$deps")
# /usr/local/cuda: the toolkit the wheel's CMake config asks for (nvcc, headers, NCCL), linked only.
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
log "environment ready in $((SECONDS - t0)) s"

t1=$SECONDS
mkdir -p "$build"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRCL_BUILD_TESTS=ON -DRCL_GPUDEPS="$deps" \
  -DCMAKE_PREFIX_PATH="$deps/usr" -Dspdlog_DIR="$repo/scripts/gpu/cmake" >"$build/configure.log" 2>&1 \
  || { cat "$build/configure.log"; exit 1; }
grep -E 'libtorch:|distributed:|transformers' "$build/configure.log" | sed 's/^-- /wheel: /'
cmake --build "$build" -j"$jobs"
log "built in $((SECONDS - t1)) s (torch $(cat "$build/libtorch-version.txt"))"

t2=$SECONDS
set +e
# shellcheck disable=SC2086  # RCL_CTEST_ARGS: extra ctest arguments, e.g. "-R Launcher"
ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 900 ${RCL_CTEST_ARGS:-}
rc=$?
set -e
log "tests finished in $((SECONDS - t2)) s (ctest exit $rc); lane $((SECONDS - t0)) s"
exit "$rc"
