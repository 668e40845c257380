"""``Store.table``: a series as an Arrow C stream, taken as it is by pyarrow, DuckDB, polars and
pandas (the Arrow PyCapsule interface), checked against ``Store.scan`` record for record; its
batches bounded, its values the mapped file's bytes, its filters, its errors, and a query over
a series much larger than the memory it is given."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys

import duckdb
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import runstore


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """3 runs of 1,000 steps of loss (float64), acc (float32, zstd), grid (float32 (2, 3)),
    flag (bool), note (str) and ragged (int32 of varying shapes), committed every 100 steps;
    and y, one record of each of 500 hashed ids."""
    s = runstore.open(tmp_path_factory.mktemp("query") / "s")
    with s.writer() as w:
        w.define("acc", dtype="float32", codec="zstd")
        w.define("ragged", dtype="int32", variable_shape=True)
        for run in range(3):
            for step in range(0, 1000, 100):
                steps = np.arange(step, step + 100)
                x = run * 10_000.0 + steps
                w.log_many(
                    [run] * 100,
                    steps,
                    loss=x,
                    acc=(x / 10).astype(np.float32),
                    grid=np.repeat(x.astype(np.float32), 6).reshape(100, 2, 3),
                    flag=steps % 3 == 0,
                    note=[f"n{k}" + "x" * (k % 5) for k in steps],
                )
                for k in steps:
                    w.log(run, step=int(k), ragged=np.full(int(k) % 4, k, dtype=np.int32))
                w.commit()
    with s.writer() as w:
        ids = [f"e{k:016x}" for k in range(500)]
        w.log_many(ids, y=np.arange(500, dtype=np.float64))
    return s.refresh()


def reader(t):
    return pa.RecordBatchReader.from_stream(t)


def test_the_schema_is_each_series_own_type(store):
    types = {
        "loss": pa.float64(),
        "acc": pa.float32(),
        "grid": pa.list_(pa.field("item", pa.float32(), nullable=False), 6),
        "flag": pa.bool_(),
        "note": pa.large_string(),
        "ragged": pa.large_list(pa.field("item", pa.int32(), nullable=False)),
    }
    for name, value in types.items():
        schema = reader(store.table(name)).schema
        assert schema.names[:3] == ["run", "step", "value"], name
        assert schema.field("run").type == pa.int64()
        assert schema.field("step").type == pa.int64()
        assert schema.field("value").type == value, name
        assert not any(f.nullable for f in schema), name
    assert reader(store.table("y")).schema.field("run").type == pa.large_string()
    grid = reader(store.table("grid")).schema.field("value")
    assert grid.metadata == {b"runstore.shape": b"[2, 3]"}
    assert pa.schema(store.table("ragged")).names == ["run", "step", "value", "shape"]


def test_every_record_is_the_scans(store):
    for name in ("loss", "acc", "grid", "flag", "note", "ragged", "y"):
        got = reader(store.table(name)).read_all()
        d = store.scan(name)
        assert got.num_rows == len(d["run"]), name
        assert got.column("run").to_pylist() == list(d["run"]), name
        assert np.array_equal(got.column("step").to_numpy(), d["step"]), name
        values = got.column("value").to_pylist()
        if name == "grid":
            expect = [v.reshape(-1).tolist() for v in d["value"]]
        elif name == "ragged":
            expect = [v.tolist() for v in d["value"]]
            shapes = got.column("shape").to_pylist()
            assert shapes == [list(v.shape) for v in d["value"]]
        else:
            expect = list(d["value"])
        assert values == expect, name


def test_batches_are_bounded_and_the_stream_is_read_as_pulled(store):
    r = reader(store.table("loss", batch_rows=64))
    lengths = [b.num_rows for b in r]
    assert max(lengths) == 64 and sum(lengths) == 3000
    with pytest.raises(ValueError, match="batch_rows must be an int of at least 1"):
        store.table("loss", batch_rows=0)


def mapped_segment_of(address: int, store) -> str | None:
    """The segment file of ``store`` whose mapping holds ``address``, if any."""
    segments = os.path.join(str(store.path), "segments")
    for line in open("/proc/self/maps"):
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].strip().startswith(segments):
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= address < hi:
                return fields[5].strip()
    return None


def test_values_of_an_uncompressed_block_are_the_mapped_files_bytes(store):
    for name, compressed in (("y", False), ("loss", False), ("acc", True)):
        batch = next(iter(reader(store.table(name))))
        address = batch.column("value").buffers()[1].address
        assert (mapped_segment_of(address, store) is None) == compressed, name


def test_runs_and_steps_filter_what_is_read(store):
    t = store.table("loss", runs=[2, 0], steps=(990, 1000))
    got = reader(t).read_all()
    assert sorted(zip(got.column("run").to_pylist(), got.column("step").to_pylist())) == [
        (r, s) for r in (0, 2) for s in range(990, 1000)
    ]


def test_duckdb_polars_and_pandas_take_it_as_it_is(store):
    t = store.table("loss")
    rows = duckdb.sql(
        "SELECT run, count(*) AS n, max(value) AS top FROM t GROUP BY run ORDER BY run"
    ).fetchall()
    assert rows == [(r, 1000, r * 10_000.0 + 999) for r in range(3)]
    # A second query of the same object reads the series again.
    assert duckdb.sql("SELECT sum(step) FROM t").fetchall()[0][0] == 3 * sum(range(1000))
    notes = store.table("note")  # noqa: F841 (DuckDB finds it by the name of the variable)
    assert duckdb.sql("SELECT count(*) FROM notes WHERE value LIKE 'n1%x'").fetchall()[0][0] > 0
    df = pl.DataFrame(t)
    assert df.shape == (3000, 3) and df["value"].sum() == sum(
        r * 10_000.0 + s for r in range(3) for s in range(1000)
    )
    lazy = pl.scan_arrow_c_stream(store.table("loss")).filter(pl.col("step") >= 998)
    assert lazy.collect().height == 6
    frame = pd.DataFrame.from_arrow(store.table("acc"))
    assert list(frame.columns) == ["run", "step", "value"] and len(frame) == 3000
    assert frame["value"].dtype == np.float32


def test_errors_name_what_was_wrong(store):
    with pytest.raises(KeyError, match="series 'nope' not found"):
        store.table("nope")
    with pytest.raises(TypeError, match="the name of one series"):
        store.table(b"loss")
    for runs, what in (("abc", "a single str"), (b"ab", "a single bytes"), (5, "got int")):
        with pytest.raises(TypeError, match=f"runs must be a list of run ids.*{what}"):
            store.table("loss", runs=runs)
    with pytest.raises(TypeError, match="run id"):  # a run id of no run id's type
        pa.RecordBatchReader.from_stream(store.table("loss", runs=[1.5])).read_all()


QUERY_PEAK = """
import sys
import duckdb
import runstore
store = runstore.open(sys.argv[1], "r")
t = store.table("big")
def peak():  # VmHWM: ru_maxrss would start from the parent's, the test's
    return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])
