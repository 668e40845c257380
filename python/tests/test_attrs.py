"""Store.attrs (a small JSON document published whole) and experiment records written from a
loop of one's own (runstore.experiments.writer), with categories kept through store.attrs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pandas as pd
import pytest

import runstore
from runstore import _attrs
from runstore._experiments import DESIGN


def test_attributes_round_trip_and_count_revisions(tmp_path):
    store = runstore.open(tmp_path / "s")
    assert dict(store.attrs) == {} and store.attrs.revision == 0
    store.attrs["model"] = {"name": "sir", "version": 2}
    store.attrs.update(units="days", tags=["a", "b"], ratio=0.5)
    assert store.attrs.revision == 2
    again = runstore.open(tmp_path / "s", mode="r")
    assert again.attrs.to_dict() == {
        "model": {"name": "sir", "version": 2},
        "units": "days",
        "tags": ["a", "b"],
        "ratio": 0.5,
    }
    del store.attrs["units"]
    assert "units" not in again.attrs and len(again.attrs) == 3
    with pytest.raises(RuntimeError, match="read-only"):
        again.attrs["x"] = 1
    with pytest.raises(TypeError, match="JSON"):
        store.attrs["bad"] = object()
    assert store.attrs.revision == 3, "a refused value writes nothing"
    assert sorted(os.listdir(tmp_path / "s")) == ["ATTRS", "RUNSTORE", "segments"]


def test_an_update_refuses_when_another_got_in_first(tmp_path):
    store = runstore.open(tmp_path / "s")
    store.attrs["a"] = 1
    _attrs.write(store.path, {"a": 2})  # another process
    with pytest.raises(RuntimeError, match="changed meanwhile"):
        _attrs.write(store.path, {"a": 3}, expect_revision=1)
    assert store.attrs["a"] == 2


@pytest.mark.parametrize(
    "content, message",
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a runstore attributes document"),
        (b'{"runstore_attrs": 9, "revision": 1, "attrs": {}}', "layout 9"),
        (b'{"runstore_attrs": 1, "revision": -1, "attrs": {}}', "positive integers"),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_damaged_or_newer_attributes_are_named(tmp_path, content, message):
    store = runstore.open(tmp_path / "s")
    (tmp_path / "s" / "ATTRS").write_bytes(content)
    with pytest.raises(_attrs.AttrsError, match=message) as e:
        store.attrs.to_dict()
    assert "ATTRS" in str(e.value)


def test_a_failure_at_every_step_of_a_write_leaves_the_old_document_whole(tmp_path, monkeypatch):
    store = runstore.open(tmp_path / "s")
    store.attrs["v"] = "old"
    steps = ["open", "write", "fsync", "replace"]
    real = {n: getattr(os, n) for n in steps}
    for step in steps:

        def fail(*a, _step=step, **k):
            raise OSError(5, f"injected failure at {_step}")

        monkeypatch.setattr(os, step, fail)
        with pytest.raises(OSError, match=f"at {step}"):
            store.attrs["v"] = "new"
        monkeypatch.setattr(os, step, real[step])
        assert store.attrs.to_dict() == {"v": "old"}, step
        assert sorted(os.listdir(tmp_path / "s")) == ["ATTRS", "RUNSTORE", "segments"], step


WRITER = """
import runstore, itertools
store = runstore.open({path!r})
for i in itertools.count():
    store.attrs.update(i=i, pad="x" * (i % 5000))
"""


def test_kill_9_during_writes_never_leaves_a_torn_document(tmp_path):
    path = str(tmp_path / "s")
    runstore.open(path).attrs["i"] = -1
    kills = 0
    for _ in range(10):
        p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER.format(path=path))])
        time.sleep(0.3)
        p.send_signal(signal.SIGKILL)
        p.wait()
        kills += 1
        doc = json.loads((tmp_path / "s" / "ATTRS").read_text())
        assert isinstance(doc["attrs"]["i"], int)
        assert len(doc["attrs"].get("pad", "")) == max(doc["attrs"]["i"], 0) % 5000
    print(f"{kills} kills during attribute writes, every ATTRS whole")
    # Temporaries of the killed writers are ignored by readers.
    assert runstore.open(path, mode="r").attrs["i"] >= 0


def test_experiment_records_from_a_loop_of_ones_own(tmp_path):
    store = runstore.open(tmp_path / "s")
    store.attrs["categories"] = {"kind": ["c", "b", "a"]}
    rows = []
    with runstore.experiments.writer(store) as w:
        for i in range(6):
            p = {"x": i / 4, "kind": "abc"[i % 3], "n": i}
            rows.append(runstore.experiment_id(p))
            failed = i == 4
            w.record(
                rows[-1],
                p,
                None if failed else {"y": float(i), "curve": np.arange(3.0) * i},
                state="failed" if failed else "done",
                error="RuntimeError: boom" if failed else "",
            )
    experiments, outcomes = runstore.load_results(store)
    assert experiments["experiment"].tolist() == rows
    assert experiments["kind"].dtype == "category"
    assert list(experiments["kind"].cat.categories) == ["c", "b", "a"]
    assert experiments["state"].tolist() == ["done"] * 4 + ["failed", "done"]
    assert np.isnan(outcomes["y"][4]) and outcomes["y"][5] == 5.0
    assert store.design()["kind"].dtype == "category"
    assert store.pending() == [rows[4]]
    # A second writer's rows go after the first's.
    with runstore.experiments.writer(store) as w:
        w.record("extra", {"x": 9.0, "kind": "a", "n": 9}, {"y": 9.0})
    assert runstore.load_results(store)[0]["experiment"].tolist()[-1] == "extra"


def test_experiment_records_refuse_what_is_not_theirs(tmp_path):
    store = runstore.open(tmp_path / "s")
    with runstore.experiments.writer(store) as w:
        with pytest.raises(ValueError, match="state 'finished'"):
            w.record("e", {"x": 1}, state="finished")
        with pytest.raises(ValueError, match="reserved"):
            w.record("e", {"~x": 1})
        with pytest.raises(ValueError, match="'~y'"):
            w.record("e", {"x": 1}, {"~y": 1.0})
    assert pd.isna(store.attrs.get("categories"))


def test_record_many_with_an_outcome_its_series_refuses_records_no_experiment(tmp_path):
    """record_many is one atomic record set: an outcome column that conflicts with what the
    store holds leaves none of the batch's parameters or states behind, not even after a
    later commit, and the batch can be recorded again once it is right."""
    store = runstore.open(tmp_path / "s")
    ids = [runstore.experiment_id({"x": i / 4}) for i in range(4)]
    with runstore.experiments.writer(store) as w:
        w.record_many(ids[:2], {"x": [0.0, 0.25]}, {"curve": np.zeros((2, 3))})
        with pytest.raises(ValueError, match="'curve'"):
            w.record_many(ids[2:], {"x": [0.5, 0.75]}, {"curve": np.zeros((2, 4))})
        w.commit()
        store.refresh()
        assert len(store.scan(DESIGN + "x")["run"]) == 2
        assert store.pending() == []
        w.record_many(ids[2:], {"x": [0.5, 0.75]}, {"curve": np.ones((2, 3))})
    experiments, outcomes = runstore.load_results(store)
    assert experiments["experiment"].tolist() == ids
    assert experiments["state"].tolist() == ["done"] * 4
    assert outcomes["curve"].shape == (4, 3)
    assert outcomes["curve"][2:].tolist() == [[1.0] * 3] * 2
