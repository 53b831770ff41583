#!/usr/bin/env bash
# Inside a Slurm allocation (called by scripts/slurm/*.sbatch): one rank per allocated GPU on
# every node of the allocation, each through scripts/launch_rank.sh. Node and GPU counts come
# from the allocation, never from a file. Arguments go to rocm-conformance-llm, and win over the
# template's own --stress, --device and --output-dir (each is passed only when the user's are not).
#   RCL_STRESS   stress modes (default: all)
#   RCL_RUNS_DIR where runs/<job name>-<job id>/ goes (default: <repo>/runs; every node must see it)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
output_dir="${RCL_RUNS_DIR:-$repo/runs}/${SLURM_JOB_NAME:-rcl}-${SLURM_JOB_ID:?not inside a Slurm job}"

# SLURM_GPUS_ON_NODE is set when GPUs were requested; SLURM_GPUS_PER_NODE may read "mi300x:8".
per_node_request="${SLURM_GPUS_PER_NODE:-}"
gpus="${SLURM_GPUS_ON_NODE:-${per_node_request##*:}}"
if [[ ! "$gpus" =~ ^[1-9][0-9]*$ ]]; then
  echo "launch_slurm.sh: no GPUs in this allocation; submit with --gpus-per-node=<GPUs per node>" >&2
  exit 2
fi
nodes="${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}"
cpus_per_rank=$(( ${SLURM_CPUS_ON_NODE:-$gpus} / gpus ))
(( cpus_per_rank >= 1 )) || cpus_per_rank=1

# Every rank sees every GPU of its node and picks its own by local rank (SLURM_LOCALID). When a
# rank dies or freezes, the survivors' next collective times out after collective_timeout_s with
# a finding that names it, and each survivor exits only once rank 0's job report is written
# (docs/distributed.md): --kill-on-bad-exit then ends the step, a frozen rank included, instead of
# leaving it to the job's time limit.
# The binary refuses an option given twice, so a default the user overrides is left out.
user_gave() {
  local flag=$1 arg
  shift
  for arg in "$@"; do [[ $arg == "$flag" || $arg == "$flag="* ]] && return 0; done
  return 1
}
defaults=()
user_gave --stress "$@" || defaults+=(--stress "${RCL_STRESS:-all}")
user_gave --device "$@" || defaults+=(--device gpu)
user_gave --output-dir "$@" || defaults+=(--output-dir "$output_dir")
user_gave --output-dir "$@" && output_dir="the --output-dir given"
echo "launch_slurm.sh: $nodes node(s) x $gpus GPU(s) = $(( nodes * gpus )) ranks, $cpus_per_rank CPUs each; results in $output_dir"
exec srun --nodes="$nodes" --ntasks="$(( nodes * gpus ))" --ntasks-per-node="$gpus" \
  --cpus-per-task="$cpus_per_rank" --kill-on-bad-exit=1 \
  "$repo/scripts/launch_rank.sh" "${defaults[@]}" "$@"
