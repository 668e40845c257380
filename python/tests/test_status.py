"""``runstore status``: counts, rate, ETA, the slowest, the longest running and the failed, from
the status records a sweep writes; on a real sweep and on records with known times."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import runstore
from runstore.experiments import _records as ex
from runstore.experiments import _status

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from test_experiments import fails_on_odd_x  # noqa: E402


def write_status(store, rows):
    """Status records as the runner writes them: (id, state, started, finished, host, error)."""
    with store.writer(_allow_reserved=True) as w:
        for eid, state, started, finished, host, error in rows:
            rec = {ex.STATE: state, ex.ATTEMPT: 1}
            if started is not None:
                rec[ex.STARTED] = started
                rec[ex.HOST] = host
            if finished is not None:
                rec[ex.FINISHED] = finished
                rec[ex.SECONDS] = finished - started
            if error is not None:
                rec[ex.ERROR] = error
            w.log(eid, **rec)


@pytest.fixture
def timed(store):
    """10 experiments (default hashed ids): 5 done, 1 failed, 2 running, 2 pending, at known
    times up to t = 1000 s."""
    design = store.define_experiments(runstore.grid(x=range(10)))
    ids = design["experiment"].tolist()
    tb = 'Traceback (most recent call last):\n  File "m.py", line 3\nValueError: x=5 is bad\n'
    write_status(
        store,
        [
            (ids[0], "done", 100.0, 110.0, "n1", ""),  # before the window
            (ids[1], "done", 700.0, 760.0, "n1", ""),  # 60 s, the slowest
            (ids[2], "done", 750.0, 800.0, "n2", ""),
            (ids[3], "done", 850.0, 900.0, "n2", ""),
            (ids[4], "done", 960.0, 990.0, "n1", ""),
            (ids[5], "failed", 980.0, 995.0, "n2", tb),
            (ids[6], "running", 900.0, None, "n1", None),
            (ids[7], "running", 990.0, None, "n2", None),
        ],
    )
    store.refresh()
    return store, ids


def test_counts_rate_eta_and_lists(timed):
    store, ids = timed
    s = _status.summary(store, now=1000.0, window_s=300.0, top=2)
    assert s["experiments"] == 10 and not s["complete"]
    assert s["counts"] == {"done": 5, "running": 2, "pending": 2, "failed": 1}
    # Finished in (700, 1000]: ids 1..5 -> 5 in 300 s.
    assert s["finished_in_window"] == 5
    assert s["rate"] == pytest.approx(5 / 300)
    assert s["eta_s"] == pytest.approx(4 / (5 / 300))
    assert [e["experiment"] for e in s["slowest"]] == [ids[1], ids[2]]
    assert s["slowest"][0]["seconds"] == pytest.approx(60.0) and s["slowest"][0]["host"] == "n1"
    assert [e["experiment"] for e in s["running"]] == [ids[6], ids[7]]  # longest first
    assert s["running"][0]["running_s"] == pytest.approx(100.0)
    assert s["failed"] == [
        {"experiment": ids[5], "attempt": 1, "host": "n2", "error": "ValueError: x=5 is bad"}
    ]
    text = _status.format_summary(s)
    assert "10 experiments" in text and "ETA 4 min 0 s" in text
    assert "1.0 experiments/min over the last 5 min 0 s (5 finished)" in text
    assert f"{ids[5]}" in text and "ValueError: x=5 is bad" in text
    # A window shorter than the sweep's age: only what finished in it counts.
    s = _status.summary(store, now=1000.0, window_s=50.0)
    assert s["finished_in_window"] == 2 and s["rate"] == pytest.approx(2 / 50)
    # Nothing finished in the window: no ETA, said so.
    s = _status.summary(store, now=5000.0, window_s=60.0)
    assert s["rate"] == 0 and s["eta_s"] is None
    assert "none finished in the last 1 min 0 s; ETA unknown" in _status.format_summary(s)
    json.dumps(s)  # every value is JSON


def test_a_real_sweep_with_failures(store):
    store.define_experiments(runstore.grid(x=range(8)))
    runstore.run_experiments(store, fails_on_odd_x, workers=1, progress=False)
    store.refresh()
    s = _status.summary(store)
    assert s["counts"] == {"done": 4, "running": 0, "pending": 0, "failed": 4}
    assert s["complete"] and s["eta_s"] == 0.0 and s["finished_in_window"] == 8
    want = {f"RuntimeError: odd x={x} is not supported" for x in (1, 3, 5, 7)}
    assert {e["error"] for e in s["failed"]} == want
    assert len(s["slowest"]) == 4 and all(e["host"] for e in s["slowest"])
    assert "all finished" in _status.format_summary(s)


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-c", "import _runstore_cli, sys; sys.exit(_runstore_cli.main())", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_command(timed, tmp_path):
    store, ids = timed
    r = run_cli("status", str(store.path))
    assert r.returncode == 0, r.stderr
    assert "10 experiments" in r.stdout and "failed" in r.stdout
    r = run_cli("status", str(store.path), "--json", "--top", "1")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["counts"]["done"] == 5 and len(s["slowest"]) == 1
    # A store without experiments, and no store: clear errors, the tool's exit codes.
    runstore.open(tmp_path / "empty").writer().close()
    r = run_cli("status", str(tmp_path / "empty"))
    assert r.returncode == 5 and "has no experiments" in r.stderr, r.stderr
    r = run_cli("status", str(tmp_path / "missing"))
    assert r.returncode == 3 and "NotFound" in r.stderr, r.stderr
    r = run_cli("status")
    assert r.returncode == 1 and "usage" in r.stderr


def test_status_reads_only_the_series_it_shows(store):
    """Listing the series for their types resolves no keys: a design written twice (every key
    overwritten, whose resolution reads its blocks) and an outcome are listed with their types
    and without counts, and the status is right."""
    store.define_experiments([{"x": float(i)} for i in range(50)])
    ids = runstore.experiments.design(store)["experiment"].tolist()
    with store.writer(_allow_reserved=True) as w:
        # The design again, as a writer that records whole experiments does (keys repeat).
        w.log_many(ids, **{ex.DESIGN + "x": [float(i) for i in range(50)]})
        w.log_many(ids, **{ex.STATE: ["done"] * 50, ex.ATTEMPT: [1] * 50}, y=list(range(50)))
    store.refresh()
    typed = {d["name"]: d for d in store._core.series(include_reserved=True, counts=False)}
    counted = {d["name"]: d for d in store._core.series(include_reserved=True)}
    assert set(typed) == set(counted)
    for name, d in typed.items():
        assert "count" not in d
        assert {k: v for k, v in counted[name].items() if k != "count"} == d
    assert counted[ex.DESIGN + "x"]["count"] == 50  # the overwritten keys, resolved
    assert ex.reserved_series(store, counts=False).keys() == typed.keys()
    st = store.status()
    assert st["state"].tolist() == ["done"] * 50


def test_positions_of_runs_in_the_same_order_are_computed_once_and_stay_right():
    """The columns of one log_many hold their runs in the same order: the positions of the last
    runs asked are reused, read-only, and other runs get theirs."""
    import numpy as np

    index = ex.ExperimentIndex(np.array(["a", "b", "c", "d"], dtype=object))
    first = index.positions(np.array(["c", "a", "d"], dtype=object))
    assert first.tolist() == [2, 0, 3]
    again = index.positions(np.array(["c", "a", "d"], dtype=object))
    assert again is first and not again.flags.writeable
    assert index.positions(np.array(["c", "b", "d"], dtype=object)).tolist() == [2, 1, 3]
    assert index.positions(np.array(["c", "a", "zz"], dtype=object)).tolist() == [2, 0, -1]
    # A run that is not an experiment: nothing to check the positions by, so not reused.
    assert index.positions(np.array(["c", "a", "zz"], dtype=object)).tolist() == [2, 0, -1]
    assert index.positions(np.array(["c", "a", "b"], dtype=object)).tolist() == [2, 0, 1]
    assert index.positions(np.array(["d"], dtype=object)).tolist() == [3]
    assert index.positions(np.array([1, "b"], dtype=object)).tolist() == [-1, 1]


@pytest.mark.parametrize("ids", ["hashed", "int"])
def test_the_summary_read_as_arrays_is_the_summary_of_the_status_frame(store, ids):
    """``summary`` reads the status series into arrays aligned on the design (no Python object
    per experiment); it says exactly what the summary of ``Store.status()`` says: states
    logged again (the later wins), explicit and implicit pending, an unknown state, ties in
    run time and start time (broken in definition order), status records of runs that are not
    experiments (left out), fields missing from some records, at every ``top``."""
    import random

    seed = random.randrange(2**32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    n = 400
    if ids == "int":
        design = store.define_experiments(
            [{"experiment": 1000 - 2 * i, "x": float(i)} for i in range(n)]
        )
    else:
        design = store.define_experiments([{"x": float(i)} for i in range(n)])
    eids = design["experiment"].tolist()
    rows = []
    for i, e in enumerate(eids):
        kind = rng.choice(["none", "pending", "running", "done", "failed", "cancelled"])
        started = float(rng.choice([100, 200, 300, rng.uniform(0, 1000)]))
        if kind == "none":
            continue
        if kind in ("pending", "cancelled"):
            rows.append((e, kind, None, None, None, None))
        elif kind == "running":
            rows.append((e, "running", started, None, f"n{i % 3}", None))
        else:
            rows.append((e, "running", started, None, f"n{i % 3}", None))
            seconds = float(rng.choice([5, 10, rng.uniform(0, 50)]))
            error = "" if kind == "done" else f"Traceback ...\nValueError: {i % 7}\n"
            rows.append((e, kind, started, started + seconds, f"n{i % 3}", error))
    rng.shuffle(rows)
    # The later of two records of one experiment wins: written in order of the list above,
    # with "running" always before its end.
    ends = [r for r in rows if r[1] in ("done", "failed")]
    write_status(store, [r for r in rows if r[1] not in ("done", "failed")])
    write_status(store, ends)
    strangers = ["not-an-experiment", 7] if ids == "hashed" else ["stranger", 1001]
    write_status(store, [(s, "failed", 1.0, 2.0, "x", "boom") for s in strangers])
    store.refresh()
    frame = store.status()
    for top in (0, 1, 5, 1000):
        for now in (400.0, 1100.0):
            fast = _status.summary(store, now=now, window_s=500.0, top=top)
            assert fast == _status.summary(store, now=now, window_s=500.0, top=top, frame=frame)
    assert fast["experiments"] == n
    assert sum(fast["counts"].values()) <= n


def test_scan_aligned_places_every_series_on_the_runs_of_the_base(store):
    """The core of the summary: series placed on a base's runs by exact run, strings as codes,
    runs handed back as bytes; what it cannot read is refused by name."""
    import numpy as np

    with store.writer() as w:
        w.log_many(["b", 3, "é"], base=[10, 11, 12])
        w.log_many([3, "b", "zz"], f=[1.5, 2.5, 9.0], s=["x", "y", "x"])
        w.log("é", s="", step=1)  # another step: not read
        w.log("é", arr=np.zeros(3))
    store.refresh()
    r = store._core.scan_aligned("base", ["f", "s"])
    runs = [
        int(r["run"][i])
        if not r["run_is_str"][i]
        else bytes(r["run_bytes"][(r["run_ends"][i - 1] if i else 0) : r["run_ends"][i]]).decode()
        for i in range(3)
    ]
    order = [runs.index(k) for k in ("b", 3, "é")]
    cols = r["columns"]
    assert "base" not in cols  # it orders the rows; it is no column
    assert cols["f"]["value"][order].tolist() == [2.5, 1.5, 0.0]
    assert cols["f"]["present"][order].tolist() == [True, True, False]
    s = cols["s"]
    assert [s["categories"][c] if c >= 0 else None for c in s["value"][order]] == ["y", "x", None]
    # Arrays of one shape are placed whole; ordered=True puts the runs in the order of the
    # base's values (ties in storage order).
    r = store._core.scan_aligned("base", ["arr"], ordered=True, ids=True)
    assert r["ids"].tolist() == ["b", 3, "é"]
    assert r["columns"]["arr"]["value"].shape == (3, 3)
    assert r["columns"]["arr"]["present"].tolist() == [False, False, True]
    with store.writer() as w:
        w.log("é", by=b"x")
        w.log(1, base=11)
    store.refresh()
    r = store._core.scan_aligned("base", [], ordered=True, ids=True)
    assert r["ids"].tolist() == ["b", 3, 1, "é"] or r["ids"].tolist() == ["b", 1, 3, "é"]
    with pytest.raises(ValueError, match="'by' is not a series of numbers of one shape"):
        store._core.scan_aligned("base", ["by"])
    with pytest.raises(ValueError, match="orders by a base series of integers only"):
        store._core.scan_aligned("f", [], ordered=True)
    with pytest.raises(KeyError, match="nope"):
        store._core.scan_aligned("base", ["nope"])


def test_status_fields_of_another_type_are_no_state_host_or_error(store, capsys):
    """A store whose status series hold numbers where strings belong (written by hand): the
    experiments with such a state count in no state, and the command still answers."""
    design = store.define_experiments([{"x": float(i)} for i in range(4)])
    ids = design["experiment"].tolist()
    with store.writer(_allow_reserved=True) as w:
        w.log_many(ids[:2], **{ex.STATE: [1.0, 2.0], ex.HOST: [3, 4], ex.ERROR: [5.0, 6.0]})
    store.refresh()
    s = _status.summary(store, now=10.0)
    assert s["counts"] == {"done": 0, "running": 0, "pending": 2, "failed": 0}
    assert s["experiments"] == 4


def test_status_memory_grows_by_a_few_hundred_bytes_per_experiment(tmp_path):
    """What ``runstore status`` holds per experiment, from its peak memory on sweeps of 5,000
    and 50,000 experiments (default ids, the seven status fields each): the aligned read holds
    arrays, about 210 bytes an experiment here, where the status frame's Python objects took
    about 420. A bound on the growth, not a clock."""
    import numpy as np

    peaks = {}
    for n in (5_000, 50_000):
        path = str(tmp_path / f"s{n}")
        store = runstore.open(path)
        ids = store.define_experiments(runstore.grid(x=range(n)))["experiment"].tolist()
        with store.writer(_allow_reserved=True) as w:
            w.log_many(
                ids,
                **{
                    ex.STATE: ["done"] * n,
                    ex.ERROR: [""] * n,
                    ex.HOST: ["node01"] * n,
                    ex.STARTED: np.arange(n, dtype=float),
                    ex.FINISHED: np.arange(n, dtype=float) + 1,
                    ex.SECONDS: np.ones(n),
                    ex.ATTEMPT: np.ones(n, dtype=np.int64),
                },
            )
        # VmHWM: the peak of this program's own memory (ru_maxrss would keep the peak of the
        # process that forked it, carried across exec).
        code = (
            "import sys, runstore\n"
            "from runstore.experiments import _status\n"
            "_status.summary(runstore.open(sys.argv[1], 'r'))\n"
            "hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')]\n"
            "print(hwm[0])\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code, path], capture_output=True, text=True, check=True
        )
        peaks[n] = int(out.stdout.split()[-1]) * 1024
    per_experiment = (peaks[50_000] - peaks[5_000]) / 45_000
    print(
        f"status: peak {peaks[5_000] >> 20} MiB at 5,000, {peaks[50_000] >> 20} MiB at "
        f"50,000: {per_experiment:.0f} bytes an experiment"
    )
    assert per_experiment < 300


def test_the_commands_done_in_python_ask_numpy_for_one_blas_thread(tmp_path, monkeypatch):
    """status (and the other commands done in Python) set OPENBLAS_NUM_THREADS=1 before numpy
    is imported, unless the user set it: none multiplies matrices, and OpenBLAS's threads spin
    after the import (about 0.1 s of `runstore status` on 2 cores). The tool's commands do not."""
    import _runstore_cli

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    assert _runstore_cli.main(["status", str(tmp_path / "none")]) != 0  # no store: an error
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    _runstore_cli.main(["status", str(tmp_path / "none")])
    assert os.environ["OPENBLAS_NUM_THREADS"] == "4"
