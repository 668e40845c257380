#!/usr/bin/env bash
# compact_test.sh: `runstore compact` on fixture stores: every record reads
# the same after it, --dry-run writes nothing, the filters select, bad sizes
# are usage errors.
#
#   compact_test.sh path/to/runstore path/to/make_fixture
#
# Registered with ctest as cli_compact_test (cli/CMakeLists.txt).
set -u

RS=$(realpath "${1:?usage: compact_test.sh RUNSTORE MAKE_FIXTURE}")
MK=$(realpath "${2:?usage: compact_test.sh RUNSTORE MAKE_FIXTURE}")
T=$(mktemp -d "${TMPDIR:-/tmp}/runstore_compact_test.XXXXXX")
trap 'rm -rf "$T"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# dump STORE: every record of every series (reserved ones too), as CSV, sorted
# (a scan returns records segment by segment, which compaction changes).
dump() {
  local s
  for s in $("$RS" ls "$1" --all | awk 'NR > 1 { print $1 }'); do
    echo "== $s"
    "$RS" cat "$1" "$s" --format csv | sort
  done
}
segments() { ls "$1/segments" | grep -c '\.rss$'; }

test_name=compact_reads_the_same
"$MK" good "$T/good" >/dev/null
# More sealed segments: a copy of the fixture's writers under other ids is
# not possible from the shell, so the fixture's own are merged.
before=$(dump "$T/good")
n_before=$(segments "$T/good")
run "$RS" compact "$T/good" --dry-run
expect_rc 0
expect_out_has "^would merge [0-9]+ segments"
checks=$((checks + 1))
[[ $(segments "$T/good") == "$n_before" ]] || fail "--dry-run changed the segments"
run "$RS" compact "$T/good"
expect_rc 0
expect_out_has "^merged [0-9]+ segments .* into 1 "
after=$(dump "$T/good")
checks=$((checks + 1))
[[ $before == "$after" ]] || fail "records differ after compact:
$(diff <(echo "$before") <(echo "$after") | head -20)"
# The merged segments stay (--retain, 300 s by default) for readers of older
# snapshots; newer snapshots, info among them, leave them out.
expect_out_has "^kept [0-9]+ replaced segments for readers of older snapshots"
checks=$((checks + 1))
[[ $(segments "$T/good") -gt $n_before ]] || fail "the merged segments were removed at once"
run "$RS" info "$T/good"
expect_out_has "^segments: +2 \\(1 sealed, 1 open\\)"  # the crashed writer's stays open
run "$RS" verify "$T/good"
expect_rc 0
run "$RS" compact "$T/good"
expect_rc 0
expect_out_has "^nothing to compact"
expect_out_has "^kept [0-9]+ replaced segments"
# Past the retention (here 0), the next compact removes them.
run "$RS" compact "$T/good" --retain 0 --json
expect_rc 0
expect_out_has '"removed_leftovers": \['
expect_out_has '"retained": \[\]'
checks=$((checks + 1))
[[ $(segments "$T/good") == 2 ]] || fail "$(segments "$T/good") segments after compact --retain 0"
after=$(dump "$T/good")
checks=$((checks + 1))
[[ $before == "$after" ]] || fail "records differ after the replaced segments went"
# In text, what a compaction removes is one line (100,000 removed files would
# be 100,000 lines); --verbose lists them.
"$MK" good "$T/quiet" >/dev/null
cp -r "$T/quiet" "$T/loud"
for d in quiet loud; do "$RS" compact "$T/$d" > /dev/null; done
run "$RS" compact "$T/quiet" --retain 0
expect_rc 0
expect_out_has "^removed [0-9]+ leftover files \(replaced segments past their --retain, files of interrupted compactions\); --verbose lists them$"
checks=$((checks + 1))
[[ $(grep -c "\.rss" <<< "$out") == 0 ]] || fail "a removed file listed without --verbose: $out"
run "$RS" compact "$T/loud" --retain 0 --verbose
expect_rc 0
expect_out_has "^removed [0-9]+ leftover files .*:$"
expect_out_has "^  segments/.*\.rss$"
run "$RS" compact "$T/good" --retain -1
expect_rc 1
expect_err_has "--retain must not be negative"

test_name=compact_filters
"$MK" good "$T/f" >/dev/null
run "$RS" compact "$T/f" --older-than 100000
expect_rc 0
expect_out_has "^nothing to compact"
run "$RS" compact "$T/f" --smaller-than 1
expect_rc 0
expect_out_has "^nothing to compact"
run "$RS" compact "$T/f" --smaller-than 1G --memory 64M --json
expect_rc 0
expect_out_has '"outputs": \['
expect_out_has '"output_records": [0-9]+'

test_name=compact_usage_errors
run "$RS" compact "$T/f" --memory lots
expect_rc 1
expect_err_has "--memory: 'lots' is not a size"
run "$RS" compact "$T/f" --smaller-than 12Q
expect_rc 1
run "$RS" compact "$T/f" --memory 1M
expect_rc 5
expect_err_has "memory_bytes must be at least 16 MiB"
run "$RS" compact "$T/missing"
checks=$((checks + 1))
[[ $rc != 0 ]] || fail "compact of a missing store succeeded"
[[ ! -e $T/missing ]] || fail "compact created a store"

test_name=compact_damaged_store_is_refused
"$MK" corrupt-header "$T/bad" >/dev/null
run "$RS" compact "$T/bad"
checks=$((checks + 1))
[[ $rc != 0 ]] || fail "compact of a damaged store succeeded"

finish compact_test.sh
