#!/usr/bin/env bash
# A simulated cluster on this machine: N network namespaces ("nodes") on one bridge, each with its
# own address (10.231.S.1..N), interface eth0, hostname (a UTS namespace per command) and a shared
# hosts file like a cluster's DNS. Runs one driver command on the host with the cluster described
# in its environment, then deletes every namespace, link and bridge it made, on failure too.
# Root only (ip netns, unshare). Names carry this script's PID, so invocations side by side do not
# meet; namespaces left by an invocation that is gone are deleted first.
#
#   sim_cluster.sh [--nodes N] [--timeout S] [--unlisted K]... -- DRIVER [ARGS...]
#   sim_cluster.sh --each [--nodes N] [--timeout S] [--unlisted K]... -- CMD [ARGS...]
#
# --each runs CMD once on every node, side by side, and fails if any fails. --unlisted K leaves
# node K's name out of the hosts file (a node whose own name does not resolve). --timeout bounds
# the driver (default 300 s). The driver sees:
#   SIM_NODES  the node count          SIM_MASTER_ADDR  node 0's address
#   SIM_ON     "SIM_ON K CMD..." runs CMD on node K (its namespace, hostname and hosts file)
#   SIM_NS_K, SIM_ADDR_K, SIM_HOST_K   node K's namespace, address and hostname
#   SIM_IF_K   node K's link on the bridge (host side): `ip link set $SIM_IF_K down` cuts it
# and, on a node (SIM_ON), SIM_NODE_RANK=K.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
self="$here/$(basename "$0")"

# SIM_ON: run the rest on node K, as that node sees itself.
if [[ "${1:-}" == "--on" ]]; then
  k=$2
  shift 2
  ns_var="SIM_NS_$k" host_var="SIM_HOST_$k"
  [[ -n "${!ns_var:-}" ]] || { echo "sim_cluster.sh --on $k: no such node (SIM_NODES=${SIM_NODES:-unset})" >&2; exit 2; }
  export SIM_NODE_RANK=$k
  # nsenter, not `ip netns exec`: that remounts /sys, hiding the cgroup mounts slurmd needs.
  exec nsenter --net="/run/netns/${!ns_var}" unshare --uts --mount sh -c \
    'mount --bind "$SIM_HOSTS_FILE" /etc/hosts && hostname "$0" && exec "$@"' "${!host_var}" "$@"
fi

nodes=2 timeout_s=300 each=0 unlisted=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --unlisted) unlisted+=("$2"); shift 2 ;;
    --each) each=1; shift ;;
    --) shift; break ;;
    *) echo "sim_cluster.sh: unknown option '$1' (allowed: --nodes N, --timeout S, --unlisted K, --each, -- CMD)" >&2
       exit 2 ;;
  esac
done
[[ $# -gt 0 ]] || { echo "sim_cluster.sh: no command after --" >&2; exit 2; }
[[ "$nodes" =~ ^[0-9]+$ && "$nodes" -ge 1 && "$nodes" -le 200 ]] ||
  { echo "sim_cluster.sh: invalid --nodes '$nodes': must be an integer in [1, 200]" >&2; exit 2; }
[[ "$timeout_s" =~ ^[0-9]+$ && "$timeout_s" -ge 1 ]] ||
  { echo "sim_cluster.sh: invalid --timeout '$timeout_s': must be whole seconds >= 1" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "sim_cluster.sh: needs root (network namespaces)" >&2; exit 77; }

# Namespaces of invocations whose process is gone, and their bridges.
for ns in $(ip netns list | awk '/^rclsim[0-9]+n[0-9]+/ {print $1}'); do
  owner=${ns#rclsim}
  owner=${owner%%n*}
  if ! kill -0 "$owner" 2>/dev/null; then
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    ip link del "rclb$owner" 2>/dev/null || true
  fi
done

id=$$
bridge="rclb$id"
subnet="10.231.$((id % 254 + 1))"
work=$(mktemp -d "/tmp/rclsim$id.XXXXXX")
made_ns=()
cleanup() {
  local ns
  for ns in "${made_ns[@]}"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip link add "$bridge" type bridge
ip link set "$bridge" up
export SIM_HOSTS_FILE="$work/hosts"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$SIM_HOSTS_FILE"
for ((k = 0; k < nodes; k++)); do
  ns="rclsim${id}n$k"
  ip netns add "$ns"
  made_ns+=("$ns")
  ip link add "rclv${id}n$k" type veth peer name "rclp${id}n$k"
  ip link set "rclv${id}n$k" master "$bridge" up
  ip link set "rclp${id}n$k" netns "$ns"
  ip -n "$ns" link set "rclp${id}n$k" name eth0
  ip -n "$ns" addr add "$subnet.$((k + 1))/24" dev eth0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
  export "SIM_NS_$k=$ns" "SIM_ADDR_$k=$subnet.$((k + 1))" "SIM_HOST_$k=node$k" "SIM_IF_$k=rclv${id}n$k"
  [[ " ${unlisted[*]} " == *" $k "* ]] || printf '%s node%s\n' "$subnet.$((k + 1))" "$k" >>"$SIM_HOSTS_FILE"
done
export SIM_NODES=$nodes SIM_MASTER_ADDR="$subnet.1" SIM_ON="$self --on"

if [[ $each -eq 0 ]]; then
  timeout -k 10 "$timeout_s" "$@" && rc=0 || rc=$?
  exit $rc
fi
pids=()
for ((k = 0; k < nodes; k++)); do
  timeout -k 10 "$timeout_s" "$self" --on "$k" "$@" &
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do
  wait "$pid" || rc=$?
done
exit $rc
