# cli/tests/lib.sh: the checks the CLI test scripts share. Sourced after the
# script has made its scratch directory $T; each check counts itself in
# $checks, and a failed one prints the current $test_name and adds to
# $failures. A script ends with `finish NAME`, whose status is the script's.
# shellcheck shell=bash

failures=0
checks=0
test_name=${test_name:-start}

fail() {
  echo "FAIL [$test_name]: $*"
  failures=$((failures + 1))
}

# run CMD...: runs CMD with stdout in $out, stderr in $err, exit code in $rc.
run() {
  "$@" >"$T/stdout" 2>"$T/stderr"
  rc=$?
  out=$(cat "$T/stdout")
  err=$(cat "$T/stderr")
}

expect_rc() {
  checks=$((checks + 1))
  [[ $rc == "$1" ]] || fail "exit code $rc, expected $1 (stderr: $err)"
}

# stdout exactly
expect_out() {
  checks=$((checks + 1))
  [[ $out == "$1" ]] || fail "stdout differs; expected:
$1
--- got:
$out"
}

# stdout has a line matching the extended regular expression
expect_out_has() {
  checks=$((checks + 1))
  grep -qE -- "$1" <<<"$out" || fail "stdout lacks /$1/; got:
$out"
}

# stdout contains the string
expect_out_contains() {
  checks=$((checks + 1))
  [[ $out == *"$1"* ]] || fail "stdout lacks '$1'; got:
$out"
}

expect_out_lacks() {
  checks=$((checks + 1))
  if grep -qE -- "$1" <<<"$out"; then fail "stdout has /$1/"; fi
}

# stderr contains the string
expect_err_has() {
  checks=$((checks + 1))
  [[ $err == *"$1"* ]] || fail "stderr lacks '$1'; got: $err"
}

expect_err_empty() {
  checks=$((checks + 1))
  [[ -z $err ]] || fail "stderr not empty: $err"
}

expect_file_eq() {  # path, expected contents
  checks=$((checks + 1))
  [[ -f $1 ]] || { fail "missing file $1"; return; }
  [[ $(cat "$1") == "$2" ]] || fail "$1 differs; expected:
$2
--- got:
$(cat "$1")"
}

# finish NAME: the summary line; succeeds when no check failed.
finish() {
  echo "$1: $checks checks, $failures failures"
  ((failures == 0))
}
