#!/usr/bin/env bash
# Fuzzing runstore's readers with libFuzzer (fuzz/README.md). Builds the fuzz
# preset (clang, ASan + UBSan) when needed, then:
#
#   bash scripts/fuzz.sh TARGET SECONDS   a campaign on TARGET (e.g. recovery)
#   bash scripts/fuzz.sh all SECONDS      a campaign on every target in turn
#   bash scripts/fuzz.sh replay           every target once over its seed corpus
#                                         and its regressions (scripts/test.sh)
#   bash scripts/fuzz.sh list             the targets
#
# RUNSTORE_FUZZ_RUNS=N ends each campaign after N executions instead, if that
# comes first (e.g. RUNSTORE_FUZZ_RUNS=10000000 bash scripts/fuzz.sh all 36000).
# RUNSTORE_FUZZ_FLAGS adds libFuzzer flags to a campaign: -entropic=0 more than
# doubles the speed of the whole-store targets (store, store_keys, recovery),
# whose many features make the entropic scheduler's bookkeeping the larger part
# of each execution.
#
# A campaign works on build/fuzz/corpus/<target>, seeded from fuzz/corpus/<target>
# and fuzz/regressions/<target>, writes what it finds to
# build/fuzz/artifacts/<target>/ and prints its executions, exec/s and coverage.
# Reproduce an artifact with build/fuzz/fuzz/<target>_fuzzer FILE; minimise it
# with -minimize_crash=1 -runs=10000 FILE.
#
# Regressions under fuzz/regressions/<target>/known_failing/ reproduce engine
# bugs not fixed yet: replay skips them with a warning; move a file up a level
# once its bug is fixed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)
build="$root/build/fuzz"

# What libFuzzer reports as a failure besides crashes: a single allocation
# past 512 MiB (no valid input here is near that), a process past 2 GiB, an
# input that runs for more than 10 s.
limits=(-rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=10)

targets() { ls fuzz/*_fuzzer.cc | sed 's|fuzz/||; s|_fuzzer\.cc$||'; }

usage() {
  echo "usage: scripts/fuzz.sh TARGET|all SECONDS | replay | list" >&2
  echo "targets: $(targets | tr '\n' ' ')" >&2
  exit 2
}

build_targets() {
  mkdir -p "$root/build"
  if [ ! -f "$build/build.ninja" ]; then
    cmake --preset fuzz > "$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
    rm -f "$build.configure.log"
  fi
  cmake --build "$build" -j "$(nproc)" --target "$@" > "$build.build.log" 2>&1 \
    || { cat "$build.build.log"; exit 1; }
}

setup_env() {
  local s
  for s in llvm-symbolizer-16 llvm-symbolizer; do
    if command -v "$s" > /dev/null; then
      export ASAN_SYMBOLIZER_PATH
      ASAN_SYMBOLIZER_PATH=$(command -v "$s")
      break
    fi
  done
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
}

# Campaigns skip the inputs of engine bugs already known (see the targets that
# read it); replay and a reproduction by hand do not.
campaign_env() { export RUNSTORE_FUZZ_SKIP_KNOWN=1; }

# The regression inputs of a target that must pass (not those in known_failing/).
regressions() { [ -d "fuzz/regressions/$1" ] && find "fuzz/regressions/$1" -maxdepth 1 -type f; true; }

campaign() {
  local t=$1 secs=$2
  local corpus="$build/corpus/$t" artifacts="$build/artifacts/$t" log="$build/logs/$t.log"
  mkdir -p "$corpus" "$artifacts" "$build/logs"
  cp -n fuzz/corpus/"$t"/* "$corpus"/ 2> /dev/null || true
  regressions "$t" | xargs -r cp -n -t "$corpus"
  echo "== $t: ${secs}s, corpus $corpus ($(ls "$corpus" | wc -l) inputs)"
  local rc=0 stamp="$build/logs/$t.start"
  touch "$stamp"
  local runs=()
  [ -n "${RUNSTORE_FUZZ_RUNS:-}" ] && runs=(-runs="$RUNSTORE_FUZZ_RUNS")
  local flags=()
  # shellcheck disable=SC2206  # libFuzzer flags, split on spaces
  [ -n "${RUNSTORE_FUZZ_FLAGS:-}" ] && flags=($RUNSTORE_FUZZ_FLAGS)
  echo "   libFuzzer flags: ${limits[*]} ${runs[*]} ${flags[*]}"
  (cd "$artifacts" && "$build/fuzz/${t}_fuzzer" "${limits[@]}" "${runs[@]}" "${flags[@]}" -max_total_time="$secs" \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus") > "$log" 2>&1 || rc=$?
  local last execs rate
  last=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  printf '%-20s executions %-10s exec/s %-7s %s\n' "$t" "${execs:-?}" "${rate:-?}" \
    "$(echo "$last" | grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*' || true)" \
    | tee -a "$build/logs/summary.txt"
  local found
  found=$(find "$artifacts" -type f -newer "$stamp")
  if [ -n "$found" ] || [ "$rc" != 0 ]; then
    echo "   FOUND (exit status $rc), log $log:"
    for f in $found; do echo "   $f"; done
    grep -E 'ERROR: |SUMMARY: |fuzz property failed|runtime error' "$log" | head -n 5 | sed 's/^/   /'
    return 1
  fi
}

replay() {
  local t bin failed=0 log
  mkdir -p "$build/logs"
  for t in $(targets); do
    bin="$build/fuzz/${t}_fuzzer"
    log="$build/logs/replay-$t.log"
    mkdir -p "$build/artifacts/replay/$t"
    local files=() rc=0
    mapfile -t files < <(regressions "$t")
    {
      "$bin" "${limits[@]}" -runs=0 -artifact_prefix="$build/artifacts/replay/$t/" \
        "fuzz/corpus/$t"
      if [ ${#files[@]} -gt 0 ]; then
        "$bin" "${limits[@]}" -artifact_prefix="$build/artifacts/replay/$t/" "${files[@]}"
      fi
    } > "$log" 2>&1 || rc=$?
    local n
    n=$(($(ls "fuzz/corpus/$t" | wc -l) + ${#files[@]}))
    if [ "$rc" != 0 ]; then
      echo "-- $t: FAILED ($n inputs); log $log:"
      grep -E 'Running: |ERROR: |SUMMARY: |fuzz property failed|runtime error' "$log" | tail -n 8
      failed=1
    else
      echo "-- $t: $n inputs ok"
    fi
    if [ -d "fuzz/regressions/$t/known_failing" ]; then
      for f in "fuzz/regressions/$t/known_failing"/*; do
        [ -f "$f" ] && echo "   warning: skipped known failing input $f (engine bug, see fuzz/README.md)"
      done
    fi
  done
  return $failed
}

[ $# -ge 1 ] || usage
case "$1" in
  list)
    targets
    ;;
  replay)
    build_targets $(targets | sed 's/$/_fuzzer/')
    setup_env
    replay
    ;;
  *)
    [ $# -eq 2 ] || usage
    secs=$2
    if [ "$1" = all ]; then
      list=$(targets)
    else
      targets | grep -qx "$1" || usage
      list=$1
    fi
    build_targets $(echo "$list" | sed 's/$/_fuzzer/')
    setup_env
    campaign_env
    rm -f "$build/logs/summary.txt"
    status=0
    for t in $list; do campaign "$t" "$secs" || status=1; done
    exit $status
    ;;
esac
