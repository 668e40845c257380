"""runstore.mlinstrument.Backend under the real ml-instrument Collector (run by scripts/test.sh in
.venv-mli, ml-instrument's own environment): a run checkpointed every 5,000 frames, SIGKILLed at
frame 19,500 and resumed from its checkpoint ends with exactly one point per frame, equal to an
uninterrupted run's; read_metric's order; the restore path's handle on the backend; the analysis
(load_all_results) against ml-instrument's own on a sqlite file of the same points; every
hostile string as a metric name, a run id and a parameter."""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("ml_instrumentation")

import polars as pl
from _hostile import HOSTILE, STORABLE
from ml_instrumentation import reader
from ml_instrumentation.backends.base import Point
from ml_instrumentation.backends.sqlite import Sqlite
from ml_instrumentation.Collector import Collector
from ml_instrumentation.metadata import attach_metadata

import runstore
import runstore.mlinstrument
from runstore.mlinstrument import Backend

FRAMES, EVERY = 20_000, 5_000

RUN = """
import os, pickle, signal, sys
import numpy as np
from ml_instrumentation.Collector import Collector
import runstore.mlinstrument

store, ckpt, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
FRAMES, EVERY = {frames}, {every}
if os.path.exists(ckpt):
    with open(ckpt, "rb") as f:
        state = pickle.load(f)  # the collector (with its backend) and the rng
    c, start = state["collector"], state["frame"]
    rng = np.random.default_rng()
    rng.bit_generator.state = state["rng"]
    # Hide what the killed attempt wrote after the checkpoint's frame (start - 1).
    backend = runstore.mlinstrument.resume(c)
    assert backend is runstore.mlinstrument.backend_of(c)
else:
    backend = runstore.mlinstrument.Backend(store)
    c = Collector(backend=backend, experiment_id=0, low_watermark=200)
    rng, start = np.random.default_rng(5), 0
for frame in range(start, FRAMES):
    if frame % EVERY == 0 and frame > start:
        with open(ckpt + ".tmp", "wb") as f:  # pickling the collector writes its buffer
            pickle.dump({{"collector": c, "frame": frame, "rng": rng.bit_generator.state}}, f)
        os.replace(ckpt + ".tmp", ckpt)
    if frame == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    c.set_frame(frame)
    c.collect("reward", float(rng.normal()))
    c.collect("steps_in_episode", int(rng.integers(1, 100)))
c.close()
"""


def run(store, ckpt, kill_at=-1):
    code = textwrap.dedent(RUN.format(frames=FRAMES, every=EVERY))
    p = subprocess.run([sys.executable, "-c", code, str(store), str(ckpt), str(kill_at)])
    return p.returncode


def test_sigkill_at_19500_and_resume_end_with_one_point_per_frame(tmp_path):
    assert run(tmp_path / "ref", tmp_path / "ref.ckpt") == 0
    assert run(tmp_path / "s", tmp_path / "s.ckpt", kill_at=19_500) == -signal.SIGKILL
    killed = runstore.open(tmp_path / "s", mode="r").scan("reward")
    print(f"after the kill: {len(killed['step'])} reward points for frames up to 19,500")
    assert run(tmp_path / "s", tmp_path / "s.ckpt") == 0
    ref = runstore.open(tmp_path / "ref", mode="r")
    got = runstore.open(tmp_path / "s", mode="r")
    for metric in ("reward", "steps_in_episode"):
        a, b = ref.scan(metric), got.scan(metric)
        oa, ob = np.argsort(a["step"]), np.argsort(b["step"])
        assert np.array_equal(b["step"][ob], np.arange(FRAMES)), f"{metric}: one point per frame"
        np.testing.assert_array_equal(b["value"][ob], a["value"][oa], err_msg=metric)


