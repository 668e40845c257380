#!/usr/bin/env bash
# The C API as a user gets it: `cmake --install` into a fresh prefix, found by
# pkg-config, compiled as C11 against the installed header and library only
# (not the tree's), and run: tests/capi/capi_test.c, and the program of
# docs/c_api.md.
# Or the C API that the Python wheel carries, by the pkg-config file in it, whose Libs also
# set the run path (the library lies in site-packages, in no system directory).
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
#        install_test.sh --pkgconfig DIR SOURCE_DIR
set -euo pipefail
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ $1 == --pkgconfig ]]; then
  export PKG_CONFIG_PATH=$2
  src=$3
else
  build=$1 src=$2
  cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
  pc=$(find "$tmp/prefix" -name runstore.pc)
  [[ -n $pc ]] || { echo "install_test: no runstore.pc installed" >&2; exit 1; }
  export PKG_CONFIG_PATH=$(dirname "$pc")
fi
cflags=$(pkg-config --cflags runstore)
libs=$(pkg-config --libs runstore)
libdir=$(pkg-config --variable=libdir runstore)
[[ -f $libdir/librunstore_c.so ]] || { echo "install_test: $libdir/librunstore_c.so missing" >&2; exit 1; }
[[ -f $(pkg-config --variable=includedir runstore)/runstore/runstore.h ]]
cc -std=c11 -pthread -Wall -Wextra -Wpedantic -Werror $cflags "$src/tests/capi/capi_test.c" \
  -o "$tmp/capi_test" \
  $libs ${build:+-Wl,-rpath,"$libdir"}
# The program finds the installed library, not the build tree's.
ldd "$tmp/capi_test" > "$tmp/ldd.txt"
grep -qF "$libdir/librunstore_c.so" "$tmp/ldd.txt" || {
  echo "install_test: the program does not load the installed library:" >&2
  cat "$tmp/ldd.txt" >&2
  exit 1
}
"$tmp/capi_test" "$tmp/store"
# The documentation's program, as printed there.
awk '/^```c$/ {on = 1; next} /^```$/ {if (on) exit} on' "$src/docs/c_api.md" > "$tmp/doc_example.c"
[[ -s $tmp/doc_example.c ]] || { echo "install_test: no C program in docs/c_api.md" >&2; exit 1; }
cc -std=c11 -Wall -Wextra -Wpedantic -Werror $cflags "$tmp/doc_example.c" -o "$tmp/doc_example" \
  $libs ${build:+-Wl,-rpath,"$libdir"}
out=$("$tmp/doc_example" "$tmp/doc-store")
grep -q "loss at step 9: 0.1" <<< "$out" && grep -q "1000 records of loss" <<< "$out" || {
  echo "install_test: docs/c_api.md's program printed: $out" >&2
  exit 1
}
echo "install_test: ${build:+installed under $tmp/prefix, }found by pkg-config ($cflags $libs), built and run"
