#!/usr/bin/env bash
# A source build on a machine without runstore's libraries' development files
# stops with one message that names the package to install on Debian/Ubuntu,
# RHEL/Fedora and conda, for every library missing, not CMake's trace of the
# first. Configures the tree twice in a scratch directory: with pkg-config
# finding no .pc file at all, and with no pkg-config.
# Usage: build_errors_test.sh SOURCE_DIR
set -uo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "build_errors_test: $*" >&2; echo "--- cmake said:" >&2; cat "$tmp/out" >&2; exit 1; }

# CMake wraps a message's lines: `said` holds the output with every run of blanks and newlines
# one space (a variable, not a pipe into grep -q, whose early exit would fail the pipeline).
said=""
hear() { said=$(tr -s ' \n' '  ' < "$tmp/out"); }

configure() {
  cmake -S "$src" -B "$tmp/build" -G Ninja -DRUNSTORE_BUILD_TESTS=OFF -DRUNSTORE_BUILD_BENCHMARKS=OFF \
    -DRUNSTORE_BUILD_CLI=OFF -DRUNSTORE_BUILD_EXAMPLES=OFF -DRUNSTORE_BUILD_C_API=OFF "$@" > "$tmp/out" 2>&1
}

# No .pc file found: every library named, with its package on each platform.
rm -rf "$tmp/build"
if PKG_CONFIG_LIBDIR="$tmp/none" PKG_CONFIG_PATH= configure; then fail "configured without libraries"; fi
hear
for want in "the development files of libzstd, liblz4, libxxhash were not found" \
            "sudo apt-get install libzstd-dev liblz4-dev libxxhash-dev" \
            "sudo dnf install libzstd-devel lz4-devel xxhash-devel" \
            "conda install -c conda-forge zstd lz4-c xxhash"; do
  grep -qF "$want" <<< "$said" || fail "no \"$want\""
done
# The Python extension's build names libcrypto too (OpenSSL hidden by a root with nothing).
rm -rf "$tmp/build"
if PKG_CONFIG_LIBDIR="$tmp/none" PKG_CONFIG_PATH= configure -DRUNSTORE_BUILD_PYTHON=ON \
    -DOPENSSL_ROOT_DIR="$tmp/none" -DOPENSSL_CRYPTO_LIBRARY="$tmp/none/libcrypto.so" \
    -DOPENSSL_INCLUDE_DIR="$tmp/none"; then
  fail "configured the Python extension without libraries"
fi
hear
grep -qF "libzstd, liblz4, libxxhash, libcrypto" <<< "$said" || fail "libcrypto not named"
grep -qF "libxxhash-dev libssl-dev" <<< "$said" || fail "libssl-dev not named"
# No pkg-config at all.
rm -rf "$tmp/build"
if configure -DPKG_CONFIG_EXECUTABLE="$tmp/none/pkg-config"; then fail "configured without pkg-config"; fi
hear
grep -qF "sudo apt-get install pkg-config libzstd-dev" <<< "$said" || fail "pkg-config not named"
echo "build_errors_test: each missing library named with its Debian, Fedora and conda package"
