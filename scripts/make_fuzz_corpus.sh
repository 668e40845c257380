#!/usr/bin/env bash
# Regenerates the fuzz targets' seed corpora, fuzz/corpus/<target>/, from real
# stores that fuzz/make_fuzz_corpus.cc writes through the public API (see
# fuzz/README.md). Deterministic: run twice, it writes the same files.
#   bash scripts/make_fuzz_corpus.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=build/fuzz
[ -f "$build/build.ninja" ] || cmake --preset fuzz > /dev/null
cmake --build "$build" --target make_fuzz_corpus
out="$build/corpus-new"
rm -rf "$out"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 "$build/fuzz/make_fuzz_corpus" "$out"
rm -rf fuzz/corpus
mv "$out" fuzz/corpus
echo "fuzz/corpus: $(find fuzz/corpus -type f | wc -l) files," \
  "$(du -sb fuzz/corpus | cut -f1) bytes"
