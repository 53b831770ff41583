#!/usr/bin/env bash
# A throwaway one-node Slurm on 127.0.0.1 (slurmctld + slurmd + its own munged, all state in a
# temp dir) for trying the templates in this folder without a cluster. The node declares
# Gres=gpu:2 on two placeholder files, so `--gpus-per-node=2` allocates; run with --device cpu.
# Needs Debian's slurm-wlm and munge (scripts/setup.sh --with-tests installs them), and root:
# slurmd runs jobs as their submitter. No cgroups are used (proctrack/linuxproc, task/none), so it
# works in a container.
#   scripts/slurm/local_cluster.sh <command...>  # runs the command with SLURM_CONF set, then stops
#   scripts/slurm/local_cluster.sh               # prints `export SLURM_CONF=...`, runs until Ctrl-C
# Example, from the repository root:
#   scripts/slurm/local_cluster.sh sbatch --wait --gpus-per-node=2 --output=/tmp/%j.out \
#     scripts/slurm/one_node.sbatch --device cpu --stress comm --preset smoke --steps 20
# Inside scripts/cluster/sim_cluster.sh (SIM_NODES set) it makes one Slurm node per simulated
# node instead: slurmctld on node 0, a slurmd on every node (its hostname, its NodeAddr), and runs
# the command on node 0, where the controller is reachable:
#   scripts/cluster/sim_cluster.sh --nodes 2 -- scripts/slurm/local_cluster.sh sbatch --wait \
#     --nodes=2 --gpus-per-node=2 scripts/slurm/multi_node.sbatch --device cpu --preset smoke --steps 20
# Exit status: the command's; 2 when the cluster did not come up (the logs are printed).
set -euo pipefail

for tool in slurmctld slurmd munged sinfo; do
  command -v "$tool" >/dev/null || { echo "local_cluster.sh: $tool not found (apt-get install slurm-wlm munge)" >&2; exit 2; }
done
[[ $(id -u) == 0 ]] || { echo "local_cluster.sh: run as root (slurmd starts jobs as their user)" >&2; exit 2; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/rcl-slurm.XXXXXX")
cpus=$(nproc)
# The nodes, their addresses, and the command prefix that runs a daemon on each; the controller is
# the first node's.
if [[ -n "${SIM_NODES:-}" ]]; then
  nodes=() addrs=() on=()
  for ((k = 0; k < SIM_NODES; k++)); do
    host_var="SIM_HOST_$k" addr_var="SIM_ADDR_$k"
    nodes+=("${!host_var}") addrs+=("${!addr_var}") on+=("$SIM_ON $k")
  done
else
  nodes=("$(hostname -s)") addrs=(127.0.0.1) on=("")
fi
# Ports the kernel hands out now, so clusters of parallel runs on one host do not collide.
read -r ctld_port slurmd_port < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))')

daemons=()  # munged, slurmctld, slurmd: this script's children, in the foreground
stop() {
  # The reverse order of starting: slurmd ends its jobs' steps and talks to slurmctld through
  # munge on the way down. Each gets 10 s before SIGKILL.
  local i pid
  for ((i = ${#daemons[@]} - 1; i >= 0; i--)); do
    pid=${daemons[i]}
    kill "$pid" 2>/dev/null || continue
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$dir"
}
trap stop EXIT
trap 'exit 130' INT TERM

mkdir -p "$dir"/{state,spool,munge}
touch "$dir/gpu0" "$dir/gpu1"
cat >"$dir/slurm.conf" <<EOF
# cred_expire is also how long a requeued job waits before it may start again (default 120 s).
ClusterName=rcl-local
SlurmctldHost=${nodes[0]}(${addrs[0]})
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=20
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
GresTypes=gpu
$(for k in "${!nodes[@]}"; do echo "NodeName=${nodes[k]} NodeAddr=${addrs[k]} CPUs=$cpus Gres=gpu:2 State=UNKNOWN"; done)
PartitionName=local Nodes=$(IFS=,; echo "${nodes[*]}") Default=YES MaxTime=INFINITE State=UP
EOF
for node in "${nodes[@]}"; do echo "NodeName=$node Name=gpu File=$dir/gpu[0-1]"; done >"$dir/gres.conf"
export SLURM_CONF=$dir/slurm.conf

dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 700 "$dir/munge"
chmod 400 "$dir/munge/munge.key"
munged --foreground --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/munged.pid" --seed-file="$dir/munge/seed" >>"$dir/munged.log" 2>&1 &
daemons+=($!)
# ${on[k]} is split into words on purpose: a command prefix, or nothing.
# shellcheck disable=SC2086
${on[0]} slurmctld -D -i >>"$dir/slurmctld.log" 2>&1 &
daemons+=($!)
for k in "${!nodes[@]}"; do
  mkdir -p "$dir/spool/${nodes[k]}"
  # shellcheck disable=SC2086
  ${on[k]} slurmd -D -N "${nodes[k]}" >>"$dir/slurmd.${nodes[k]}.log" 2>&1 &
  daemons+=($!)
done

# Up when every node is idle; slurmd registers within seconds.
up=0
for _ in $(seq 150); do
  # shellcheck disable=SC2086
  if (($(${on[0]} sinfo -h -t idle -o %n 2>/dev/null | wc -l) == ${#nodes[@]})); then up=1; break; fi
  sleep 0.2
done
if ((!up)); then
  echo "local_cluster.sh: nodes ${nodes[*]} not all idle after 30 s; logs follow" >&2
  tail -n 20 "$dir"/*.log >&2 || true
  exit 2
fi

if (($#)); then
  status=0
  # shellcheck disable=SC2086
  ${on[0]} "$@" || status=$?
  exit "$status"
fi
echo "local_cluster.sh: ${#nodes[@]} node(s) (${nodes[*]}, $cpus CPUs each, gpu:2 placeholders) up; in another shell:"
echo "  export SLURM_CONF=$SLURM_CONF"
echo "Ctrl-C stops it and removes $dir."
while :; do sleep 3600 & wait $!; done
