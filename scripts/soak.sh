#!/usr/bin/env bash
# The soak: writer processes, readers and kill -9s against one store for
# MINUTES minutes (tests/kill9_test.cc in soak mode), then every acknowledged
# commit is checked byte for byte, nothing appears twice, and verify runs.
# It prints its seed and figures; docs/reliability.md records a 30-minute run.
#
#   bash scripts/soak.sh MINUTES          # e.g. 30
#   RUNSTORE_SEED=123 bash scripts/soak.sh 5   # replay a seed
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
minutes=${1:?usage: scripts/soak.sh MINUTES}
case "$minutes" in
  ''|*[!0-9]*) echo "soak.sh: MINUTES must be a whole number, got '$minutes'" >&2; exit 1 ;;
esac
bash scripts/install-deps.sh > /dev/null
cmake --preset release > /dev/null
cmake --build build/release -j "$(nproc)" --target kill9_test kill9_writer
# The store lives in $TMPDIR (default /tmp): a 30-minute soak writes some GiB.
echo "soak: ${minutes} min of kills against one store in ${TMPDIR:-/tmp}"
RUNSTORE_SOAK_SECONDS=$((minutes * 60)) exec build/release/kill9_test \
  --gtest_filter='Kill9Test.EveryAcknowledgedCommitSurvivesSigkillOfConcurrentWriters'
