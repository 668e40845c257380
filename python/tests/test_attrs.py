"""Store.attrs (a small JSON document published whole) and experiment records written from a
loop of one's own (runstore.experiments.writer), with categories kept through store.attrs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import runstore
from runstore import _attrs
from runstore.experiments._records import DESIGN


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
    assert sorted(os.listdir(tmp_path / "s")) == ["ATTRS", "ATTRS.d", "RUNSTORE", "segments"]


def test_pop_setdefault_clear_and_modify_are_one_write_each(tmp_path):
    store = runstore.open(tmp_path / "s")
    store.attrs.update(a=1, b=2)
    assert store.attrs.pop("a") == 1 and store.attrs.revision == 2
    assert store.attrs.pop("a", "gone") == "gone" and store.attrs.revision == 2
    with pytest.raises(KeyError):
        store.attrs.pop("a")
    with pytest.raises(KeyError):
        del store.attrs["a"]
    assert store.attrs.setdefault("b", 9) == 2 and store.attrs.setdefault("c", [3]) == [3]
    assert store.attrs.revision == 3
    assert store.attrs.modify(lambda a: {**a, "n": a.get("n", 0) + 1}) == 4
    assert store.attrs.to_dict() == {"b": 2, "c": [3], "n": 1}
    store.attrs.clear()
    assert store.attrs.to_dict() == {} and store.attrs.revision == 5
    with pytest.raises(TypeError, match="names must be str"):
        store.attrs.update({1: "x"})
    with pytest.raises(TypeError, match="names must be str"):
        store.attrs["nested"] = {"ok": {2: "not a str key"}}
    assert store.attrs.revision == 5


def test_an_update_refuses_when_another_got_in_first(tmp_path):
    store = runstore.open(tmp_path / "s")
    store.attrs["a"] = 1
    _attrs.write(store.path, {"a": 2})  # another process
    with pytest.raises(RuntimeError, match="changed meanwhile"):
        _attrs.write(store.path, {"a": 3}, expect_revision=1)
    assert store.attrs["a"] == 2
    assert _attrs.write(store.path, {"a": 4}, expect_revision=2) == 3


# Processes that each set keys of their own, all at once: every key must be there at the end.
CONCURRENT = """
import os, sys, time, runstore
store = runstore.open(sys.argv[1])
i, k = int(sys.argv[2]), int(sys.argv[3])
while not os.path.exists(os.path.join(sys.argv[1], "go")):
    time.sleep(0.001)
errors = 0
for j in range(k):
    try:
        store.attrs[f"p{i}-k{j}"] = [i, j]
    except Exception as e:
        errors += 1
        print(f"p{i}-k{j}: {type(e).__name__}: {e}", file=sys.stderr)
print(errors)
"""


def test_processes_setting_distinct_keys_at_once_keep_every_key(tmp_path):
    """8 processes x 40 keys, released together: each update lands (no error, as no key is
    set twice), so the document ends with all 320 and one revision per update."""
    n, k = 8, 40
    path = str(tmp_path / "s")
    runstore.open(path)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CONCURRENT, path, str(i), str(k)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    open(os.path.join(path, "go"), "w").close()
    errors = sum(int(p.communicate()[0]) for p in procs)
    assert all(p.returncode == 0 for p in procs)
    got = runstore.open(path, mode="r").attrs
    kept = got.to_dict()
    print(
        f"{n} processes x {k} keys: {len(kept)} of {n * k} kept, {errors} errors, "
        f"revision {got.revision}"
    )
    assert errors == 0
    assert kept == {f"p{i}-k{j}": [i, j] for i in range(n) for j in range(k)}
    assert got.revision == n * k
    left = sorted(os.listdir(os.path.join(path, "ATTRS.d")))
    assert len(left) <= _attrs.KEEP + 1, left  # old revisions removed, no temporaries left


def test_threads_setting_distinct_keys_at_once_keep_every_key(tmp_path):
    import threading

    store = runstore.open(tmp_path / "s")
    barrier = threading.Barrier(6)

    def work(i):
        barrier.wait()
        for j in range(20):
            store.attrs[f"t{i}-{j}"] = j

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.attrs) == 120 and store.attrs.revision == 120


def test_a_layout_1_document_is_carried_into_revisions_and_its_file_refuses_old_readers(
    tmp_path,
):
    path = tmp_path / "s"
    runstore.open(path)
    old = {"runstore_attrs": 1, "revision": 5, "attrs": {"kept": [1, 2], "units": "days"}}
    (path / "ATTRS").write_text(json.dumps(old))
    store = runstore.open(path)
    assert store.attrs.revision == 5 and store.attrs["kept"] == [1, 2]  # read as it is
    store.attrs["new"] = True
    assert store.attrs.to_dict() == {"kept": [1, 2], "units": "days", "new": True}
    assert store.attrs.revision == 6
    pointer = json.loads((path / "ATTRS").read_text())
    # What a reader of layout 1 checks first: an object with 'attrs', positive integers, and
    # then a layout it does not know, which it refuses saying to upgrade.
    assert pointer["runstore_attrs"] == 2 and pointer["revision"] >= 1
    assert pointer["attrs"] == {} and pointer["revisions"] == "ATTRS.d"


def _fresh(tmp_path, name):
    path = tmp_path / name
    path.mkdir()
    return str(path)


def _crash_at(path, n, change):
    """Runs ``_attrs.modify(path, change)`` in a forked child that dies (os._exit, no cleanup:
    what kill -9 leaves) just before its n-th file operation; its exit code (0: it finished
    with fewer operations)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        count = [0]

        def fault(operation, p):
            count[0] += 1
            if count[0] == n:
                os._exit(9)

        _attrs._fault = fault
        try:
            _attrs.modify(path, change)
        except BaseException:  # noqa: BLE001 - the child reports any failure by its exit code
            os._exit(2)
        os._exit(0)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@pytest.mark.parametrize("start", ["layout 1", "no attributes", "revisions"])
