#!/usr/bin/env bash
# Makes the folder of build dependencies the GPU machine lacks (it has no apt and no network):
# CLI11, nlohmann-json, spdlog, fmt, Gloo's headers (c10d's ProcessGroupGloo.hpp includes them; PyTorch
# wheels link Gloo statically and ship no headers) and GoogleTest's sources, unpacked from Debian sid's packages
# and used header-only there. The wheel lane (scripts/wheel/test.sh) builds with the same folder.
#   bash scripts/gpu/make_deps.sh [DEST]      # DEST defaults to .gpudeps/ (git-ignored)
# Run where apt reaches a Debian mirror (as root or not). Prints the folder's size: the device
# tool carries at most 64 MiB with the repository.
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=${1:-.gpudeps}
packages=(libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev googletest libgloo-dev)

mirror=$(grep -hsoE '^URIs:[[:space:]]*\S+' /etc/apt/sources.list.d/*.sources 2>/dev/null \
  | awk '{print $2}' | grep -v security | head -n1 || true)
mirror=${mirror:-http://deb.debian.org/debian}

work=$(mktemp -d /tmp/rcl-gpudeps.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
echo "deb [trusted=yes] $mirror sid main" >"$work/sources.list"
# sid's Release file on the project's mirror is past its Valid-Until date.
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=-"
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
  -o 'Acquire::Check-Valid-Until=false' -o 'APT::Architecture=amd64'
  -o 'Debug::NoLocking=1')
apt-get "${apt_opts[@]}" update -qq
(cd "$work/debs" && apt-get "${apt_opts[@]}" download "${packages[@]}")

rm -rf "$dest"
mkdir -p "$dest"
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$dest"; done
# Only headers, CMake files and GoogleTest's sources are used; drop the rest.
# spdlog's and fmt's CMake files name the shared libraries: scripts/gpu/cmake/ has header-only ones.
rm -rf "$dest/usr/share/doc" "$dest/usr/share/man" "$dest"/usr/lib/*/lib*.so* "$dest"/usr/lib/*/pkgconfig \
  "$dest"/usr/lib/*/cmake/spdlog "$dest"/usr/lib/*/cmake/fmt
ls "$work/debs" | sed 's/^/gpudeps: /'
du -sh "$dest" | sed 's/^/gpudeps: size /'
