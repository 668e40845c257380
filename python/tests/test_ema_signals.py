"""runstore.ema's callback and SIGTERM (docs/experiments.md, "Signals"): ema-workbench 3.x needs
Python 3.12, so scripts/test.sh runs this in .venv312.

A batch system preempts with SIGTERM; until the callback closes, SIGTERM raises SystemExit(143) in
the main thread, EMA's loop stops, and the callback's close at exit commits every experiment it
got. The moment is drawn from the session's seed (RUNSTORE_TEST_SEED, in the header).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("ema_workbench")

from conftest import SEED
from ema_workbench import perform_experiments
from test_ema import make_model, scenarios_of, toy

import runstore.ema

HERE = Path(__file__).parent

EMA_SCRIPT = """
import os, sys, time
sys.path.insert(0, {testdir!r})
import runstore.ema
from conftest import SEED
from ema_workbench import perform_experiments
from test_ema import make_model, scenarios_of, toy

def counted(x=0.5, n=3, kind="a"):
    with open({calls!r}, "a") as f:
        f.write("call\\n")
    time.sleep(0.005)
    return toy(x, n, kind)

model = make_model(counted)
cb = runstore.ema.callback({path!r}, flush_every_s=3600, commit_every_s=3600, batch=10**6)
print("start", flush=True)
perform_experiments(model, scenarios_of(model, {n}), callback=cb)
"""


def test_sigterm_to_an_ema_sweep_commits_every_experiment_the_callback_got(tmp_path, rng):
    n = 200
    path, calls = str(tmp_path / "s"), str(tmp_path / "calls")
    script = EMA_SCRIPT.format(testdir=str(HERE), n=n, path=path, calls=calls)
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "start", proc.communicate()
    target = int(rng.integers(10, n // 2))
    while proc.poll() is None and (
        not os.path.exists(calls) or len(Path(calls).read_text().splitlines()) < target
    ):
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    called = len(Path(calls).read_text().splitlines())
    model = make_model(toy)
    scen = scenarios_of(model, n)
    left = runstore.ema.remaining(path, scen)
    kept = n - len(left)
    print(f"SIGTERM to an EMA sweep after {called} model calls (seed {SEED}): {kept} kept")
    # Nothing was written before the signal (no flush, no commit): every experiment the callback
    # got is committed by the exit the signal raised; the model's last call may not have
    # reached the callback.
    assert called - 1 <= kept <= called
    # The rest, and the store holds every experiment once.
    store = perform_experiments(model, left, callback=runstore.ema.callback(path))
    experiments, _ = runstore.ema.load_results(store)
    assert len(experiments) == n
    assert runstore.ema.remaining(path, scen) == []
