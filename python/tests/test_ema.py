"""runstore.ema with the real ema-workbench (3.x, Python 3.12+: run by scripts/test.sh in .venv312).

EMA's own DefaultCallback on the same scenarios is the reference: the tables that
runstore.ema.load_results gives back, and that ema_workbench.load_results reads from
runstore.ema.save_results, must equal what EMA returns itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pandas as pd
import pytest

ema = pytest.importorskip("ema_workbench")

from ema_workbench import (  # noqa: E402
    ArrayOutcome,
    CategoricalParameter,
    EMAError,
    IntegerParameter,
    Model,
    MultiprocessingEvaluator,
    RealParameter,
    ScalarOutcome,
    perform_experiments,
)
from ema_workbench.em_framework.samplers import LHSSampler  # noqa: E402

import runstore  # noqa: E402
import runstore.ema  # noqa: E402

N = 40


def toy(x=0.5, n=3, kind="a", fail_above=2.0):
    if x > fail_above:
        raise RuntimeError(f"x={x} is too large")
    return {"y": x * n + (kind == "b"), "curve": np.linspace(0.0, x, 10), "count": n * 2}


def slow_toy(x=0.5, n=3, kind="a"):
    time.sleep(0.02)
    return toy(x, n, kind)


def make_model(fn=toy, name="toy"):
    m = Model(name, function=fn)
    m.uncertainties = [
        RealParameter("x", 0.0, 1.0),
        IntegerParameter("n", 1, 5),
        CategoricalParameter("kind", ["a", "b", "c"]),
    ]
    m.outcomes = [ScalarOutcome("y"), ArrayOutcome("curve"), ScalarOutcome("count")]
    return m


def scenarios_of(model, n=N, seed=42):
    return list(LHSSampler().generate_samples(model.uncertainties, n, rng=seed))


def assert_same_results(a, b):
    ea, oa = a
    eb, ob = b
    pd.testing.assert_frame_equal(ea, eb)
    assert sorted(oa) == sorted(ob)
    for k in oa:
        assert oa[k].shape == ob[k].shape, k
        np.testing.assert_array_equal(np.asarray(oa[k]), np.asarray(ob[k]), err_msg=k)


def test_sequential_run_gives_back_what_emas_default_callback_does(tmp_path):
    model = make_model()
    scen = scenarios_of(model)
    reference = perform_experiments(model, scen)
    cb = runstore.ema.callback(tmp_path / "s")
    store = perform_experiments(model, scen, callback=cb)
    assert isinstance(store, runstore.Store)
    got = runstore.ema.load_results(store)
    assert_same_results(reference, got)
    assert got[0]["kind"].dtype == "category" and got[0]["n"].dtype == np.int64
    meta = store.attrs["ema"]
    assert [p["kind"] for p in meta["parameters"]] == ["real", "integer", "categorical"]
    assert meta["versions"]["ema_workbench"] == ema.__version__
    # One writer: a handful of segments, not one per experiment.
    assert len(store.segments()) <= 2
    # runstore's own reading of the same store: a sweep like any other.
    experiments, outcomes = runstore.load_results(store)
    assert (experiments["state"] == "done").all() and len(experiments) == N
    assert outcomes["curve"].shape == (N, 10)


def test_multiprocessing_evaluator(tmp_path):
    model = make_model()
    scen = scenarios_of(model, seed=7)
    reference = perform_experiments(model, scen)
    with MultiprocessingEvaluator(model, n_processes=2) as evaluator:
        store = evaluator.perform_experiments(scen, callback=runstore.ema.callback(tmp_path / "s"))
    assert_same_results(reference, runstore.ema.load_results(store))


def test_load_true_returns_the_tables_and_save_results_reads_in_ema(tmp_path):
    model = make_model()
    scen = scenarios_of(model, seed=3)
    reference = perform_experiments(model, scen)
    cb = runstore.ema.callback(tmp_path / "s", load=True)
    got = perform_experiments(model, scen, callback=cb)
    assert_same_results(reference, got)
    out = tmp_path / "results.tar.gz"
    runstore.ema.save_results(tmp_path / "s", out, chunk_rows=7)
    assert_same_results(ema.load_results(str(out)), reference_as_ema_reads(reference, tmp_path))


def reference_as_ema_reads(reference, tmp_path):
    """EMA's own save_results then load_results of its results (the round trip changes dtypes
    of some columns, as EMA's CSV does)."""
    path = tmp_path / "ema.tar.gz"
    ema.save_results(reference, str(path))
    return ema.load_results(str(path))