duckdb.sql("SELECT 1").fetchall()  # DuckDB's own memory, before the measure
before = peak()
total, n = duckdb.sql("SELECT sum(value), count(*) FROM t").fetchall()[0]
assert n == int(sys.argv[2]), n
print(total, (peak() - before) // 1024)
"""


def test_a_query_over_a_series_larger_than_its_memory_holds_a_few_batches(tmp_path):
    """DuckDB sums a series of 160 MiB of values (20 million records, written in blocks of a
    million) pulled through the stream: the process's peak grows by less than 64 MiB (the
    pages of the mapped files are let go as the stream moves on), and the sum is right."""
    s = runstore.open(tmp_path / "s")
    n, per = 20_000_000, 1_000_000
    with s.writer() as w:
        for k in range(n // per):
            steps = np.arange(k * per, (k + 1) * per)
            w.log_many(np.zeros(per, dtype=np.int64), steps, big=(steps % 1000).astype(np.float64))
            w.commit()
    p = subprocess.run(
        [sys.executable, "-c", QUERY_PEAK, str(tmp_path / "s"), str(n)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    total, grew = p.stdout.split()
    print(f"duckdb over {n:,} records (160 MiB of values): peak RSS grew {grew} MiB")
    assert float(total) == (n // 1000) * sum(range(1000))
    assert int(grew) < 64, f"peak RSS grew by {grew} MiB"


JOIN_PEAK = """
import sys
import duckdb
import runstore
from runstore._arrow_stream import JoinedTable
store = runstore.open(sys.argv[1], "r")
t = JoinedTable(store, ["a", "b"], window_bytes=int(sys.argv[3]))
def peak():
    return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])
