#!/usr/bin/env bash
# libFuzzer runs of the input parsers: the config file, --set, --stress, --inject, and the
# checkpoint reader (state.json, manifest.json, safetensors). Built with Debian's clang
# (-fsanitize=fuzzer,address) from tests/fuzz/ against the project's own GCC build of the rest.
#   scripts/fuzz.sh                  # every target, 60 s each
#   RCL_FUZZ_SECONDS=600 scripts/fuzz.sh config_file inject
#   RCL_FUZZ_OUT=- scripts/fuzz.sh   # no file (default: docs/generated/fuzz.md)
# Each run starts from tests/fuzz/corpus/<target>/ and adds what it found there (kept in the
# repository; libFuzzer's -merge keeps only inputs that add coverage). Prints a table, one row per
# target: executions, seconds, crashes; writes it under a header saying when, where and from
# which commit; exits 1 when any target crashed (the input is saved under build-fuzz/crashes/).
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${RCL_FUZZ_SECONDS:-60}"
build="$repo/build"
fuzz_build="$repo/build-fuzz"
out="${RCL_FUZZ_OUT:-$repo/docs/generated/fuzz.md}"
started_at="$(date -u '+%Y-%m-%d %H:%M UTC')"
targets=("$@")
((${#targets[@]})) || targets=(config_file set stress inject checkpoint)

# Debian's clang ships libFuzzer's runtime (libclang-rt / clang's own package on Debian 12).
if ! command -v clang++ >/dev/null; then
  echo "fuzz: installing clang"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends clang >/dev/null || exit 2
fi

export CCACHE_BASEDIR="$repo" CCACHE_SLOPPINESS=pch_defines,time_macros
jobs="${RCL_FUZZ_JOBS:-2}"
[[ -f "$build/CMakeCache.txt" ]] || cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null || exit 2
cmake --build "$build" -j"$jobs" --target rcl_core rocm-conformance-llm || exit 2
cmake -S "$repo/tests/fuzz" -B "$fuzz_build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
  -DRCL_CORE_LIBRARY="$build/librcl_core.a" >/dev/null || exit 2
cmake --build "$fuzz_build" -j"$jobs" || exit 2

# The checkpoint target's fixed files: a real one-step smoke checkpoint of this binary.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$build/rocm-conformance-llm" --preset smoke --device cpu --steps 1 --set num_threads=1 --set eval_interval=0 \
  --checkpoint-interval 1 --output-dir "$work/run" >"$work/run.log" 2>&1 || { cat "$work/run.log"; exit 2; }
export RCL_FUZZ_CHECKPOINT="$work/run/checkpoints/step-00000001"
# Its seeds: that checkpoint's own files, behind the byte that picks them (fuzz_checkpoint.cpp).
mkdir -p "$work/new-checkpoint"
for pick in "0 state.json" "1 manifest.json" "2 rank-0.safetensors"; do
  read -r byte file <<<"$pick"
  { printf "\\x0$byte"; cat "$RCL_FUZZ_CHECKPOINT/$file"; } >"$work/new-checkpoint/seed-$file"
done
# Leaks: CLI11 and libtorch keep static allocations that LeakSanitizer would report at exit.
export ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS:-}"

mkdir -p "$fuzz_build/crashes"
failed=0
table="$work/table.md"
printf '| target | executions | seconds | crashes | corpus files |\n|---|---|---|---|---|\n' | tee "$table"
for t in "${targets[@]}"; do
  corpus="$repo/tests/fuzz/corpus/$t"
  mkdir -p "$corpus" "$work/new-$t"
  log="$fuzz_build/$t.log"
  rm -f "$fuzz_build/crashes/$t-"*
  started=$SECONDS
  (cd "$work" && TMPDIR="$work" "$fuzz_build/fuzz_$t" "$work/new-$t" "$corpus" -max_total_time="$seconds" -max_len=4096 \
    -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$fuzz_build/crashes/$t-" >"$log" 2>&1)
  rc=$?
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  took=$((SECONDS - started))
  crashes=$(ls "$fuzz_build/crashes" | grep -c "^$t-" || true)
  # Merge what this run found into the kept corpus: only inputs that add coverage.
  "$fuzz_build/fuzz_$t" -merge=1 "$corpus" "$work/new-$t" >/dev/null 2>&1
  printf '| %s | %s | %s | %s | %s |\n' "$t" "${execs:-?}" "$took" "$crashes" "$(ls "$corpus" | wc -l)" |
    tee -a "$table"
  if ((rc != 0 || crashes > 0)); then
    failed=1
    grep -m5 -E "ERROR|not a ConfigError|SUMMARY" "$log" >&2
  fi
done

if [[ "$out" != - ]]; then
  commit="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  [[ -n "$(git -C "$repo" status --porcelain -- rocm_conformance_llm tests/fuzz 2>/dev/null)" ]] &&
    commit="$commit, with uncommitted changes to the sources"
  cpu="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)"
  mkdir -p "$(dirname "$out")"
  {
    echo "# Fuzzing (generated)"
    echo
    echo "Written by \`scripts/fuzz.sh\` (do not edit by hand: run it again); what each target feeds: docs/fuzzing.md."
    echo
    echo "- produced: $started_at, $seconds s per target, $(clang++ --version | head -1)"
    echo "- machine: $(nproc) CPU core(s), ${cpu:-unknown CPU}, load average $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "- repository HEAD when run: $commit"
    echo
    cat "$table"
  } >"$out"
fi
exit "$failed"