def test_a_model_that_raises_keeps_what_was_done_before(tmp_path):
    model = make_model(lambda **kw: toy(**kw, fail_above=0.8))
    scen = scenarios_of(model, seed=11)
    first_bad = next(i for i, s in enumerate(scen) if s["x"] > 0.8)
    cb = runstore.ema.callback(tmp_path / "s")
    with pytest.raises(EMAError, match="too large"):
        try:
            perform_experiments(model, scen, callback=cb)
        finally:
            cb.close_all()
    experiments, outcomes = runstore.ema.load_results(tmp_path / "s")
    assert len(experiments) == first_bad
    np.testing.assert_array_equal(experiments["x"], [s["x"] for s in scen[:first_bad]])
    # The remaining scenarios are the failing one and those after it.
    left = runstore.ema.remaining(tmp_path / "s", scen)
    assert [s["x"] for s in left] == [s["x"] for s in scen[first_bad:]]


KILL_SCRIPT = """
import sys, time
sys.path.insert(0, {testdir!r})
import runstore.ema
from ema_workbench import perform_experiments
from test_ema import make_model, scenarios_of, slow_toy
model = make_model(slow_toy)
perform_experiments(model, scenarios_of(model, {n}), callback=runstore.ema.callback(
    {path!r}, flush_every_s=0.0, commit_every_s=0.05))
"""


def test_kill_9_then_resume_runs_only_what_is_missing(tmp_path):
    n = 200
    path = str(tmp_path / "s")
    script = KILL_SCRIPT.format(testdir=os.path.dirname(__file__), n=n, path=path)
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)])
    done = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
        if os.path.exists(os.path.join(path, "ATTRS")):
            try:
                done = int((runstore.open(path, mode="r").status()["state"] == "done").sum())
            except (ValueError, KeyError):
                done = 0
            if done >= 20:
                break
    assert proc.poll() is None, "the sweep ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    model = make_model(slow_toy)
    scen = scenarios_of(model, n)
    left = runstore.ema.remaining(path, scen)
    kept = n - len(left)
    print(f"killed after at least {done} experiments seen done; {kept} kept, {len(left)} left")
    assert kept >= done and 0 < len(left) < n
    store = perform_experiments(model, left, callback=runstore.ema.callback(path))
    experiments, outcomes = runstore.ema.load_results(store)
    assert len(experiments) == n, "every experiment exactly once"
    assert runstore.ema.remaining(path, scen) == []
    ref_e, ref_o = perform_experiments(make_model(), scen)
    order = np.argsort(experiments["x"].to_numpy())
    ref_order = np.argsort(ref_e["x"].to_numpy())
    np.testing.assert_array_equal(
        experiments["x"].to_numpy()[order], ref_e["x"].to_numpy()[ref_order]
    )
    np.testing.assert_array_equal(outcomes["curve"][order], ref_o["curve"][ref_order])


def test_ids_are_stable_and_content_based():
    s = {"x": 0.25, "n": 2, "kind": "b"}
    a = runstore.ema.experiment_id(s, {}, "toy")
    assert a == runstore.ema.experiment_id(dict(reversed(list(s.items()))), None, "toy")
    assert a != runstore.ema.experiment_id(s, {}, "other")
    assert a == runstore.experiment_id({**s, "model": "toy"})


def test_stores_without_ema_experiments_say_so(tmp_path):
    store = runstore.open(tmp_path / "plain")
    with store.writer() as w:
        w.log("r", 0, loss=1.0)
    with pytest.raises(ValueError, match="no EMA workbench experiments"):
        runstore.ema.load_results(store)
    with pytest.raises(ValueError, match="no experiment design"):
        runstore.load_results(store)
