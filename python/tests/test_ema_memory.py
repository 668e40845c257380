"""The memory of the process that holds runstore.ema's callback stays flat in the number of
experiments (ema-workbench 3.x: run by scripts/test.sh in .venv312; docs/experiments.md, "The
EMA workbench").

EMA's MultiprocessingEvaluator sends every experiment's outcomes to its parent, where the
callback runs: that parent is the process to keep flat. Each case runs N_LARGE experiments in
an interpreter of its own and reports that parent's peak RSS (VmHWM, which the kernel keeps: no
sampling that could miss a peak) once N_SMALL experiments have reached the callback, and at the
end (the callback closed, perform_experiments returned):

  runstore  runstore.ema.callback: every experiment in the store as it finishes
  default   EMA's DefaultCallback, which holds every result in memory

The limit: with runstore's callback the parent's peak grows by at most LIMIT_MIB from N_SMALL
experiments to N_LARGE, EMA's own loop included (with a callback that only counts, that loop
grew by 0.8 MiB over the same span here, runstore's by 1.3 to 2.1 MiB in all), while with EMA's
own it grows by at least 3/4 of the outcome bytes it holds for the experiments in between. EMA
samples the scenarios itself, so that the N-sized structures of its design are made before the
first experiment, as the pool and the store are. (Not EMA's MPIEvaluator: its parent keeps
every experiment and its future for the whole sweep, ``list(experiments)`` and
``MPIPoolExecutor.map``, so its memory grows with N whatever the callback.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("ema_workbench")

N_SMALL, N_LARGE = 2_000, 20_000
CURVE = 100  # points of the array outcome: 800 bytes an experiment
LIMIT_MIB = 4.0

CASE = """
import json, warnings
warnings.simplefilter("ignore")
import numpy as np
import runstore
import runstore.ema
from ema_workbench import (ArrayOutcome, CategoricalParameter, IntegerParameter, Model,
                           MultiprocessingEvaluator, RealParameter, ScalarOutcome)
from ema_workbench.em_framework.callbacks import DefaultCallback

def fn(x=0.5, n=3, kind="a"):
    return {{"y": x * n + (kind == "b"), "curve": np.linspace(0.0, x, {curve}) * n}}

def peak_mib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024

class Probe:
    \"\"\"Notes the peak RSS once {small} experiments have reached the callback.\"\"\"
    peak = None

    def __call__(self, experiment, outcomes):
        super().__call__(experiment, outcomes)
        if self.i == {small}:
            Probe.peak = peak_mib()

if __name__ == "__main__":
    model = Model("toy", function=fn)
    model.uncertainties = [RealParameter("x", 0.0, 1.0), IntegerParameter("n", 1, 5),
                           CategoricalParameter("kind", ["a", "b", "c"])]
    model.outcomes = [ScalarOutcome("y"), ArrayOutcome("curve")]
    base = {{"runstore": runstore.ema.callback({path!r}), "default": DefaultCallback}}[{case!r}]
    with MultiprocessingEvaluator(model, n_processes=2) as evaluator:
        results = evaluator.perform_experiments({n}, callback=type("Probed", (Probe, base), {{}}))
    end = peak_mib()
    if {case!r} == "runstore":
        done = int((results.status()["state"] == "done").sum())
    else:
        done = len(results[0])
    print(json.dumps({{"small": Probe.peak, "large": end, "experiments": done}}))
"""


def _peaks_mib(tmp_path: Path, case: str) -> dict[int, float]:
    """The peak RSS of the evaluator's parent with ``case``'s callback after N_SMALL and after
    N_LARGE experiments, every one of which the callback must have seen."""
    script = tmp_path / f"case_{case}.py"  # not runstore.py: that would shadow the package
    fields = {"curve": CURVE, "small": N_SMALL, "n": N_LARGE}
    script.write_text(textwrap.dedent(CASE.format(path=str(tmp_path / case), case=case, **fields)))
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["experiments"] == N_LARGE and report["small"] is not None, (case, report)
    return {N_SMALL: report["small"], N_LARGE: report["large"]}


def test_the_parent_holding_the_callback_stays_flat_in_n_while_emas_own_grows(tmp_path):
    cases = ("runstore", "default")
    peak = {c: _peaks_mib(tmp_path, c) for c in cases}
    growth = {c: peak[c][N_LARGE] - peak[c][N_SMALL] for c in cases}
    for c in cases:
        print(
            f"{c:>8}: the parent's peak RSS {peak[c][N_SMALL]:.1f} MiB after {N_SMALL:,} "
            f"experiments, {peak[c][N_LARGE]:.1f} MiB after {N_LARGE:,} ({growth[c]:+.1f} MiB)"
        )
    assert growth["runstore"] <= LIMIT_MIB, growth
    held = (N_LARGE - N_SMALL) * (CURVE + 1) * 8 / 2**20  # EMA's outcome arrays, float64
    assert growth["default"] >= 0.75 * held, (growth, held)