def test_a_crash_before_every_file_operation_of_an_update_loses_no_acknowledged_one(
    tmp_path, start
):
    """From a store with a layout-1 ATTRS, with none, and with revisions to remove: an update
    killed before each of its file operations in turn leaves attributes that read whole, with
    every update acknowledged before it, and the next update lands."""
    import shutil

    template = _fresh(tmp_path, "template")
    acked = {}
    if start == "layout 1":
        acked = {"old": "doc"}
        doc = {"runstore_attrs": 1, "revision": 3, "attrs": acked}
        with open(os.path.join(template, "ATTRS"), "w") as f:
            json.dump(doc, f)
    elif start == "revisions":
        for i in range(_attrs.KEEP + 2):
            _attrs.modify(template, lambda a, i=i: {**a, f"a{i}": i})
            acked[f"a{i}"] = i
    crashes = 0
    for n in range(1, 200):
        path = str(tmp_path / f"{n}")
        shutil.copytree(template, path)
        code = _crash_at(path, n, lambda a, n=n: {**a, "crashed": n})
        if code == 0:
            break
        assert code == 9
        crashes += 1
        got = _attrs.read(path)[1]
        got.pop("crashed", None)  # not acknowledged: there or not
        assert got == acked, n
        _attrs.modify(path, lambda a: {**a, "after": 1})
        got = _attrs.read(path)[1]
        got.pop("crashed", None)
        assert got == {**acked, "after": 1}, n
    else:
        raise AssertionError("the update never finished")
    print(f"{start}: {crashes} crash points of one update, each loses nothing acknowledged")
    assert crashes >= 6


def test_a_failure_at_every_file_operation_raises_and_leaves_the_document_whole(tmp_path):
    path = _fresh(tmp_path, "s")
    _attrs.modify(path, lambda a: {"v": "old"})
    ops = []
    _attrs._fault = lambda op, p: ops.append((op, p))
    try:
        _attrs.modify(path, lambda a: {"v": "probe"})
    finally:
        _attrs._fault = None
    _attrs.modify(path, lambda a: {"v": "old"})
    failures = 0
    for i, (op, p) in enumerate(ops):
        count = [0]

        def fault(operation, where, i=i, count=count):
            count[0] += 1
            if count[0] == i + 1:
                raise OSError(5, f"injected failure at {operation}", where)

        _attrs._fault = fault
        try:
            with pytest.raises(OSError, match="injected"):
                _attrs.modify(path, lambda a: {"v": "new"})
        finally:
            _attrs._fault = None
        failures += 1
        v = _attrs.read(path)[1]["v"]
        before_rename = [o for o, _ in ops[: i + 1]].count("rename") == 0
        assert v == "old" if before_rename else v in ("old", "new"), (op, p)
        assert not [n for n in os.listdir(os.path.join(path, "ATTRS.d")) if n.startswith("tmp")]
        _attrs.modify(path, lambda a: {"v": "old"})
    print(f"an I/O error at each of {failures} file operations: raised, document whole")


