"""The sweep demo (examples/sweep_demo.py, what `bash scripts/demo.sh` runs) as a newcomer meets it.

Ctrl-C in the middle of the sweep ends it with runstore's line and the command that resumes it,
never a traceback, and leaves nothing running: every experiment done or pending.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import runstore

DEMO = Path(__file__).resolve().parents[2] / "examples" / "sweep_demo.py"


def test_ctrl_c_ends_the_demo_with_a_line_and_the_resume_command(tmp_path):
    path = tmp_path / "sweep"
    # 50,000 experiments: minutes on 2 processes, so the interrupt always lands in the sweep.
    proc = subprocess.Popen(
        [sys.executable, str(DEMO), "--experiments", "50000", "--workers", "2", "--store", path],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    header = proc.stdout.readline()
    assert header.startswith("runstore demo: 50,000 SIR epidemics"), header
    store = runstore.open(str(path))
    while proc.poll() is None:  # until the first experiments are committed
        store.refresh()
        if "peak_infected" in store.names():
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and "Traceback" not in out, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-2].startswith("runstore: interrupted;"), err
    assert lines[-1].startswith("resume it: ") and lines[-1].endswith(
        f"python {DEMO} --store {path} --experiments 50000"
    ), lines[-1]
    store.refresh()
    states = store.status()["state"].value_counts()
    assert set(states.index) <= {"done", "pending"}, states
    assert 0 < states.get("done", 0) < 50_000 and states.sum() == 50_000
