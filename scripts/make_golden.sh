#!/usr/bin/env bash
# Regenerates the golden store of one format version (tests/golden/README.md).
#
#   scripts/make_golden.sh VERSION        # 1, 2 or 3
#
# Checks out the tag format-vVERSION (the last commit that wrote that
# version) into a temporary git worktree, builds its library, compiles
# tests/programs/golden_writer.cc of the current tree against that build's
# public headers and librunstore.a, and runs it to write
# tests/golden/vVERSION/store/ and tests/golden/vVERSION/expected.txt,
# replacing what was there. The temporary worktree and build are removed
# afterwards, also on failure. Running it twice gives the same files but for
# the timestamps in segment headers and commit records.
set -euo pipefail

if [[ $# -ne 1 || ! $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 VERSION   (a format version: 1, 2, 3, ...)" >&2
  exit 1
fi
version=$1
tag=format-v$version
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
if ! git -C "$repo" rev-parse -q --verify "refs/tags/$tag" >/dev/null; then
  echo "$0: no tag $tag in $repo" >&2
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/runstore-golden-v$version.XXXXXX")
cleanup() {
  git -C "$repo" worktree remove --force "$tmp/src" 2>/dev/null || true
  git -C "$repo" worktree prune
  rm -rf "$tmp"
}
trap cleanup EXIT

git -C "$repo" worktree add --quiet --detach "$tmp/src" "$tag"
cmake -S "$tmp/src" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DRUNSTORE_BUILD_TESTS=OFF -DRUNSTORE_BUILD_BENCHMARKS=OFF -DRUNSTORE_BUILD_CLI=OFF \
  -DRUNSTORE_BUILD_PYTHON=OFF >"$tmp/cmake.log" || { cat "$tmp/cmake.log" >&2; exit 1; }
cmake --build "$tmp/build" --target runstore -j "${JOBS:-2}" >"$tmp/build.log" ||
  { cat "$tmp/build.log" >&2; exit 1; }

"${CXX:-c++}" -std=c++20 -O1 -g -Wall -Wextra -I"$tmp/src/include" \
  "$repo/tests/programs/golden_writer.cc" "$tmp/build/librunstore.a" \
  -lzstd -llz4 -lxxhash -pthread -o "$tmp/golden_writer"

# Written beside the destination and moved into place, so that a failure
# leaves the old files as they were.
out=$repo/tests/golden/v$version
mkdir -p "$repo/tests/golden"
rm -rf "$out.new"
"$tmp/golden_writer" "$out.new"
rm -rf "$out"
mv "$out.new" "$out"
echo "$0: wrote $out ($(du -sk "$out" | cut -f1) KiB) with the library of $tag ($(git -C "$repo" rev-parse --short "$tag^{commit}"))"
