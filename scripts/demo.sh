#!/usr/bin/env bash
# The main job: installs what is missing, builds runstore (the Python package, which
# carries the command-line tool) and runs the sweep demo on all cores.
#   bash scripts/demo.sh [--experiments N] [--store PATH]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)
bash scripts/install-deps.sh
# The package carries the command-line tool: `runstore` in .venv/bin.
"$root/.venv/bin/python" -m pip install -q --no-build-isolation "$root"
exec "$root/.venv/bin/python" examples/sweep_demo.py "$@"
