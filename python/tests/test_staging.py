"""Node-local staging (docs/design.md#staging): Store.writer(staging_dir=...), the shipped
ticket, ship_every_s, and runstore.sync after a writer process is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import runstore


def test_staging_writer_ships_everything_at_close_and_leaves_staging_empty(store, tmp_path):
    staging = tmp_path / "local"
    runs = [f"{i * 2654435761:016x}" for i in range(300)]  # hashed string ids
    with store.writer(staging_dir=staging, segment_bytes=1 << 16) as w:
        for i, run in enumerate(runs):
            w.log(run, step=0, loss=float(i), trace=np.arange(200, dtype=np.float32) + i)
            if i % 20 == 19:
                w.commit()
    assert w.stats()["segments_sealed"] > 2
    assert list(staging.iterdir()) == []
    store.refresh()
    for i, run in enumerate(runs):
        assert store.get(run, "loss") == float(i)
        np.testing.assert_array_equal(store.get(run, "trace"), np.arange(200, dtype=np.float32) + i)
    assert all(s.file.endswith(".rss") for s in store.segments())


def test_a_commit_is_visible_in_the_store_once_shipped(store, tmp_path):
    with store.writer(staging_dir=tmp_path / "local") as w:
        w.log(1, x=1.0)
        ticket = w.commit()
        store.refresh()
        assert "x" not in store.names()  # durable in staging, not shipped yet
        assert w.shipped_ticket < ticket
        w.wait_for_shipped(ticket)
        assert w.shipped_ticket >= ticket
        store.refresh()
        assert store.get(1, "x") == 1.0
        w.log(2, x=2.0)
        w.commit()
        w.wait_for_shipped()  # the last commit
        store.refresh()
        assert store.get(2, "x") == 2.0
        with pytest.raises(ValueError, match="no commit ticket"):
            w.wait_for_shipped(ticket + 100)


def test_ship_every_s_ships_without_being_asked(store, tmp_path):
    with store.writer(staging_dir=str(tmp_path / "local"), ship_every_s=0.2) as w:
        w.log(7, x=7.0)
        ticket = w.commit()
        deadline = time.monotonic() + 60  # generous: no assertion on how fast
        while w.shipped_ticket < ticket and time.monotonic() < deadline:
            time.sleep(0.02)
        assert w.shipped_ticket >= ticket
        store.refresh()
        assert store.get(7, "x") == 7.0


def test_staging_dir_from_the_environment_and_empty_string_disables(store, tmp_path, monkeypatch):
    staging = tmp_path / "env_staging"
    monkeypatch.setenv("RUNSTORE_STAGING_DIR", str(staging))
    w = store.writer()
    w.log(1, x=1.0)
    w.commit()
    assert any(p.suffix == ".rss" for p in staging.iterdir())
    w.close()
    assert list(staging.iterdir()) == []
    with store.writer(staging_dir="") as w2:
        w2.log(2, x=2.0)
        w2.commit()
        assert list(staging.iterdir()) == []
    store.refresh()
    assert store.get(1, "x") == 1.0 and store.get(2, "x") == 2.0


def test_sync_errors_name_the_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        runstore.sync(tmp_path / "nope", tmp_path)
    (tmp_path / "local").mkdir()
    with pytest.raises(FileNotFoundError, match="not a runstore store"):
        runstore.sync(tmp_path / "local", tmp_path / "nostore")


def test_a_staging_directory_inside_the_store_is_refused_and_the_store_survives(store, tmp_path):
    """`runstore sync STORE/segments STORE` removed every segment, and a writer staging into
    segments/ claimed 100,001 numbers: both are refused before anything is touched."""
    with store.writer() as w:
        for run in range(5):
            w.log(run, x=float(run))
    root = Path(store.path)
    segments = sorted(os.listdir(root / "segments"))
    os.symlink(root / "segments", tmp_path / "alias")
    inside = [root / "segments", tmp_path / "alias", root, root / "stage"]
    for staging in inside:
        if staging.exists():  # a sync of a staging directory that is not there: NotFound
            with pytest.raises(ValueError, match="apart from the store"):
                runstore.sync(staging, root, force=True, progress=False)
        with pytest.raises(ValueError, match="apart from the store"):
            store.writer(staging_dir=staging)
    assert sorted(os.listdir(root / "segments")) == segments
    assert not (root / "stage").exists()
    store.refresh()
    assert store.scan("x")["value"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


_WRITER = textwrap.dedent(
    """
    import sys
    import runstore

    store = runstore.open(sys.argv[1])
    w = store.writer(staging_dir=sys.argv[2], writer_id="py", segment_bytes=1 << 16)
    for step in range(10**9):
        w.log(1, step=step, x=float(step), pad=b"p" * 500)
        w.commit()
        print("ACK", step, flush=True)
    """
)


def test_sync_after_kill_ships_every_acknowledged_commit_once(store_path, tmp_path):
    staging = tmp_path / "local"
    runstore.open(store_path).writer(staging_dir="").close()  # create the store
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(store_path), str(staging)],
        stdout=subprocess.PIPE,
        text=True,
    )
    acked = -1
    assert proc.stdout is not None
    for line in proc.stdout:
        acked = int(line.split()[1])
        if acked >= 300:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert any(p.suffix == ".rss" for p in staging.iterdir())
    report = runstore.sync(staging, store_path, wait_s=1.2)
    assert report["shipped"] and not report["skipped"]
    assert [p.name for p in staging.iterdir()] == []
    again = runstore.sync(staging, store_path, force=True)
    assert again["shipped"] == [] and again["already_published"] == []
    store = runstore.open(store_path, "r")
    n = store.series_info("x").count
    assert n >= acked + 1  # every acknowledged commit, maybe one more
    d = store.scan("x")
    assert sorted(d["step"].tolist()) == list(range(n))  # whole commits, in order, none twice
    np.testing.assert_array_equal(np.sort(d["value"]), np.arange(n, dtype=np.float64))
    print(
        f"staging: killed a writer after {acked + 1} acknowledged commits; sync shipped "
        f"{len(report['shipped'])} segments, {n} records read back"
    )
