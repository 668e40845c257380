"""The long commands a user waits on draw a progress line on a terminal, and only there: run
with stderr on a pseudo-terminal (as at a shell), each draws its line and erases it at the end;
with stderr on a pipe (a log, a batch job) or with --no-progress, stderr stays empty."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from _terminal import CLI, run_on_terminal

import runstore

N = 3000


def _model(x, seed):
    rng = np.random.default_rng(seed)
    return {"y": x * 2.0, "curve": rng.random(50)}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A sweep of N experiments in several sealed segments (so that compact has work)."""
    path = tmp_path_factory.mktemp("progress") / "sweep"
    store = runstore.open(path)
    store.define_experiments([{"x": float(i) / N, "seed": i} for i in range(N)])
    for shard in range(3):
        runstore.run_experiments(store, _model, workers=0, progress=False, shard=(shard, 3))
    return path


_STAGED_WRITER = textwrap.dedent(
    """
    import os, sys
    import runstore

    w = runstore.open(sys.argv[1]).writer(staging_dir=sys.argv[2], writer_id=sys.argv[3])
    for step in range(2000):
        w.log(sys.argv[3], step=step, loss=float(step))
    w.commit()
    os._exit(0)  # preempted: the segment and the lease stay in staging
    """
)


def _staging(tmp_path, store_path, writers=3):
    staging = tmp_path / "local"
    for k in range(writers):
        subprocess.run(
            [sys.executable, "-c", _STAGED_WRITER, str(store_path), str(staging), f"node{k}"],
            check=True,
            timeout=60,
        )
    return staging


