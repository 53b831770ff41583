#!/usr/bin/env bash
# The GPU run: on a GPU machine with no network and no apt (PyTorch 2.x in its python3, CMake,
# ninja, a compiler and, for a CUDA wheel, the matching toolkit), runs the stages named on the
# command line (default: all), writing everything into one results folder and a tarball of it.
# The build it runs is either carried (--carried: the wheel lane's, made by scripts/wheel/test.sh
# against the same torch version and packed by scripts/gpu/carry_build.sh; measuring starts at
# once) or made here from source against that python's libtorch with the carried dependencies
# (scripts/gpu/make_deps.sh), the fallback.
#   bash scripts/gpu/make_deps.sh                         # where apt works: makes .gpudeps/
#   bash scripts/gpu/carry_build.sh                       # after the wheel lane: .gpucarry/
#   bash scripts/gpu/run.sh --carried [test] [main] [faults] [bench] [fit] [mfu]  # in the order given
#   bash scripts/gpu/run.sh [build] [test] [main] [faults] [bench] [fit]    # building here first
# A carried build made against another torch than this machine's python has is refused with one
# line (exit 2): its binaries link that libtorch's C++ API, which changes between versions.
# Environment: RCL_GPU_RESULTS (default $OUT when set, else gpu-results/), RCL_GPUDEPS (default
# .gpudeps/), RCL_GPU_BUILD (default build-gpu/; with --carried, where the carried build is
# unpacked: build-wheel/), RCL_GPU_CARRY (default .gpucarry/build-wheel.tar.xz), RCL_JOBS
# (default nproc), RCL_CTEST_ARGS (more ctest arguments for the test stage, e.g. "-R Gpu" when
# a device call has no room for the suite), RCL_GPU_BENCH_ARGS (more bench/gpu_bench.py arguments,
# e.g. "--steps 30 --warmup 8"), RCL_GPU_FIT_ARGS (more bench/fit_sample.py arguments, e.g.
# "--only small:gemm,memory,fusion"), RCL_GPU_MFU_ARGS (more bench/mode_mfu.py arguments, e.g.
# "--only base,all --duration 40").
# This script is the only place that knows which vendor's machine it is on: the project itself
# is device-agnostic libtorch (torch::kCUDA is the HIP device on ROCm).
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
carried=0
if [[ "${1:-}" == "--carried" ]]; then
  carried=1
  shift
fi
deps=$(realpath "${RCL_GPUDEPS:-.gpudeps}")
if ((carried)); then
  build=$(realpath -m "${RCL_GPU_BUILD:-build-wheel}")
else
  build=$(realpath -m "${RCL_GPU_BUILD:-build-gpu}")
