#!/usr/bin/env bash
# One rank of rocm-conformance-llm, as run by srun (or mpirun) on every task. The binary reads
# its rank, world and rendezvous from the launcher's environment itself; this wrapper only
# gives each node the state that must not be shared across nodes or jobs.
#   srun scripts/launch_rank.sh --stress comm --output-dir runs/job42
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
binary="${RCL_BINARY:-$repo/build/rocm-conformance-llm}"

# MIOpen keeps its user find-db in SQLite under $HOME by default; jobs sharing it over a network
# filesystem corrupt it ("database disk image is malformed", MIOpen#1878, #2214). Give every
# job and node its own, on node-local storage, unless the user chose a path.
if [[ -z "${MIOPEN_USER_DB_PATH:-}" ]]; then
  MIOPEN_USER_DB_PATH="${TMPDIR:-/tmp}/rcl-miopen-${SLURM_JOB_ID:-$$}-$(hostname -s)"
  export MIOPEN_USER_DB_PATH
fi
export MIOPEN_CUSTOM_CACHE_DIR="${MIOPEN_CUSTOM_CACHE_DIR:-$MIOPEN_USER_DB_PATH/cache}"
mkdir -p "$MIOPEN_USER_DB_PATH" "$MIOPEN_CUSTOM_CACHE_DIR"

exec "$binary" "$@"