def test_the_backend_interface(tmp_path):
    backend = runstore.mlinstrument.Backend(tmp_path / "s")
    c = Collector(backend=backend, experiment_id="run-a", low_watermark=10)
    for frame in range(50):
        c.set_frame(frame)
        c.collect("loss", 1.0 / (frame + 1))
        if frame % 10 == 0:
            c.collect("weights", np.full(3, float(frame)))
    points = c.get("loss", "run-a")  # the collector writes what it buffered first
    assert [p.frame for p in points] == list(range(50))
    assert points[3].measurement == 0.25 and points[3].id == "run-a"
    assert backend.get_tables() == {"loss", "weights"}
    w = backend.read_metric("weights")
    assert [p.frame for p in w] == [0, 10, 20, 30, 40]
    np.testing.assert_array_equal(w[1].measurement, np.full(3, 10.0))
    assert backend.read_metric("nothing") == [] and backend.read_metric("loss", "other") == []
    # Pickled (a checkpoint), then merged into another store and loaded from a dump.
    c2 = pickle.loads(pickle.dumps(c))
    assert [p.frame for p in c2.get("loss", "run-a")] == list(range(50))
    backend.merge(str(tmp_path / "other"))
    assert len(runstore.open(tmp_path / "other", mode="r").scan("loss")["step"]) == 50
    third = runstore.mlinstrument.Backend(tmp_path / "third")
    third.load(backend.dump())
    assert len(third.read_metric("loss")) == 50
    c.close()
    c2.close()


def test_read_metric_orders_integer_ids_numerically_then_str_ids(tmp_path):
    """By run then frame, as its docstring says: 2 before 10, not as strings (0, 1, 10, 2)."""
    for ids in ([20, 1, 10, 0, 2, 11, -3], [20, 1, "b", 10, 0, 2, "a", 11, -3]):
        backend = Backend(tmp_path / f"{len(ids)}")
        points = [Point(i, "r", f, float(f)) for f in (1, 0) for i in ids]
        backend.write_many({"r": dict(enumerate(points))})
        got = [(p.id, p.frame) for p in backend.read_metric("r")]
        ints = sorted(i for i in ids if isinstance(i, int))
        strs = sorted(i for i in ids if isinstance(i, str))
        assert got == [(i, f) for i in ints + strs for f in (0, 1)], ids
        backend.close()


def test_a_restored_collector_reaches_its_backend_and_resumes_after_its_frame(tmp_path):
    """A Collector pickled at frame 5 (a checkpoint) and loaded again after the killed attempt
    wrote frames 6 to 9: resume(collector) hides those, so the re-done frames are there once,
    with the new values."""
    c = Collector(backend=Backend(tmp_path / "s"), experiment_id="run", low_watermark=2)
    for frame in range(10):
        c.set_frame(frame)
        c.collect("x", float(frame))
        if frame == 5:
            checkpoint = pickle.dumps(c)  # writes what the collector buffered
    c.close()  # the "killed" attempt's frames 6..9 are in the store
    restored = pickle.loads(checkpoint)
    backend = runstore.mlinstrument.resume(restored)
    assert backend is runstore.mlinstrument.backend_of(restored)
    for frame in range(6, 10):
        restored.set_frame(frame)
        restored.collect("x", 100.0 + frame)
    points = restored.get("x", "run")
    assert [p.frame for p in points] == list(range(10))
    assert [p.measurement for p in points] == [float(f) for f in range(6)] + [
        106.0,
        107.0,
        108.0,
        109.0,
    ]
    restored.close()

    fresh = Collector(backend=Backend(tmp_path / "t"), experiment_id=1)
    with pytest.raises(ValueError, match="no current frame"):
        runstore.mlinstrument.resume(fresh)
    runstore.mlinstrument.resume(fresh, frame=0)  # explicit: allowed
    fresh.close()
    with pytest.raises(TypeError, match="Sqlite, not runstore.mlinstrument.Backend"):
        runstore.mlinstrument.backend_of(Collector(experiment_id=1))


def _collect_sweep(make_backend, ids):
    """A small sweep, one collector (and backend) per id: 6 frames of 'reward' and every other
    frame of 'steps'."""
    for i in ids:
        c = Collector(backend=make_backend(), experiment_id=i, low_watermark=3)
        for frame in range(6):
            c.set_frame(frame)
            c.collect("reward", float(frame) + 0.5 * len(str(i)))
            if frame % 2 == 0:
                c.collect("steps", frame * 10 + len(str(i)))
        c.close()


