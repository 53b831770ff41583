#!/usr/bin/env bash
# Regenerates the generated blocks of README.md and docs/*.md: everything between
# "<!-- generated: rocm-conformance-llm ARGS -->" and "<!-- end generated -->" becomes the
# output of the built binary run with ARGS. tests/binary/test_config.cpp (Docs.*) fails when a block
# differs from what the binary prints now.
#   scripts/update_docs.sh [path/to/rocm-conformance-llm]   (default: build/rocm-conformance-llm)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/rocm-conformance-llm}
[[ -x $bin ]] || { echo "error: no binary at $bin (build first, or pass its path)" >&2; exit 2; }
for page in "$root"/README.md "$root"/docs/*.md; do
  grep -q '^<!-- generated: rocm-conformance-llm ' "$page" || continue
  awk -v bin="$bin" '
    /^<!-- end generated -->$/ { skipping = 0 }
    skipping { next }
    { print }
    /^<!-- generated: rocm-conformance-llm .* -->$/ {
      args = $0
      sub(/^<!-- generated: rocm-conformance-llm /, "", args)
      sub(/ -->$/, "", args)
      cmd = bin " " args
      while ((cmd | getline line) > 0) print line
      if (close(cmd) != 0) { print "error: " cmd " failed" > "/dev/stderr"; exit 2 }
      skipping = 1
    }' "$page" >"$page.tmp"
  mv "$page.tmp" "$page"
  echo "updated ${page#"$root"/}"
done
