#!/usr/bin/env bash
# The main job: installs what is missing, builds runstore (library, command-line
# tool, Python package) and runs the sweep demo on all cores.
#   bash scripts/demo.sh [--experiments N] [--store PATH]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)
bash scripts/install-deps.sh
cmake --preset release -DRUNSTORE_BUILD_TESTS=OFF -DRUNSTORE_BUILD_BENCHMARKS=OFF > /dev/null
cmake --build build/release -j "$(nproc)" --target runstore_cli
"$root/.venv/bin/python" -m pip install -q --no-build-isolation "$root"
export PATH="$root/build/release/cli:$PATH"
export RUNSTORE_PYTHON="$root/.venv/bin/python"  # `runstore export tar|parquet` runs the package
exec "$root/.venv/bin/python" examples/sweep_demo.py "$@"
