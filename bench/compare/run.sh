#!/usr/bin/env bash
# runstore against the tools its users use today (h5py, zarr, sqlite3, pickle + bz2, np.save,
# a tarball of CSVs): every workload, each case in a process of its own, a table and a chart per
# workload in docs/benchmarks.md.
#
#   bash bench/compare/run.sh                 # everything, 3 repetitions (~15 min on 2 cores)
#   bash bench/compare/run.sh --quick         # a smoke run of every case (~2 min); report in --dir
#   bash bench/compare/run.sh --workloads sweep,crash --tools h5py_one --repeat 1
#   bash bench/compare/run.sh --help
#
# Installs what it needs into the project's virtual environment (.venv) when missing: the
# packages of python/requirements-bench.txt, and the runstore package itself (built from this
# tree, again whenever src/, include/ or python/ are newer than the installed module; set
# RUNSTORE_BENCH_NO_BUILD=1 to use what is installed).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$here"
venv="$here/.venv"
py="$venv/bin/python"

if [ ! -x "$py" ]; then
  echo "bench: no $venv yet: running scripts/install-deps.sh" >&2
  bash scripts/install-deps.sh
fi

# The peers and the tools of the driver.
if ! "$py" -c "import h5py, zarr, pandas, matplotlib, psutil" 2>/dev/null; then
  echo "bench: installing python/requirements-bench.txt into .venv" >&2
  "$py" -m pip install -q -r python/requirements-bench.txt
fi

# runstore itself, built from this tree (not needed to print help or rewrite a report).
build=1
for a in "$@"; do
  case "$a" in -h|--help|--from-json|--from-json=*) build=0 ;; esac
done
if [ "${RUNSTORE_BENCH_NO_BUILD:-0}" != 1 ] && [ "$build" = 1 ]; then
  core=$("$py" -c "import runstore._core as c; print(c.__file__)" 2>/dev/null || true)
  rebuild=0
  if [ -z "$core" ]; then
    echo "bench: runstore is not installed in .venv: building it" >&2
    rebuild=1
  elif [ -n "$(find src include python/src python/runstore python/CMakeLists.txt CMakeLists.txt \
                 -newer "$core" -type f -print -quit 2>/dev/null)" ]; then
    echo "bench: sources are newer than the installed runstore: rebuilding it" >&2
    rebuild=1
  fi
  if [ "$rebuild" = 1 ]; then
    "$py" -m pip install -q --no-build-isolation -C build-dir=build/py-bench . >&2
  fi
fi

exec "$py" "$here/bench/compare/bench.py" "$@"
