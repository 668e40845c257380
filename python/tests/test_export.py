"""Exports: the spreadsheet tarball and import_tar, Arrow and Parquet, python -m runstore."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import subprocess
import sys
import tarfile
import textwrap

import numpy as np
import pandas as pd
import pytest

import runstore

AWKWARD = ["loss, final", 'acc "top1"', "multi\nline", "a/b", "Loss", "naïve ü", ".hidden"]


def awkward_outcomes(kind, seed, **other_params):
    """Every dtype and rank the tarball handles, under names that need care in CSV and tar."""
    rng = np.random.default_rng(seed)
    if kind == "fail":
        raise RuntimeError('this one fails, with a comma, and a "quote"')
    return {
        "loss, final": [math.nan, math.inf, -0.0, 0.1][seed % 4],
        'acc "top1"': np.float32(rng.random()),
        "multi\nline": np.int8(-seed),
        "a/b": np.uint64(2**64 - 1 - seed),
        "Loss": bool(seed % 2),
        "loss": ["", "a,b", 'q"uote', "new\nline", "ü"][seed % 5],
        "blob": [b"", b"\x00\xff", b"abc"][seed % 3],
        "vec": rng.random(3).astype(np.float32),
        "grid": rng.integers(-1000, 1000, (2, 3)).astype(np.int16),
        "cube": rng.random((2, 2, 2)),
        "flags3d": rng.random((2, 1, 2)) > 0.5,
        ".hidden": "x" if seed % 3 else None,  # None: no value for this outcome
    }


@pytest.fixture
def awkward_store(tmp_path):
    store = runstore.open(tmp_path / "awkward")
    design = pd.DataFrame(
        {
            "experiment": ["exp,1", 'exp"2', "exp\n3", "e4", "e5", "e6", "e7", "e8", "e9"],
            "kind": ["ok", "ok", "ok", "fail", "ok", "ok", "ok", "ok", "ok"],
            "seed": np.arange(9, dtype=np.int32),
            "lr, rate": np.array([0.1, 1e-300, np.nan, 2.5, 3, 4, 5, 6, 7], dtype=np.float64),
            'say "hi"': ["", "a,b", 'q"', "x\ny", None, "z", "", "w", "v"],
            "flag": [True, False, True, True, False, True, False, True, False],
            "naïve/ü": pd.array([1, None, 3, 4, 5, 6, 7, 8, 9], dtype="Int64"),
        }
    )
    store.define_experiments(design.iloc[:7])
    runstore.run_experiments(store, awkward_outcomes, workers=0, progress=False)
    store.define_experiments(design)  # two more rows, never run: pending
    return store


def assert_same_results(a: runstore.Store, b: runstore.Store) -> None:
    pd.testing.assert_frame_equal(a.design(), b.design())
    pd.testing.assert_frame_equal(a.status(), b.status())
    ea, oa = runstore.load_results(a)
    eb, ob = runstore.load_results(b)
    pd.testing.assert_frame_equal(ea, eb)
    assert sorted(oa) == sorted(ob)
    for name in oa:
        x, y = oa[name], ob[name]
        assert type(x) is type(y) and x.dtype == y.dtype and x.shape == y.shape, name
        if isinstance(x, np.ma.MaskedArray):
            np.testing.assert_array_equal(x.mask, y.mask, err_msg=name)
            x, y = (
                x.data[~x.mask.reshape(len(x), -1).any(1)],
                y.data[~y.mask.reshape(len(y), -1).any(1)],
            )
        if x.dtype == object:
            assert x.tolist() == y.tolist(), name
        else:
            np.testing.assert_array_equal(x, y, err_msg=name)  # NaN equals NaN here
            if x.dtype.kind == "f":  # -0.0 stays -0.0 (a NaN's sign is not data)
                real = ~np.isnan(x)
                assert np.array_equal(np.signbit(x[real]), np.signbit(y[real])), name


def test_tarball_round_trip_keeps_names_dtypes_and_gaps(awkward_store, tmp_path):
    out = tmp_path / "results.tar.gz"
    r = awkward_store.export_tar(out, chunk_rows=4)  # several chunks per member
    assert r["experiments"] == 9 and out.exists()
    imported = runstore.import_tar(out, tmp_path / "imported", chunk_rows=3)
    assert_same_results(awkward_store, imported)
    experiments, outcomes = runstore.load_results(imported)
    assert (
        experiments["state"].tolist() == ["done"] * 3 + ["failed"] + ["done"] * 3 + ["pending"] * 2
    )
    assert 'a "quote"' in experiments["error"][3]
    assert outcomes["a/b"].dtype == np.uint64 and outcomes["a/b"][0] == 2**64 - 1
    absent = [False] * 3 + [True] + [False] * 3 + [True] * 2  # failed, then two pending
    assert outcomes["loss"][0] == "" and outcomes["loss"].mask.tolist() == absent
    assert outcomes["cube"].shape == (9, 2, 2, 2) and np.isnan(outcomes["cube"][3]).all()


def test_the_export_module_reads_a_tarball_into_an_open_store(awkward_store, tmp_path):
    out = tmp_path / "results.tar.gz"
    runstore.export.export_tar(awkward_store, out)
    into = runstore.open(tmp_path / "into")
    assert runstore.export.import_tar(out, into) is into
    assert_same_results(awkward_store, into)
    with pytest.raises(RuntimeError, match="read-only"):
        runstore.export.import_tar(out, runstore.open(tmp_path / "into", mode="r"))


def test_tarball_opens_like_a_spreadsheet(awkward_store, tmp_path):
    out = tmp_path / "results.tar.gz"
    awkward_store.export_tar(out)
    with tarfile.open(out, "r:gz") as tar:
        names = tar.getnames()
        assert names[:2] == ["metadata.json", "experiments.csv"]
        assert all(re.fullmatch(r"outcomes/[A-Za-z0-9._%~-]+\.(csv|npy)", n) for n in names[2:]), (
            names
        )
        meta = json.loads(tar.extractfile("metadata.json").read())
        exp_csv = tar.extractfile("experiments.csv").read().decode()
        files = {m["name"]: m for m in meta["outcomes"]}
        vec = tar.extractfile(files["vec"]["member"]).read().decode()
        grid = tar.extractfile(files["grid"]["member"]).read().decode()
        cube = np.load(io.BytesIO(tar.extractfile(files["cube"]["member"]).read()))
        cube_absent = np.load(io.BytesIO(tar.extractfile(files["cube"]["mask_member"]).read()))
    # Member names are safe; metadata maps every series name to its member.
    assert files["a/b"]["member"] == "outcomes/a%2Fb.csv"
    assert files["multi\nline"]["member"] == "outcomes/multi%0Aline.csv"
    assert files[".hidden"]["member"] == "outcomes/%2Ehidden.csv"
    assert files["Loss"]["member"] != files["loss"]["member"]
    assert (
        files["Loss"]["member"].lower() != files["loss"]["member"].lower()
    )  # case-insensitive file systems
    assert files["cube"]["format"] == "npy" and files["grid"]["format"] == "csv"
    assert files["vec"]["dtype"] == "float32" and files["grid"]["shape"] == [2, 3]
    # experiments.csv: what a spreadsheet (or the csv module) reads.
    rows = list(csv.reader(io.StringIO(exp_csv)))
    assert rows[0][:7] == ["experiment", "kind", "seed", "lr, rate", 'say "hi"', "flag", "naïve/ü"]
    assert rows[0][7:] == ["state", "error", "host", "started", "finished", "seconds", "attempt"]
    assert [r[0] for r in rows[1:]] == [
        "exp,1",
        'exp"2',
        "exp\n3",
        "e4",
        "e5",
        "e6",
        "e7",
        "e8",
        "e9",
    ]
    assert [r[3] for r in rows[1:4]] == ["0.1", "1e-300", "nan"]
    assert [r[4] for r in rows[1:6]] == ["", "a,b", 'q"', "x\ny", ""]
    assert [r[6] for r in rows[1:3]] == ["1", ""]  # an absent parameter: an empty cell
    assert rows[-1][7] == "pending" and rows[-1][13] == "0"
    # pandas reads it without runstore.
    df = pd.read_csv(io.StringIO(exp_csv))
    assert len(df) == 9 and df["seed"].tolist() == list(range(9)) and df["flag"].dtype == bool
    # A 1-d outcome has a column per element, a 2-d one <name>_i_j.
    assert vec.splitlines()[0] == "experiment,vec_0,vec_1,vec_2"
    assert (
        grid.splitlines()[0] == "experiment,grid_0_0,grid_0_1,grid_0_2,grid_1_0,grid_1_1,grid_1_2"
    )
    assert list(csv.reader(io.StringIO(vec)))[4] == ["e4", "", "", ""]  # failed: empty cells
    assert cube.shape == (9, 2, 2, 2)
    assert cube_absent.tolist() == [False] * 3 + [True] + [False] * 3 + [True] * 2


def test_export_of_a_store_without_a_design(store, tmp_path):
    with store.writer() as w:
        w.define("ragged", "float32", variable_shape=True)
        w.log_many(np.arange(50), loss=np.linspace(0, 1, 50), trace=np.ones((50, 4)))
        w.log("extra", note="a str run")
        for run in range(3):
            w.put(run, "ragged", np.arange(run * 2, dtype=np.float32).reshape(run, 2))
            w.log(run, step=5, loss=9.0)  # not step 0: not part of the table
    store.refresh()
    out = tmp_path / "plain.tar.gz"
    r = store.export_tar(out)
    assert r["experiments"] == 51 and r["left_out"] == {"loss": 3}
    imported = runstore.import_tar(out, tmp_path / "plain2")
    assert imported.design().empty
    for name in ("loss", "trace", "note", "ragged"):
        a, b = store.scan(name), imported.scan(name)
        keep = a["step"] == 0
        assert a["run"][keep].tolist() == b["run"].tolist()
        if name == "ragged":
            assert imported.series_info(name).variable_shape
            for x, y in zip(a["value"], b["value"]):
                assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)
        else:
            np.testing.assert_array_equal(a["value"][keep], b["value"])


def test_export_keeps_memory_flat(tmp_path):
    """Exporting 64 MiB of outcomes grows the resident set by far less than that."""
    script = tmp_path / "export.py"
    script.write_text(
        textwrap.dedent(
            """
        import resource, sys
        import numpy as np
        import runstore
        store = runstore.open(sys.argv[1])
        n, k = 4000, 2000
        store.define_experiments([{"experiment": i, "x": float(i)} for i in range(n)])
        with store.writer(_allow_reserved=True) as w:
            for start in range(0, n, 500):
                ids = np.arange(start, start + 500)
                series = np.random.default_rng(start).random((500, k))
                w.log_many(ids, series=series, score=ids * 0.5)
                w.log_many(ids, **{"~status/state": ["done"] * 500})
                w.commit()
        store = runstore.open(sys.argv[1], "r")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        store.export_tar(sys.argv[2], chunk_rows=200)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print((after - before) // 1024)
        """
        )
    )
    p = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "big"), str(tmp_path / "big.tar.gz")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    growth_mib = int(p.stdout.split()[-1])
    assert growth_mib < 16, f"peak RSS grew by {growth_mib} MiB while exporting 61 MiB of outcomes"


def test_python_m_runstore_exports_and_imports(awkward_store, tmp_path):
    tar_path, pq_path = tmp_path / "r.tar.gz", tmp_path / "r.parquet"

    def run(*a):
        return subprocess.run(
            [sys.executable, "-m", "runstore", *map(str, a)], capture_output=True, text=True
        )

    p = run("export", "tar", awkward_store.path, tar_path)
    assert p.returncode == 0 and "9 experiments" in p.stdout, p.stderr
    p = run("import", "tar", tar_path, tmp_path / "back")
    assert p.returncode == 0, p.stderr
    assert_same_results(awkward_store, runstore.open(tmp_path / "back", "r"))
    p = run("export", "parquet", awkward_store.path, pq_path)
    assert p.returncode == 0 and pq_path.exists(), p.stderr
    p = run("export", "tar", tmp_path / "no-such-store", tmp_path / "x.tar.gz")
    assert p.returncode == 3 and "runstore: export tar: NotFound" in p.stderr
    assert not (tmp_path / "x.tar.gz").exists()


# -- Arrow and Parquet ---------------------------------------------------------------------------


def test_to_arrow_is_zero_copy_where_the_bytes_allow(store):
    pa = pytest.importorskip("pyarrow")
    n = 1000
    runs = np.arange(n) ** 2  # not a sequence: the run column is stored (and mapped) as it is
    with store.writer(codec="none") as w:
        w.log_many(
            runs,
            steps=runs % 5,
            x=np.arange(n) * 0.5,
            v=np.arange(3 * n, dtype=np.int32).reshape(n, 3),
        )
    store.refresh()
    t = store.to_arrow()
    assert t.column_names == ["run", "step", "v", "x"]
    for name in ("x", "v"):
        view = store.scan(name)["value"]
        assert view.base.zero_copy  # the scan is a view of the mapped file ...
        arr = t.column(name).chunk(0)
        values = arr if name == "x" else arr.values
        assert values.buffers()[1].address == view.base.address  # ... and so is the Arrow column
    assert t.column("v").type == pa.list_(pa.int32(), 3)
    assert t.column("v").chunk(0)[7].as_py() == [21, 22, 23]
    assert t.column("run").chunk(0).buffers()[1].address == store.scan("v")["run"].base.address


def test_to_arrow_places_series_with_different_keys_and_nested_shapes(store):
    pytest.importorskip("pyarrow")
    with store.writer() as w:
        w.log(2, a=1.5, m=np.arange(6.0).reshape(2, 3))
        w.log(1, a=0.5, s="one")
        w.log(1, step=3, b=np.int8(7))
    store.refresh()
    t = store.to_arrow()
    assert t.column("run").to_pylist() == [1, 1, 2] and t.column("step").to_pylist() == [0, 3, 0]
    assert t.column("a").to_pylist() == [0.5, None, 1.5]
    assert t.column("b").to_pylist() == [None, 7, None] and str(t.column("b").type) == "int8"
    assert t.column("s").to_pylist() == ["one", None, None]
    assert t.column("m").to_pylist() == [None, None, [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]]
    scalars = store.to_pandas()
    pd.testing.assert_frame_equal(
        t.select(["run", "step", "a"]).to_pandas(), scalars[["run", "step", "a"]]
    )


def test_export_parquet_writes_row_groups_that_pandas_reads(awkward_store, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "r.parquet"
    r = awkward_store.export_parquet(out, row_group_rows=4)
    assert r["rows"] == 9
    f = pq.ParquetFile(out)
    assert f.metadata.num_row_groups == 3
    meta = json.loads(f.schema_arrow.metadata[b"runstore"])
    assert meta["parameters"][:3] == ["kind", "seed", "lr, rate"]
    t = f.read()
    experiments, outcomes = runstore.load_results(awkward_store)
    assert t.column("experiment").to_pylist() == experiments["experiment"].tolist()
    assert (
        str(t.schema.field("seed").type) == "int32" and str(t.schema.field("a/b").type) == "uint64"
    )
    assert t.column("naïve/ü").to_pylist()[:3] == [1, None, 3]
    assert t.column("state").to_pylist() == experiments["state"].tolist()
    cube = t.column("cube").to_pylist()
    np.testing.assert_array_equal(np.array(cube[0]), outcomes["cube"][0])
    assert cube[3] is None and t.column("Loss").to_pylist()[3] is None
    df = pd.read_parquet(out)
    assert len(df) == 9 and list(df.columns[:3]) == ["experiment", "kind", "seed"]
    np.testing.assert_array_equal(df["lr, rate"].to_numpy(), experiments["lr, rate"].to_numpy())


@pytest.mark.parametrize("ids", [[30, 10, 20], ["b", "a", "é"], [3, "x", 1, "y"]])
@pytest.mark.parametrize("window_bytes", [None, 1])
def test_exports_keep_int_str_and_mixed_ids_in_design_order(
    store, tmp_path, ids, window_bytes, monkeypatch
):
    """The exports take the ids a chunk at a time from the runs of the aligned read (no Python
    object per experiment held): each id comes back as defined, in definition order, with its
    type (mixed ones: their rows noted in the tarball, text in Parquet); also with windows of
    one experiment (read_aligned on int, str and mixed runs)."""
    pq = pytest.importorskip("pyarrow.parquet")
    if window_bytes is not None:
        from runstore.export import _table

        monkeypatch.setattr(_table, "WINDOW_BYTES", window_bytes)
    store.define_experiments(pd.DataFrame({"experiment": ids, "x": np.arange(len(ids)) * 1.5}))
    with store.writer() as w:
        for k, e in enumerate(ids):
            w.log(e, y=float(k), v=np.full(2, k))
    store.refresh()
    out = tmp_path / "t.tar.gz"
    store.export_tar(out, chunk_rows=2)  # chunks that split the ids
    with tarfile.open(out) as tf:
        meta = json.loads(tf.extractfile("metadata.json").read())
        rows = list(csv.reader(io.TextIOWrapper(tf.extractfile("experiments.csv"))))
    kinds = {type(e) for e in ids}
    want_dtype = "int64" if kinds == {int} else "string" if kinds == {str} else "mixed"
    assert meta["columns"][0]["dtype"] == want_dtype
    if want_dtype == "mixed":
        assert meta["columns"][0]["string_id_rows"] == [
            k for k, e in enumerate(ids) if isinstance(e, str)
        ]
    assert [r[0] for r in rows[1:]] == [str(e) for e in ids]
    back = runstore.import_tar(out, tmp_path / "back")
    assert back.design()["experiment"].tolist() == ids
    _, outcomes = runstore.load_results(back)
    np.testing.assert_array_equal(outcomes["y"], np.arange(len(ids), dtype=float))
    store.export_parquet(tmp_path / "t.parquet", row_group_rows=2)
    got = pq.read_table(tmp_path / "t.parquet").column("experiment").to_pylist()
    assert got == (ids if want_dtype != "mixed" else [str(e) for e in ids])


def test_names_that_collide_get_columns_of_their_own(store, tmp_path):
    """A parameter named status.state beside one named state, and an outcome named like a
    parameter beside one named outcome.<it>: every column is there once, under a name of its
    own, in load_results, the tarball, Parquet and xarray (a DataFrame, a Parquet schema or a
    Dataset with two columns of one name loses one, or cannot be read)."""
    pq = pytest.importorskip("pyarrow.parquet")
    store.define_experiments([{"state": "s", "status.state": "t", "x": 1.0}])
    eid = store.design()["experiment"][0]
    with store.writer() as w:
        w.log(eid, values={"x": 2.0, "outcome.x": 3.0})
    store.refresh()
    experiments, outcomes = runstore.load_results(store)
    assert list(experiments.columns[:5]) == [
        "experiment",
        "state",
        "status.state",
        "x",
        "status.state~2",
    ]
    assert experiments["status.state"][0] == "t" and experiments["status.state~2"][0] == "pending"
    assert outcomes["x"][0] == 2.0 and outcomes["outcome.x"][0] == 3.0
    store.export_parquet(tmp_path / "r.parquet")
    t = pq.read_table(tmp_path / "r.parquet")
    assert len(set(t.column_names)) == len(t.column_names)
    assert t.column("outcome.x~2").to_pylist() == [2.0] and t.column("outcome.x").to_pylist() == [
        3.0
    ]
    assert t.column("x").to_pylist() == [1.0] and t.column("status.state").to_pylist() == ["t"]
    meta = json.loads(t.schema.metadata[b"runstore"])
    assert {o["name"]: o["column"] for o in meta["outcomes"]} == {
        "x": "outcome.x~2",
        "outcome.x": "outcome.x",
    }
    ds = store.to_xarray()
    assert ds["outcome.x~2"].values.tolist() == [2.0] and ds["status.state"].values.tolist() == [
        "t"
    ]
    assert ds["status.state~2"].values.tolist() == ["pending"]
    store.export_tar(tmp_path / "r.tar.gz")
    back = runstore.import_tar(tmp_path / "r.tar.gz", tmp_path / "back")
    assert_same_results(store, back)


def _tar_members(path):
    """Every member of an export's archive by name; metadata.json without its date."""
    with tarfile.open(path) as t:
        out = {m.name: t.extractfile(m).read() for m in t.getmembers()}
    meta = json.loads(out["metadata.json"])
    del meta["created"]
    out["metadata.json"] = meta
    return out


@pytest.mark.parametrize("window_bytes", [1, 300, 1000])
def test_exports_read_in_windows_write_what_whole_columns_write(
    awkward_store, tmp_path, monkeypatch, window_bytes
):
    """The exports read the scalar columns a window of rows at a time (read_aligned); with
    windows of a row, of a few rows and of several chunks, every member and every Parquet
    column is what reading the columns whole gives: ids, gaps, empty strings against absent
    ones (missing_rows), status, the order of members."""
    from runstore.export import _table

    def export(tag):
        runstore.export.export_tar(awkward_store, tmp_path / f"{tag}.tar.gz", chunk_rows=2)
        runstore.export.export_parquet(awkward_store, tmp_path / f"{tag}.parquet", row_group_rows=2)
        return _tar_members(tmp_path / f"{tag}.tar.gz"), pd.read_parquet(
            tmp_path / f"{tag}.parquet"
        )

    whole_tar, whole_pq = export("whole")
    monkeypatch.setattr(_table, "WINDOW_BYTES", window_bytes)
    windows = _table.ExperimentTable(awkward_store, ids=False, window=True)
    assert windows.windowed and windows.window_rows < windows.n
    win_tar, win_pq = export("windows")
    assert list(win_tar) == list(whole_tar)
    for name in whole_tar:
        assert win_tar[name] == whole_tar[name], name
    pd.testing.assert_frame_equal(win_pq, whole_pq)
    # What the rule for empty strings needs was kept across windows.
    columns = {c["name"]: c for c in whole_tar["metadata.json"]["columns"]}
    assert columns['say "hi"']["missing_rows"] == [4]


def test_read_aligned_places_the_runs_it_is_given(store):
    """read_aligned: the records of the given runs, in the order given, absent where a run has
    none; a run given twice is refused, a str is not taken for its characters."""
    with store.writer() as w:
        w.log_many(["a", "b", "c", 7], x=[1.0, 2.0, 3.0, 4.0], s=["p", "", "q", "r"])
    store.refresh()
    got = store._core.read_aligned(["c", 7, "zz", "a"], ["x", "s"])["columns"]
    assert got["x"]["value"][[0, 1, 3]].tolist() == [3.0, 4.0, 1.0]
    assert got["x"]["present"].tolist() == [True, True, False, True]
    cats = got["s"]["categories"]
    assert [cats[c] if c >= 0 else None for c in got["s"]["value"]] == ["q", "r", None, "p"]
    with pytest.raises(ValueError, match="runs\\[2\\] is also an earlier run"):
        store._core.read_aligned(["a", "b", "a"], ["x"])
    with pytest.raises(TypeError, match="list of run ids"):
        store._core.read_aligned("abc", ["x"])
    assert len(store._core.read_aligned([], ["x"])["columns"]["x"]["present"]) == 0


EXPORT_PEAK = """
import sys
import runstore
from runstore.export import _table
_table.WINDOW_BYTES = int(sys.argv[3])
store = runstore.open(sys.argv[1], "r")
store.refresh()
import pyarrow as pa, pyarrow.parquet as pq  # pyarrow's own memory, before the measure
pq.write_table(pa.table({"a": [1.0]}), sys.argv[2] + ".small.parquet")
def peak():  # VmHWM: ru_maxrss would start from the parent's, the test's
    return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])
before = peak()
runstore.export.export_tar(store, sys.argv[2] + ".tar.gz")
runstore.export.export_parquet(store, sys.argv[2] + ".parquet")
print((peak() - before) // 1024)
"""


def test_exports_hold_a_window_of_the_experiments_not_all_of_them(tmp_path):
    """The exports' peak memory does not hold every experiment's parameters, status and scalar
    outcomes: with a window of 1 MiB, exporting 100,000 experiments (hashed ids, 5 parameters,
    the status of run_experiments, 3 scalars: about 60 MB as whole columns) grows the resident
    set by less than 32 MiB (the ids, 2.4 MB, and a window), and by more when the window holds
    them all, which shows the measure sees the columns."""
    store = runstore.open(tmp_path / "s")
    n = 100_000
    rng = np.random.default_rng(5)
    design = store.define_experiments(pd.DataFrame({f"p{i}": rng.random(n) for i in range(5)}))
    ids = design["experiment"].tolist()
    with store.writer(_allow_reserved=True) as w:
        w.log_many(ids, **{"~status/state": ["done"] * n, "~status/attempt": np.ones(n, np.int64)})
        w.log_many(ids, **{"~status/host": ["node-1"] * n, "~status/seconds": rng.random(n)})
        w.log_many(ids, **{"~status/started": rng.random(n), "~status/finished": rng.random(n)})
        w.log_many(ids, y0=rng.random(n), y1=rng.random(n), y2=rng.random(n))
    del store, design, ids

    def peak_growth(window_bytes):
        p = subprocess.run(
            [sys.executable, "-c", EXPORT_PEAK, str(tmp_path / "s"),
             str(tmp_path / f"out{window_bytes}"), str(window_bytes)],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
        return int(p.stdout.split()[-1])

    windowed, whole = peak_growth(1 << 20), peak_growth(1 << 40)
    print(f"exports of {n:,} experiments: peak RSS grew {windowed} MiB with windows of 1 MiB, "
          f"{whole} MiB with the columns whole")  # fmt: skip
    assert windowed < 32, f"peak RSS grew by {windowed} MiB"
    assert whole > windowed + 16, (windowed, whole)