fi
results=${RCL_GPU_RESULTS:-${OUT:-gpu-results}}/gpu-results
jobs=${RCL_JOBS:-$(nproc)}
stages=("$@")
((${#stages[@]})) || stages=(build test main faults bench)
if ((carried)); then
  # Before anything is written: the carried build, unpacked and checked (one line if refused).
  bash scripts/gpu/use_carried.sh "${RCL_GPU_CARRY:-.gpucarry/build-wheel.tar.xz}" "$build" || exit 2
  # Its binaries find this python's libtorch (and the CUDA libraries the wheel brought) first.
  torch_libs=$(python3 -c 'import glob,os,torch;r=os.path.dirname(torch.__file__);print(":".join([r+"/lib"]+sorted(glob.glob(os.path.dirname(r)+"/nvidia/*/lib"))))')
  export LD_LIBRARY_PATH=$torch_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  stages=("${stages[@]/build/}")
fi
mkdir -p "$results"
results=$(realpath "$results")
summary="$results/summary.txt"
binary="$build/rocm-conformance-llm"

note() { echo "gpu: $*" | tee -a "$summary"; }
wants() { [[ " ${stages[*]} " == *" $1 "* ]]; }
# stage NAME SECONDS COMMAND...: runs it with a time limit, its output in NAME.log; notes the result.
stage() {
  local name=$1 limit=$2 start=$SECONDS rc; shift 2
  # bash -c: the command may be one of this script's functions (exported below).
  timeout --kill-after=10 "$limit" bash -c '"$@"' _ "$@" >"$results/$name.log" 2>&1
  rc=$?
  note "$name: exit $rc after $((SECONDS - start)) s (log: $name.log)"
  return "$rc"
}
pack() { tar -C "$(dirname "$results")" -czf "$(dirname "$results")/gpu-results.tar.gz" gpu-results; }
trap pack EXIT

machine_facts() {
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true
  rocm-smi --showproductname 2>&1 | head -n 5 || true
  python3 -c 'import torch,sys;print("python", sys.version.split()[0], "torch", torch.__version__,
    "cuda", torch.version.cuda, "hip", torch.version.hip, "gpu", torch.cuda.is_available() and torch.cuda.get_device_name(0))'
  cmake --version | head -n1; c++ --version | head -n1; nvcc --version 2>/dev/null | tail -n2
  nproc; free -g | head -n2
}

build_project() {
  [[ -d "$deps/usr/include/CLI" ]] || { echo "no carried dependencies at $deps: run scripts/gpu/make_deps.sh"; return 2; }
  # Without the test stage only the binary is built (no GoogleTest, no tests): a whole build took
  # 258 s on the H100 machine's 16 cores, most of it the tests.
  local gtest=$build/gtest-install tests=OFF
  if [[ " $stages_text " == *" test "* ]]; then
    tests=ON
    if [[ ! -f "$gtest/lib/cmake/GTest/GTestConfig.cmake" && ! -f "$gtest/lib64/cmake/GTest/GTestConfig.cmake" ]]; then
      cmake -S "$deps/usr/src/googletest" -B "$build/gtest" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_INSTALL_PREFIX="$gtest" -DBUILD_GMOCK=ON && cmake --build "$build/gtest" -j"$jobs" \
        && cmake --install "$build/gtest" || return 1
    fi
  fi
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRCL_GPUDEPS="$deps" -DRCL_BUILD_TESTS="$tests" \
    -DCMAKE_PREFIX_PATH="$deps/usr;$gtest" -Dspdlog_DIR="$repo/scripts/gpu/cmake" || return 1
  cmake --build "$build" -j"$jobs"
}

main_job() {
  # The main job of the README on the GPU: small preset, every stress mode. Time-boxed: all modes
  # together make a 1.3B-parameter model at seq 8192 whose steps took 60 s on an H100
  # (docs/gpu-run.md), so a fixed step count would not fit a device call.
  "$binary" --device gpu --preset small --stress all --steps "${RCL_GPU_MAIN_STEPS:-200}" \
    --duration "${RCL_GPU_MAIN_DURATION:-120s}" --output-dir "$results/main-small-all" --overwrite
}

stages_text="${stages[*]}"  # build_project runs in a child bash: arrays are not exported
export repo deps build jobs results binary stages_text
export -f build_project main_job
note "stages: ${stages[*]}; results in $results"
machine_facts >"$results/machine.txt" 2>&1
cat "$results/machine.txt"
# Later stages build first when the binary is missing (each device call may start on a bare
# machine); the test stage always does (an earlier call may have built the binary alone).
if ((carried)); then
  note "build: carried ($build, torch $(cat "$build/libtorch-version.txt")), not built here"
elif wants build || wants test || [[ ! -x "$binary" ]]; then
  stage build 360 build_project || { note "build failed: later stages skipped"; exit 1; }
fi
status=0
run_tests() {
  # Two intra-op threads per test: at 16 tests x 16 threads the float64 gradient sweep took 60-120 s
  # a test (measured on an H100 machine's 16 cores). A whole suite needs a device call of its own.
  # The rendered-report tests drive chromium, which the GPU machine does not have (no apt): left
  # out and said so, rather than failed. Every lane with apt installs chromium and runs them.
  local exclude=()
  if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
    exclude=(-E 'RenderedReport')
    note "test: RenderedReport tests not run: no chromium on this machine"
  fi
  OMP_NUM_THREADS=2 stage test 540 ctest --test-dir "$build" -j"$((jobs / 2 > 0 ? jobs / 2 : 1))" --timeout 300 \
    --output-on-failure "${exclude[@]}" ${RCL_CTEST_ARGS:-} || status=1
  sed -n '/tests passed/,$p' "$results/test.log" | tee -a "$summary"
}
run_faults() {
  RCL_GPU_COUNT=$(python3 -c 'import torch; print(torch.cuda.device_count())') RCL_BINARY="$binary" RCL_DEVICE=gpu RCL_FAULT_MATRIX_OUT="$results/fault-matrix.md" RCL_FAULT_MATRIX_KEEP="$results/fault-runs" \
    stage faults 180 bash scripts/fault_matrix.sh || status=1
  tail -n1 "$results/faults.log" | tee -a "$summary"
}
# In the order given: a device call that may be cut short runs what matters most first.
for name in "${stages[@]}"; do
  case "$name" in
    build | "") ;;
    test) run_tests ;;
    main) stage main 360 main_job || status=1 ;;
    faults) run_faults ;;
    bench) stage bench 300 python3 bench/gpu_bench.py --binary "$binary" --output "$results/results-gpu.md" \
      ${RCL_GPU_BENCH_ARGS:-} || status=1 ;;
    fit) stage fit 360 python3 bench/fit_sample.py --binary "$binary" --output "$results/fit-sample-gpu.md" \
      ${RCL_GPU_FIT_ARGS:-} || status=1 ;;
    mfu) stage mfu 570 python3 bench/mode_mfu.py --binary "$binary" --output "$results/mode-mfu-gpu.md" \
      ${RCL_GPU_MFU_ARGS:-} || status=1 ;;
    *) note "unknown stage '$name' (allowed: build test main faults bench fit mfu)"; status=2 ;;
  esac
done
exit "$status"
