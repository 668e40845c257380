#!/usr/bin/env bash
# The user's side of tests/wheel_hidden_toolchain_test.sh, run by it as a user who is not root,
# inside the namespace it made: checks that the toolchain and the libraries are gone, installs
# the wheel with pip alone into a fresh environment, and runs what a newcomer runs.
#   wheel_hidden_toolchain_user.sh FOLDER PYTHON SOURCE_DIR
set -euo pipefail
base=$1 python=$2 src=$3
T="$base/home"  # the user's: where the checks keep their output
# shellcheck source=tests/lib/checks.sh
source "$src/tests/lib/checks.sh"
S="$T/sweep"

check "not root" 1 test "$(id -u)" = 0
for tool in cc gcc g++ c++ clang++-16 cmake ninja pkg-config ld; do
  check "no $tool on PATH" 1 command -v "$tool"
done
for header in zstd.h lz4.h xxhash.h openssl/sha.h Python.h; do
  check "no header $header" 1 test -e "/usr/include/$header"
done
for so in libzstd.so.1 liblz4.so.1 libxxhash.so.0 libcrypto.so.3 libssl.so.3; do
  check "the system's $so does not load" 1 "$python" -c "import ctypes; ctypes.CDLL('$so')"
done

check "a fresh virtual environment" 0 "$python" -m venv "$T/venv"
V="$T/venv/bin"
check "pip installs the wheel with the report's extra, from wheels alone" 0 \
  "$V/python" -m pip install --no-index --find-links "$base/wheels" \
  "$(ls "$base"/wheels/runstore-*.whl)[report]"
export PATH="$V:$PATH"

check "runstore --version (the compiled tool)" 0 runstore --version
has "it answers" out "reads store format versions"
check "the demo sweep of 2,000 experiments on 2 processes" 0 \
  python "$src/examples/sweep_demo.py" --experiments 2000 --workers 2 --store "$S"
has "it ran every experiment" out "2,000 done"
has "and read them back" out "read back: 2,000 experiments"
check "runstore info" 0 runstore info "$S"
check "runstore status" 0 runstore status "$S"
has "status counts them done" out "2,000"
check "runstore verify" 0 runstore verify "$S"
check "runstore cat --limit 3" 0 runstore cat "$S" final_size --limit 3
check "runstore export tar" 0 runstore export tar "$S" "$T/sweep.tar.gz"
check "runstore report" 0 runstore report "$S" -o "$T/report.html"
check "the report is a page" 0 grep -q "<html" "$T/report.html"
check "the C API's library loads, and reads the sweep" 0 python - "$S" << 'PY'
import ctypes
import sys

import runstore

lib = ctypes.CDLL(runstore.get_library_dir() + "/librunstore_c.so.1")
lib.runstore_version.restype = ctypes.c_char_p
assert lib.runstore_version().decode() == runstore.__version__, lib.runstore_version()
store = ctypes.c_void_p()
assert lib.runstore_open(sys.argv[1].encode(), 1, ctypes.byref(store)) == 0
lib.runstore_close(store)
PY
# Every binary of the installed package: nothing it needs is missing, and the C++ standard
# library does not come from the machine.
for elf in $(find "$T/venv/lib" -path '*site-packages/runstore*' -type f \
               \( -name '*.so*' -o -path '*/_bin/*' \)); do
  [ "$(head -c 4 "$elf" | tail -c 3)" = ELF ] || continue  # librunstore_c.so: a linker script
  check "ldd $(basename "$elf"): every library found" 0 bash -c "! ldd '$elf' | grep -q 'not found'"
  check "$(basename "$elf") needs no libstdc++" 0 bash -c "! ldd '$elf' | grep -q 'libstdc++'"
done

if [ "$fails" != 0 ]; then
  echo "wheel_hidden_toolchain_test: $fails checks failed"
  exit 1
fi
echo "wheel_hidden_toolchain_test: every check passed"
