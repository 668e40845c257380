#!/usr/bin/env bash
# The signal campaign: python/tests/test_signals.py with ROUNDS rounds of each
# randomized test instead of the suite's 3: SIGTERM and SIGINT at random moments
# in a writer's with-block and between blocks, and to a sweep of run_experiments
# (to the whole job, to the parent alone, Ctrl-C to the process group; on worker
# processes and in the calling process), each round checked, then a rerun that
# must do every experiment exactly once. The seed is in pytest's header.
#
#   bash scripts/signal_campaign.sh ROUNDS              # e.g. 50
#   RUNSTORE_TEST_SEED=123 bash scripts/signal_campaign.sh 50   # replay a seed
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=${1:?usage: scripts/signal_campaign.sh ROUNDS}
case "$rounds" in
  ''|*[!0-9]*) echo "signal_campaign.sh: ROUNDS must be a whole number, got '$rounds'" >&2; exit 1 ;;
esac
cd python/tests
RUNSTORE_SIGNAL_ROUNDS=$rounds exec ../../.venv/bin/python -m pytest -q -s -p no:cacheprovider \
  test_signals.py -k "random_moments or with_block"
