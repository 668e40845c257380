#!/usr/bin/env bash
# Installs what runstore needs, on a fresh Debian 12 machine, as root. Idempotent: packages
# already present are skipped, so a second run does nothing but check.
#
#   bash scripts/install-deps.sh              # everything the tests and benchmarks use
#   bash scripts/install-deps.sh demo         # what scripts/demo.sh builds and runs with: a C++
#                                             # compiler, CMake, the libraries' -dev packages and
#                                             # .venv with numpy, pandas and the build tools
#   bash scripts/install-deps.sh demo-wheel   # what the demo needs when it installs a built wheel:
#                                             # python3-venv and .venv (pip brings numpy and pandas)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/functions.sh
source "$here/scripts/functions.sh"
profile=${1:-all}

# What builds the library, the tool and the Python package (`pip install .`).
build_packages=(
  build-essential g++ cmake ninja-build pkg-config
  libzstd-dev liblz4-dev libxxhash-dev libssl-dev
  python3 python3-venv python3-dev
)
case $profile in
  all)
    apt_packages=(
      "${build_packages[@]}" git
      libgtest-dev libgmock-dev libbenchmark-dev
      libcli11-dev nlohmann-json3-dev clang-format
      clang-16 libclang-rt-16-dev llvm
      openmpi-bin libopenmpi-dev
      tmux chromium ccache
      cargo
      openjdk-17-jre-headless
    ) ;;
  demo) apt_packages=("${build_packages[@]}") ;;
  demo-wheel) apt_packages=(python3 python3-venv) ;;
  *) echo "install-deps: unknown profile '$profile' (all, demo or demo-wheel)" >&2; exit 2 ;;
esac

missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing Debian packages (${missing[*]}); run this script as root" >&2
    exit 1
  fi
  echo "install-deps: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The Python side lives in virtual environments of the project's own (scripts/functions.sh).
py=${PYTHON:-python3}
case $profile in
  demo) venv "$here/.venv" "$py" "$here/python/requirements-demo.txt" ;;
  demo-wheel) [ -x "$here/.venv/bin/python" ] || "$py" -m venv "$here/.venv" ;;
  all) if [ "${RUNSTORE_SKIP_PYTHON:-0}" != 1 ]; then
    # Python 3.12 for the EMA workbench integration (ema-workbench 3.x needs 3.12 or later).
    py312=$(find_python 3.12)
    if [ -z "$py312" ]; then
      echo "install-deps: no Python 3.12 (python3.12 or pyenv); the EMA workbench tests need" \
        "one (the demo does not: bash scripts/install-deps.sh demo)" >&2
      exit 1
    fi
    # The three environments are independent: made at once (in a new clone, pip's unpacking
    # and compiling takes minutes), each one's output printed when it is done.
    logs=$(mktemp -d)
    venv_logged() { venv "$@" > "$logs/$(basename "$1")" 2>&1; }
    venv_logged "$here/.venv" "$py" "$here/python/requirements-dev.txt" & dev=$!
    # ml-instrument's own environment: it pins numpy (<=2.2.4), pyarrow and polars, which the
    # project's .venv does not hold; the runstore wheel is installed into it by scripts/test.sh.
    venv_logged "$here/.venv-mli" "$py" "$here/python/requirements-mli.txt" & mli=$!
    venv_logged "$here/.venv312" "$py312" "$here/python/requirements-ema.txt" & ema=$!
    failed=0
    for job in "$dev .venv" "$mli .venv-mli" "$ema .venv312"; do
      wait "${job% *}" || { failed=1; echo "install-deps: making ${job#* } failed:" >&2; }
      cat "$logs/${job#* }"
    done
    rm -rf "$logs"
    [ "$failed" = 0 ] || exit 1
  fi ;;
esac
echo "install-deps: ok"
