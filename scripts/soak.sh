#!/usr/bin/env bash
# The soak: the cluster kill -9 loop of tests/kill9_test.cc for MINUTES minutes
# against one store: 6 writer processes (3 staging on "node-local" disk and
# shipping), a `runstore compact` and a `runstore sync` in loops, all SIGKILLed
# at random, and two reader threads checking every snapshot; then a forced sync
# and a compaction, and every acknowledged commit is checked byte for byte,
# nothing appears twice, staging is empty and verify runs. It prints its seed
# and figures; docs/reliability.md records a 30-minute run.
#
#   bash scripts/soak.sh MINUTES          # e.g. 30
#   RUNSTORE_SEED=123 bash scripts/soak.sh 5   # replay a seed
#   RUNSTORE_SOAK_WRITERS_ONLY=1 bash scripts/soak.sh 30   # the writers-only loop
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
minutes=${1:?usage: scripts/soak.sh MINUTES}
case "$minutes" in
  ''|*[!0-9]*) echo "soak.sh: MINUTES must be a whole number, got '$minutes'" >&2; exit 1 ;;
esac
bash scripts/install-deps.sh > /dev/null
cmake --preset release > /dev/null
cmake --build build/release -j "$(nproc)" --target kill9_test kill9_writer runstore_cli
# The store lives in $TMPDIR (default /tmp): a 30-minute soak writes some GiB.
echo "soak: ${minutes} min of kills against one store in ${TMPDIR:-/tmp}"
if [ "${RUNSTORE_SOAK_WRITERS_ONLY:-0}" = 1 ]; then
  RUNSTORE_SOAK_SECONDS=$((minutes * 60)) exec build/release/kill9_test \
    --gtest_filter='Kill9Test.EveryAcknowledgedCommitSurvivesSigkillOfConcurrentWriters'
fi
RUNSTORE_CLUSTER_SOAK_SECONDS=$((minutes * 60)) exec build/release/kill9_test \
  --gtest_filter='Kill9Test.StagingWritersCompactionAndSyncAllKilledLoseNothing'
