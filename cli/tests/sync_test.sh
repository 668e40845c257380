#!/usr/bin/env bash
# sync_test.sh: `runstore sync` on what real staging writers leave behind.
#
#   sync_test.sh path/to/runstore path/to/kill9_writer
#
# Registered with ctest as cli_sync_test (cli/CMakeLists.txt). Writers are
# tests/programs/kill9_writer processes staging through $RUNSTORE_STAGING_DIR;
# one is SIGKILLed and its leftovers synced, one is synced while alive (its
# open segment must be skipped). Checks output, exit codes, that staging ends
# empty and that the store verifies.
set -u

RS=$(realpath "${1:?usage: sync_test.sh RUNSTORE KILL9_WRITER}")
WR=$(realpath "${2:?usage: sync_test.sh RUNSTORE KILL9_WRITER}")
T=$(mktemp -d "${TMPDIR:-/tmp}/runstore_sync_test.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# start_writer INDEX ACKS: a staging writer on $T/store, returned in $wpid
# once it has acknowledged ACKS commits.
start_writer() {
  RUNSTORE_STAGING_DIR=$T/local "$WR" "$T/store" "$1" 0 >"$T/acks$1" 2>"$T/werr$1" &
  wpid=$!
  pids+=("$wpid")
  for _ in $(seq 1 600); do
    (($(grep -c '^ACK' "$T/acks$1") >= $2)) && return 0
    kill -0 "$wpid" 2>/dev/null || break
    sleep 0.05
  done
  fail "writer $1 did not acknowledge $2 commits: $(cat "$T/werr$1")"
}
staged() { find "$T/local" -name '*.rss' | wc -l; }

test_name="errors"
run "$RS" sync "$T/nope" "$T/store"
expect_rc 3
expect_err_has "staging directory $T/nope"
mkdir -p "$T/local" "$T/notastore"
run "$RS" sync "$T/local" "$T/notastore"
expect_rc 3
expect_err_has "$T/notastore is not a runstore store"
run "$RS" sync --force --wait 1 "$T/local" "$T/notastore"
expect_rc 1
run "$RS" sync --wait 0.2 "$T/local" "$T/notastore"
expect_rc 5
expect_err_has "at least 1 s (two beats)"

test_name="killed writer"
start_writer 0 30
kill -9 "$wpid"
{ wait "$wpid"; } 2>/dev/null
checks=$((checks + 1))
(($(staged) >= 1)) || fail "the killed writer left nothing in staging"
run "$RS" sync --wait 1.5 "$T/local" "$T/store"
expect_rc 0
expect_out_contains "shipped w0-0-"
expect_out_contains "cleaned "
expect_out_contains "ok: "
checks=$((checks + 1))
(($(staged) == 0)) || fail "left in staging: $(ls "$T/local")"
run "$RS" verify "$T/store"
expect_rc 0

test_name="sync again"
run "$RS" sync --force --json "$T/local" "$T/store"
expect_rc 0
expect_out_contains '"shipped": []'
expect_out_contains '"ok": true'

test_name="live writer"
start_writer 1 10
run "$RS" sync --wait 1.5 "$T/local" "$T/store"
expect_rc 0
expect_out_contains "skipped w1-0-"
expect_out_contains "(its writer is alive)"
checks=$((checks + 1))
(($(staged) >= 1)) || fail "the live writer's open segment was taken"
kill -9 "$wpid"
{ wait "$wpid"; } 2>/dev/null
run "$RS" sync --wait 1.5 "$T/local" "$T/store"
expect_rc 0
expect_out_contains "shipped w1-0-"
checks=$((checks + 1))
(($(staged) == 0)) || fail "left in staging: $(ls "$T/local")"
run "$RS" verify "$T/store"
expect_rc 0
run "$RS" info "$T/store"
expect_rc 0

# A staging directory that is the store's own segments/ (or inside the store,
# or holding it) is refused before anything is touched: inside the store every
# segment looks like a published copy of itself, and a sync once removed them
# all with exit code 0.
test_name="staging inside the store"
before=$(ls "$T/store/segments" | sort)
for staging in "$T/store/segments" "$T/store/segments/" "$T/store" "$T"; do
  run "$RS" sync --force "$staging" "$T/store"
  expect_rc 5
  expect_err_has "apart from the store"
done
ln -s "$T/store/segments" "$T/alias"
run "$RS" sync --force "$T/alias" "$T/store"
expect_rc 5
checks=$((checks + 1))
[[ "$(ls "$T/store/segments" | sort)" == "$before" ]] || fail "segments changed"
run "$RS" verify "$T/store"
expect_rc 0

# A file named like a lease that is not one (a FIFO would block a reader; a
# sparse giant would be read whole) is left alone and reported, and the dead
# writer's committed records beside it are shipped.
test_name="damaged leases"
start_writer 2 10
kill -9 "$wpid"
{ wait "$wpid"; } 2>/dev/null
mkfifo "$T/local/00000000000000aa.lease"
truncate -s 256G "$T/local/00000000000000bb.lease"
run "$RS" sync --wait 1.5 --json "$T/local" "$T/store"
expect_rc 2
expect_out_has '"damaged_leases"'
expect_out_contains "00000000000000aa.lease"
expect_out_contains "00000000000000bb.lease"
expect_out_contains "w2-0-"
checks=$((checks + 1))
(($(staged) == 0)) || fail "the dead writer's segment was not shipped: $(ls "$T/local")"
checks=$((checks + 1))
[[ -p "$T/local/00000000000000aa.lease" && -f "$T/local/00000000000000bb.lease" ]] ||
  fail "a damaged lease was removed"

finish sync_test