KILLED = """
import sys, runstore
store = runstore.open(sys.argv[1])
prefix = sys.argv[2]
print("ready", flush=True)
j = 0
while True:
    store.attrs.update({f"{prefix}-{j}": j, "pad": "x" * (j % 5000)})
    print(j, flush=True)  # acknowledged
    j += 1
"""


def test_kill_9_at_random_moments_of_updates_loses_no_acknowledged_one(tmp_path, rng):
    path = str(tmp_path / "s")
    runstore.open(path).attrs["start"] = -1
    acked: dict[str, int] = {"start": -1}
    kills = 0
    for r in range(3):
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", KILLED, path, f"r{r}p{i}"], stdout=subprocess.PIPE, text=True
            )
            for i in range(3)
        ]
        for p in procs:
            assert p.stdout.readline() == "ready\n"
        time.sleep(float(rng.uniform(0.05, 0.4)))
        for i, p in enumerate(procs):
            p.send_signal(signal.SIGKILL)
            out, _ = p.communicate()
            kills += 1
            for line in out.split():
                acked[f"r{r}p{i}-{line}"] = int(line)
        got = runstore.open(path, mode="r").attrs.to_dict()  # whole, after every round
        missing = [k for k in acked if k not in got]
        assert not missing, missing[:5]
    print(f"{kills} writers killed at random moments, {len(acked)} acknowledged updates, all kept")


@pytest.mark.parametrize(
    "content, message",
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a runstore attributes document"),
        (b'{"runstore_attrs": 9, "revision": 1, "attrs": {}}', "layout 9"),
        (b'{"runstore_attrs": 1, "revision": -1, "attrs": {}}', "positive integers"),
        (b"\xff\xfe", "not JSON"),
        (b'{"runstore_attrs": 2, "revision": 1, "attrs": {}}', "ATTRS.d, which is missing"),
    ],
)
def test_damaged_or_newer_attributes_are_named(tmp_path, content, message):
    store = runstore.open(tmp_path / "s")
    (tmp_path / "s" / "ATTRS").write_bytes(content)
    with pytest.raises(_attrs.AttrsError, match=message) as e:
        store.attrs.to_dict()
    assert "ATTRS" in str(e.value)
    with pytest.raises(_attrs.AttrsError, match=message):
        store.attrs["x"] = 1  # an update does not go on from damaged attributes either


def _damage_newest(path, how):
    revisions = os.path.join(path, "ATTRS.d")
    newest = os.path.join(revisions, str(max(int(n) for n in os.listdir(revisions) if n.isdigit())))
    doc = os.path.join(newest, "ATTRS")
    if how == "empty revision":
        os.unlink(doc)
    elif how == "fifo":
        os.unlink(doc)
        os.mkfifo(doc)
    elif how == "other revision":
        d = json.load(open(doc))
        d["revision"] += 5
        json.dump(d, open(doc, "w"))
    elif how == "revisions a file":
        import shutil

        shutil.rmtree(revisions)
        open(revisions, "w").close()
    elif how == "hostile name":
        os.mkdir(os.path.join(revisions, "99999"))
        open(os.path.join(revisions, "99999", "ATTRS"), "w").write("[]")


@pytest.mark.parametrize(
    "how, message",
    [
        ("empty revision", "holds no ATTRS"),
        ("fifo", "not a regular file \\(a FIFO\\)"),
        ("other revision", "not the document of revision"),
        ("revisions a file", "ATTRS.d: not a directory"),
        ("hostile name", "99999/ATTRS: not a runstore attributes document"),
    ],
)
def test_damaged_revisions_are_named_never_read_as_attributes_and_never_hang(
    tmp_path, how, message
):
    path = _fresh(tmp_path, "s")
    _attrs.modify(path, lambda a: {"v": 1})
    _damage_newest(path, how)
    with pytest.raises(_attrs.AttrsError, match=message):
        _attrs.read(path)
    with pytest.raises(_attrs.AttrsError, match=message):
        _attrs.modify(path, lambda a: {**a, "w": 2})


def test_a_fifo_in_place_of_attrs_is_refused_without_blocking(tmp_path):
    store = runstore.open(tmp_path / "s")
    os.mkfifo(tmp_path / "s" / "ATTRS")
    with pytest.raises(_attrs.AttrsError, match="FIFO"):
        store.attrs.to_dict()
    ro = runstore.open(tmp_path / "s", mode="r")
    with pytest.raises(_attrs.AttrsError, match="FIFO"):
        dict(ro.attrs)


