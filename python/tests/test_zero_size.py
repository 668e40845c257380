"""Arrays with a zero dimension hold no bytes and keep their shape everywhere: put, log and
log_many, in fixed-shape and variable-shape series, read back by get, scan, to_pandas,
to_arrow, load_results and verify, and through export_tar (and import_tar), export_parquet."""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pandas as pd
import pytest

import runstore

N = 12  # experiments 0..N-1; the zero-size outcomes are written for the even ones


def cols() -> np.ndarray:
    return np.zeros((100, 0))


def rows3() -> np.ndarray:
    return np.zeros((0, 3), dtype=np.int32)


@pytest.fixture
def zstore(store_path):
    store = runstore.open(store_path)
    store.define_experiments(pd.DataFrame({"experiment": np.arange(N), "lr": np.arange(N) / 10}))
    even = np.arange(0, N, 2)
    with store.writer() as w:
        w.define("vcols", "float64", variable_shape=True)
        w.define("vrows", "int32", variable_shape=True)
        for run in range(N):
            w.log(run, score=run * 1.5)
            if run % 2:
                w.put(run, "vcols", np.arange(4.0).reshape(2, 2) + run)  # not empty
                continue
            w.put(run, "cols", cols())
            w.put(run, "rows3", rows3())
            w.log(run, lcols=cols(), lrows3=rows3())
            w.put(run, "vcols", cols())
            w.put(run, "vrows", rows3())
        w.log_many(
            even, mcols=np.zeros((len(even), 100, 0)), mrows3=np.zeros((len(even), 0, 3), np.int32)
        )
    return store.refresh()


FIXED = {
    "cols": ((100, 0), "float64"),
    "lcols": ((100, 0), "float64"),
    "mcols": ((100, 0), "float64"),
    "rows3": ((0, 3), "int32"),
    "lrows3": ((0, 3), "int32"),
    "mrows3": ((0, 3), "int32"),
}


def test_get_keeps_shape_and_dtype(zstore):
    for name, (shape, dtype) in FIXED.items():
        info = zstore.series_info(name)
        assert info.shape == shape and info.dtype == dtype and info.count == N // 2
        for run in range(0, N, 2):
            v = zstore.get(run, name)
            assert v.shape == shape and v.dtype == np.dtype(dtype) and v.nbytes == 0
        with pytest.raises(KeyError):
            zstore.get(1, name)
    assert zstore.series_info("vcols").shape is None
    assert zstore.get(0, "vcols").shape == (100, 0) and zstore.get(1, "vcols").shape == (2, 2)
    v = zstore.get(4, "vrows")
    assert v.shape == (0, 3) and v.dtype == np.int32