def _commands(sweep, tmp_path):
    """(label drawn, command) of every long command, each with a fresh output."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    k = len(list(out.iterdir()))
    return [
        ("verify", ["verify", str(sweep)]),
        ("cat", ["cat", str(sweep), "curve"]),
        ("export", ["export", "csv", str(sweep), str(out / f"{k}.csv")]),
        ("runstore export tar", ["export", "tar", str(sweep), str(out / f"{k}.tar.gz")]),
        ("runstore export parquet", ["export", "parquet", str(sweep), str(out / f"{k}.parquet")]),
        ("runstore export zarr", ["export", "zarr", str(sweep), str(out / f"{k}.zarr")]),
        ("runstore report", ["report", str(sweep), "-o", str(out / f"{k}.html")]),
    ]


def _erased(drawn: bytes) -> bool:
    """The line is gone at the end: the tool ends with "\\r" and erase-line, Python's with
    spaces over it and "\\r"."""
    return drawn.endswith(b"\r\x1b[K") or drawn.endswith(b"\r")


@pytest.mark.parametrize(
    "k", range(7), ids=["verify", "cat", "csv", "tar", "parquet", "zarr", "report"]
)
def test_each_long_command_draws_and_erases_its_line_on_a_terminal_only(sweep, tmp_path, k):
    label, args = _commands(sweep, tmp_path)[k]
    p, drawn = run_on_terminal(*args)
    assert p.returncode == 0, drawn.decode(errors="replace")
    assert b"\r" + label.encode() in drawn, drawn
    assert _erased(drawn), drawn
    # On a pipe: nothing on stderr.
    _, args = _commands(sweep, tmp_path)[k]
    q = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)
    assert q.returncode == 0 and q.stderr == "", q.stderr
    # On a terminal with --no-progress, before the command or after it: nothing drawn.
    _, args = _commands(sweep, tmp_path)[k]
    p, drawn = run_on_terminal("--no-progress", *args)
    assert p.returncode == 0 and drawn == b"", drawn
    if args[0] == "export" and args[1] != "csv":
        _, args = _commands(sweep, tmp_path)[k]
        p, drawn = run_on_terminal(*args, "--no-progress")
        assert p.returncode == 0 and drawn == b"", drawn


def test_compact_draws_the_records_merged(sweep, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(sweep, copy)
    before = runstore.open(copy, "r").scan("y")
    p, drawn = run_on_terminal("compact", str(copy), "--retain", "0")
    assert p.returncode == 0, drawn
    assert p.stdout.startswith("merged "), p.stdout
    assert b"\rcompact  100% [" + b"#" * 30 + b"]" in drawn, drawn
    assert _erased(drawn)
    after = runstore.open(copy, "r").scan("y")
    as_dict = lambda d: dict(zip(d["run"].tolist(), d["value"].tolist()))  # noqa: E731
    assert len(after["run"]) == N and as_dict(after) == as_dict(before)
    # Nothing to do, a dry run, or on a pipe: no line.
    p, drawn = run_on_terminal("compact", str(copy))
    assert p.returncode == 0 and p.stdout.startswith("nothing to compact") and drawn == b""
    q = subprocess.run([*CLI, "compact", str(copy)], capture_output=True, text=True)
    assert q.returncode == 0 and q.stderr == ""


def test_sync_draws_the_watch_then_the_segments_shipped(tmp_path):
    store_path = tmp_path / "store"
    runstore.open(store_path).writer().close()
    staging = _staging(tmp_path, store_path)
    p, drawn = run_on_terminal("sync", "--wait", "1.2", str(staging), str(store_path))
    assert p.returncode == 0, drawn
    assert "3 shipped" in p.stdout, p.stdout
    assert b"\rsync  | watching the writers' leases for 1.2 s" in drawn, drawn
    assert b"\rsync  100% [" in drawn, drawn
    assert _erased(drawn)
    assert runstore.open(store_path, "r").series_info("loss").count == 3 * 2000
    staging = _staging(tmp_path, store_path, writers=1)
    q = subprocess.run(
        [*CLI, "sync", "--force", str(staging), str(store_path)], capture_output=True, text=True
    )
    assert q.returncode == 0 and q.stderr == "" and "1 shipped" in q.stdout


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_the_export_bar_counts_every_pass_over_the_experiments(sweep, tmp_path, monkeypatch):
    """export_tar writes experiments.csv and the scalar outcomes' members in one pass over the
    N experiments and each array outcome's member in a pass of its own (here one scalar and
    one array: 2 passes): the bar reaches 100% at exactly the last row, and progress=False
    draws nothing."""
    store = runstore.open(sweep, "r")
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    store.export_tar(tmp_path / "a.tar.gz", chunk_rows=500)
    drawn = term.getvalue()
    assert "\rrunstore export tar: reading the experiments" in drawn
    assert f"100% [{'#' * 30}] {2 * N:,}/{2 * N:,} rows" in drawn, drawn[-400:]
    assert f"{2 * N + 1:,}/" not in drawn and f"/{2 * N:,} rows" in drawn
    assert drawn.endswith("\r") and drawn.rstrip("\r ").endswith(")")
    term.truncate(0)
    term.seek(0)
    store.export_parquet(tmp_path / "a.parquet", row_group_rows=1000)
    assert f"100% [{'#' * 30}] {N:,}/{N:,} rows" in term.getvalue()
    term.truncate(0)
    term.seek(0)
    store.to_zarr(tmp_path / "a.zarr")
    assert "100% [" in term.getvalue() and " tasks (" in term.getvalue()
    term.truncate(0)
    term.seek(0)
    store.export_tar(tmp_path / "b.tar.gz", progress=False)
    store.export_parquet(tmp_path / "b.parquet", progress=False)
    store.to_zarr(tmp_path / "b.zarr", progress=False)
    assert term.getvalue() == ""
    assert os.path.getsize(tmp_path / "b.tar.gz") > 0


def test_compact_verify_and_sync_of_the_python_api_draw_on_a_terminal(sweep, tmp_path, monkeypatch):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(sweep, copy)
    store_path = tmp_path / "store"
    runstore.open(store_path).writer().close()
    staging = _staging(tmp_path, store_path, writers=2)
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    store = runstore.open(copy)
    assert store.verify() > 0
    assert "\rrunstore verify: 100% [" in term.getvalue() and " MiB (" in term.getvalue()
    report = store.compact(retain=0)
    assert report["inputs"] and f"/{report['input_records']:,} records (" in term.getvalue()
    report = runstore.sync(staging, store_path, wait_s=1.2)
    assert len(report["shipped"]) == 2
    drawn = term.getvalue()
    assert "\rrunstore sync: watching the writers' leases for 1.2 s" in drawn, drawn
    assert "100% [" in drawn.split("runstore sync")[-1] and " MiB shipped (" in drawn
    assert drawn.endswith("\r")
    term.truncate(0)
    term.seek(0)
    store.verify(progress=False)
    store.compact(progress=False)
    runstore.sync(staging, store_path, force=True, progress=False)
    assert term.getvalue() == ""


def test_an_exception_in_a_progress_callback_is_raised_after_the_work(sweep, tmp_path):
    """The C++ work runs without the GIL and is not stopped by the callback: the callback's
    first exception is raised when it is done, and nothing of the work is lost."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(sweep, copy)
    store = runstore.open(copy)
    calls = []

    def boom(done, total):
        calls.append(done)
        raise KeyError("from the callback")

    with pytest.raises(KeyError, match="from the callback"):
        store._core.verify_all(boom)
    with pytest.raises(KeyError, match="from the callback"):
        store._core.compact(False, 0.0, 0, 256 << 20, 0.0, progress=boom)
    assert len(calls) == 2  # one call each: the first exception stops the calls
    store.refresh()
    assert len(store.segments()) == 1  # the compaction finished
    assert store.series_info("y").count == N
