# Shell functions the scripts share (sourced, not run): finding a Python by its version,
# keeping a virtual environment in step with a requirements file, and compiling through ccache.

# use_ccache ROOT: every C++ build of this shell goes through ccache when it is installed (the
# tests' machine; install-deps.sh installs it), with paths hashed relative to ROOT so that two
# clones and the wheels' build directories share the cache. Settings already in the
# environment are kept.
use_ccache() {
  if command -v ccache > /dev/null; then
    export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
    export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$1} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  fi
}

# find_python VERSION: prints the path of a working pythonVERSION (PATH first, then pyenv's
# versions, newest patch release first), or nothing. pyenv's shim on PATH fails unless that
# version is selected, hence the check that the interpreter runs.
find_python() {
  local v=$1 c
  for c in "$(command -v "python$v" || true)" \
           $(ls -d "$(pyenv root 2> /dev/null || echo /nonexistent)"/versions/"$v".*/bin/"python$v" \
               2> /dev/null | sort -rV); do
    if [ -n "$c" ] && "$c" -c 'import sys' 2> /dev/null; then
      echo "$c"
      return 0
    fi
  done
}

# venv DIR PYTHON REQUIREMENTS: DIR is a virtual environment of PYTHON holding what REQUIREMENTS
# lists. pip runs again only when that file's hash changes (a stamp per requirements file, so
# that one environment can serve two files without reinstalling at each alternation).
venv() {
  local dir=$1 python=$2 req=$3
  if [ ! -x "$dir/bin/python" ]; then
    echo "creating the virtual environment $dir ($("$python" --version 2>&1))"
    "$python" -m venv "$dir"
  fi
  local stamp="$dir/.$(basename "$req").sha" want
  want=$(sha256sum "$req" | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "installing $(basename "$req") into $dir"
    "$dir/bin/python" -m pip install -q --upgrade pip
    "$dir/bin/python" -m pip install -q -r "$req"
    echo "$want" > "$stamp"
  fi
}