def test_load_all_results_gives_what_ml_instruments_gives_for_its_sqlite_file(tmp_path):
    ids = [0, 2, 10, 1]
    params = {i: {"alpha": 0.1 * i, "name": f"n{i}", "layers": i % 3} for i in ids}
    db = str(tmp_path / "results.db")
    _collect_sweep(lambda: Sqlite(db), ids)
    for i in ids:
        attach_metadata(db, i, dict(params[i]))
    store = tmp_path / "s"
    _collect_sweep(lambda: Backend(store), ids)
    for i in ids:
        runstore.mlinstrument.attach_metadata(store, i, params[i])

    theirs = reader.load_all_results(db)
    ours = runstore.mlinstrument.load_all_results(store)
    print(f"ml-instrument's: {theirs.schema}\nours: {ours.schema}")
    assert ours.columns[:2] == ["frame", "id"] and set(ours.columns) == set(theirs.columns)
    assert dict(ours.schema) == dict(theirs.schema)
    key = ["id", "frame"]
    assert ours.equals(theirs.select(ours.columns).sort(key))
    assert ours["id"].to_list()[::6] == [0, 1, 2, 10], "rows by id, then frame"

    for metrics, wanted in ((["steps"], None), (None, [2, 10])):
        got = runstore.mlinstrument.load_all_results(store, metrics=metrics, ids=wanted)
        want = reader.load_all_results(db, metrics=metrics, ids=wanted)
        assert got.equals(want.select(got.columns).sort(key)), (metrics, wanted)
    assert runstore.mlinstrument.get_run_ids(store, {"layers": 1}) == reader.get_run_ids(
        db, {"layers": 1}
    )
    with pytest.raises(ValueError, match="already defined"):
        runstore.mlinstrument.attach_metadata(store, 2, {"alpha": 9.0})
    with pytest.raises(ValueError, match="no metric 'nope'"):
        runstore.mlinstrument.load_all_results(store, metrics=["nope"])


def test_load_all_results_includes_array_str_and_ragged_metrics_and_str_ids(tmp_path):
    backend = Backend(tmp_path / "s")
    backend.define("trace", "int32", variable_shape=True)
    for i in ["run-b", 3, "run-a"]:
        c = Collector(backend=backend, experiment_id=i, low_watermark=2)
        for frame in range(3):
            c.set_frame(frame)
            c.collect("q", np.full((2, 2), float(frame)))
            c.collect("note", f"f{frame}")
            c.collect("trace", np.arange(frame + 1, dtype=np.int32))
        c.close()
    df = runstore.mlinstrument.load_all_results(tmp_path / "s")
    print(df.schema)
    assert df.columns == ["frame", "id", "trace", "q", "note"]  # defined, then first logged
    assert df["id"].dtype == pl.String and df["id"].to_list()[::3] == ["3", "run-a", "run-b"]
    assert df["q"].dtype == pl.Array(pl.Float64, (2, 2))
    assert df["q"][4].to_list() == [[1.0, 1.0], [1.0, 1.0]]
    assert df["note"].dtype == pl.String and df["note"][2] == "f2"
    assert df["trace"].dtype == pl.List(pl.Int32) and df["trace"][2].to_list() == [0, 1, 2]


def test_a_refused_metric_loses_only_its_points_and_is_raised_by_close(tmp_path):
    backend = Backend(tmp_path / "s")
    c = Collector(backend=backend, experiment_id=1, low_watermark=1_000)
    for frame in range(5):
        c.set_frame(frame)
        c.collect("ok", 1.0)
        c.collect("~reserved", 2.0)
    with pytest.raises(ValueError, match="'~reserved'"):
        c.close()
    assert [p.frame for p in Backend(tmp_path / "s").read_metric("ok")] == list(range(5))


