#!/usr/bin/env bash
# cli_test.sh: runs every subcommand of the `runstore` program on fixture
# stores written by make_fixture and checks output, files and exit codes.
#
#   cli_test.sh path/to/runstore path/to/make_fixture
#
# Registered with ctest as cli_test (cli/CMakeLists.txt). Needs bash and
# coreutils; if python3 with numpy is present, the .npy files are also loaded
# with numpy.load. The tar and Parquet exports, which the Python package does,
# are checked through `$RUNSTORE_PYTHON -m runstore` (else the project's .venv)
# when that Python has the package.
set -u
shopt -s extglob

RS=$(realpath "${1:?usage: cli_test.sh RUNSTORE MAKE_FIXTURE}")
MK=$(realpath "${2:?usage: cli_test.sh RUNSTORE MAKE_FIXTURE}")
T=$(mktemp -d "${TMPDIR:-/tmp}/runstore_cli_test.XXXXXX")
FULL=  # a small tmpfs mounted for the full-disk checks, if any
cleanup() {
  [[ -n $FULL ]] && umount "$FULL"
  rm -rf "$T"
}
trap cleanup EXIT
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Bytes [offset, offset+n) of a file as space-separated hex.
hex() { od -An -tx1 -j "$2" -N "$3" "$1" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'; }

S=$T/good
C=$T/corrupt
H=$T/corrupt_header
test_name=fixtures
"$MK" good "$S" || { echo "FAIL: make_fixture good"; exit 1; }
read -r corrupt_file corrupt_offset < <("$MK" corrupt "$C") || { echo "FAIL: make_fixture corrupt"; exit 1; }
read -r header_file _ < <("$MK" corrupt-header "$H") || { echo "FAIL: make_fixture corrupt-header"; exit 1; }
[[ $corrupt_file == segments/*.rss && -n $corrupt_offset ]] || fail "make_fixture corrupt printed '$corrupt_file $corrupt_offset'"
# A fingerprint of the store, to check that no command writes to it.
fingerprint() { (cd "$1" && find . -print0 | sort -z | xargs -0 ls -ld --time-style=+%s.%N && find . -type f -print0 | sort -z | xargs -0 cksum); }
before=$(fingerprint "$S")

# --- usage -------------------------------------------------------------------
test_name=usage
run "$RS"; expect_rc 1; expect_err_has "subcommand is required"
# An unknown command is named, with the commands there are.
run "$RS" frobnicate "$S"; expect_rc 1; expect_err_has "runstore: unknown command 'frobnicate'"
expect_err_has "info, ls, cat, get, verify, compact, catalog, export, import, plan, status, watch, report, sql, sync"
run "$RS" --no-progress frobnicate; expect_rc 1; expect_err_has "unknown command 'frobnicate'"
run "$RS" export xml "$S" "$T/x"; expect_rc 1; expect_err_has "unknown command 'export xml'"
expect_err_has "csv, tar, parquet"
run "$RS" cat "$S"; expect_rc 1; expect_err_has "NAME is required"
run "$RS" cat "$S" loss --format xml; expect_rc 1
run "$RS" cat "$S" loss --run 1 --run-str 1; expect_rc 1
run "$RS" cat "$S" loss --limit -2; expect_rc 1
run "$RS" get "$S" 1 loss; expect_rc 1; expect_err_has "--output is required"
run "$RS" export "$S"; expect_rc 1
run "$RS" --help; expect_rc 0; expect_out_has "^Exit codes:"; expect_out_has "^  export "; expect_out_has "^  import "
for cmd in info ls cat get verify "export csv" "export tar" "export parquet" "export zarr" "import tar"; do
  # shellcheck disable=SC2086
  run "$RS" $cmd --help
  expect_rc 0; expect_out_has "^Examples:"; expect_out_has "^  2  corruption"
  expect_out_has "^  3  not found"; expect_out_has "^  runstore $cmd "
done
run "$RS" --version; expect_rc 0; expect_out_has "^runstore [0-9]+\.[0-9]+\.[0-9]+"

# --- missing and non-store paths ---------------------------------------------
test_name=not_a_store
run "$RS" info "$T/nowhere"; expect_rc 3; expect_err_has "runstore: info: NotFound:"
mkdir -p "$T/plain_dir"; touch "$T/plain_dir/file"
run "$RS" ls "$T/plain_dir"; expect_rc 5; expect_err_has "runstore: ls: InvalidArgument:"
[[ ! -e $T/nowhere ]] || fail "info created the missing store"
mkdir "$T/empty_dir"
run "$RS" info "$T/empty_dir"; expect_rc 3
[[ -z $(ls -A "$T/empty_dir") ]] || fail "info wrote into an empty directory"

# --- info --------------------------------------------------------------------
test_name=info
run "$RS" info "$S"; expect_rc 0; expect_err_empty
expect_out_has "^format version: +4$"
expect_out_has "^writers: +3$"
expect_out_has "^segments: +3 \(2 sealed, 1 open\)$"
expect_out_has "^series: +13 \(\+1 reserved\)$"
expect_out_has "^runs: +18$"
expect_out_has "^records: +113$"
expect_out_has "^bytes on disk: +[0-9]+ \("
expect_out_has "^committed bytes: +[0-9]+ \("
run "$RS" info "$S" --json; expect_rc 0
expect_out_has '^  "writers": 3,$'
expect_out_has '^    "sealed": 2,$'
expect_out_has '^    "open": 1$'
expect_out_has '^  "series": 13,$'
expect_out_has '^  "runs": 18,$'
expect_out_has '^  "records": 113,$'
expect_out_has '^  "committed_bytes": [0-9]+,$'

# --- ls ----------------------------------------------------------------------
test_name=ls
run "$RS" ls "$S"; expect_rc 0
expect_out_has "^NAME +DTYPE +SHAPE +COUNT +BYTES$"
expect_out_has "^loss +float64 +scalar +50 +[0-9]+$"
expect_out_has "^grid +float32 +\[3, 4\] +3 +[0-9]+$"
expect_out_has "^vec +int64 +\[3\] +3 +[0-9]+$"
expect_out_has "^trace +float64 +variable +3 +[0-9]+$"
expect_out_has "^label +string +scalar +4 +[0-9]+$"
expect_out_has "^blob +bytes +scalar +2 +[0-9]+$"
expect_out_has "^qi/3_17 +float32 +scalar +10 +[0-9]+$"
expect_out_lacks "~resume"
[[ $(wc -l <<<"$out") == 14 ]] || fail "ls printed $(wc -l <<<"$out") lines, expected 14"
run "$RS" ls "$S" --all; expect_rc 0; expect_out_has "^~resume +int64 +scalar +1 "
run "$RS" ls "$S" --json; expect_rc 0
expect_out_has '"name": "qi/3_17",'
expect_out_has '"dtype": "bytes",'
expect_out_has '"variable_shape": true,'
run "$RS" ls "$S" --runs; expect_rc 0
expect_out "0
1
2
3
4
5
6
7
8
9
100
exp,b
exp-a
exp-b
exp-c
exp-d
s1
s2"
run "$RS" ls "$S" --runs --json; expect_rc 0
expect_out_has '^  100,$'; expect_out_has '^  "exp,b",$'; expect_out_has '^  "s2"$'

# --- cat ---------------------------------------------------------------------
test_name=cat_text
run "$RS" cat "$S" loss -n 3; expect_rc 0; expect_err_empty
expect_out "run  step  value
  0     0  0
  0     1  1
  0     2  2"
# The resume marker hides run 3's steps >= 2 of the first writer.
run "$RS" cat "$S" loss --run 3
expect_out "run  step  value
  3     0  1.5
  3     1  2.5
  3     2  99"
run "$RS" cat "$S" loss --run 3 --first-step 1 --last-step 1
expect_out "run  step  value
  3     1  2.5"
run "$RS" cat "$S" loss --first-step 2 --last-step 2 -f csv
expect_rc 0; expect_out_has '^3,2,99$'; expect_out_lacks ',1,'
run "$RS" cat "$S" loss --run 3 --first-step 5; expect_rc 3
run "$RS" cat "$S" grid --run 1
expect_out "run  step  value
  1     0  [[100.5, 101.5, 102.5, 103.5], [104.5, 105.5, 106.5, 107.5], [108.5, 109.5, 110.5, 111.5]]"
run "$RS" cat "$S" label
expect_out "  run  step  value
exp-a     0  \"plain\"
exp,b     0  \"has, comma\"
exp-c     0  \"say \\\"hi\\\"\\nnext line\"
exp-d     0  \"héllo\\ttab\""
run "$RS" cat "$S" blob
expect_out "  run  step  value
exp-a     0  base64:AAH/QQ==
exp-b     0  base64:"
run "$RS" cat "$S" special
expect_out "run  step  value
  0     0  nan
  0     1  inf
  0     2  -inf
  0     3  0.1
  0     4  -0
  0     5  1e+300"
run "$RS" cat "$S" loss --limit 0; expect_rc 0; expect_out "run  step  value"

test_name=cat_csv
run "$RS" cat "$S" label --format csv; expect_rc 0
expect_out 'run,step,value
exp-a,0,plain
"exp,b",0,"has, comma"
exp-c,0,"say ""hi""
next line"
exp-d,0,héllo	tab'
run "$RS" cat "$S" blob -f csv
expect_out 'run,step,value
exp-a,0,AAH/QQ==
exp-b,0,'
run "$RS" cat "$S" trace -f csv
expect_out 'run,step,value
0,0,"[0,1]"
1,0,"[0.25,1.25,2.25,3.25]"
2,0,"[[0.5,1.5],[2.5,3.5],[4.5,5.5]]"'
run "$RS" cat "$S" flag -f csv -n 2
expect_out 'run,step,value
0,0,true
1,0,false'
run "$RS" cat "$S" small -f csv --run 5
expect_out 'run,step,value
5,0,255'

test_name=cat_jsonl
run "$RS" cat "$S" label --format jsonl; expect_rc 0
expect_out '{"run":"exp-a","step":0,"value":"plain"}
{"run":"exp,b","step":0,"value":"has, comma"}
{"run":"exp-c","step":0,"value":"say \"hi\"\nnext line"}
{"run":"exp-d","step":0,"value":"héllo\ttab"}'
run "$RS" cat "$S" special -f jsonl
expect_out '{"run":0,"step":0,"value":null}
{"run":0,"step":1,"value":null}
{"run":0,"step":2,"value":null}
{"run":0,"step":3,"value":0.1}
{"run":0,"step":4,"value":-0}
{"run":0,"step":5,"value":1e+300}'
run "$RS" cat "$S" vec -f jsonl --run 1
expect_out '{"run":1,"step":0,"value":[1,-1,1099511627776]}'
run "$RS" cat "$S" blob -f jsonl --run exp-a
expect_out '{"run":"exp-a","step":0,"value":"AAH/QQ=="}'
run "$RS" cat "$S" loss -f jsonl --run s1
expect_out '{"run":"s1","step":0,"value":1.5}'
run "$RS" cat "$S" qi/3_17 -f jsonl --run 3
expect_out '{"run":3,"step":0,"value":0.3}'

test_name=cat_errors
run "$RS" cat "$S" nope; expect_rc 3; expect_err_has "runstore: cat: NotFound: series 'nope'"
run "$RS" cat "$S" loss --run-str 1; expect_rc 3; expect_err_has "no records of run 1"
run "$RS" cat "$S" loss --run 12345; expect_rc 3
run "$RS" cat "$C" big; expect_rc 2; expect_err_has "runstore: cat: Corruption: $corrupt_file"
# A failed write of the output is an I/O error.
if [[ -w /dev/full ]]; then
  "$RS" cat "$S" loss >/dev/full 2>"$T/stderr"; rc=$?; err=$(cat "$T/stderr")
  expect_rc 4; expect_err_has "runstore: cat: IOError:"
fi

# --- get ---------------------------------------------------------------------
test_name=get
# npy_check FILE DESCR_AND_SHAPE DATA_BYTES: magic, version, a header length
# that puts the data at a multiple of 64, the dict, and the file size.
npy_check() {
  local f=$1 dict=$2 nbytes=$3
  checks=$((checks + 1))
  [[ -f $f ]] || { fail "no file $f"; return; }
  [[ $(hex "$f" 0 8) == "93 4e 55 4d 50 59 01 00" ]] || fail "$f: bad magic/version: $(hex "$f" 0 8)"
  local lo hi len
  read -r lo hi <<<"$(od -An -tu1 -j 8 -N 2 "$f")"
  len=$((lo + 256 * hi))
  (((10 + len) % 64 == 0)) || fail "$f: data starts at $((10 + len)), not a multiple of 64"
  local header
  header=$(head -c $((10 + len - 1)) "$f" | tail -c $((len - 1)))
  [[ $header == "{$dict, }" || $header == "{$dict, }"+(" ") ]] ||
    fail "$f: header is '$header', expected '{$dict, }' and spaces"
  [[ $(hex "$f" $((10 + len - 1)) 1) == "0a" ]] || fail "$f: header does not end in a newline"
  [[ $(stat -c %s "$f") == $((10 + len + nbytes)) ]] || fail "$f: size $(stat -c %s "$f"), expected $((10 + len + nbytes))"
}
run "$RS" get "$S" 7 big -o "$T/big.npy"; expect_rc 0; expect_err_empty; expect_out ""
npy_check "$T/big.npy" "'descr': '<f8', 'fortran_order': False, 'shape': (100, 200)" 160000
# Element 1 is 0.25: 00 00 00 00 00 00 d0 3f.
checks=$((checks + 1))
[[ $(hex "$T/big.npy" 136 8) == "00 00 00 00 00 00 d0 3f" ]] || fail "big.npy element 1: $(hex "$T/big.npy" 136 8)"
run "$RS" get "$S" 1 grid -o "$T/grid.npy"; expect_rc 0
npy_check "$T/grid.npy" "'descr': '<f4', 'fortran_order': False, 'shape': (3, 4)" 48
run "$RS" get "$S" 2 vec -o "$T/vec.npy"; expect_rc 0
npy_check "$T/vec.npy" "'descr': '<i8', 'fortran_order': False, 'shape': (3,)" 24
run "$RS" get "$S" 2 trace -o "$T/trace.npy"; expect_rc 0
npy_check "$T/trace.npy" "'descr': '<f8', 'fortran_order': False, 'shape': (3, 2)" 48
run "$RS" get "$S" 0 flag -o "$T/flag.npy"; expect_rc 0
npy_check "$T/flag.npy" "'descr': '|b1', 'fortran_order': False, 'shape': ()" 1
run "$RS" get "$S" 3 count -o "$T/count.npy"; expect_rc 0
npy_check "$T/count.npy" "'descr': '<i4', 'fortran_order': False, 'shape': ()" 4
run "$RS" get "$S" 5 small -o "$T/small.npy"; expect_rc 0
npy_check "$T/small.npy" "'descr': '|u1', 'fortran_order': False, 'shape': ()" 1
run "$RS" get "$S" 3 loss --step 1 -o "$T/loss.npy"; expect_rc 0
npy_check "$T/loss.npy" "'descr': '<f8', 'fortran_order': False, 'shape': ()" 8
run "$RS" get "$S" exp-c label -o "$T/label.npy"; expect_rc 0
npy_check "$T/label.npy" "'descr': '|S18', 'fortran_order': False, 'shape': ()" 18
run "$RS" get "$S" exp-a blob -o "$T/blob.npy"; expect_rc 0
npy_check "$T/blob.npy" "'descr': '|u1', 'fortran_order': False, 'shape': (4,)" 4
checks=$((checks + 1))
[[ $(hex "$T/blob.npy" 128 4) == "00 01 ff 41" ]] || fail "blob.npy data: $(hex "$T/blob.npy" 128 4)"
run "$RS" get "$S" exp-b blob -o "$T/empty_blob.npy"; expect_rc 0
npy_check "$T/empty_blob.npy" "'descr': '|u1', 'fortran_order': False, 'shape': (0,)" 0
"$RS" get "$S" 7 big -o - >"$T/big_stdout.npy"; rc=$?; expect_rc 0
checks=$((checks + 1))
cmp -s "$T/big.npy" "$T/big_stdout.npy" || fail "get -o - differs from get -o FILE"
# --run-str: "1" as a string run does not exist.
run "$RS" get "$S" 1 loss --run-str -o "$T/x.npy"; expect_rc 3
run "$RS" get "$S" 42 loss -o "$T/missing.npy"; expect_rc 3
expect_err_has "runstore: get: NotFound: no record for run 42"
run "$RS" get "$S" 3 loss --step 4 -o "$T/hidden.npy"; expect_rc 3  # hidden by the resume
run "$RS" get "$S" 1 nope -o "$T/missing.npy"; expect_rc 3
checks=$((checks + 1))
[[ -z $(find "$T" -maxdepth 1 -name '*.npy.tmp-*') && ! -e $T/missing.npy ]] || fail "get left files behind"
run "$RS" get "$S" 1 loss -o "$T/no/such/dir/x.npy"; expect_rc 4; expect_err_has "runstore: get: IOError:"
run "$RS" get "$C" 7 big -o "$T/corrupt.npy"; expect_rc 2
expect_err_has "$corrupt_file"; expect_err_has "offset"
if python3 -c "import numpy" 2>/dev/null; then
  checks=$((checks + 1))
  python3 - "$T" <<'EOF' || fail "numpy.load disagrees"
import sys, numpy as np
t = sys.argv[1]
big = np.load(t + "/big.npy")
assert big.dtype == np.float64 and big.shape == (100, 200), (big.dtype, big.shape)
assert (big.ravel() == 0.25 * np.arange(20000)).all()
g = np.load(t + "/grid.npy")
assert g.dtype == np.float32 and g[2, 3] == 111.5, g
assert np.load(t + "/vec.npy").tolist() == [2, -2, 1 << 40]
assert np.load(t + "/trace.npy").tolist() == [[0.5, 1.5], [2.5, 3.5], [4.5, 5.5]]
assert np.load(t + "/flag.npy")[()] == True
assert np.load(t + "/count.npy")[()] == -3000
assert np.load(t + "/small.npy")[()] == 255
assert np.load(t + "/loss.npy")[()] == 2.5
assert np.load(t + "/label.npy")[()].decode() == 'say "hi"\nnext line'
assert np.load(t + "/blob.npy").tobytes() == b"\x00\x01\xffA"
assert np.load(t + "/empty_blob.npy").size == 0
EOF
fi

# --- verify ------------------------------------------------------------------
test_name=verify
run "$RS" verify "$S"; expect_rc 0; expect_err_empty
expect_out_has "^ok: 3 segments, [0-9]+ blocks checked, no corruption$"
run "$RS" verify "$S" --json; expect_rc 0
expect_out_has '^  "ok": true,$'; expect_out_has '^  "segments": 3,$'
run "$RS" verify "$C"; expect_rc 2
expect_out_has "^CORRUPT: 1 segments, [0-9]+ of [0-9]+ blocks checked"
expect_err_has "runstore: verify: Corruption: $corrupt_file"; expect_err_has "offset"
run "$RS" verify "$C" --json; expect_rc 2
expect_out_has '^  "ok": false,$'; expect_out_has '"code": "Corruption"'
expect_out_has "\"message\": \"$corrupt_file: offset [0-9]+"
# A damaged segment header: opening the store fails, reported the same way.
run "$RS" verify "$H"; expect_rc 2
expect_err_has "runstore: verify: Corruption: $header_file"; expect_err_has "offset"
run "$RS" verify "$H" --json; expect_rc 2; expect_out_has '^  "ok": false,$'
run "$RS" info "$H"; expect_rc 2; expect_err_has "$header_file"
run "$RS" verify "$T/nowhere"; expect_rc 3

# --- damaged segments and --skip-damaged --------------------------------------
# A copy of the good store with beta's segment header damaged (a byte of its
# writer id: the header checksum fails) and a FIFO where a segment should be.
test_name=damaged
D=$T/damaged
cp -a "$S" "$D"
printf '\x5a' | dd of="$D/segments/beta-00000001.rss" bs=1 seek=50 conv=notrunc status=none
mkfifo "$D/segments/z-00000001.rss"
hint="to read the other segments, leaving this one out, run with --skip-damaged"
# Without --skip-damaged every command refuses the store, naming the file, with a hint.
for cmd in "info $D" "ls $D" "ls $D --runs" "cat $D loss" "get $D 7 big -o $T/damaged.npy" "export csv $D $T/damaged_csv"; do
  # shellcheck disable=SC2086
  run timeout 20 "$RS" $cmd; expect_rc 2
  name=${cmd%% /*}  # the command's words before the store's path
  expect_err_has "runstore: $name: Corruption: segments/beta-00000001.rss: offset 0"
  expect_err_has "runstore: $name: $hint"
  [[ $(grep -c . <<<"$err") == 2 ]] || fail "$cmd: stderr is not the error and the hint: $err"
done
checks=$((checks + 1))
[[ ! -e $T/damaged.npy && ! -e $T/damaged_csv ]] || fail "a refused store was exported"
# An unreadable segment alone is an I/O error, with the same hint.
F=$T/fifo_segment
cp -a "$S" "$F"
mkfifo "$F/segments/z-00000001.rss"
run timeout 20 "$RS" info "$F"; expect_rc 4
expect_err_has "runstore: info: IOError: $F/segments/z-00000001.rss: is a FIFO, not a regular file"
expect_err_has "runstore: info: $hint"
# With it (before or after the command) the rest is read, and each segment left out is named.
left_beta="runstore: left out damaged segment segments/beta-00000001.rss: Corruption: offset 0: "
left_fifo="runstore: left out damaged segment segments/z-00000001.rss: IOError: is a FIFO, not a regular file"
run timeout 20 "$RS" info "$D" --skip-damaged; expect_rc 0
expect_err_has "$left_beta"; expect_err_has "$left_fifo"
[[ $(grep -c . <<<"$err") == 2 ]] || fail "info --skip-damaged: stderr has more than the two segments: $err"
expect_out_has "^writers: +2$"
expect_out_has "^segments: +2 \(1 sealed, 1 open\)$"
expect_out_has "^damaged segments: +2 \(left out\)$"
expect_out_has "^ +segments/beta-00000001.rss: Corruption: offset 0: "
expect_out_has "^ +segments/z-00000001.rss: IOError: is a FIFO, not a regular file$"
run timeout 20 "$RS" --skip-damaged info "$D" --json; expect_rc 0
expect_out_has '^  "damaged_segments": \[$'
expect_out_has '^      "file": "segments/beta-00000001.rss",$'
expect_out_has '^      "code": "Corruption",$'
expect_out_has '^      "file": "segments/z-00000001.rss",$'
expect_out_has '^      "code": "IOError",$'
run "$RS" info "$S" --json; expect_out_has '^  "damaged_segments": \[\]$'
run "$RS" info "$S"; expect_out_lacks "damaged"
# Leaving beta out drops its records and brings back what its resume marker hid.
run timeout 20 "$RS" --skip-damaged ls "$D" --runs; expect_rc 0; expect_out_lacks "^s1$"
expect_out_has "^exp-d$"
run timeout 20 "$RS" cat "$D" loss --run 3 -f csv --skip-damaged; expect_rc 0
expect_out 'run,step,value
3,0,1.5
3,1,2.5
3,2,3.5
3,3,4.5
3,4,5.5'
expect_err_has "$left_beta"
run timeout 20 "$RS" --skip-damaged get "$D" 7 big -o "$T/damaged.npy"; expect_rc 0
npy_check "$T/damaged.npy" "'descr': '<f8', 'fortran_order': False, 'shape': (100, 200)" 160000
run timeout 20 "$RS" export csv "$D" "$T/damaged_csv" --skip-damaged; expect_rc 0
expect_out_has "^exported 13 series "; expect_err_has "$left_fifo"
checks=$((checks + 1))
[[ $(grep -c '^3,' "$T/damaged_csv/loss.csv") == 5 && ! -e $T/damaged_csv/late.csv.x ]] ||
  fail "export --skip-damaged: loss.csv has $(grep -c '^3,' "$T/damaged_csv/loss.csv") rows of run 3"
# verify always reads around damaged segments and reports them with every other problem.
for flag in "" --skip-damaged; do
  # shellcheck disable=SC2086
  run timeout 20 "$RS" verify "$D" $flag; expect_rc 2
  expect_out_has "^CORRUPT: 2 segments \(and 2 damaged, left out\), [0-9]+ of [0-9]+ blocks checked, 2 problem\(s\):$"
  expect_out_has "^  segments/beta-00000001.rss: offset 0: "
  expect_out_has "^  IOError: $D/segments/z-00000001.rss: is a FIFO, not a regular file$"
  expect_err_has "runstore: verify: Corruption: segments/beta-00000001.rss: offset 0"
done
run timeout 20 "$RS" verify "$D" --json; expect_rc 2
expect_out_has '^  "ok": false,$'; expect_out_has '"file": "segments/z-00000001.rss"'
expect_out_has '"code": "IOError",'
# A segment that cannot be read is a problem of the store: exit code 2, not 4.
run timeout 20 "$RS" verify "$F"; expect_rc 2; expect_out_has "^  IOError: .*not a regular file"
run "$RS" --help; expect_out_has "--skip-damaged"
run "$RS" verify --help; expect_out_has "as --skip-damaged does"

# --- export csv --------------------------------------------------------------
test_name=export_csv
E=$T/export
run "$RS" export csv "$S" "$E"; expect_rc 0; expect_err_empty
expect_out_has "^exported 13 series \(113 records, .*\) to $E$"
checks=$((checks + 1))
[[ $(cd "$E" && ls | tr '\n' ' ') == "big.csv blob.csv count.csv flag.csv grid.csv label.csv late.csv loss.csv manifest.json qi%2F3_17.csv small.csv special.csv trace.csv vec.csv " ]] ||
  fail "export files: $(cd "$E" && ls | tr '\n' ' ')"
expect_file_eq "$E/label.csv" 'run,step,value
exp-a,0,plain
"exp,b",0,"has, comma"
exp-c,0,"say ""hi""
next line"
exp-d,0,héllo	tab'
expect_file_eq "$E/vec.csv" 'run,step,value_0,value_1,value_2
0,0,0,0,1099511627776
1,0,1,-1,1099511627776
2,0,2,-2,1099511627776'
expect_file_eq "$E/trace.csv" 'run,step,value
0,0,"[0,1]"
1,0,"[0.25,1.25,2.25,3.25]"
2,0,"[[0.5,1.5],[2.5,3.5],[4.5,5.5]]"'
expect_file_eq "$E/blob.csv" 'run,step,value
exp-a,0,AAH/QQ==
exp-b,0,'
checks=$((checks + 1))
[[ $(head -1 "$E/grid.csv") == "run,step,value_0_0,value_0_1,value_0_2,value_0_3,value_1_0,value_1_1,value_1_2,value_1_3,value_2_0,value_2_1,value_2_2,value_2_3" ]] ||
  fail "grid.csv header: $(head -1 "$E/grid.csv")"
checks=$((checks + 1))
[[ $(sed -n 2p "$E/grid.csv") == "0,0,0.5,1.5,2.5,3.5,4.5,5.5,6.5,7.5,8.5,9.5,10.5,11.5" ]] || fail "grid.csv row: $(sed -n 2p "$E/grid.csv")"
checks=$((checks + 1))
[[ $(wc -l <"$E/loss.csv") == 51 && $(grep -c '^3,' "$E/loss.csv") == 3 ]] || fail "loss.csv rows"
checks=$((checks + 1))
grep -q '"series": "qi/3_17"' "$E/manifest.json" && grep -q '"file": "qi%2F3_17.csv"' "$E/manifest.json" ||
  fail "manifest.json lacks qi/3_17"
checks=$((checks + 1))
[[ -z $(find "$E" -name '*.tmp-*') ]] || fail "export left temporary files"
# The same records as cat --format csv, for a series that needs no splitting.
"$RS" cat "$S" label -f csv >"$T/label_cat.csv"
checks=$((checks + 1))
cmp -s "$T/label_cat.csv" "$E/label.csv" || fail "export label.csv differs from cat --format csv"

run "$RS" export csv "$S" "$T/export2" --names loss,qi/3_17 --names grid --max-columns 0; expect_rc 0
checks=$((checks + 1))
[[ $(cd "$T/export2" && ls | tr '\n' ' ') == "grid.csv loss.csv manifest.json qi%2F3_17.csv " ]] ||
  fail "export --names files: $(cd "$T/export2" && ls | tr '\n' ' ')"
checks=$((checks + 1))
[[ $(head -1 "$T/export2/grid.csv") == "run,step,value" ]] || fail "--max-columns 0 still split grid"
run "$RS" export csv "$S" "$T/export3" --all; expect_rc 0
checks=$((checks + 1))
[[ -f $T/export3/%7Eresume.csv ]] || fail "export --all lacks %7Eresume.csv"
run "$RS" export csv "$S" "$T/export4" --names loss,nope; expect_rc 3
expect_err_has "runstore: export csv: NotFound: series 'nope'"
checks=$((checks + 1))
[[ ! -e $T/export4 ]] || fail "export wrote files although a series was missing"
touch "$T/a_file"
run "$RS" export csv "$S" "$T/a_file"; expect_rc 4; expect_err_has "runstore: export csv: IOError:"
run "$RS" export csv "$C" "$T/export5"; expect_rc 2; expect_err_has "$corrupt_file"

# --- text a spreadsheet would run (CWE-1236) ---------------------------------
# A string, a string run id or base64 that begins (after its own single quotes)
# with = + - @ TAB or CR gets one more single quote; numbers stay numbers.
test_name=formulas
F=$T/formulas
"$MK" formulas "$F" || fail "make_fixture formulas"
tab=$'\t'
cr=$'\r'
cells="run,step,value
'=cmd,0,\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\"
'=cmd,1,'+1+1
'=cmd,2,'-1+1
'=cmd,3,'@SUM(A1)
'=cmd,4,'${tab}=1+1
'=cmd,5,\"'${cr}=1+1\"
'=cmd,6,''=x
'=cmd,7,'''-y
'=cmd,8,'plain
'=cmd,9,plain
'=cmd,10,a=b
'-5,0,run -5
-3,0,int run"
run "$RS" cat "$F" cell --format csv; expect_rc 0; expect_out "$cells"
run "$RS" export csv "$F" "$T/formulas_csv"; expect_rc 0
expect_file_eq "$T/formulas_csv/cell.csv" "$cells"
expect_file_eq "$T/formulas_csv/blob.csv" "run,step,value
'=cmd,0,'+AA="
expect_file_eq "$T/formulas_csv/neg.csv" "run,step,value
-3,0,-1.5
-3,1,-inf"
run "$RS" cat "$F" neg --format csv; expect_rc 0; expect_out "run,step,value
-3,0,-1.5
-3,1,-inf"
# Names one file system would take for one file: Loss and loss (case), CON (Windows).
checks=$((checks + 1))
files=$(cd "$T/formulas_csv" && ls | tr '\n' ' ')
[[ $files =~ ^%43ON.csv\ Loss.csv\ blob.csv\ cell.csv\ loss~[0-9a-f]{16}.csv\ manifest.json\ neg.csv\ $ ||
   $files =~ ^%43ON.csv\ Loss~[0-9a-f]{16}.csv\ blob.csv\ cell.csv\ loss.csv\ manifest.json\ neg.csv\ $ ]] ||
  fail "export csv files: $files"
checks=$((checks + 1))
grep -q '"text_cells": "a text cell' "$T/formulas_csv/manifest.json" || fail "manifest.json lacks text_cells"

# --- arrays with a zero dimension ----------------------------------------------
test_name=zero_size
Z=$T/zero
"$MK" zero-size "$Z" || fail "make_fixture zero-size"
run "$RS" ls "$Z"; expect_rc 0
expect_out_has "^cols +float64 +\[100, 0\] +3 +[0-9]+$"
expect_out_has "^rows3 +int32 +\[0, 3\] +3 +[0-9]+$"
run "$RS" cat "$Z" rows3 -f jsonl; expect_rc 0
expect_out '{"run":0,"step":0,"value":[]}
{"run":1,"step":0,"value":[]}
{"run":2,"step":0,"value":[]}'
run "$RS" cat "$Z" cols -f csv --run 1; expect_rc 0
expect_out "run,step,value
1,0,\"[$(printf '[],%.0s' {1..99})[]]\""
run "$RS" cat "$Z" var -f csv; expect_rc 0
expect_out 'run,step,value
0,0,[]
1,0,"[1,2]"'
run "$RS" get "$Z" 1 cols -o "$T/zcols.npy"; expect_rc 0
npy_check "$T/zcols.npy" "'descr': '<f8', 'fortran_order': False, 'shape': (100, 0)" 0
run "$RS" get "$Z" 2 rows3 -o "$T/zrows3.npy"; expect_rc 0
npy_check "$T/zrows3.npy" "'descr': '<i4', 'fortran_order': False, 'shape': (0, 3)" 0
run "$RS" get "$Z" 0 var -o "$T/zvar.npy"; expect_rc 0
npy_check "$T/zvar.npy" "'descr': '<i4', 'fortran_order': False, 'shape': (0, 3)" 0
# A zero-element shape has no element columns: one 'value' column of JSON lists.
run "$RS" export csv "$Z" "$T/zero_csv"; expect_rc 0
expect_file_eq "$T/zero_csv/rows3.csv" 'run,step,value
0,0,[]
1,0,[]
2,0,[]'
checks=$((checks + 1))
grep -q '"shape": \[' "$T/zero_csv/manifest.json" && [[ $(grep -c '^[0-9],0,' "$T/zero_csv/cols.csv") == 3 ]] ||
  fail "export csv of zero-size arrays"
run "$RS" verify "$Z"; expect_rc 0
ZPY=${RUNSTORE_PYTHON:-python3}
if "$ZPY" -c "import numpy" 2>/dev/null; then
  checks=$((checks + 1))
  "$ZPY" - "$T" <<'EOF' || fail "numpy.load of the zero-size .npy files"
import sys, numpy as np
t = sys.argv[1]
for f, shape, dtype in [("zcols", (100, 0), np.float64), ("zrows3", (0, 3), np.int32), ("zvar", (0, 3), np.int32)]:
    a = np.load(f"{t}/{f}.npy")
    assert a.shape == shape and a.dtype == dtype, (f, a.shape, a.dtype)
EOF
fi

# --- the commands of a Python engine (cli/commands.tsv) ---------------------------
# The Python package's runstore command does them and hands every other command
# to this tool, which lists them (the table names each and its engine) but
# declares none of their options: their engine does. Run here, each says where
# it is done and what to install, and exits with 5, whatever follows it,
# starting no Python (not the python3 first on PATH, not $RUNSTORE_PYTHON) and
# writing nothing.
test_name=python_engines
mkdir "$T/bin"
printf '#!/bin/sh\ntouch "%s/python_ran"\n' "$T" >"$T/bin/python3"
chmod +x "$T/bin/python3"
ln -s python3 "$T/bin/python"
table="$(dirname "${BASH_SOURCE[0]}")/../commands.tsv"
python_commands=()
while IFS=$'\t' read -r path engine _writes install summary usage <&3; do
  [[ $path == \#* || -z $path || $engine == tool || $engine == group ]] && continue
  python_commands+=("$path")
  # shellcheck disable=SC2086  # the command's words
  run env PATH="$T/bin:$PATH" RUNSTORE_PYTHON="$T/bin/python3" "$RS" $path "$S" "$T/out" --force --chunk-rows 0
  expect_rc 5; expect_out ""
  expect_err_has "runstore: $path: NotSupported: the C++ runstore tool on its own does not do '$path'; it is done by the Python package's runstore command: $install, then run '$usage' from that environment"
  checks=$((checks + 1))
  [[ $(grep -c . <<<"$err") == 1 ]] || fail "$path: stderr is not one line: $err"
  # Its help: where it is done and how to see its options there.
  # shellcheck disable=SC2086
  run "$RS" $path --help; expect_rc 0; expect_out_contains "$summary"$'\n'
  expect_out_contains "Done by the Python package's runstore command ($install)"
  expect_out_contains $'\n'"  $usage"$'\n'; expect_out_has "^  2  corruption"
  # Global flags before it, after it: the same.
  # shellcheck disable=SC2086
  run "$RS" --skip-damaged $path "$T/nowhere" --no-progress; expect_rc 5
done 3<"$table"
checks=$((checks + 1))
[[ ${#python_commands[@]} == 9 ]] || fail "commands.tsv lists ${#python_commands[@]} commands of a Python engine: ${python_commands[*]}"
checks=$((checks + 1))
[[ ! -e $T/python_ran && ! -e $T/out ]] || fail "a command of a Python engine started a Python or wrote"
run "$RS" export --help; expect_rc 0; expect_out_has "^  tar "; expect_out_has "^  parquet "
expect_out_has "^  zarr "
run "$RS" import --help; expect_rc 0; expect_out_has "^  tar "
run "$RS" import; expect_rc 1; expect_err_has "subcommand is required"
# Which commands write to a store: the table says, and the help says what the table says.
run "$RS" --help; expect_rc 0
expect_out_has "^Only compact, catalog, import tar and sync may write to a store; every other command opens it$"

# The exports themselves, through the Python front end (python -m runstore, as
# the package's runstore command does them): with the Python of
# $RUNSTORE_PYTHON, else the project's .venv (scripts/test.sh installs it there).
test_name=export_python
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=${RUNSTORE_PYTHON:-}
[[ -z $PY && -x $root/.venv/bin/python ]] && PY=$root/.venv/bin/python
have_py= have_arrow= have_xarray=
if [[ -n $PY ]] && "$PY" -c "import runstore._core" 2>/dev/null; then
  have_py=1
  "$PY" -c "import pyarrow" 2>/dev/null && have_arrow=1
  "$PY" -c "import xarray, zarr, dask" 2>/dev/null && have_xarray=1
  run "$PY" -m runstore export tar "$S" "$T/store.tar.gz"; expect_rc 0
  expect_out_has "experiments, [0-9]+ members"
  expect_err_has "are not part of the table: loss"  # records at steps other than 0
  checks=$((checks + 1))
  members=$(tar tzf "$T/store.tar.gz" | head -2 | tr '\n' ' ')
  [[ $members == "metadata.json experiments.csv " ]] || fail "tarball starts with: $members"
  checks=$((checks + 1))
  tar tzf "$T/store.tar.gz" | grep -qx 'outcomes/qi%2F3_17.csv' || fail "no outcomes/qi%2F3_17.csv"
  run "$PY" -m runstore export tar "$T/no-store" "$T/none.tar.gz"; expect_rc 3
  expect_err_has "runstore: export tar: NotFound:"
  run "$PY" -m runstore export tar "$C" "$T/none.tar.gz"; expect_rc 2
  expect_err_has "$corrupt_file"
  checks=$((checks + 1))
  [[ ! -e $T/none.tar.gz ]] || fail "a failed export left its output behind"
  # Their integer options are read as the tool reads its own (a usage error, 1, naming
  # the value), by their one engine.
  for bad in 99999999999999999999 -99999999999999999999 0x10 1.5 1e3 " 5" "5 " +5 1_000 x; do
    run "$PY" -m runstore export tar "$S" "$T/int.tar.gz" --chunk-rows "$bad"; expect_rc 1
    expect_err_has "--chunk-rows: '$bad' is"
    run "$PY" -m runstore export parquet "$S" "$T/int.parquet" --row-group-rows "$bad"; expect_rc 1
    expect_err_has "--row-group-rows: '$bad' is"
    run "$PY" -m runstore export zarr "$S" "$T/int.zarr" --chunk-rows "$bad"; expect_rc 1
    expect_err_has "--chunk-rows: '$bad' is"
    run "$PY" -m runstore report "$S" -o "$T/int.html" --max-points "$bad"; expect_rc 1
    expect_err_has "--max-points: '$bad' is"
  done
  run "$PY" -m runstore export tar "$S" "$T/int.tar.gz" --compresslevel 10; expect_rc 1
  expect_err_has "--compresslevel: '10' is out of range (expected an integer from 0 to 9)"
  run "$PY" -m runstore export tar "$S" "$T/int.tar.gz" --chunk-rows 0; expect_rc 1
  expect_err_has "'0' is out of range"
  run "$PY" -m runstore report "$S" -o "$T/int.html" --max-points 0; expect_rc 1
  expect_err_has "--max-points: '0' is out of range"
  run "$PY" -m runstore report "$S"; expect_rc 1; expect_err_has "the following arguments are required: -o/--output"
  checks=$((checks + 1))
  [[ ! -e $T/int.tar.gz && ! -e $T/int.parquet && ! -e $T/int.zarr && ! -e $T/int.html ]] ||
    fail "a refused command line wrote its output"
  # An existing OUT is replaced only with --force; OUT gets the umask's mode.
  cp "$T/store.tar.gz" "$T/store_before.tar.gz"
  run "$PY" -m runstore export tar "$S" "$T/store.tar.gz"; expect_rc 5
  expect_err_has "runstore: export tar: AlreadyExists: $T/store.tar.gz exists; use --force (-f) to replace it"
  checks=$((checks + 1))
  cmp -s "$T/store.tar.gz" "$T/store_before.tar.gz" || fail "export tar replaced a file without --force"
  run "$PY" -m runstore export tar "$S" "$T/store.tar.gz" -f; expect_rc 0
  rm "$T/store.tar.gz"
  (umask 002 && "$PY" -m runstore export tar "$S" "$T/store.tar.gz" --force) >/dev/null 2>&1
  checks=$((checks + 1))
  [[ $(stat -c %a "$T/store.tar.gz") == 664 ]] || fail "export tar with umask 002: mode $(stat -c %a "$T/store.tar.gz")"
  checks=$((checks + 1))
  [[ -z $(find "$T" -maxdepth 1 -name '.*runstore*') ]] || fail "export tar left temporaries"
  if [[ -w /dev/full ]]; then
    "$PY" -m runstore export tar "$S" "$T/full_stdout.tar.gz" >/dev/full 2>"$T/stderr"
    rc=$?; err=$(cat "$T/stderr")
    expect_rc 4; expect_err_has "runstore: export tar: IOError: standard output: No space left on device"
  fi
  # A damaged store is refused as by every command; --skip-damaged names what it leaves out.
  run timeout 60 "$PY" -m runstore export tar "$D" "$T/damaged.tar.gz"; expect_rc 2
  expect_err_has "runstore: export tar: Corruption: segments/beta-00000001.rss: offset 0"
  expect_err_has "runstore: export tar: to read the other segments, leaving this one out, run with --skip-damaged"
  run timeout 60 "$PY" -m runstore export tar "$D" "$T/damaged.tar.gz" --skip-damaged
  expect_rc 0; expect_err_has "$left_beta"; expect_err_has "$left_fifo"
  checks=$((checks + 1))
  tar tzf "$T/damaged.tar.gz" | grep -qx 'outcomes/big.npy' || fail "export tar --skip-damaged lacks big"
  if [[ -n $have_arrow ]]; then
    run "$PY" -m runstore export parquet "$S" "$T/store.parquet"; expect_rc 0
    checks=$((checks + 1))
    rows=$("$PY" -c "import pyarrow.parquet as pq, sys; print(pq.read_metadata(sys.argv[1]).num_rows)" \
      "$T/store.parquet")
    [[ $rows -gt 0 ]] || fail "export parquet wrote $rows rows"
    run "$PY" -m runstore export parquet "$S" "$T/store.parquet"; expect_rc 5
    expect_err_has "runstore: export parquet: AlreadyExists: $T/store.parquet exists; use --force"
    run "$PY" -m runstore export parquet "$S" "$T/store.parquet" --force; expect_rc 0
  else
    echo "cli_test: export parquet checks skipped: $PY has no pyarrow"
  fi
  if [[ -n $have_xarray ]]; then
    # The fixture's every kind of series: ints, bools, uint8, float32, arrays, strings under
    # int and str runs (one coordinate of text), a series at several steps, variable shapes
    # and bytes (left out, with a note).
    run "$PY" -m runstore export zarr "$S" "$T/store.zarr"; expect_rc 0
    expect_out_has "^$T/store.zarr: 18 runs by 6 steps, 11 variables, [0-9]+ chunks"
    expect_err_has "note: bytes series are not written"; expect_err_has ": blob;"
    checks=$((checks + 1))
    read_back=$("$PY" -c "
import sys
sys.modules['runstore'] = None  # read without runstore
import xarray
ds = xarray.open_zarr(sys.argv[1])
print(list(ds.run.values[:3]), float(ds['loss'].sel(run='1', step=4)), 'qi%2F3_17' in ds)
" "$T/store.zarr" 2>&1)
    [[ $read_back == "['0', '1', '2'] 4.5 True" ]] || fail "xarray.open_zarr read back: $read_back"
    run "$PY" -m runstore export zarr "$S" "$T/store.zarr"; expect_rc 5
    expect_err_has "runstore: export zarr: AlreadyExists: $T/store.zarr exists; use --force (-f) to replace it"
    run "$PY" -m runstore export zarr "$S" "$T/store.zarr" --force --names loss --chunk-rows 4; expect_rc 0
    expect_out_has ": 18 runs by 5 steps, 1 variables, "
    run "$PY" -m runstore export zarr "$S" "$T/store.zarr" --force --names trace; expect_rc 5
    expect_err_has "runstore: export zarr: ValueError: series 'trace' has a variable shape"
    run "$PY" -m runstore export zarr "$S" "$T/store.zarr" --force --names nothing; expect_rc 3
    expect_err_has "runstore: export zarr: NotFound: series 'nothing' not found in the store"
    run "$PY" -m runstore export zarr "$C" "$T/none.zarr"; expect_rc 2
    checks=$((checks + 1))
    [[ ! -e $T/none.zarr && -z $(find "$T" -maxdepth 1 -name '.*runstore-tmp*') ]] ||
      fail "a failed export zarr left its output behind"
  else
    echo "cli_test: export zarr checks skipped: $PY has no xarray, zarr and dask"
  fi
else
  echo "cli_test: export tar/parquet/zarr checks skipped: no Python with the runstore package" \
    "(set RUNSTORE_PYTHON, or install it into .venv)"
fi

# --- integers and run ids on the command line ---------------------------------
# Out of range and malformed integers are refused, naming the option and the
# value, instead of being clamped (CLI11 alone took 0x10 for 16, 010 for 8, and
# 99999999999999999999 for the largest int64).
test_name=integers
for bad in 99999999999999999999 -99999999999999999999 0x10 1.5 1e3 " 5" "5 " +5 1_000 x; do
  run "$RS" get "$S" 3 loss --step "$bad" -o "$T/int.npy"; expect_rc 1; expect_err_has "--step: '$bad' is"
  run "$RS" cat "$S" loss --first-step "$bad"; expect_rc 1; expect_err_has "--first-step: '$bad' is"
  run "$RS" cat "$S" loss --last-step "$bad"; expect_rc 1; expect_err_has "--last-step: '$bad' is"
  run "$RS" cat "$S" loss --limit "$bad"; expect_rc 1; expect_err_has "--limit: '$bad' is"
  run "$RS" export csv "$S" "$T/int_csv" --max-columns "$bad"; expect_rc 1
  expect_err_has "--max-columns: '$bad' is"
done
run "$RS" get "$S" 3 loss --step 99999999999999999999 -o "$T/int.npy"
expect_err_has "is out of range (expected an integer from -9223372036854775808 to 9223372036854775807)"
run "$RS" get "$S" 3 loss --step 0x10 -o "$T/int.npy"; expect_err_has "'0x10' is not a decimal integer"
run "$RS" cat "$S" loss --limit -1; expect_rc 1; expect_err_has "--limit: '-1' is out of range"
run "$RS" export csv "$S" "$T/int_csv" --max-columns 2147483648; expect_rc 1
expect_err_has "to 2147483647)"
checks=$((checks + 1))
[[ ! -e $T/int.npy && ! -e $T/int_csv ]] || fail "a refused command line wrote its output"
# Decimal digits, with leading zeros, are what they say.
run "$RS" cat "$S" loss --run 3 --first-step 01 --last-step -0001 -f csv; expect_rc 3
run "$RS" cat "$S" loss --run 3 --first-step 01 --last-step 0001 -f csv; expect_rc 0
expect_out 'run,step,value
3,1,2.5'
# A run id is an integer if all of it is one, a string if it does not start
# like a number, and refused if it starts like one but is not an integer:
# taken as a string it would silently select some other run, or none.
test_name=run_ids
for bad in 1x 1.5 0x10 " 1" "1 " +1 -1x .5 1e3 99999999999999999999; do
  run "$RS" cat "$S" loss --run "$bad"; expect_rc 1; expect_out ""
  expect_err_has "runstore: cat: --run '$bad' "; expect_err_has "use --run-str"
  run "$RS" get "$S" "$bad" loss -o "$T/run.npy"; expect_rc 1
  expect_err_has "runstore: get: RUN '$bad' "; expect_err_has "use --run-str"
done
run "$RS" cat "$S" loss --run 99999999999999999999
expect_err_has "does not fit a 64-bit signed integer; for the string run id '99999999999999999999', use --run-str"
run "$RS" cat "$S" loss --run 1x; expect_err_has "'1x' is not an integer"
# As strings, with --run-str, they are run ids like any other.
run "$RS" cat "$S" loss --run-str 1x; expect_rc 3; expect_err_has "no records of run 1x"
run "$RS" get "$S" 1.5 loss --run-str -o "$T/run.npy"; expect_rc 3; expect_err_has "no record for run 1.5"
run "$RS" cat "$S" loss --run s1 -f csv; expect_rc 0; expect_out 'run,step,value
s1,0,1.5'
run "$RS" cat "$S" loss --run -7; expect_rc 3; expect_err_has "no records of run -7"
checks=$((checks + 1))
[[ ! -e $T/run.npy ]] || fail "a refused run id wrote its output"
run "$RS" cat --help; expect_out_has "is refused: use --run-str"
run "$RS" get --help; expect_out_has "refused: use --run-str"

# --- output files --------------------------------------------------------------
# An existing output is replaced only with --force, as zstd and gzip do.
test_name=force
printf 'keep me' >"$T/existing.npy"
run "$RS" get "$S" 3 loss -o "$T/existing.npy"; expect_rc 5
expect_err_has "runstore: get: AlreadyExists: $T/existing.npy exists; use --force (-f) to replace it"
expect_file_eq "$T/existing.npy" "keep me"
ln -s "$T/nowhere.npy" "$T/dangling.npy"
run "$RS" get "$S" 3 loss -o "$T/dangling.npy"; expect_rc 5; expect_err_has "exists; use --force"
run "$RS" get "$S" 3 loss -o "$T/existing.npy" -f; expect_rc 0
npy_check "$T/existing.npy" "'descr': '<f8', 'fortran_order': False, 'shape': ()" 8
printf 'keep me' >"$T/existing.npy"
run "$RS" get "$S" 3 loss -o "$T/existing.npy" --force; expect_rc 0
checks=$((checks + 1))
[[ $(head -c 6 "$T/existing.npy" | od -An -c | tr -d ' ') == '223NUMPY' ]] || fail "--force did not replace the file"
checks=$((checks + 1))
[[ -z $(find "$T" -maxdepth 1 -name '*.tmp-*') ]] || fail "get left temporary files"

# No command writes into the store it reads (symlinks and relative paths
# resolved): get -o STORE/RUNSTORE destroyed the store's marker.
test_name=inside_store
V=$T/victim
cp -a "$S" "$V"
ln -s "$V" "$T/victim_link"
victim_before=$(fingerprint "$V")
run "$RS" export csv "$V" "$V"; expect_rc 5
expect_err_has "runstore: export csv: InvalidArgument: $V: refusing to write inside the store $V"
run "$RS" export csv "$V" "$V/out"; expect_rc 5; expect_err_has "refusing to write inside the store"
run "$RS" export csv "$V" "$T/victim_link/segments/../out"; expect_rc 5
expect_err_has "resolves to $V/out"
run "$RS" get "$V" 3 loss -o "$V/RUNSTORE" --force; expect_rc 5
expect_err_has "runstore: get: InvalidArgument: $V/RUNSTORE: refusing to write inside the store $V"
run "$RS" get "$V" 3 loss -o "$T/victim_link/x.npy"; expect_rc 5; expect_err_has "refusing to write inside"
run env -C "$V/segments" "$RS" get "$V" 3 loss -o ../x.npy; expect_rc 5; expect_err_has "refusing to write inside"
run env -C "$V" "$RS" export csv . out; expect_rc 5; expect_err_has "refusing to write inside the store ."
run "$RS" export tar "$V" "$V/x.tar.gz"; expect_rc 5; expect_err_has "does not do 'export tar'"
if [[ -n $have_py ]]; then
  run "$PY" -m runstore export tar "$V" "$V/x.tar.gz"; expect_rc 5
  expect_err_has "refusing to write the export inside the store"
  if [[ -n $have_arrow ]]; then
    run "$PY" -m runstore export parquet "$T/victim_link" "$V/x.parquet" --force; expect_rc 5
    expect_err_has "refusing to write the export inside the store"
  fi
  if [[ -n $have_xarray ]]; then
    run "$PY" -m runstore export zarr "$T/victim_link" "$V/segments/x.zarr"; expect_rc 5
    expect_err_has "refusing to write the export inside the store"
    run "$PY" -m runstore export zarr "$V" "$T" --force; expect_rc 5
    expect_err_has "refusing to replace it: it holds the store"
  fi
fi
checks=$((checks + 1))
[[ $(fingerprint "$V") == "$victim_before" ]] || fail "a command wrote into the store"
run "$RS" verify "$V"; expect_rc 0

# Outputs get the mode the umask gives (0666 minus the umask), as any tool's.
test_name=modes
for mask in 022 002; do
  want=$(printf '%o' $((0666 & ~8#$mask)))
  (umask $mask && "$RS" get "$S" 3 loss -o "$T/mode_$mask.npy" && "$RS" export csv "$S" "$T/mode_$mask" --names loss) >/dev/null
  checks=$((checks + 1))
  [[ $(stat -c %a "$T/mode_$mask.npy") == "$want" && $(stat -c %a "$T/mode_$mask/loss.csv") == "$want" &&
    $(stat -c %a "$T/mode_$mask/manifest.json") == "$want" ]] ||
    fail "umask $mask: modes $(stat -c %a "$T/mode_$mask.npy" "$T/mode_$mask/loss.csv" | tr '\n' ' '), expected $want"
done

# Output that cannot be written fails the command: it used to exit 0.
test_name=stdout
if [[ -w /dev/full ]]; then
  for cmd in "info $S" "info $S --json" "ls $S" "ls $S --runs" "ls $S --json" "verify $S" "verify $S --json" \
    "cat $S loss" "get $S 7 big -o -" "export csv $S $T/stdout_csv" "--help" "ls --help" "--version"; do
    # shellcheck disable=SC2086
    "$RS" $cmd >/dev/full 2>"$T/stderr"; rc=$?; err=$(cat "$T/stderr")
    expect_rc 4; expect_err_has "IOError: standard output: write failed"
  done
  "$RS" ls "$S" >/dev/full 2>"$T/stderr"; rc=$?; err=$(cat "$T/stderr")
  expect_rc 4; expect_err_has "runstore: ls: IOError: standard output: write failed: No space left on device"
fi
# shellcheck disable=SC2086
"$RS" ls "$S" >&- 2>"$T/stderr"; rc=$?; err=$(cat "$T/stderr")
expect_rc 4; expect_err_has "runstore: ls: IOError: standard output: write failed: Bad file descriptor"

# A FIFO is not a store: refused at once (reading it would wait for a writer).
test_name=fifo
mkfifo "$T/fifo"
for cmd in info ls verify; do
  run timeout 10 "$RS" $cmd "$T/fifo"; expect_rc 5
  expect_err_has "runstore: $cmd: InvalidArgument: $T/fifo is not a directory, so it cannot be a store"
done

# A full disk: the error names the file that could not be written, and no
# temporary is left behind (needs root, to mount a small tmpfs).
test_name=full_disk
if [[ $(id -u) == 0 ]] && mkdir "$T/full" && mount -t tmpfs -o size=64k tmpfs "$T/full" 2>/dev/null; then
  FULL=$T/full
  run "$RS" get "$S" 7 big -o "$FULL/big.npy"; expect_rc 4
  expect_err_has "runstore: get: IOError: $FULL/big.npy: write failed: No space left on device"
  run "$RS" export csv "$S" "$FULL/csv" --names big; expect_rc 4
  expect_err_has "IOError: series 'big': $FULL/csv/big.csv: write failed: No space left on device"
  checks=$((checks + 1))
  [[ -z $(find "$FULL" -type f) ]] || fail "a failed write left files: $(find "$FULL" -type f)"
else
  echo "cli_test: full-disk checks skipped: mounting a small tmpfs needs root"
fi

# --- catalog -----------------------------------------------------------------
# On a copy: the other commands read $S unchanged.
test_name=catalog
cp -a "$S" "$T/cat"
run "$RS" catalog "$T/cat"; expect_rc 0; expect_err_empty
expect_out_has "^catalog: 2 sealed segments of 3 \(0 from the old catalog, 2 from their footers\), [0-9]+ bytes, in "
checks=$((checks + 1))
[[ -f $T/cat/CATALOG ]] || fail "no CATALOG written"
run "$RS" catalog "$T/cat" --json; expect_rc 0
expect_out_has '"read_from_old_catalog": 2,'
expect_out_has '"open": 1,'
run "$RS" info "$T/cat"; expect_rc 0
expect_out_has "^segments: +3 \(2 sealed, 1 open\)$"
run "$RS" verify "$T/cat"; expect_rc 0
printf 'garbage' > "$T/cat/CATALOG"  # a damaged catalog costs time, not data
run "$RS" cat "$T/cat" loss --run 0; expect_rc 0
run "$RS" catalog "$T/cat"; expect_rc 0
expect_out_has "\(0 from the old catalog, 2 from their footers\)"
run "$RS" catalog "$T/nonexistent"; expect_rc 3
expect_err_has "runstore: catalog: NotFound: $T/nonexistent: no store here"

# --- the store was never written ---------------------------------------------
test_name=read_only
checks=$((checks + 1))
[[ $(fingerprint "$S") == "$before" ]] || fail "the store changed while the CLI read it"

finish cli_test
