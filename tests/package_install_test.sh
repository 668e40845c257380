#!/usr/bin/env bash
# A newcomer's install: a new virtual environment, `pip install` of the package's wheel (what
# `pip install .` builds) with its arrow extra, and then the `runstore` command as typed, with
# no variable set: info, ls, cat, verify, the tar and Parquet exports, import tar, and the
# package's three modules. Also that the compiled tool, run by itself, names what to install
# for the exports it has no engine for, instead of starting a Python behind the user's back.
#
#   bash tests/package_install_test.sh WHEEL
set -euo pipefail
wheel=$(realpath "$1")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# shellcheck source=tests/lib/checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/checks.sh"

python3 -m venv "$T/venv"
"$T/venv/bin/python" -m pip install -q "${wheel}[arrow]"
# The environment of a new shell with the venv activated: its bin first, nothing of ours set.
run() { env -i HOME="$HOME" PATH="$T/venv/bin:/usr/local/bin:/usr/bin:/bin" LANG=C.UTF-8 "$@"; }
S="$T/sweep.rs"

check "the runstore command is on the environment's PATH" 0 run sh -c 'command -v runstore'
has "it is the venv's" out "$T/venv/bin/runstore"
check "runstore --version" 0 run runstore --version
has "the compiled tool answers" out "reads store format versions"
check "the package's three modules import" 0 run python -c \
  "import runstore, runstore.experiments, runstore.export; print(runstore.__version__)"
cat > "$T/sweep.py" << 'EOF'
import sys

import numpy as np

import runstore
import runstore.experiments as ex


def model(a, b):
    return {"y": a * b, "curve": np.arange(4.0) * a}


if __name__ == "__main__":
    store = runstore.open(sys.argv[1])
    ex.define(store, ex.grid(a=range(10), b=[0.5, 1.0, 1.5, 2.0, 2.5]))
    summary = ex.run(store, model, workers=2, progress=False)
    assert summary.done == 50, summary
EOF
check "a sweep of 50 experiments on 2 worker processes into a store" 0 run python "$T/sweep.py" "$S"

check "runstore info STORE" 0 run runstore info "$S"
has "info counts the experiments' records" out "records"
check "runstore ls STORE" 0 run runstore ls "$S"
has "ls lists the outcome" out "curve"
check "runstore cat STORE y --format csv" 0 run runstore cat "$S" y --format csv
check "runstore verify STORE" 0 run runstore verify "$S"
check "runstore export tar STORE OUT" 0 run runstore export tar "$S" "$T/out.tar.gz"
has "the tar export reports its experiments" out "50 experiments"
check "export tar again refuses to replace OUT" 5 run runstore export tar "$S" "$T/out.tar.gz"
has "and says how to" err "--force"
check "runstore --skip-damaged export tar STORE OUT -f (global flag first)" 0 \
  run runstore --skip-damaged export tar "$S" "$T/out.tar.gz" -f
check "runstore export parquet STORE OUT" 0 run runstore export parquet "$S" "$T/out.parquet"
has "the Parquet export reports its rows" out "50 rows"
check "the Parquet file reads back" 0 run python -c \
  "import pyarrow.parquet as pq, sys; t = pq.read_table(sys.argv[1]); assert t.num_rows == 50, t" \
  "$T/out.parquet"
check "runstore import tar OUT STORE2" 0 run runstore import tar "$T/out.tar.gz" "$T/again.rs"
check "the imported store verifies" 0 run runstore verify "$T/again.rs"
check "python -m runstore is the same command" 0 run python -m runstore ls "$S"
check "an unknown command is a usage error" 1 run runstore frobnicate
check "an export missing its OUT is a usage error too" 1 run runstore export tar "$S"
check "a missing store is not found" 3 run runstore info "$T/none.rs"
check "export tar of a missing store is not found" 3 run runstore export tar "$T/none.rs" "$T/n.tgz"

tool=$(run python -c "import _runstore_cli as c; print(c.tool_path())")
check "the compiled tool by itself has no tar engine" 5 run "$tool" export tar "$S" "$T/x.tar.gz"
has "and names what to install" err "pip install"
[ ! -e "$T/x.tar.gz" ] && echo "ok: and writes nothing" || { echo "FAIL: it wrote $T/x.tar.gz"; fails=$((fails + 1)); }

# The C API from the wheel: a C11 program built with the wheel's pkg-config file alone (whose
# Libs set the run path), against the wheel's header and library, then run.
lib=$(run python -c "import runstore; print(runstore.get_library_dir())")
check "the wheel carries the C API: runstore.h and librunstore_c" 0 \
  test -f "$(run python -c "import runstore; print(runstore.get_include())")/runstore/runstore.h" \
  -a -f "$lib/librunstore_c.so.1" -a -f "$lib/pkgconfig/runstore.pc"
check "a C program builds against the wheel's C API by its pkg-config file and runs" 0 \
  bash "$(dirname "${BASH_SOURCE[0]}")/capi/install_test.sh" --pkgconfig "$lib/pkgconfig" \
  "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [ "$fails" != 0 ]; then
  echo "package_install_test: $fails checks failed"
  exit 1
fi
echo "package_install_test: every check passed"
