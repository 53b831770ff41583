#!/usr/bin/env bash
# The wheel lane's virtual environment: PyPI's torch 2.11.0 (the GPU machine's version, a CUDA
# 13.0 build) with transformers, accelerate, datasets, safetensors and numpy, pinned in
# scripts/wheel/requirements.txt (top level) and scripts/wheel/constraints.txt (everything else).
#   bash scripts/wheel/env.sh            # makes or checks it; prints its path
#   source scripts/wheel/env.sh          # ... and puts its python3, pip and torchrun first on PATH
# Cached at $RCL_WHEEL_VENV (default /var/cache/rocm-conformance-llm/wheel-venv), keyed by the
# two files' hash: a changed pin makes it again from nothing, as does an interrupted creation
# (the key is written last). One creation at a time (a lock in the cache folder).
# shellcheck shell=bash
_rcl_wheel_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_rcl_cache=${RCL_CACHE_DIR:-/var/cache/rocm-conformance-llm}
RCL_WHEEL_VENV=${RCL_WHEEL_VENV:-$_rcl_cache/wheel-venv}

rcl_wheel_env() {
  local requirements=$_rcl_wheel_dir/requirements.txt constraints=$_rcl_wheel_dir/constraints.txt
  local key stamp=$RCL_WHEEL_VENV/.rcl-requirements.sha256 start=$SECONDS
  # The python is part of the key: a venv links to the interpreter it was made with.
  key=$(cat "$requirements" "$constraints" <(/usr/bin/python3 --version) | sha256sum | cut -d' ' -f1)
  mkdir -p "$(dirname "$RCL_WHEEL_VENV")"
  exec 8>"$RCL_WHEEL_VENV.lock"
  flock 8
  if [[ "$(cat "$stamp" 2>/dev/null)" != "$key" ]]; then
    echo "wheel-env: making $RCL_WHEEL_VENV (requirements changed or first use)"
    rm -rf "$RCL_WHEEL_VENV"
    /usr/bin/python3 -m venv "$RCL_WHEEL_VENV" || return 1
    "$RCL_WHEEL_VENV/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir \
      -r "$requirements" -c "$constraints" || return 1
    echo "$key" >"$stamp"
    echo "wheel-env: made in $((SECONDS - start)) s ($(du -sh "$RCL_WHEEL_VENV" | cut -f1))"
  fi
  flock -u 8
  exec 8>&-
  "$RCL_WHEEL_VENV/bin/python3" -c 'import torch; print("wheel-env: torch", torch.__version__, "cuda", torch.version.cuda)'
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  rcl_wheel_env
  echo "$RCL_WHEEL_VENV"
else
  rcl_wheel_env || return 1
  export VIRTUAL_ENV=$RCL_WHEEL_VENV PATH=$RCL_WHEEL_VENV/bin:$PATH
fi
