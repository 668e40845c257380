#!/usr/bin/env bash
# Runs every test of runstore: the C++ suites (GoogleTest through CTest, including
# the crash, corruption and kill -9 tests and the CLI tests), the corruption and
# power-loss tests again under AddressSanitizer + UndefinedBehaviorSanitizer, the
# unit and concurrency tests under ThreadSanitizer, the
# Python suite (pytest), and the formatting check. Installs what is missing first.
#
#   bash scripts/test.sh            # everything
#   SKIP_ASAN=1 SKIP_TSAN=1 bash scripts/test.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)
jobs=$(nproc)

bash scripts/install-deps.sh

step() { printf '\n==== %s (at %ds) ====\n' "$*" "$SECONDS"; }

step "Python package (into .venv; the CLI test's export checks use it)"
"$root/.venv/bin/python" -m pip install -q --no-build-isolation "$root"
export RUNSTORE_PYTHON="$root/.venv/bin/python"

step "C++ build (release) and tests"
cmake --preset release -DRUNSTORE_BUILD_BENCHMARKS=ON > build-release-configure.log 2>&1 \
  || { cat build-release-configure.log; exit 1; }
rm -f build-release-configure.log
cmake --build build/release -j "$jobs"
ctest --test-dir build/release --output-on-failure -j "$jobs" --timeout 900

if [ "${SKIP_ASAN:-0}" != 1 ]; then
  step "C++ tests under ASan+UBSan (unit, power loss, corruption sweep)"
  cmake --preset asan > /dev/null
  cmake --build build/asan -j "$jobs" --target runstore_unit_tests power_loss_test corruption_test
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  for t in runstore_unit_tests power_loss_test corruption_test; do
    echo "-- $t (asan)"
    "build/asan/$t" --gtest_brief=1
  done
fi

if [ "${SKIP_TSAN:-0}" != 1 ]; then
  step "C++ threaded tests under ThreadSanitizer (unit tests, concurrency)"
  cmake --preset tsan > /dev/null
  cmake --build build/tsan -j "$jobs" --target runstore_unit_tests concurrency_test
  export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
  for t in runstore_unit_tests concurrency_test; do
    echo "-- $t (tsan)"
    "build/tsan/$t" --gtest_brief=1
  done
fi

step "Python tests"
cd "$root/python/tests"
"$root/.venv/bin/python" -m pytest -q -p no:cacheprovider "$root/python/tests"
cd "$root"

step "Formatting (clang-format, Google style)"
files=$(git ls-files '*.h' '*.cc' | grep -v '^third_party/' || true)
if command -v clang-format > /dev/null && [ -n "$files" ]; then
  clang-format --dry-run --Werror $files
  echo "clang-format: clean"
fi
echo; echo "all tests passed in ${SECONDS}s"
