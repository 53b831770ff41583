#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine (as root) and builds build/rocm-conformance-llm.
#   bash scripts/setup.sh               # dependencies + the binary
#   bash scripts/setup.sh --with-tests  # ... + the GoogleTest suite
# To build against a ROCm PyTorch wheel's libtorch instead of Debian's, set LIBTORCH_DIR or
# Torch_DIR, or put that python3 on PATH (see docs/building.md).
set -euo pipefail
cd "$(dirname "$0")/.."

with_tests=OFF
[[ "${1:-}" == "--with-tests" ]] && with_tests=ON

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libtorch-dev libgloo-dev           # libtorch 1.13 CPU + Gloo headers for c10d
  libopenblas0-pthread libopenblas-dev  # the fast BLAS (reference BLAS trains ~20x slower)
  libopenblas0-openmp                # ... built for OpenMP: the binary loads it (CMakeLists.txt)
  libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev
  libamdhip64-dev librocm-smi-dev    # headers for the dlopen'ed HIP / ROCm SMI shims
  openmpi-bin python3-torch          # mpirun and torchrun launch tests; Python peer for bench/
)
# headless Chromium loads report.html in the tests (no network needed); a throwaway Slurm
# (scripts/slurm/local_cluster.sh) runs the Slurm templates in the tests; network namespaces
# (iproute2, util-linux) simulate the nodes of the multi-node tests (scripts/cluster/sim_cluster.sh)
[[ $with_tests == ON ]] && packages+=(chromium slurm-wlm munge iproute2 util-linux)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# libtorch calls whatever libblas.so.3 resolves to: make sure it is OpenBLAS (the binary itself
# looks in OpenBLAS's OpenMP build first; other programs keep the system's choice).
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 || true)
if [[ "$blas" != *openblas* ]]; then
  update-alternatives --set libblas.so.3-x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3
  blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)
fi
echo "setup: libblas.so.3 -> $blas"

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DRCL_BUILD_TESTS=$with_tests >/dev/null
cmake --build build -j"$(nproc)"
echo "setup: built build/rocm-conformance-llm"
