#!/usr/bin/env bash
# Runs every test of runstore: the C++ suites (GoogleTest through CTest, including
# the crash, corruption and kill -9 tests and the CLI tests), the layering check and
# a Clang build with its thread-safety analysis as errors, the corruption and
# power-loss tests again under AddressSanitizer + UndefinedBehaviorSanitizer, every
# fuzz target over its seed corpus and regressions, the unit and concurrency tests
# under ThreadSanitizer, the Python suite (pytest), a small run of every benchmark
# harness, and the formatting and lint checks (clang-format, ruff). Installs what is missing
# first.
#
#   bash scripts/test.sh            # everything
#   SKIP_ASAN=1 SKIP_FUZZ=1 SKIP_TSAN=1 bash scripts/test.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)
jobs=$(nproc)

bash scripts/install-deps.sh

# Every C++ build goes through ccache (installed by install-deps.sh): the Python 3.12 wheel
# then reuses the library objects of the first wheel, and a rerun only compiles what changed.
# shellcheck source=scripts/functions.sh
source scripts/functions.sh
use_ccache "$root"

step() { printf '\n==== %s (at %ds) ====\n' "$*" "$SECONDS"; }

# parallel CMD...: runs CMD in the background, at most one a core at once; `parallel_wait` waits
# for every one and fails if one did (a command prints its own output when it fails).
parallel_pids=()
parallel() {
  while [ "$(jobs -pr | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  "$@" &
  parallel_pids+=($!)
}
parallel_wait() {
  local pid rc=0
  for pid in "${parallel_pids[@]}"; do wait "$pid" || rc=1; done
  parallel_pids=()
  return $rc
}

step "Wheels: every Python's self-contained wheel (scripts/build-wheel.sh); the 3.11 one into .venv"
# What users install: the package, the tool and the C API, their libraries bundled by
# auditwheel. Each Python builds at one depth under build/ (build/wheel-3.X), so that ccache finds
# the library's objects of one wheel for the next (the same compile, the same relative paths)
# and of a previous run or clone.
rm -rf "$root/build/wheelhouse"
mkdir -p "$root/build"
bash scripts/build-wheel.sh --out "$root/build/wheelhouse" > "$root/build/wheels.log" 2>&1 \
  || { cat "$root/build/wheels.log"; exit 1; }
grep '^build-wheel: runstore-' "$root/build/wheels.log"
wheel=$(ls "$root"/build/wheelhouse/runstore-*-cp311-*.whl)
wheel312=$(ls "$root"/build/wheelhouse/runstore-*-cp312-*.whl)
"$root/.venv/bin/python" -m pip install -q --force-reinstall --no-deps "$wheel"
# The Python the CLI test runs the package's `runstore export tar|parquet` with.
export RUNSTORE_PYTHON="$root/.venv/bin/python"

step "C++ build (release) and tests"
cmake --preset release -DRUNSTORE_BUILD_BENCHMARKS=ON > build-release-configure.log 2>&1 \
  || { cat build-release-configure.log; exit 1; }
rm -f build-release-configure.log
cmake --build build/release -j "$jobs"
ctest --test-dir build/release --output-on-failure -j "$jobs" --timeout 900
# What the crash, kill, misuse and damage suites tried, with their seeds (each prints its figures).
grep -ah '^\[ \(figures\|misuse\|open files\|staging\|seed\|stride\) *\]' \
  build/release/Testing/Temporary/LastTest.log || true

step "Layers: includes point down, the library holds no test code, Clang's thread-safety analysis"
python3 scripts/check_layers.py --self-test
python3 scripts/check_layers.py
# The fault-injecting env is test code (src/testing): never in the library.
if nm -C build/release/librunstore.a | grep -qi 'FaultInjection'; then
  echo "librunstore.a holds fault-injection symbols: src/testing must stay out of it"; exit 1
fi
echo "nm librunstore.a: no fault-injection symbols"
cmake --preset clang-tsa > /dev/null
cmake --build build/clang-tsa -j "$jobs" --target runstore runstore_present
echo "clang -Wthread-safety -Werror: clean"

if [ "${SKIP_ASAN:-0}" != 1 ]; then
  step "C++ tests under ASan+UBSan (unit, power loss, corruption sweep, the C API from C)"
  cmake --preset asan > /dev/null
  cmake --build build/asan -j "$jobs" --target runstore_unit_tests power_loss_test corruption_test \
    capi_test
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # The release build above swept every byte and tried 16 power losses at every crash point;
  # under the sanitizers (ten times slower) every 8th byte, from an offset the seed picks, and 4
  # power losses a point, so each run replays a different part of the sweep.
  for t in runstore_unit_tests power_loss_test corruption_test; do
    echo "-- $t (asan)"
    RUNSTORE_SWEEP_STRIDE=8 RUNSTORE_POWER_LOSS_TRIES=4 "build/asan/$t" --gtest_brief=1
  done
  echo "-- capi_test (asan)"
  build/asan/capi_test build/asan/capi-test-store
fi

if [ "${SKIP_FUZZ:-0}" != 1 ]; then
  step "Fuzz targets over their seed corpora and regressions (libFuzzer, ASan+UBSan)"
  bash scripts/fuzz.sh replay
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

step "Rust crate over the C API (bindings/rust/runstore: cargo test --offline, the sseq example)"
# Debian's toolchain where it is installed (the crate's floor, rustc 1.63), else the PATH's.
cargo=cargo
if [ -x /usr/bin/cargo ] && [ -x /usr/bin/rustc ]; then
  cargo=/usr/bin/cargo
  export RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc
fi
# The tests link the build tree's library; the sseq example links the one the wheel in .venv
# carries, as a user without a compiler toolchain for C++ would (docs/c_api.md, "From the wheel").
wheel_lib=$("$root/.venv/bin/python" -c "import runstore; print(runstore.get_library_dir())")
(
  cd bindings/rust/runstore
  export CARGO_TARGET_DIR="$root/build/rust"
  RUNSTORE_LIB_DIR="$root/build/release" "$cargo" test --offline -q
  RUNSTORE_LIB_DIR="$wheel_lib" "$cargo" build --offline -q --release --examples
)
sseq="$root/build/rust-sseq-store"
rm -rf "$sseq"
ldd build/rust/release/examples/sseq_matrices | grep -F "$wheel_lib/librunstore_c.so.1"
build/rust/release/examples/sseq_matrices write "$sseq"
build/rust/release/examples/sseq_matrices read "$sseq"
rm -rf "$sseq"
# The Python tests that run the C and Rust programs beside the package need them built.
export RUNSTORE_REQUIRE_BINDINGS=1

step "Python tests"
# One pytest process a core (pytest-xdist; the tests that share a module's fixture in one of
# them, python/tests/conftest.py): most tests wait on the processes they start.
pytest_args=(-q -p no:cacheprovider -n "$jobs" --dist loadgroup)
cd "$root/python/tests"
"$root/.venv/bin/python" -m pytest "${pytest_args[@]}" --durations=30 "$root/python/tests"
cd "$root"

# The tests that need nothing but numpy, pandas and pyarrow, for the other Pythons' wheels.
core_tests=("$root"/python/tests/{test_attrs,test_roundtrip,test_values,test_writer,test_experiments,test_zero_copy,test_errors,test_pandas,test_log_call}.py)

step "Python 3.12: the package's core tests and the EMA workbench integration (ema-workbench 3.x)"
# ema-workbench 3.x needs Python 3.12; .venv312 (scripts/install-deps.sh) has it and the build
# tools. The 3.12 wheel, then the tests that need nothing but numpy and pandas.
"$root/.venv312/bin/python" -m pip install -q --force-reinstall --no-deps "$wheel312"
cd "$root/python/tests"
"$root/.venv312/bin/python" -m pytest "${pytest_args[@]}" \
  "$root"/python/tests/{test_ema,test_ema_signals,test_ema_batch,test_ema_mpi,test_ema_memory}.py \
  "${core_tests[@]}"
# The layout check of runstore.ema, whose ema_workbench only this environment has.
"$root/.venv312/bin/python" -m pytest -q -p no:cacheprovider "$root"/python/tests/test_package_layout.py -k "ema"
cd "$root"
# The EMA benchmark at a small size (that it runs and reads back right; exit 3 is a missed target).
rc=0
"$root/.venv312/bin/python" bench/python/ema_bench.py --n 500 --rounds 2 > "$root/build/ema_bench.log" 2>&1 || rc=$?
if [ "$rc" != 0 ] && [ "$rc" != 3 ]; then cat "$root/build/ema_bench.log"; exit 1; fi
echo "bench/python/ema_bench.py: ran (exit status $rc)"

step "ml-instrument's Collector on runstore.mlinstrument.Backend, in ml-instrument's own environment"
"$root/.venv-mli/bin/python" -m pip install -q --force-reinstall --no-deps "$wheel"
cd "$root/python/tests"
"$root/.venv-mli/bin/python" -m pytest -q -p no:cacheprovider \
  "$root"/python/tests/{test_mlinstrument,test_package_layout}.py -k "mlinstrument"
cd "$root"

step "Every other Python's wheel in a new environment: the package's core tests"
for w in "$root"/build/wheelhouse/runstore-*.whl; do
  case $w in *-cp311-* | *-cp312-*) continue ;; esac
  v=$(basename "$w" | sed 's/.*-cp3\([0-9]*\)-cp3.*/3.\1/')
  env="$root/build/venv-$v"
  rm -rf "$env"
  "$root/.venv-wheel/$v/bin/python" -m venv "$env"
  "$env/bin/python" -m pip install -q "$w" "pytest>=8,<9.2" pytest-xdist hypothesis pyarrow
  (cd "$root/python/tests" && "$env/bin/python" -m pytest "${pytest_args[@]}" "${core_tests[@]}")
