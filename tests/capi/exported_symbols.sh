#!/usr/bin/env bash
# The C library exports the C API and nothing else: the dynamic symbols it
# defines are exactly the functions runstore.h declares (a declaration without
# a definition would fail only at a user's link; a symbol beyond them would be
# an interface no header states).
# Usage: exported_symbols.sh LIBRARY HEADER
set -euo pipefail
lib=$1 header=$2
defined=$(nm -D --defined-only "$lib" | awk '$2 != "A" {print $3}' | sed 's/@.*//' | sort -u)
others=$(grep -v '^runstore_' <<< "$defined" || true)
if [[ -n $others ]]; then
  echo "exported_symbols: $lib exports $(wc -l <<< "$others") symbols that are not the C API:" >&2
  head -20 <<< "$others" >&2
  exit 1
fi
# Declarations: a name followed by "(" at the start of a declaration, not static inline.
declared=$(grep -v '^static inline' "$header" |
  grep -oE '^[A-Za-z_][A-Za-z0-9_ *]*[ *]runstore_[a-z0-9_]+\(' |
  grep -oE 'runstore_[a-z0-9_]+\($' | tr -d '(' | sort -u)
missing=$(comm -23 <(echo "$declared") <(echo "$defined"))
if [[ -n $missing ]]; then
  echo "exported_symbols: declared in $header but not exported by $lib:" >&2
  echo "$missing" >&2
  exit 1
fi
undeclared=$(comm -13 <(echo "$declared") <(echo "$defined"))
if [[ -n $undeclared ]]; then
  echo "exported_symbols: exported by $lib but not declared in $header:" >&2
  echo "$undeclared" >&2
  exit 1
fi
echo "exported_symbols: the $(wc -l <<< "$defined") functions $(basename "$header") declares," \
  "exported, and nothing else"
