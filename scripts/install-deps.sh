#!/usr/bin/env bash
# Installs everything runstore needs to build and test, on a fresh Debian 12 machine, as root.
# Idempotent: packages already present are skipped, so a second run does nothing but check.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

apt_packages=(
  build-essential g++ cmake ninja-build pkg-config git
  libzstd-dev liblz4-dev libxxhash-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev clang-format
  clang-16 libclang-rt-16-dev llvm
  python3 python3-venv python3-dev
  openmpi-bin libopenmpi-dev
  tmux chromium ccache
  cargo
)

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

# A virtual environment made with a Python and kept in step with a requirements file: pip runs
# again only when the file's hash changes. venv PYTHON REQUIREMENTS
venv() {
  local dir=$1 python=$2 req=$3
  if [ ! -x "$dir/bin/python" ]; then
    echo "install-deps: creating $dir"
    "$python" -m venv "$dir"
  fi
  local stamp="$dir/.requirements.sha" want
  want=$(sha256sum "$req" | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    "$dir/bin/python" -m pip install -q --upgrade pip
    "$dir/bin/python" -m pip install -q -r "$req"
    echo "$want" > "$stamp"
  fi
}

# The Python side lives in virtual environments of the project's own.
if [ "${RUNSTORE_SKIP_PYTHON:-0}" != 1 ]; then
  py=${PYTHON:-python3}
  venv "$here/.venv" "$py" "$here/python/requirements-dev.txt"
  # ml-instrument's own environment: it pins numpy (<=2.2.4), pyarrow and polars, which the
  # project's .venv does not hold; the runstore wheel is installed into it by scripts/test.sh.
  venv "$here/.venv-mli" "$py" "$here/python/requirements-mli.txt"
  # Python 3.12 for the EMA workbench integration (ema-workbench 3.x needs 3.12 or later):
  # python3.12 from PATH or from pyenv's versions
  # (pyenv's shim on PATH fails unless 3.12 is selected, hence the check that it runs.)
  py312=""
  for c in "$(command -v python3.12 || true)" \
           $(ls -d "$(pyenv root 2> /dev/null || echo /nonexistent)"/versions/3.12*/bin/python3.12 2> /dev/null); do
    if [ -n "$c" ] && "$c" -c 'import sys' 2> /dev/null; then py312=$c; break; fi
  done
  if [ -z "$py312" ]; then
    echo "install-deps: no Python 3.12 (python3.12 or pyenv); the EMA workbench tests need one" >&2
    exit 1
  fi
  venv "$here/.venv312" "$py312" "$here/python/requirements-ema.txt"
fi
echo "install-deps: ok"
