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
from ema_workbench import MultiprocessingEvaluator, SequentialEvaluator
from test_ema import make_model, scenarios_of, slow_toy
if __name__ == "__main__":
    model = make_model(slow_toy)
    evaluator = {evaluator}
    with evaluator:
        evaluator.perform_experiments(scenarios_of(model, {n}), callback=runstore.ema.callback(
            {path!r}, flush_every_s=0.0, commit_every_s=0.05))
"""

EVALUATORS = {
    "sequential": "SequentialEvaluator(model)",
    # EMA's own pool: the callback runs in the parent, which the kill takes with its workers.
    "multiprocessing": "MultiprocessingEvaluator(model, n_processes=2)",
}


@pytest.mark.parametrize("evaluator", sorted(EVALUATORS))
def test_kill_9_then_resume_runs_only_what_is_missing(tmp_path, evaluator):
    n = 200
    path = str(tmp_path / "s")
    script = KILL_SCRIPT.format(
        testdir=os.path.dirname(__file__), n=n, path=path, evaluator=EVALUATORS[evaluator]
    )
    (tmp_path / "sweep.py").write_text(textwrap.dedent(script))
    proc = subprocess.Popen([sys.executable, str(tmp_path / "sweep.py")], start_new_session=True)
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
    os.killpg(proc.pid, signal.SIGKILL)  # the evaluator and its pool's workers at once
    proc.wait()
    model = make_model(slow_toy)
    scen = scenarios_of(model, n)
    left = runstore.ema.remaining(path, scen)
    kept = n - len(left)
    print(
        f"{evaluator}: killed after at least {done} experiments seen done; "
        f"{kept} kept, {len(left)} left"
    )
    assert kept >= done and 0 < len(left) < n
    if evaluator == "multiprocessing":
        with MultiprocessingEvaluator(model, n_processes=2) as ev:
            store = ev.perform_experiments(left, callback=runstore.ema.callback(path))
    else:
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


def _masked_curve(x=0.5):
    curve = np.ma.masked_array(np.linspace(0.0, x, 3), mask=[False, x > 0.5, False])
    return {"y": x, "curve": curve}


def test_a_masked_outcome_is_refused_and_the_experiments_before_it_are_kept(tmp_path):
    """A store holds no mask: an outcome array with a masked element raises (naming the
    outcome) instead of being stored with the masked value as data; one whose mask hides
    nothing is its data."""
    model = Model("masked", function=_masked_curve)
    model.uncertainties = [RealParameter("x", 0.0, 1.0)]
    model.outcomes = [ScalarOutcome("y"), ArrayOutcome("curve")]
    scen = scenarios_of(model, 30, seed=5)
    first_bad = next(i for i, s in enumerate(scen) if s["x"] > 0.5)
    cb = runstore.ema.callback(tmp_path / "s", batch=1)
    with pytest.raises((TypeError, EMAError), match="'curve'.*stores no mask"):
        try:
            perform_experiments(model, scen, callback=cb)
        finally:
            cb.close_all()
    experiments, outcomes = runstore.ema.load_results(tmp_path / "s")
    assert len(experiments) == first_bad
    assert not isinstance(outcomes["curve"], np.ma.MaskedArray)
    np.testing.assert_array_equal(outcomes["curve"][:, 1], [s["x"] / 2 for s in scen[:first_bad]])


def _hostile_model(names, categories, fail_with=None):
    def fn(**kw):
        x = kw[names[0]]
        if fail_with is not None and x > 0.5:
            raise RuntimeError(fail_with)
        return {n: x + i for i, n in enumerate(names)} | {"arr": np.full(2, x)}

    model = Model("hostile", function=fn)
    model.uncertainties = [RealParameter(n, 0.0, 1.0) for n in names] + [
        CategoricalParameter("cat", categories)
    ]
    model.outcomes = [ScalarOutcome(n) for n in names] + [ArrayOutcome("arr")]
    return model


# EMA warns of each name that is not an identifier, the hostile ones among them (a lone
# surrogate, which pytest-xdist cannot send from its worker): the names are the test's point.
@pytest.mark.filterwarnings("ignore:.*is not a valid Python identifier:DeprecationWarning")
def test_every_hostile_string_as_a_name_or_category_round_trips_or_is_refused_first(tmp_path):
    """Every hostile string as an uncertainty name, an outcome name and a category: the tables
    runstore.ema.load_results gives equal EMA's own, also through save_results and EMA's
    load_results (whose CSV breaks on a carriage return in EMA's own files); a name the store
    cannot hold is refused, naming it, before any experiment runs."""
    from _hostile import HOSTILE

    accepted, refused = [], {}
    with runstore.open(tmp_path / "names").writer() as w:  # which names a store takes
        for key, s in HOSTILE.items():
            try:
                w.log(1, values={s: 1.0})
                accepted.append(s)
            except ValueError as e:
                refused[key] = str(e)
    # The accepted ones, all in one model, and the refused ones one by one through EMA.
    model = _hostile_model(accepted, accepted)
    scen = scenarios_of(model, 8, seed=2)
    reference = perform_experiments(model, scen)
    store = perform_experiments(model, scen, callback=runstore.ema.callback(tmp_path / "s"))
    got = runstore.ema.load_results(store)
    assert_same_results(reference, got)
    assert list(got[0].columns[: len(accepted)]) == accepted
    # Through save_results and EMA's own load_results: the values (its CSV changes dtypes, as
    # for its own files; a "\r" in a name or category, which breaks EMA's own file, is kept).
    out = tmp_path / "results.tar.gz"
    runstore.ema.save_results(store, out)
    back, back_outcomes = ema.load_results(str(out))
    assert list(back.columns) == list(reference[0].columns)
    for n in accepted:
        np.testing.assert_array_equal(back[n].to_numpy(), reference[0][n].to_numpy(), err_msg=n)
        np.testing.assert_array_equal(back_outcomes[n], reference[1][n], err_msg=n)
    assert back["cat"].astype(str).tolist() == reference[0]["cat"].astype(str).tolist()

    calls = []
    for key, s in HOSTILE.items():
        if key not in refused:
            continue
        m = _hostile_model([s], ["a", "b"])
        m.function = lambda **kw: calls.append(kw)
        with pytest.raises((ValueError, EMAError)) as e:
            perform_experiments(m, 2, callback=runstore.ema.callback(tmp_path / f"r-{key}"))
        assert repr(s)[:12] in str(e.value) or "empty" in str(e.value), (key, str(e.value)[:200])
    assert calls == [], "refused before any experiment ran"
    print(
        f"EMA: {len(accepted)} hostile names and categories round-trip, {len(refused)} refused "
        f"first: {sorted(refused)}"
    )


def test_a_hostile_exception_text_keeps_what_was_done_and_the_store_readable(tmp_path):
    from _hostile import STORABLE

    text = "".join(STORABLE[k] for k in ("html-script-close", "term-osc52-clipboard", "newline"))
    model = _hostile_model(["x"], ["a", "b"], fail_with=text)
    scen = scenarios_of(model, 20, seed=4)
    first_bad = next(i for i, s in enumerate(scen) if s["x"] > 0.5)
    cb = runstore.ema.callback(tmp_path / "s")
    with pytest.raises(EMAError, match="window.__pwned"):
        try:
            perform_experiments(model, scen, callback=cb)
        finally:
            cb.close_all()
    experiments, _ = runstore.ema.load_results(tmp_path / "s")
    assert len(experiments) == first_bad and list(experiments.columns)[:2] == ["x", "cat"]
    assert len(runstore.ema.remaining(tmp_path / "s", scen)) == len(scen) - first_bad
