# The checks the shell tests of an install share (sourced): each prints "ok: WHAT" or
# "FAIL: WHAT" with what was seen, and counts the failures in $fails. $T is the test's folder.
fails=0
check() {  # check WHAT EXPECTED_RC CMD...: runs CMD, compares its exit code
  local what=$1 want=$2 rc=0
  shift 2
  "$@" > "$T/out" 2> "$T/err" || rc=$?
  if [ "$rc" != "$want" ]; then
    echo "FAIL: $what: exit code $rc, expected $want"
    sed 's/^/  stdout: /' "$T/out" | head -n 5
    sed 's/^/  stderr: /' "$T/err" | head -n 5
    fails=$((fails + 1))
  else
    echo "ok: $what"
  fi
}
has() {  # has WHAT FILE TEXT: FILE of the last check (out or err) contains TEXT
  if grep -qF -- "$3" "$T/$2"; then echo "ok: $1"; else
    echo "FAIL: $1: $2 lacks '$3'"; sed 's/^/  /' "$T/$2" | head -n 5; fails=$((fails + 1))
  fi
}
