#!/usr/bin/env bash
# On the GPU machine: unpacks a build carried from the wheel lane (scripts/gpu/carry_build.sh)
# into the repository and checks it can run here; run.sh --carried calls it. Exit 2 with one
# line when it cannot: no carried build, or one made against another torch than this python's.
#   bash scripts/gpu/use_carried.sh ARCHIVE BUILD_DIR
# The build names the folders it was made in (CTest files; the tests' paths to the binary, the
# shims and the sources are compiled in), so where those are not this repository, a symbolic link
# from the folder it was made in to this repository stands in for it.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
archive=$1 build=$2
if [[ -f "$archive" ]]; then
  rm -rf "$build"
  tar -C "$repo" -xJf "$archive"
fi
if [[ ! -f "$build/libtorch-version.txt" || ! -f "$build/carried-from.txt" ]]; then
  echo "gpu: no carried build at $build (nor $archive): pack one with scripts/gpu/carry_build.sh, or run run.sh without --carried to build here"
  exit 2
fi
made=$(cat "$build/libtorch-version.txt")
here=$(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo "none")
if [[ "$made" != "$here" ]]; then
  echo "gpu: the carried build was made against torch $made but this machine's python3 has torch $here: refused (run run.sh without --carried to build here)"
  exit 2
fi
source_dir=$(cat "$build/carried-from.txt")
if [[ "$source_dir" != "$repo" && "$(realpath -m "$source_dir")" != "$repo" ]]; then
  if [[ -e "$source_dir" ]]; then
    echo "gpu: the carried build names $source_dir, which here is another folder than this repository: refused"
    exit 2
  fi
  mkdir -p "$(dirname "$source_dir")"
  ln -s "$repo" "$source_dir"
fi
echo "gpu: carried build at $build (torch $made, made in $source_dir)"
