"""``Store.table``: a series as an Arrow C stream, taken as it is by pyarrow, DuckDB, polars and
pandas (the Arrow PyCapsule interface), checked against ``Store.scan`` record for record; its
batches bounded, its values the mapped file's bytes, its filters, its errors, and a query over
a series much larger than the memory it is given."""

from __future__ import annotations

import os
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
        store.table(["loss", "acc"])


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
