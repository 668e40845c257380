#!/usr/bin/env bash
# The wheel where there is nothing to build with: installed by a user who is not root, into a
# fresh virtual environment, inside a mount namespace whose /usr has lost the compilers, CMake,
# ninja, pkg-config, every header (/usr/include), the libraries' unversioned .so links and
# pkg-config files, and the shared objects of zstd, lz4, xxhash and OpenSSL (libcrypto, libssl)
# themselves: an overlay over /usr in which they are deleted, so that they are absent, not
# broken. There it runs the demo sweep, the command-line tool and the report from the wheel,
# and loads the C API's library. numpy, pandas and plotly come from a folder of their wheels
# fetched beforehand (pip has no index inside).
#
#   bash tests/wheel_hidden_toolchain_test.sh WHEEL      # as root; WHEEL: a cp311 wheel of
#                                                        # scripts/build-wheel.sh
# Its Python is Debian's own /usr/bin/python3.X (X from the wheel's tag): an interpreter that a
# user without root finds on the machine.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
wheel=$(realpath "$1")
if [ "$(id -u)" != 0 ]; then
  echo "wheel_hidden_toolchain_test: needs root (to make the mount namespace and drop to a user)" >&2
  exit 1
fi
tag=$(basename "$wheel" | sed -n 's/.*-cp3\([0-9]*\)-cp3.*/\1/p')
python=/usr/bin/python3.$tag
if [ -z "$tag" ] || [ ! -x "$python" ]; then
  echo "wheel_hidden_toolchain_test: no /usr/bin/python3.$tag for $(basename "$wheel")" >&2
  exit 1
fi

# The user's home: a folder of its own that nobody else writes, on the repository's disk.
T="$root/build/hidden-toolchain"
rm -rf "$T"
mkdir -p "$T/home" "$T/wheels"
trap 'rm -rf "$T"' EXIT
cp "$wheel" "$T/wheels/"
# What pip would fetch from an index: the wheels of the package's dependencies, for this Python.
"$python" -m venv "$T/fetch"
"$T/fetch/bin/python" -m pip download -q -d "$T/wheels" --only-binary=:all: \
  "$(ls "$T"/wheels/runstore-*.whl)[report]" > "$T/download.log" 2>&1 \
  || { cat "$T/download.log"; exit 1; }
rm -rf "$T/fetch"
user=nobody
uid=$(id -u "$user") gid=$(id -g "$user")
chown -R "$uid:$gid" "$T/home"
chmod -R a+rX "$T/wheels"

# Inside the namespace, as root: /usr overlaid, then the toolchain and the libraries deleted.
hide=$(cat << 'HIDE'
set -euo pipefail
mount -t tmpfs tmpfs "$T/ovl"
mkdir "$T/ovl/upper" "$T/ovl/work"
mount -t overlay overlay -o "lowerdir=/usr,upperdir=$T/ovl/upper,workdir=$T/ovl/work" /usr
cd /usr/bin
rm -f gcc* g++* cc c++ cpp* clang* *-linux-gnu-* ld ld.* as ccache cmake ctest cpack ninja \
  pkg-config pkgconf
rm -rf /usr/include /usr/local/include /usr/lib/gcc /usr/libexec/gcc /usr/lib/llvm-* \
  /usr/share/cmake* /usr/lib/x86_64-linux-gnu/pkgconfig /usr/share/pkgconfig
rm -f /usr/lib/x86_64-linux-gnu/lib{zstd,lz4,xxhash,crypto,ssl}.{so,so.*,a}
exec setpriv --reuid "$uid" --regid "$gid" --clear-groups --inh-caps=-all \
  env -i HOME="$T/home" PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
  bash "$root/tests/wheel_hidden_toolchain_user.sh" "$T" "$python" "$root"
HIDE
)
mkdir -p "$T/ovl"
T="$T" uid="$uid" gid="$gid" python="$python" root="$root" \
  unshare --mount --propagation private bash -c "$hide"