def test_a_writer_that_stalled_past_the_removal_of_old_revisions_takes_its_update_back(
    tmp_path,
):
    """A writer that read revision r and stalled while others published (and removed) r+1
    and more renames its document into the freed number r+1: its check finds that the newest
    document does not descend from it, so it removes it and is told to try again (None), and
    nothing of it is read. Stalled longer than a lineage reaches, it cannot tell, and raises."""
    path = _fresh(tmp_path, "s")
    _attrs.modify(path, lambda a: {"n": 0})
    stalled = _attrs._newest(path)
    for i in range(_attrs.KEEP + 3):
        _attrs.modify(path, lambda a, i=i: {**a, "n": i + 1})
    newest = _attrs.read(path)
    assert not os.path.exists(os.path.join(path, "ATTRS.d", str(stalled.revision + 1)))
    assert _attrs._publish(path, stalled, {"lost": True}) is None
    assert _attrs.read(path) == newest
    assert not os.path.exists(os.path.join(path, "ATTRS.d", str(stalled.revision + 1)))

    for i in range(_attrs.LINEAGE):
        _attrs.modify(path, lambda a, i=i: {**a, "m": i})
    with pytest.raises(_attrs.AttrsConflictError, match="cannot be told"):
        _attrs._publish(path, stalled, {"lost": True})
    assert "lost" not in _attrs.read(path)[1]


def test_temporaries_of_killed_writers_are_removed_once_old(tmp_path):
    path = _fresh(tmp_path, "s")
    _attrs.modify(path, lambda a: {"v": 1})
    revisions = os.path.join(path, "ATTRS.d")
    old, young = (os.path.join(revisions, f"tmp.{c * 32}") for c in "ab")
    for t in (old, young):
        os.mkdir(t)
        open(os.path.join(t, "ATTRS"), "w").write("{")
    old_file = os.path.join(path, "ATTRS.1234-abcdef01.tmp")  # of a layout-1 writer
    open(old_file, "w").close()
    past = time.time() - 3600
    for p in (old, old_file):
        os.utime(p, (past, past))
    _attrs.modify(path, lambda a: {"v": 2})
    assert not os.path.exists(old) and not os.path.exists(old_file)
    assert os.path.exists(young) and _attrs.read(path)[1] == {"v": 2}


def test_values_that_json_would_change_are_refused_naming_them(tmp_path):
    store = runstore.open(tmp_path / "s")
    with pytest.raises(ValueError, match="attribute 'k'.*not valid Unicode"):
        store.attrs["k"] = "a\ud800b"
    with pytest.raises(ValueError, match="attribute name 'a\\\\udc80'"):
        store.attrs["a\udc80"] = 1
    with pytest.raises(ValueError, match="\\['x'\\]\\[1\\]: not valid Unicode"):
        store.attrs["k"] = {"x": [1, "\udfff"]}
    assert store.attrs.revision == 0
    store.attrs["nan"] = float("nan")
    assert np.isnan(store.attrs["nan"])


def test_every_storable_hostile_string_round_trips_as_key_and_value(tmp_path):
    from _hostile import HOSTILE, STORABLE

    store = runstore.open(tmp_path / "s")
    doc = {f"k-{k}": v for k, v in STORABLE.items()}
    doc.update({v: k for k, v in STORABLE.items()})
    store.attrs.update(doc)
    assert runstore.open(tmp_path / "s", mode="r").attrs.to_dict() == doc
    refused = 0
    for k, v in HOSTILE.items():
        if k in STORABLE:
            continue
        for bad in ({"k": v}, {v: "value"}):
            with pytest.raises(ValueError, match="not valid Unicode"):
                store.attrs.update(bad)
            refused += 1
    assert store.attrs.to_dict() == doc
    print(
        f"attributes: {2 * len(STORABLE)} hostile keys and values round-trip, "
        f"{refused} refused (not Unicode)"
    )


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


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(),  # any code point but lone surrogates
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=25)
@given(doc=st.dictionaries(st.text(), _JSON, max_size=6))
def test_any_json_document_of_text_keys_round_trips(tmp_path_factory, doc):
    path = str(tmp_path_factory.mktemp("attrs"))
    _attrs.modify(path, lambda a: doc)
    assert _attrs.read(path) == (1, doc)
