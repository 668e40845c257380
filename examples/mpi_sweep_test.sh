#!/usr/bin/env bash
# examples/mpi_sweep.cc under a real mpirun with 4 ranks, one of them SIGKILLed part way, then
# run again. mpirun aborts the whole job when a rank dies, so the other ranks may be killed too:
# what must hold is that every experiment a rank committed as done is there with its outcomes,
# and that the rerun completes only what is missing, each experiment run exactly once except
# those a kill interrupted (at most one per rank).
#
#   mpi_sweep_test.sh path/to/mpi_sweep path/to/runstore
#
# Registered with ctest as mpi_sweep_test (CMakeLists.txt).
set -uo pipefail
SWEEP=$(realpath "${1:?usage: mpi_sweep_test.sh MPI_SWEEP RUNSTORE}")
RS=$(realpath "${2:?usage: mpi_sweep_test.sh MPI_SWEEP RUNSTORE}")
if ! command -v mpirun > /dev/null; then
  echo "mpirun not found: skipped"
  exit 0
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/runstore_mpi_test.XXXXXX")
trap 'rm -rf "$T"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/../cli/tests/lib.sh"
N=200
mpi=(mpirun -np 4 --oversubscribe)
[[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)

# done EXPERIMENTS: the experiments the store holds as done, one per line, sorted.
done_list() { "$RS" cat "$T/store" done --format csv | awk -F, 'NR > 1 { print $1 }' | sort -n; }

test_name=a_rank_killed
run timeout 240 "${mpi[@]}" "$SWEEP" --store "$T/store" --experiments $N --log "$T/log" \
  --kill-rank 2 --kill-after 10
checks=$((checks + 1))
[[ $rc != 0 ]] || fail "rank 2 was killed, but mpirun exited with 0"
mapfile -t done_first < <(done_list)
checks=$((checks + 1))
((${#done_first[@]} >= 10 && ${#done_first[@]} < N)) || fail "${#done_first[@]} experiments done"
rank2=0
for e in "${done_first[@]}"; do ((e % 4 == 2)) && rank2=$((rank2 + 1)); done
checks=$((checks + 1))
((rank2 == 10)) || fail "rank 2 committed $rank2 experiments before its kill, expected 10"
# Every done experiment has its outcomes.
n_mean=$("$RS" cat "$T/store" mean --format csv | awk 'NR > 1' | wc -l)
n_curve=$("$RS" cat "$T/store" curve --format csv | awk 'NR > 1' | wc -l)
checks=$((checks + 1))
((n_mean >= ${#done_first[@]} && n_curve >= ${#done_first[@]})) \
  || fail "${#done_first[@]} done but $n_mean means and $n_curve curves"
cp "$T/log" "$T/log.first"

test_name=the_rerun_completes_only_what_is_missing
run timeout 240 "${mpi[@]}" "$SWEEP" --store "$T/store" --experiments $N --log "$T/log"
expect_rc 0
expect_out_has "^sweep: $N experiments over 4 ranks, $((N - ${#done_first[@]})) run now, ${#done_first[@]} done before$"
for r in 0 1 2 3; do expect_out_has "^rank $r summary ran [0-9]+ already-done [0-9]+$"; done
mapfile -t done_all < <(done_list)
checks=$((checks + 1))
[[ ${#done_all[@]} == "$N" && $(printf '%s\n' "${done_all[@]}" | uniq | wc -l) == "$N" ]] \
  || fail "${#done_all[@]} done records after the rerun, expected $N, each once"
# Each experiment ran once, but those a kill interrupted (started, not committed): at most one
# per rank of the first run.
twice=$(awk '{ print $1 }' "$T/log" | sort -n | uniq -d | wc -l)
checks=$((checks + 1))
((twice <= 4)) || fail "$twice experiments ran twice"
for e in "${done_first[@]}"; do
  n=$(awk -v e="$e" '$1 == e' "$T/log" | wc -l)
  if [[ $n != 1 ]]; then
    fail "experiment $e was committed in the first run but ran $n times"
    break
  fi
done
checks=$((checks + 1))
run "$RS" verify "$T/store"
expect_rc 0

test_name=bench_runs
run timeout 120 "${mpi[@]}" "$SWEEP" --store "$T/bench" --bench 20000 --commit-every 1000
expect_rc 0
expect_out_has "^bench: 4 ranks x 20000 records"
run "$RS" info "$T/bench"
expect_out_has "^records: +80000$"

finish mpi_sweep_test.sh
