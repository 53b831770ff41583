#!/usr/bin/env bash
# Packs the wheel lane's build (scripts/wheel/test.sh: the binary and every test, built against
# PyPI's torch 2.11.0, the GPU machine's version) for the GPU machine, where run.sh --carried runs
# it without building. Only what running needs: executables, shared libraries, CTest files and
# the recorded torch version, xz-compressed as one stream (the test executables share most of
# their code, which a solid archive stores about once).
#   bash scripts/gpu/carry_build.sh [BUILD_DIR] [ARCHIVE]   # defaults: build-wheel, .gpucarry/build-wheel.tar.xz
# Prints the archive's size: the device tool carries at most 64 MiB with the repository.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-wheel}
archive=${2:-.gpucarry/$(basename "$build").tar.xz}
[[ -f "$build/libtorch-version.txt" && -x "$build/rocm-conformance-llm" ]] \
  || { echo "carry: no build at $build: run scripts/wheel/test.sh first"; exit 2; }
# The folder the build was made in: CTest files and the tests name paths under it.
pwd >"$build/carried-from.txt"
mkdir -p "$(dirname "$archive")"
list=$(mktemp)
trap 'rm -f "$list"' EXIT
{
  echo "$build/libtorch-version.txt"
  echo "$build/carried-from.txt"
  echo "$build/rocm-conformance-llm"
  find "$build" -path "$build/CMakeFiles" -prune -o -path "$build/tests/CMakeFiles" -prune -o \
    \( -name 'CTestTestfile.cmake' -o -name '*_tests.cmake' -o -name '*_include.cmake' -o -name '*.so' \
       -o \( -type f -perm -u+x \( -name 'test_*' -o -name '*_tests' \) \) \) -print
} | sort -u >"$list"
tar -C . -cf - -T "$list" | xz -6 -T1 >"$archive"
echo "carry: $(wc -l <"$list") files from $build (torch $(cat "$build/libtorch-version.txt")) -> $archive ($(du -h "$archive" | cut -f1))"
