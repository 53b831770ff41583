#!/usr/bin/env bash
# The libtorch 2.x lane: builds the project against Debian sid's libtorch (2.14) inside a sid
# root and runs the whole test suite there (the same ctest flags as the host lane).
#   bash scripts/test_libtorch2.sh           # as root, on Debian 12, with the Debian mirror
# The root is cached at $RCL_SID_ROOT (default /var/cache/rocm-conformance-llm/sid-root) and
# refreshed (missing packages only) on later runs; ccache lives at $RCL_SID_CCACHE. The build
# goes to build-libtorch2/ in the repository. Every mount is undone on every exit path.
# RCL_CTEST_ARGS adds ctest arguments (e.g. RCL_CTEST_ARGS="-R Launcher" for some tests only).
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/sid_root.sh
source scripts/sid_root.sh
jobs=${RCL_JOBS:-2}

# 4. Build against the root's libtorch into build-libtorch2/.
t1=$(date +%s)
in_root cmake -S /src -B /src/build-libtorch2 -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DRCL_BUILD_TESTS=ON >/dev/null
in_root cmake --build /src/build-libtorch2 -j"$jobs"
log "built in $(( $(date +%s) - t1 )) s"

# 5. The whole test suite, with the host lane's flags.
t2=$(date +%s)
set +e
# shellcheck disable=SC2086  # RCL_CTEST_ARGS: extra ctest arguments, e.g. "-R Launcher"
in_root ctest --test-dir /src/build-libtorch2 --output-on-failure -j"$jobs" --timeout 900 ${RCL_CTEST_ARGS:-}
rc=$?
set -e
log "tests finished in $(( $(date +%s) - t2 )) s (ctest exit $rc); libtorch $torch_version"
exit "$rc"