def test_every_hostile_string_as_metric_id_and_parameter_round_trips_or_is_refused(tmp_path):
    """Each hostile string as a metric name, as a str run id, and as a parameter name and value:
    stored and read back equal (read_metric, load_all_results), or refused with an error that
    names it (and the other points of the batch kept)."""
    backend = Backend(tmp_path / "s")
    kept = {"metric": 0, "id": 0, "parameter": 0}
    refused = {"metric": 0, "id": 0, "parameter": 0}
    reasons = set()
    for key, s in HOSTILE.items():
        for role in ("metric", "id"):
            metric, run = (s, "run") if role == "metric" else ("m", s)
            points = {metric: {0: Point(run, metric, 7, 1.5)}, "ok": {1: Point(run, "ok", 7, 2.5)}}
            try:
                backend.write_many(points)
            except ValueError as e:
                assert "runstore refused" in str(e) and repr(s)[:12] in str(e), (key, role)
                assert key in STORABLE or "UTF-8" in str(e) or "surrogate" in str(e), str(e)
                refused[role] += 1
                reasons.add(f"{role}: {str(e).rsplit(': ', 1)[-1][:60]}")
                backend._refused.clear()
                continue
            got = backend.read_metric(metric, run)
            assert [(p.frame, p.id, p.measurement) for p in got] == [(7, run, 1.5)], (key, role)
            kept[role] += 1
        try:
            runstore.mlinstrument.attach_metadata(backend, f"p-{key}", {s: s, "k": key})
        except (ValueError, TypeError) as e:
            assert "parameter" in str(e) or repr(s)[:12] in str(e), (key, str(e)[:200])
            refused["parameter"] += 1
            reasons.add(f"parameter: {str(e)[:80]}")
            continue
        kept["parameter"] += 1
    design = runstore.open(tmp_path / "s", mode="r").design()
    for key, s in STORABLE.items():
        if f"p-{key}" in design["experiment"].tolist():
            row = design[design["experiment"] == f"p-{key}"].iloc[0]
            assert row[s] == s and row["k"] == key, key
    df = runstore.mlinstrument.load_all_results(tmp_path / "s", metrics=["m"])
    assert len(df) == kept["id"] and df["m"].to_list() == [1.5] * kept["id"]
    backend.close()
    print(f"hostile strings: kept {kept}, refused with an error naming them {refused}")
    for r in sorted(reasons):
        print("  refused:", r)
    assert sum(kept.values()) + sum(refused.values()) == 3 * len(HOSTILE)
    assert kept["metric"] >= len(STORABLE) // 2 and kept["id"] >= len(STORABLE) // 2


@settings(max_examples=60)
@given(
    metric=st.text(max_size=12),
    run=st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=12)),
    frame=st.integers(0, 2**62),
)
def test_any_metric_name_and_run_id_round_trip_or_are_refused(tmp_path_factory, metric, run, frame):
    backend = Backend(tmp_path_factory.mktemp("s"))
    try:
        backend.write_many({metric: {0: Point(run, metric, frame, 0.25)}})
    except ValueError as e:
        assert metric == "" or metric.startswith("~") or "\0" in metric, str(e)
        with pytest.raises(ValueError, match="runstore refused"):
            backend.close()  # says it again
        return
    got = backend.read_metric(metric, run)
    backend.close()
    assert [(p.frame, p.id, p.measurement) for p in got] == [(frame, run, 0.25)]


def test_merge_and_load_carry_ragged_metrics_and_parameters(tmp_path):
    backend = Backend(tmp_path / "s")
    backend.define("trace", "float64", variable_shape=True)
    for i in (1, 2):
        c = Collector(backend=backend, experiment_id=i, low_watermark=2)
        for frame in range(3):
            c.set_frame(frame)
            c.collect("trace", np.zeros(frame + i))
            c.collect("r", float(frame))
        c._writer.sync_now()
        runstore.mlinstrument.attach_metadata(backend, i, {"alpha": i / 10, "env": f"e{i}"})
    backend.merge(str(tmp_path / "merged"))
    third = Backend(tmp_path / "loaded")
    third.load(backend.dump())
    want = runstore.mlinstrument.load_all_results(tmp_path / "s")
    for other in ("merged", "loaded"):
        got = runstore.mlinstrument.load_all_results(tmp_path / other)
        assert got.equals(want.select(got.columns)) and set(got.columns) == set(want.columns)
    backend.close()