duckdb.sql("SELECT 1").fetchall()
before = peak()
n, a, b, nb = duckdb.sql("SELECT count(*), sum(a), sum(b), count(b) FROM t").fetchall()[0]
assert n == int(sys.argv[2]), n
print(a, b, nb, (peak() - before) // 1024)
"""


def test_a_join_over_series_larger_than_its_memory_holds_a_window(tmp_path):
    """DuckDB sums two series joined by the core (10 million records of a, 5 million of b at
    every other step; 480 MiB of keys and values mapped) in windows of 16 MiB: the process's
    peak grows by a few windows and DuckDB's own (80 MiB when written; 16, 37 and 222 MiB with
    windows of 1, 4 and 64 MiB), far below what the series hold, and the sums are right."""
    s = runstore.open(tmp_path / "s")
    n, per = 10_000_000, 1_000_000
    with s.writer() as w:
        for k in range(n // per):
            steps = np.arange(k * per, (k + 1) * per)
            w.log_many(np.zeros(per, dtype=np.int64), steps, a=(steps % 1000).astype(np.float64))
            w.log_many(np.zeros(per // 2, dtype=np.int64), steps[::2], b=steps[::2] % 7)
            w.commit()
    p = subprocess.run(
        [sys.executable, "-c", JOIN_PEAK, str(tmp_path / "s"), str(n), str(16 << 20)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    a, b, nb, grew = p.stdout.split()
    print(f"duckdb over a join of {n:,} and {n // 2:,} records: peak RSS grew {grew} MiB")
    assert float(a) == (n // 1000) * sum(range(1000))
    assert int(b) == sum(k % 7 for k in range(0, n, 2)) and int(nb) == n // 2
    assert int(grew) < 128, f"peak RSS grew by {grew} MiB"


def test_hostile_run_ids_and_strings_come_back_as_data(tmp_path):
    """Every hostile string a store can hold, as a run id and as a string value, comes back
    byte for byte through pyarrow and DuckDB (a string from the store is data, never SQL or
    markup; NUL and 64 KiB strings too)."""
    from _hostile import STORABLE

    s = runstore.open(tmp_path / "s")
    # Run ids of at most 255 bytes: the long strings cut (at a character's boundary).
    runs = [
        f"r-{k}-" + v.encode()[:240].decode("utf-8", "ignore")
        for k, v in enumerate(STORABLE.values())
    ]
    with s.writer() as w:
        w.log_many(runs, text=list(STORABLE.values()), k=np.arange(len(runs), dtype=np.int64))
    s.refresh()
    got = reader(s.table("text")).read_all()
    assert got.column("run").to_pylist() == runs
    assert got.column("value").to_pylist() == list(STORABLE.values())
    t = s.table("k")  # noqa: F841 (DuckDB finds it by the name of the variable)
    rows = duckdb.sql("SELECT run, value FROM t ORDER BY value").fetchall()
    assert rows == [(r, k) for k, r in enumerate(runs)]


# -- the experiments table, runstore.sql and runstore sql -----------------------------------------


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """12 experiments (default hashed ids) of lr and opt, 2 of them failed; outcomes loss and
    curve (4 points); and a series called "experiments", whose name the view then gives up."""
    s = runstore.open(tmp_path_factory.mktemp("sql") / "sweep")
    s.define_experiments(runstore.grid(lr=[0.1, 0.01, 0.001], opt=["adam", "sgd"], seed=[0, 1]))

    def train(lr, opt, seed):
        if opt == "sgd" and lr == 0.1:
            raise FloatingPointError(f"diverged at lr={lr}")
        return {"loss": lr * 10 + seed, "curve": np.arange(4.0) * lr}

    runstore.run_experiments(s, train, workers=0, progress=False)
    with s.writer() as w:
        w.log("side", experiments=1.0)
    return s.refresh()


def test_the_experiments_table_is_a_stream_of_the_cores_join(sweep):
    t = pa.RecordBatchReader.from_stream(sweep.experiments_table()).read_all()
    assert t.num_rows == 12
    assert t.column_names[:3] == ["experiment", "lr", "opt"]
    assert sorted(t.column("state").to_pylist()) == ["done"] * 10 + ["failed"] * 2
    item = pa.field("item", pa.float64(), nullable=False)
    assert t.schema.field("curve").type == pa.list_(item, 4)
    assert t.schema.field("curve").metadata == {b"runstore.shape": b"[4]"}
    rel = runstore.sql(sweep, 'SELECT opt, count(*) FROM "~experiments" GROUP BY opt ORDER BY opt')
    assert rel.fetchall() == [("adam", 6), ("sgd", 6)]


def test_runstore_sql_reads_series_and_experiments_in_place(sweep):
    rows = runstore.sql(
        sweep.path,
        'SELECT e.lr, l.value FROM loss l JOIN "~experiments" e ON e.experiment = l.run '
        "WHERE e.seed = 1 ORDER BY e.lr, e.opt",
    ).fetchall()
    assert rows == [(0.001, 1.01), (0.001, 1.01), (0.01, 1.1), (0.01, 1.1), (0.1, 2.0)]
    # The series called "experiments" keeps its name; the table is "~experiments".
    assert runstore.sql(sweep, "SELECT value FROM experiments").fetchall() == [(1.0,)]
    assert runstore.sql(sweep, 'SELECT count(*) FROM "~experiments"').fetchall() == [(12,)]


def test_no_progress_bar_lands_in_the_output(sweep):
    """DuckDB draws a progress bar on standard output for a query of more than 2 s, terminal
    or not: the views' connection has it off, so a long query's CSV stays CSV."""
    setting = "SELECT current_setting('enable_progress_bar')"
    assert runstore.sql(sweep, setting).fetchall() == [(False,)]


def run_cli(*args, text=True):
    return subprocess.run(
        [sys.executable, "-m", "runstore", *args], capture_output=True, text=text, timeout=300
    )


def run_bytes(*args):
    """Standard output as it was written (text=True would turn a CR into a line end)."""
    r = run_cli(*args, text=False)
    assert r.returncode == 0, r.stderr
    return r.stdout.decode("utf-8")


def test_the_command_prints_as_cat_prints_and_names_what_was_wrong(sweep, tmp_path):
    q = """SELECT lr, opt, loss FROM "~experiments" WHERE state = 'done' ORDER BY lr, opt, loss"""
    r = run_cli("sql", str(sweep.path), q)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["lr", "opt", "loss"] and len(lines) == 11
    assert lines[1].split() == ["0.001", '"adam"', "0.01"]
    r = run_cli("sql", str(sweep.path), q, "-f", "csv", "-n", "2")
    assert r.returncode == 0 and r.stdout == "lr,opt,loss\n0.001,adam,0.01\n0.001,adam,1.01\n"
    r = run_cli("sql", str(sweep.path), q, "--format", "jsonl", "--limit", "1")
    assert r.stdout == '{"lr":0.001,"opt":"adam","loss":0.01}\n'
    r = run_cli("sql", str(sweep.path), "SELEC 1")
    assert r.returncode == 1 and "runstore: sql: ParserException:" in r.stderr
    assert 'syntax error at or near "SELEC"' in r.stderr
    r = run_cli("sql", str(sweep.path), "SELECT * FROM nope")
    assert r.returncode == 1 and "Table with name nope does not exist" in r.stderr
    # It reads the store's views and writes nowhere: no COPY TO, read_csv or ATTACH.
    target = os.path.join(str(sweep.path), "segments", "x.csv")
    r = run_cli("sql", str(sweep.path), f"COPY (SELECT 1) TO '{target}'")
    assert r.returncode == 1 and "file system operations are disabled" in r.stderr
    assert not os.path.exists(target)
    r = run_cli("sql", str(tmp_path / "missing"), "SELECT 1")
    assert r.returncode == 3 and "runstore: sql: NotFound:" in r.stderr


def test_the_command_shows_hostile_strings_as_data(tmp_path):
    from _hostile import STORABLE

    s = runstore.open(tmp_path / "s")
    with s.writer() as w:
        for k, v in enumerate(STORABLE.values()):
            w.log(f"r{k}", step=0, text=v)
    out = run_bytes("sql", str(tmp_path / "s"), "SELECT run, value FROM text")
    # Nothing a terminal acts on: no control byte but the line ends, no bidi override.
    assert not any(ord(c) < 0x20 and c != "\n" for c in out)
    assert "\u202e" not in out and "\x9b" not in out
    assert len(out.splitlines()) == len(STORABLE) + 1
    out = run_bytes("sql", str(tmp_path / "s"), "SELECT value FROM text", "-f", "jsonl")
    assert [json.loads(ln)["value"] for ln in out.split("\n")[:-1]] == list(STORABLE.values())
    out = run_bytes("sql", str(tmp_path / "s"), "SELECT value FROM text", "-f", "csv")
    got = list(csv.reader(io.StringIO(out, newline="")))
    assert [row[0] for row in got[1:]] == list(STORABLE.values())


def test_a_damaged_block_is_corruption_not_a_query_error(tmp_path):
    s = runstore.open(tmp_path / "s")
    with s.writer() as w:
        w.log_many(np.zeros(1000, dtype=np.int64), np.arange(1000), x=np.full(1000, 1234.5))
        w.log_many(np.zeros(1000, dtype=np.int64), np.arange(1000), y=np.full(1000, 1.0))
    (seg,) = [p for p in (tmp_path / "s" / "segments").iterdir() if p.suffix == ".rss"]
    data = bytearray(seg.read_bytes())
    at = data.find(np.float64(1234.5).tobytes())
    data[at + 7] ^= 1
    seg.write_bytes(bytes(data))
    r = run_cli("sql", str(tmp_path / "s"), "SELECT sum(value) FROM x")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "runstore: sql: Corruption:" in r.stderr and ".rss" in r.stderr
    # In a join, as the base or as a column: the error names the file, no row is made up.
    s.refresh()
    for names in (["x", "y"], ["y", "x"]):
        with pytest.raises(OSError, match=r"Corruption.*\.rss"):
            reader(s.table(names)).read_all()


def test_the_stream_shows_what_scan_resolves_overwrites_and_resume_markers(tmp_path):
    """Keys written again by later commits and a run resumed from a checkpoint: the stream
    holds exactly the records scan and get resolve to, through pyarrow, DuckDB and polars."""
    s = runstore.open(tmp_path / "s")
    with s.writer() as w:
        for run in (1, 2):
            x = np.arange(100, dtype=np.float64)
            w.log_many([run] * 100, np.arange(100), x=x, y=x * 2)
        w.commit()
        w.log_many([1] * 10, np.arange(10), x=np.full(10, -1.0), y=np.full(10, -2.0))  # steps 0..9
        w.commit()
        w.resume(2, 50)  # run 2 restarted from step 50: its steps 50..99 hidden
        w.log_many([2] * 5, np.arange(50, 55), x=np.full(5, 7.0), y=np.full(5, 14.0))
    s.refresh()
    d = s.scan("x")
    want = sorted(zip(d["run"].tolist(), d["step"].tolist(), d["value"].tolist()))
    assert len(want) == 100 + 55
    got = reader(s.table("x")).read_all()
    rows = sorted(zip(*(got.column(c).to_pylist() for c in ("run", "step", "value"))))
    assert rows == want
    t = s.table("x")  # noqa: F841 (DuckDB finds it by the name of the variable)
    assert sorted(duckdb.sql("SELECT run, step, value FROM t").fetchall()) == want
    assert sorted(pl.DataFrame(s.table("x")).rows()) == want
    assert s.get(1, "x", step=3) == -1.0 and (1, 3, -1.0) in rows
    # Joined, each series resolved as its scan resolves it.
    joined = reader(s.table(["x", "y"])).read_all()
    jrows = sorted(zip(*(joined.column(c).to_pylist() for c in ("run", "step", "x", "y"))))
    assert jrows == [(r, k, v, 2 * v) for r, k, v in want]


def test_duckdb_and_polars_take_the_runs_and_steps_pushed_down(store):
    """The filters of table() (runs, steps) read only the blocks that may hold them, and the
    engines get just those records."""
    t = store.table("grid", runs=[1], steps=(500, 510))  # noqa: F841 (DuckDB's, by name)
    rows = duckdb.sql("SELECT run, step, value[6] FROM t ORDER BY step").fetchall()
    assert rows == [(1, s, 10_000.0 + s) for s in range(500, 510)]
    df = pl.scan_arrow_c_stream(store.table("loss", runs=[0, 2], steps=(0, 2))).collect()
    assert sorted(df.rows()) == [(0, 0, 0.0), (0, 1, 1.0), (2, 0, 20_000.0), (2, 1, 20_001.0)]


def test_a_store_opened_around_damaged_segments_streams_the_others(tmp_path):
    """Opened with on_damaged="skip" (the commands' --skip-damaged), a store whose segment
    cannot be read streams the records of the others; runstore sql --skip-damaged too."""
    s = runstore.open(tmp_path / "s")
    for k in range(2):
        with s.writer() as w:
            w.log_many([k] * 10, np.arange(10), x=np.full(10, float(k)))
    first = sorted((tmp_path / "s" / "segments").glob("*.rss"))[0]
    first.write_bytes(b"XXXX" + first.read_bytes()[4:])  # not a segment's magic
    skip = runstore.open(tmp_path / "s", "r", on_damaged="skip")
    assert len(skip.damaged_segments) == 1
    got = reader(skip.table("x")).read_all()
    # The other writer's ten records (which of the two sorts first is the writers' ids).
    assert got.num_rows == 10 and len(set(got.column("value").to_pylist())) == 1
    r = run_cli("sql", str(tmp_path / "s"), "SELECT count(*) FROM x", "--skip-damaged")
    assert r.returncode == 0 and r.stdout.split()[-1] == "10", r.stderr
    assert "left out damaged segment" in r.stderr
    r = run_cli("sql", str(tmp_path / "s"), "SELECT count(*) FROM x")
    assert r.returncode == 2 and "Corruption" in r.stderr


def test_the_experiments_table_reads_only_the_columns_asked_for(sweep, tmp_path):
    """experiments_table(columns) gives those columns, as the whole table names and fills
    them (the columns export_parquet writes, in its order); runstore.sql asks for the columns
    a query names (``*`` for every one)."""
    whole = pa.RecordBatchReader.from_stream(sweep.experiments_table()).read_all()
    export = tmp_path / "e.parquet"
    runstore.export.export_parquet(sweep, export, progress=False)
    assert whole.column_names == pa.parquet.read_schema(export).names
    part = pa.RecordBatchReader.from_stream(sweep.experiments_table(["loss", "lr", "state"]))
    part = part.read_all()
    assert part.column_names == ["lr", "state", "loss"]  # the table's order
    for c in part.column_names:
        assert part.column(c).to_pylist() == whole.column(c).to_pylist(), c
    ids = pa.RecordBatchReader.from_stream(sweep.experiments_table([])).read_all()
    assert ids.column_names == ["experiment"] and ids.num_rows == 12
    # A parameter called like a status field: the field is "status.state", chosen alone too.
    s = runstore.open(tmp_path / "clash")
    s.define_experiments([{"state": k} for k in range(3)])
    runstore.run_experiments(s, lambda state: {"y": state * 2.0}, workers=0, progress=False)
    t = pa.RecordBatchReader.from_stream(s.refresh().experiments_table(["status.state", "y"]))
    assert t.read_all().to_pydict() == {"status.state": ["done"] * 3, "y": [0.0, 2.0, 4.0]}


def test_a_query_of_the_series_alone_reads_no_experiment(sweep, monkeypatch):
    """DuckDB reads a view's schema when it is registered: the experiments table (its
    design's runs and a window) is made a view only for a query that names it."""

    def refused(self, columns=None, status=None, ordered=True):
        raise AssertionError("the experiments table was read")

    monkeypatch.setattr(runstore.Store, "experiments_table", refused)
    assert runstore.sql(sweep, "SELECT count(*) FROM loss").fetchall() == [(10,)]
    with pytest.raises(AssertionError, match="the experiments table was read"):
        runstore.sql(sweep, 'SELECT count(*) FROM "~experiments"')


def test_a_query_names_the_columns_it_reads():
    from runstore._arrow_stream import referenced_columns

    q = "SELECT e.lr, avg(loss) FROM experiments e WHERE opt = 'sgd' GROUP BY ALL"
    assert referenced_columns(duckdb, q) == {"lr", "loss", "opt"}
    assert referenced_columns(duckdb, "SELECT * FROM experiments") is None
    assert referenced_columns(duckdb, "SELECT COLUMNS('p.*') FROM experiments") is None
    assert referenced_columns(duckdb, "SELECT count(*) FROM experiments") == set()
    assert referenced_columns(duckdb, "SELEC 1") is None  # DuckDB says why when it runs


# -- several series joined on (run, step) -------------------------------------------------------


def test_series_joined_on_the_first_ones_keys_with_nulls_where_one_lacks_a_key(tmp_path):
    """table([...]): the keys of the first series, a column per series, null where a series
    has no record at a key; every record the scans' (checked against to_pandas' outer join)."""
    s = runstore.open(tmp_path / "s")
    with s.writer() as w:
        w.define("ragged", dtype="int32", variable_shape=True)
        for run in range(3):
            steps = np.arange(2000)
            w.log_many([run] * 2000, steps, loss=run * 1e4 + steps, flag=steps % 4 == 1)
            w.log_many([run] * 200, steps[::10], reward=-(run * 1e4 + steps[::10]))
            w.log_many([run] * 667, steps[::3], note=[f"n{k}" for k in steps[::3]])
            for k in range(0, 2000, 7):
                w.log(run, step=k, ragged=np.full(k % 4, k, dtype=np.int32))
            w.commit()
    s.refresh()
    t = reader(s.table(["loss", "reward", "note", "ragged", "flag"])).read_all()
    assert t.column_names == [
        "run",
        "step",
        "loss",
        "reward",
        "note",
        "ragged",
        "ragged.shape",
        "flag",
    ]
    assert t.num_rows == 6000
    assert t.schema.field("reward").nullable and t.schema.field("reward").type == pa.float64()
    got = t.to_pandas().sort_values(["run", "step"]).reset_index(drop=True)
    want = s.to_pandas(["loss", "reward", "note", "flag"])
    assert len(want) == 6000
    np.testing.assert_array_equal(got["run"], want["run"])
    np.testing.assert_array_equal(got["step"], want["step"])
    np.testing.assert_array_equal(got["loss"], want["loss"])
    np.testing.assert_array_equal(got["reward"], want["reward"])  # NaN where null
    assert got["note"].tolist() == [None if v is None else v for v in want["note"]]
    assert got["flag"].tolist() == want["flag"].tolist()
    for row in got.itertuples():
        if row.step % 7 == 0:
            assert list(row.ragged) == [row.step] * (row.step % 4)
            assert list(row._7) == [row.step % 4]  # ragged.shape
        else:
            assert row.ragged is None
    # Runs and steps filter the rows, and the other series are read for those only.
    part = reader(s.table(["reward", "loss"], runs=[2], steps=(0, 100))).read_all()
    assert part.to_pydict() == {
        "run": [2] * 10,
        "step": list(range(0, 100, 10)),
        "reward": [-(2e4 + k) for k in range(0, 100, 10)],
        "loss": [2e4 + k for k in range(0, 100, 10)],
    }
    # DuckDB and polars take it as it is.
    loss = s.table(["loss", "reward"])
    n, r = duckdb.sql("SELECT count(*), count(reward) FROM loss").fetchall()[0]
    assert (n, r) == (6000, 600)
    assert pl.DataFrame(loss)["reward"].null_count() == 5400
    # A series named like a key column is series.<name>, as to_pandas names it.
    with s.writer() as w:
        w.log_many([0], [0], **{"step": [5.0]})
    s.refresh()
    assert pa.schema(s.table(["loss", "step"])).names == ["run", "step", "loss", "series.step"]
    with pytest.raises(KeyError, match="nope"):
        s.table(["loss", "nope"])
    with pytest.raises(KeyError, match="nope"):
        s.table(["nope", "loss"])
    with pytest.raises(ValueError, match="twice"):
        s.table(["loss", "loss"])
    with pytest.raises(TypeError):
        s.table([])


def test_the_experiments_table_of_a_status_reads_those_experiments(sweep):
    """experiments_table(status=...): the rows of those states only (no state recorded reads
    as pending), with the columns asked for; a state that does not exist is named."""
    failed = reader(sweep.experiments_table(status="failed")).read_all()
    assert failed.num_rows == 2
    assert set(failed.column("state").to_pylist()) == {"failed"}
    assert all("diverged at lr=0.1" in e for e in failed.column("error").to_pylist())
    assert set(failed.column("opt").to_pylist()) == {"sgd"}
    done = reader(sweep.experiments_table(["loss"], status=["done", "pending"])).read_all()
    assert done.column_names == ["loss"] and done.num_rows == 10
    assert reader(sweep.experiments_table(status="pending")).read_all().num_rows == 0
    whole = reader(sweep.experiments_table()).read_all()
    assert whole.column("error").null_count == 10  # none where done
    assert set(whole.column("attempt").to_pylist()) == {1}
    with pytest.raises(ValueError, match="'finished' is not one of"):
        sweep.experiments_table(status="finished")


def test_the_experiments_table_of_a_sweep_not_yet_run_fills_its_status(tmp_path):
    s = runstore.open(tmp_path / "s")
    s.define_experiments(runstore.grid(a=[1, 2, 3]))
    t = reader(s.refresh().experiments_table()).read_all()
    assert t.column("state").to_pylist() == ["pending"] * 3
    assert t.column("attempt").to_pylist() == [0] * 3
    assert t.column("error").to_pylist() == [None] * 3
    assert t.schema.field("seconds").type == pa.float64()
    assert sorted(t.column("a").to_pylist()) == [1, 2, 3]
    assert reader(s.experiments_table(status="pending")).read_all().num_rows == 3
    plain = runstore.open(tmp_path / "plain")
    with plain.writer() as w:
        w.log(0, x=1.0)
    with pytest.raises(ValueError, match="no experiment design"):
        reader(plain.refresh().experiments_table())


def test_ctrl_c_stops_a_query_with_130(store):
    """SIGINT while DuckDB runs the query (sent once the command has used 3 s of CPU, which
    its imports do not: counted, not timed) ends it with 130 and no traceback."""
    q = "SELECT count(*) FROM range(10000000000000) t(x) WHERE x % 7 = 3"
    p = subprocess.Popen(
        [sys.executable, "-m", "runstore", "sql", str(store.path), q],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )

    def cpu_seconds():
        fields = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    try:
        while p.poll() is None and cpu_seconds() < 3:
            try:
                p.wait(0.05)
            except subprocess.TimeoutExpired:
                pass
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 130, err
    assert b"Traceback" not in err and out == b""


def test_a_stream_made_before_a_fork_is_read_in_the_child(store):
    """A table made in the parent, its stream pulled in a forked child (and the parent's own
    read after): the same records in both."""
    t = store.table(["loss", "acc"])
    want = reader(t).read_all()
    stream = t.__arrow_c_stream__()  # made before the fork, pulled after it
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            got = pa.RecordBatchReader._import_from_c_capsule(stream).read_all()
            child = reader(store.table(["loss", "acc"])).read_all()
            code = 0 if got.equals(want) and child.equals(want) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert reader(t).read_all().equals(want)


NO_PYARROW = """
import sys
sys.modules["pyarrow"] = None  # any import of it fails
import runstore
from runstore.commands.sql import sql_main
store = runstore.open(sys.argv[1], "r")
print(runstore.sql(store, 'SELECT count(*), count(loss) FROM "~experiments"').fetchall())
print(runstore.sql(store, "SELECT count(*) FROM loss").fetchall())
q = 'SELECT opt, count(*) FROM "~experiments" GROUP BY opt ORDER BY opt'
sys.exit(sql_main([sys.argv[1], q, "-f", "csv"]))
"""


def test_sql_needs_no_pyarrow(sweep):
    """DuckDB takes the streams through the PyCapsule interface: with pyarrow not importable,
    runstore.sql and runstore sql read the series and the experiments table."""
    p = subprocess.run(
        [sys.executable, "-c", NO_PYARROW, str(sweep.path)], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[:2] == ["[(12, 10)]", "[(10,)]"]
    assert lines[2:] == ["opt,count_star()", "adam,6", "sgd,6"]


def test_the_experiments_table_comes_in_definition_order_compacted_or_not(tmp_path):
    """Rows in definition order (docs/experiments.md: ``~design/~row`` gives the row order of
    every table) before and after a compaction sorts the series by id; ``ordered=False`` in the
    store's order, the same rows."""
    s = runstore.open(tmp_path / "s")
    s.define_experiments(runstore.grid(a=list(range(40)), b=[0.5, 1.5]))
    s.define_experiments(runstore.grid(a=[100, 101], b=[2.5]))  # more rows, defined later
    runstore.run_experiments(s, lambda a, b: {"y": a * b}, workers=0, progress=False)
    s.refresh()
    ids = s.design()["experiment"].tolist()
    assert len(ids) == 82
    for compacted in (False, True):
        if compacted:
            s.compact(retain=0, progress=False)
            s.refresh()
        t = reader(s.experiments_table()).read_all()
        assert t.column("experiment").to_pylist() == ids, compacted
        assert t.column("y").to_pylist() == [
            a * b for a, b in zip(t["a"].to_pylist(), t["b"].to_pylist())
        ]
        loose = reader(s.experiments_table(ordered=False)).read_all()
        assert sorted(loose.column("experiment").to_pylist()) == sorted(ids)
    assert loose.column("experiment").to_pylist() == sorted(ids)  # compacted: by id