done

step "A new virtual environment: pip install of the wheel, then the runstore command as typed"
bash tests/package_install_test.sh "$wheel"

step "The wheel where there is nothing to build with: a user's install, toolchain and libraries hidden"
bash tests/wheel_hidden_toolchain_test.sh "$wheel"

step "A CMake project that embeds runstore (add_subdirectory) with the compiler's default standard"
bash tests/embed_test.sh "$root/build/embed"

step "Benchmark harnesses at small sizes (that they run and read back right; not their speed)"
smoke="$root/build/bench-smoke"  # on the repository's disk: the suite refuses tmpfs
rm -rf "$smoke"
# docs/benchmarks.md must be what report.py makes of the recorded figures and of the notes.
bash bench/compare/run.sh --from-json docs/img/benchmarks.json --report "$smoke/regen/benchmarks.md" > /dev/null
diff -u docs/benchmarks.md "$smoke/regen/benchmarks.md" || {
  echo "docs/benchmarks.md is out of step with bench/compare: run" \
    "bash bench/compare/run.sh --from-json docs/img/benchmarks.json"
  exit 1
}
# Every harness below runs at once with the others, one a core, each with a log of its own
# (printed when it fails).
# Every case of every workload of the comparison suite, its crash kills and its report. The
# suite fails on an error or on runstore losing committed data, never on a missed target.
compare_smoke() {
  RUNSTORE_BENCH_NO_BUILD=1 bash bench/compare/run.sh --quick --dir "$smoke/compare" \
    > "$smoke.compare.log" 2>&1 || { cat "$smoke.compare.log"; return 1; }
  tail -n 1 "$smoke.compare.log"
}
# smoke NAME CMD...: exit status 3 is a benchmark that ran but missed a target, which a small
# run may; any other failure fails the suite.
smoke() {
  local name=$1 rc=0 log
  log="$smoke.$(basename "${1%% *}").log"
  shift
  "$@" > "$log" 2>&1 || rc=$?
  if [ "$rc" != 0 ] && [ "$rc" != 3 ]; then cat "$log"; return 1; fi
  echo "$name: ran (exit status $rc)"
}
# The wheel against h5py's and pyarrow's (size, install, import): that it measures all three.
wheel_smoke() {
  "$root/.venv/bin/python" bench/python/wheel_bench.py --wheel "$wheel" --repeat 1 \
    --dir "$smoke/wheel" > "$smoke.wheel.log" 2>&1 || { cat "$smoke.wheel.log"; return 1; }
  grep -c '^| \(runstore\|h5py\|pyarrow\) ' "$smoke.wheel.log" | grep -qx 3 \
    || { cat "$smoke.wheel.log"; echo "wheel_bench.py: not three rows"; return 1; }
  echo "bench/python/wheel_bench.py: ran"
}
parallel compare_smoke
for b in "sweep_bench.py --n 2000 --batch 200" "export_bench.py --n 2000" \
         "lazy_io_probe.py --n 4 --k 2 --reps 1" "layout_bench.py --runs 8 --steps 1000 --repeat 1" \
         "commit_floor.py --mb 4 --commits 20 --experiments 2000 --reps 1" \
         "lookup_bench.py --n 2000 --lookups 200" "dask_bench.py --outputs 10 20" \
         "steplog_bench.py --steps 20000 --repeat 1" "rl_log_bench.py --procs 2 --steps 2000" \
         "report_bench.py --n 2000" "runner_bench.py --n 2000 --commit-every None 1" \
         "xarray_bench.py --n 2000" "frame_bench.py --series 50 --repeat 1" \
         "attrs_bench.py --updates 5 --reads 20" \
         "query_bench.py --steps 20000 --experiments 2000 --compact" \
         "spark_vs_dask.py --objects 8 16 --mib 1 --terminators save" \
         "tune_bench.py --trials 4 --iterations 5"; do
  name=${b%%.py*}
  # shellcheck disable=SC2086  # the benchmark's name and arguments
  parallel smoke "bench/python/$b" "$root/.venv/bin/python" bench/python/$b --dir "$smoke/$name"
done
# The Rust crate against the C++ API, one round (that both programs run and print the same
# figures; the ratios are docs/performance.md's, measured with more rounds on a quiet machine).
parallel smoke "bench/rust_vs_cpp.py" python3 bench/rust_vs_cpp.py --rounds 1 --dir "$smoke"
parallel wheel_smoke
parallel_wait
rm -rf "$smoke" "$smoke".*log

step "Formatting (clang-format, Google style; ruff for the Python)"
files=$(git ls-files '*.h' '*.cc' | grep -v '^third_party/' || true)
if command -v clang-format > /dev/null && [ -n "$files" ]; then
  clang-format --dry-run --Werror $files
  echo "clang-format: clean"
fi
# Settings in pyproject.toml [tool.ruff]; `ruff format` and `ruff check --fix` repair most.
python_dirs=(python examples bench scripts)
"$root/.venv/bin/ruff" format --check "${python_dirs[@]}"
"$root/.venv/bin/ruff" check "${python_dirs[@]}"
echo; echo "all tests passed in ${SECONDS}s"
