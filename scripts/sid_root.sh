# The Debian sid root with libtorch 2.14 (and python3-torch), made, refreshed, mounted and locked
# for one run. Sourced by scripts/test_libtorch2.sh (the test lane) and bench/run_bench_libtorch2.sh
# (the CPU 2.x benchmark); the caller has `set -euo pipefail` and is in the repository root.
# Afterwards: $root, $torch_version, in_root CMD... (runs CMD in the root, the repository at
# /src), and every mount is undone when the caller exits, on every path.
# shellcheck shell=bash
repo=$(pwd)

cache=${RCL_CACHE_DIR:-/var/cache/rocm-conformance-llm}
root=${RCL_SID_ROOT:-$cache/sid-root}
ccache_dir=${RCL_SID_CCACHE:-$cache/sid-ccache}
aptopt='Acquire::Check-Valid-Until "false";'

log() { echo "libtorch2: $*"; }

# The host's Debian mirror (deb822 or one-line sources), else deb.debian.org.
mirror=$(grep -hsoE '^URIs:[[:space:]]*\S+' /etc/apt/sources.list.d/*.sources 2>/dev/null \
  | awk '{print $2}' | grep -v security | head -n1 || true)
if [[ -z "$mirror" ]]; then
  mirror=$(grep -hsoE '^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?\S+' /etc/apt/sources.list \
    /etc/apt/sources.list.d/*.list 2>/dev/null | awk '{print $NF}' | grep -v security | head -n1 || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}

# Packages the build and the tests need inside the root (besides what mmdebstrap put there).
packages=(
  g++ cmake ninja-build ccache pkg-config make
  libtorch-dev libgloo-dev
  libopenblas0-pthread libopenblas-dev
  libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev
  openmpi-bin python3-torch
  python3-transformers         # loads our checkpoints in test_checkpoints (TransformersLoads)
  chromium                     # report.html is checked in a headless browser
)
optional=(libamdhip64-dev librocm-smi-dev)   # headers for the dlopen shims, if sid has them

mounts=()
cleanup() {
  local rc=$?
  local i p
  # A signal while the build or the tests run: stop whatever still runs inside the root first.
  for p in /proc/[0-9]*; do
    [[ "$(readlink "$p/root" 2>/dev/null)" == "$root" ]] && kill -KILL "${p#/proc/}" 2>/dev/null
  done
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    umount -l "${mounts[i]}" 2>/dev/null || true
  done
  mounts=()
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mount_in() {  # mount_in TARGET mount-args...
  local target=$1; shift
  mkdir -p "$target"
  if mountpoint -q "$target"; then umount -l "$target"; fi
  mount "$@" "$target"
  mounts+=("$target")
}

# One run at a time per root: a second one would remount (and unmount) under the first.
mkdir -p "$cache"
exec 9>"$cache/.lock"
if ! flock -n 9; then
  log "another run holds $cache/.lock: waiting for it"
  flock 9
fi

# Mounts left under the root by a run that was killed (-9): undo them before anything else.
unmount_stale() {
  local m
  for m in $(awk -v r="$root/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
}
unmount_stale
[[ -d "$root.partial" ]] && root_save=$root && root=$root.partial && unmount_stale && root=$root_save

t0=$(date +%s)

# 1. The root: made once with mmdebstrap (into a temporary directory, renamed when complete).
if [[ ! -x "$root/usr/bin/apt-get" || ! -f "$root/.rcl-root-complete" ]]; then
  command -v mmdebstrap >/dev/null || {
    log "installing mmdebstrap on the host"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
  }
  mkdir -p "$cache"
  tmp="$root.partial"
  if awk -v a="$root/" -v b="$tmp/" 'index($2, a) == 1 || index($2, b) == 1 {found = 1} END {exit !found}' /proc/mounts; then
    log "something is still mounted under $root or $tmp: not removing it"; exit 1
  fi
  rm -rf "$tmp" "$root"
  log "creating the sid root at $root from $mirror"
  mmdebstrap --variant=apt --aptopt="$aptopt" \
    --include="$(IFS=,; echo "${packages[*]}")" \
    sid "$tmp" "$mirror"
  touch "$tmp/.rcl-root-complete"
  mv "$tmp" "$root"
fi
# Keep the aptopt inside the root (sid's Release file on the mirror is past Valid-Until).
mkdir -p "$root/etc/apt/apt.conf.d"
echo "$aptopt" > "$root/etc/apt/apt.conf.d/99rcl-no-check-valid-until"
cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
# torchrun's c10d rendezvous advertises the store under this machine's hostname.
cp -L /etc/hosts "$root/etc/hosts" 2>/dev/null || true

# 2. Mounts: proc, dev, the repository, the ccache directory.
mkdir -p "$ccache_dir"
mount_in "$root/proc" -t proc proc
mount_in "$root/dev" --bind /dev
mount_in "$root/dev/pts" --bind /dev/pts
mount_in "$root/dev/shm" -t tmpfs tmpfs
mount_in "$root/src" --bind "$repo"
mount_in "$root/ccache" --bind "$ccache_dir"

# In the background and waited for: bash runs a trap only once its foreground command ends, so a
# SIGTERM during a 20-minute build would otherwise wait for the build.
in_root() {
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive CCACHE_DIR=/ccache CCACHE_BASEDIR=/src CCACHE_SLOPPINESS=pch_defines,time_macros \
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$@" &
  wait $!
}

# 3. Refresh: install only what is missing.
missing=()
for p in "${packages[@]}"; do
  in_root dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
opt_missing=()
for p in "${optional[@]}"; do
  in_root dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || opt_missing+=("$p")
done
if ((${#missing[@]} + ${#opt_missing[@]})); then
  log "installing in the root: ${missing[*]} ${opt_missing[*]}"
  in_root apt-get update -qq
  ((${#missing[@]})) && in_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  for p in "${opt_missing[@]}"; do
    in_root apt-get install -y -qq --no-install-recommends "$p" >/dev/null \
      || log "optional $p not available in sid: skipped"
  done
fi
# libtorch calls whatever libblas.so.3 resolves to: make it OpenBLAS (as scripts/setup.sh does).
blas=$(in_root readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 || true)
if [[ "$blas" != *openblas* ]]; then
  in_root update-alternatives --set libblas.so.3-x86_64-linux-gnu \
    /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3 >/dev/null
  blas=$(in_root readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)
fi
# Debian's torch has no libuv but its torchrun asks for it: see the module's docstring.
site=$root/usr/lib/python3/dist-packages
cp scripts/libtorch2-root/rcl_tcpstore_without_libuv.py "$site/"
echo "import rcl_tcpstore_without_libuv" >"$site/rcl_tcpstore_without_libuv.pth"
torch_version=$(in_root dpkg-query -W -f='${Version}' libtorch-dev)
log "root ready in $(( $(date +%s) - t0 )) s: libtorch-dev $torch_version, libblas.so.3 -> $blas"

