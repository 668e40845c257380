#!/usr/bin/env bash
# The main job: installs what the demo needs, builds runstore (the Python package, which carries
# the command-line tool) and runs the sweep demo on all cores.
#
#   bash scripts/demo.sh [--experiments N] [--store PATH] [--workers N] [--tar OUT]
#
# It installs only what it uses: a wheel of scripts/build-wheel.sh (dist/) for .venv's Python
# when one is there and newer than every source, else one build of the sources into .venv (the
# compiler, CMake and the libraries' -dev packages, `install-deps.sh demo`). A rerun builds
# nothing when no source changed, and with --store of a killed run runs only what is not done.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)
say() { echo "demo: $*"; }
trap 'echo; say "interrupted"; exit 130' INT

py=${PYTHON:-python3}
tag=$("$py" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
# What the package is built from (its tests are not).
sources=(CMakeLists.txt pyproject.toml cmake include src present cli capi python)
newer() { find "${sources[@]}" -type f ! -path 'python/tests/*' -newer "$1" -print -quit; }

# A wheel built from these sources, if there is one.
wheel=$(ls -t dist/runstore-*-"$tag"-*manylinux*.whl 2> /dev/null | head -n 1 || true)
if [ -n "$wheel" ] && [ -n "$(newer "$wheel")" ]; then
  say "$wheel is older than the sources: building instead"
  wheel=""
fi

if [ -n "$wheel" ]; then
  bash scripts/install-deps.sh demo-wheel
  want="wheel $(basename "$wheel") $(stat -c %Y "$wheel")"
else
  bash scripts/install-deps.sh demo
  if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    files() { git ls-files -z -- "${sources[@]}" ':!python/tests'; }
  else
    files() { find "${sources[@]}" -type f ! -path 'python/tests/*' -print0 | sort -z; }
  fi
  want="source $(files | xargs -0 sha256sum | sha256sum | cut -c1-16)"
fi

stamp="$root/.venv/.runstore-installed"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
  && "$root/.venv/bin/python" -c 'import runstore._core' 2> /dev/null; then
  say "runstore is installed in .venv and up to date (${want%% *} unchanged)"
elif [ -n "$wheel" ]; then
  say "installing $wheel into .venv"
  # The wheel again even where its version is installed; its dependencies only if missing.
  "$root/.venv/bin/python" -m pip install -q --force-reinstall --no-deps "$wheel"
  "$root/.venv/bin/python" -m pip install -q "$wheel"
  echo "$want" > "$stamp"
else
  # One build, kept in build/demo: after a change, only what changed compiles again. Through
  # ccache when it is installed (the tests' machine), else the compiler alone.
  # shellcheck source=scripts/functions.sh
  source "$root/scripts/functions.sh"
  use_ccache "$root"
  mkdir -p build
  log="$root/build/demo-build.log"
  say "building runstore (the C++ library, the runstore tool, the Python module); the first" \
    "build takes a few minutes, its log is $log"
  rm -f "$stamp"
  set +e
  # Progress: the compiler's steps ([n/N] and the file), not pip's and CMake's chatter.
  "$root/.venv/bin/python" -m pip install -v --no-build-isolation --no-deps \
    -C build-dir=build/demo -C cmake.define.RUNSTORE_BUILD_C_API=OFF "$root" 2>&1 \
    | tee "$log" \
    | awk '/^ *\[[0-9]+\/[0-9]+\] / { sub(/^ */, ""); f = $NF; sub(/.*\.dir\//, "", f); sub(/.*site-packages\//, "", f); sub(/^__\//, "", f);
             sub(/\.o$/, "", f); print "  " $1 " " f; fflush() }'
  rc=${PIPESTATUS[0]}
  set -e
  # Ctrl-C reaches pip and the compiler, which end on their own (so the trap above does not
  # run): the build's log tells an interruption from a failure.
  if [ "$rc" != 0 ] && grep -q "interrupted by user" "$log"; then
    echo
    say "interrupted; the next run builds what is left"
    exit 130
  fi
  if [ "$rc" != 0 ]; then
    tail -n 30 "$log"
    say "the build failed (exit status $rc); the whole log is $log"
    exit 1
  fi
  echo "$want" > "$stamp"
  say "built and installed into .venv"
fi
trap - INT
exec "$root/.venv/bin/python" examples/sweep_demo.py "$@"