def test_scan_has_a_row_per_record(zstore):
    for name, (shape, dtype) in FIXED.items():
        for keys in (True, False):
            d = zstore.scan(name, keys=keys)
            assert d["value"].shape == (N // 2, *shape) and d["value"].dtype == np.dtype(dtype)
            assert not d["value"].flags.writeable
            if keys:
                assert sorted(d["run"].tolist()) == list(range(0, N, 2))
        d = zstore.scan(name, runs=[2, 4], steps=(0, 1))
        assert d["value"].shape == (2, *shape) and sorted(d["run"].tolist()) == [2, 4]
    v = zstore.scan("vcols")
    shapes = {r: a.shape for r, a in zip(v["run"].tolist(), v["value"])}
    assert shapes == {r: (100, 0) if r % 2 == 0 else (2, 2) for r in range(N)}
    assert all(a.shape == (0, 3) for a in zstore.scan("vrows")["value"])


def test_to_pandas_and_verify(zstore):
    df = zstore.to_pandas()  # the scalar series only: zero-size arrays are not columns
    assert list(df.columns) == ["run", "step", "score"] and len(df) == N
    with pytest.raises(ValueError, match="not scalar"):
        zstore.to_pandas(["cols"])
    assert zstore.verify() > 0


def test_load_results(zstore):
    experiments, outcomes = runstore.load_results(zstore)
    assert len(experiments) == N
    for name, (shape, dtype) in FIXED.items():
        out = outcomes[name]
        # A row per experiment; with no elements there is nothing to mark absent (NaN or a
        # mask): which experiments have one is what scan says (python/README.md).
        assert out.shape == (N, *shape) and out.dtype == np.dtype(dtype), name
    assert [a.shape for a in outcomes["vrows"][::2]] == [(0, 3)] * (N // 2)


def test_to_arrow_keeps_the_fixed_size_lists(zstore):
    pa = pytest.importorskip("pyarrow")
    t = zstore.to_arrow(["score", "cols", "rows3"])  # score has every run: gaps in the others
    assert t.schema.field("cols").type == pa.list_(pa.list_(pa.float64(), 0), 100)
    assert t.schema.field("rows3").type == pa.list_(pa.list_(pa.int32(), 3), 0)
    cols_ = t.column("cols").to_pylist()
    assert [c is None for c in cols_] == [r % 2 == 1 for r in range(N)]
    assert cols_[0] == [[]] * 100
    rows3_ = t.column("rows3").to_pylist()
    assert rows3_[::2] == [[]] * (N // 2) and rows3_[1::2] == [None] * (N // 2)


def test_export_parquet_reads_back_as_lists(zstore, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "z.parquet"
    zstore.export_parquet(out)
    t = pq.read_table(out)
    assert t.num_rows == N
    for name, (shape, dtype) in FIXED.items():
        values = t.column(name).to_pylist()
        for run, v in enumerate(values):
            if run % 2:
                assert v is None
            else:
                assert np.array(v, dtype=dtype).reshape(shape).shape == shape
    meta = json.loads(t.schema.metadata[b"runstore"])
    shapes = {o["name"]: tuple(o["shape"]) for o in meta["outcomes"] if o["shape"] is not None}
    assert all(shapes[n] == s for n, (s, _) in FIXED.items())
    # A store without a design goes through to_arrow: the same lists.
    bare = runstore.open(tmp_path / "bare")
    with bare.writer() as w:
        w.put(1, "cols", cols())
    bare.refresh().export_parquet(tmp_path / "bare.parquet")
    assert pq.read_table(tmp_path / "bare.parquet").column("cols").to_pylist() == [[[]] * 100]


def test_export_tar_records_which_empty_arrays_are_absent(zstore, tmp_path):
    out = tmp_path / "z.tar.gz"
    zstore.export_tar(out)
    with tarfile.open(out) as tar:
        meta = json.loads(tar.extractfile("metadata.json").read())
        by_name = {o["name"]: o for o in meta["outcomes"]}
        cols_csv = tar.extractfile(by_name["cols"]["member"]).read().decode()
    assert by_name["cols"]["columns"] == ["experiment"]  # no element, no value column
    assert cols_csv.splitlines() == ["experiment", *map(str, range(N))]
    assert by_name["cols"]["missing"] == N // 2
    assert by_name["cols"]["missing_rows"] == list(range(1, N, 2))
    back = runstore.import_tar(out, tmp_path / "back")
    for name, (shape, dtype) in FIXED.items():
        info = back.series_info(name)
        assert info.shape == shape and info.dtype == dtype and info.count == N // 2, name
        assert back.get(4, name).shape == shape
        with pytest.raises(KeyError):
            back.get(3, name)
    assert back.get(2, "vrows").shape == (0, 3) and back.get(3, "vcols").shape == (2, 2)
    assert back.verify() > 0


def test_npy_members_for_three_dimensions(store_path, tmp_path):
    store = runstore.open(store_path)
    with store.writer() as w:
        for run in range(4):
            w.put(run, "cube", np.zeros((2, 0, 3), dtype=np.uint8))
    out = tmp_path / "c.tar.gz"
    store.refresh().export_tar(out)
    with tarfile.open(out) as tar:
        cube = np.load(io.BytesIO(tar.extractfile("outcomes/cube.npy").read()))
    assert cube.shape == (4, 2, 0, 3) and cube.dtype == np.uint8
    back = runstore.import_tar(out, tmp_path / "back")
    assert back.get(3, "cube").shape == (2, 0, 3)
