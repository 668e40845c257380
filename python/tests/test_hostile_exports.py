"""Hostile strings through every export and import (docs/reliability.md, "Surfaces a user
touches"): each storable string of tests/data/hostile_strings.json as a series name, an
experiment id, a parameter name and value, an outcome value and an error text, through
load_results, to_pandas, to_xarray, export_tar and import_tar, export_parquet, export zarr,
`runstore export csv` and `runstore cat --format csv`. Each must come back exactly, read the
way its users read it (the csv module and pandas for CSV, pyarrow for Parquet,
xarray.open_zarr for Zarr), or be refused with a clear error before anything is written.
A hypothesis property drives random stores through the tarball and back."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _hostile import HOSTILE, STORABLE
from hypothesis import given, settings
from hypothesis import strategies as st
from test_import import assert_same_results

import runstore

#: A cell a spreadsheet would evaluate as a formula (OWASP's list).
FORMULA = re.compile(r"[=+\-@\t\r]")


def text_from_cell(cell: str) -> str:
    """A text cell's text, by the rule docs/experiments.md gives a reader without runstore:
    one leading quote removed from a cell that, after its leading quotes, begins with one of
    = + - @ TAB CR."""
    if cell.startswith("'") and FORMULA.match(cell.lstrip("'")):
        return cell[1:]
    return cell


def _accepted(fn) -> bool:
    try:
        fn()
    except ValueError:
        return False
    return True


def _fits_id(s: str) -> bool:
    return 0 < len(s.encode()) <= 255


def _fits_name(s: str, prefix: str = "") -> bool:
    return 0 < len(s.encode()) and len((prefix + s).encode()) <= 255 and "\0" not in s


#: Role -> the hostile strings the store takes in that role (the others are refused by the
#: writer or define_experiments with ValueError before anything is written: tested below).
IDS = {k: v for k, v in STORABLE.items() if _fits_id(v)}
SERIES = {k: v for k, v in STORABLE.items() if _fits_name(v) and not v.startswith("~")}
PARAMS = {k: v for k, v in SERIES.items() if _fits_name(v, "~design/") and v != "experiment"}
VALUES = dict(STORABLE)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> runstore.Store:
    """One store with every hostile string in every role: experiments whose ids are the
    strings, a parameter named by each (value k), a parameter "value" and an outcome "text"
    holding them, an outcome named by each (value k + row / 10), every third experiment
    failed with one as its error text, and a bytes outcome (left out of Zarr)."""
    store = runstore.open(tmp_path_factory.mktemp("hostile") / "store")
    ids = list(IDS.values())
    values = list(VALUES.values())
    n = len(ids)
    design = {"experiment": ids, "value": [values[k % len(values)] for k in range(n)]}
    for k, name in enumerate(PARAMS.values()):
        design[name] = [float(k)] * n
    store.define_experiments(pd.DataFrame(design))
    with store.writer(_allow_reserved=True) as w:
        for row, eid in enumerate(ids):
            failed = row % 3 == 1
            status = {
                "~status/state": "failed" if failed else "done",
                "~status/error": values[(row * 7) % len(values)] if failed else "",
                "~status/host": values[(row * 5) % len(values)],
                "~status/attempt": 1,
            }
            w.log(eid, **status)
            if failed:
                continue
            outcomes = {name: k + row / 10 for k, name in enumerate(SERIES.values())}
            outcomes["text"] = values[(row * 3) % len(values)]
            outcomes["blob"] = values[row % len(values)].encode()
            w.log(eid, values=outcomes)
    store.refresh()
    return store


def report(capsys, what: str) -> None:
    with capsys.disabled():
        print(f"\n{what}")


def test_each_role_holds_the_strings_a_store_takes(capsys):
    """The strings each role refuses, and why: those the store cannot hold there (a lone
    surrogate is no UTF-8; NUL, "~", "" and more than 255 bytes are not names), refused with
    ValueError by the writer before anything is written."""
    refused = {}
    for role, kept in (("series name", SERIES), ("experiment id", IDS), ("parameter", PARAMS)):
        refused[role] = sorted(set(HOSTILE) - set(kept))
    assert set(refused["series name"]) == {
        "lone-surrogate",
        "nul",
        "reserved-tilde",
        "reserved-tilde-status",
        "empty",
        "long-4k",
        "long-64k",
        "long-64k-multibyte",
    }
    for key in refused["series name"]:
        store_dir = Path(__import__("tempfile").mkdtemp())
        s = runstore.open(store_dir / "s")
        with pytest.raises(ValueError):
            with s.writer() as w:
                w.log(1, values={HOSTILE[key]: 1.0})
        s.refresh()
        assert s.names() == []
    report(
        capsys,
        f"hostile strings: {len(HOSTILE)}; taken as series names {len(SERIES)}, experiment ids "
        f"{len(IDS)}, parameter names {len(PARAMS)}, values {len(VALUES)}",
    )


def test_load_results_and_to_pandas_give_every_string_back(hostile, capsys):
    experiments, outcomes = runstore.load_results(hostile)
    assert experiments["experiment"].tolist() == list(IDS.values())
    for name in PARAMS.values():
        assert experiments[name].tolist() == [float(list(PARAMS.values()).index(name))] * len(IDS)
    values = list(VALUES.values())
    assert experiments["value"].tolist() == [values[k % len(values)] for k in range(len(IDS))]
    errors = [None if pd.isna(e) else e for e in experiments["error"].tolist()]
    for row, e in enumerate(errors):
        assert e == (values[(row * 7) % len(values)] or None if row % 3 == 1 else None)
    assert set(outcomes) == {*SERIES.values(), "text", "blob"}
    df = hostile.to_pandas()
    assert set(df.columns) == {"run", "step", *SERIES.values(), "text", "blob"}
    done = [eid for row, eid in enumerate(IDS.values()) if row % 3 != 1]
    assert sorted(df["run"].tolist()) == sorted(done)
    for k, name in enumerate(SERIES.values()):
        got = dict(zip(df["run"], df[name]))
        row = list(IDS.values()).index(done[-1])
        assert got[done[-1]] == k + row / 10, name
    report(capsys, f"load_results, to_pandas: {len(SERIES) + len(IDS) + len(PARAMS)} names")


def _csv(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))


def _text_cells_are_safe(cells: list[str], where: str) -> None:
    for c in cells:
        assert not FORMULA.match(c), f"{where}: a cell a spreadsheet would run: {c[:40]!r}"


def test_the_tarball_holds_every_string_as_a_spreadsheet_reads_it(hostile, tmp_path, capsys):
    """Read with the csv module and pandas, no runstore: headers and text cells are the
    strings (a leading quote where one would be a formula), and no text cell is a formula."""
    out = tmp_path / "h.tar.gz"
    hostile.export_tar(out)
    with tarfile.open(out) as t:
        files = {m.name: t.extractfile(m).read() for m in t.getmembers()}
    meta = json.loads(files["metadata.json"])
    rows = _csv(files["experiments.csv"])
    header, body = rows[0], rows[1:]
    assert [text_from_cell(h) for h in header] == [c["name"] for c in meta["columns"]]
    _text_cells_are_safe(header, "experiments.csv header")
    assert [text_from_cell(r[0]) for r in body] == list(IDS.values())
    _text_cells_are_safe([r[0] for r in body], "ids")
    k = header.index("value")
    assert [text_from_cell(r[k]) for r in body][:5] == list(VALUES.values())[:5]
    _text_cells_are_safe([r[k] for r in body], "values")
    frame = pd.read_csv(io.BytesIO(files["experiments.csv"]), dtype=str, keep_default_na=False)
    assert len(frame) == len(IDS) and len(frame.columns) == len(header)
    cells = 0
    for o in meta["outcomes"]:
        data = _csv(files[o["member"]])
        assert text_from_cell(data[0][1]) == o["name"], o["member"]
        _text_cells_are_safe([c for r in data for c in r[:1]] + data[0], o["member"])
        if o["dtype"] in ("string", "bytes"):
            _text_cells_are_safe([r[1] for r in data[1:]], o["member"])
        cells += sum(len(r) for r in data)
    assert {o["name"] for o in meta["outcomes"]} == {*SERIES.values(), "text", "blob"}
    back = runstore.import_tar(out, tmp_path / "back")
    assert_same_results(hostile, back)
    report(capsys, f"tarball: {len(meta['outcomes'])} members, {cells} cells, round trip exact")


def test_parquet_holds_every_string_for_pyarrow_and_pandas(hostile, tmp_path, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "h.parquet"
    hostile.export_parquet(out)
    t = pq.read_table(out)
    meta = json.loads(t.schema.metadata[b"runstore"])
    assert len(set(t.column_names)) == len(t.column_names)
    assert t.column("experiment").to_pylist() == list(IDS.values())
    for name in PARAMS.values():
        assert t.column(name).to_pylist() == [float(list(PARAMS.values()).index(name))] * len(IDS)
    column = {o["name"]: o["column"] for o in meta["outcomes"]}
    assert set(column) == {*SERIES.values(), "text", "blob"}
    _, outcomes = runstore.load_results(hostile)
    for name, col in column.items():
        want = outcomes[name]
        got = t.column(col).to_pylist()
        if isinstance(want, np.ma.MaskedArray):
            want = [None if m else v for v, m in zip(want.data.tolist(), want.mask.tolist())]
        else:
            want = [None if isinstance(v, float) and math.isnan(v) else v for v in want.tolist()]
        assert got == want, name
    frame = pd.read_parquet(out)
    assert list(frame.columns) == t.column_names and len(frame) == len(IDS)
    report(capsys, f"parquet: {len(t.column_names)} columns, every name and value exact")


def test_xarray_and_zarr_hold_every_name(hostile, tmp_path, capsys):
    """to_xarray and, read back by xarray.open_zarr, the Zarr export: every series a
    variable or coordinate of its own (found by attrs["runstore_series"]), values exact
    (absent strings empty in Zarr), parameters and status still coordinates."""
    xr = pytest.importorskip("xarray")
    pytest.importorskip("zarr")
    ds = hostile.to_xarray()
    by_series = {
        v.attrs["runstore_series"]: (name, v)
        for name, v in ds.variables.items()
        if v.attrs.get("runstore_series")
    }
    assert set(SERIES.values()) | {"text", "blob"} <= set(by_series)
    assert {"~design/" + p for p in PARAMS.values()} <= set(by_series)
    assert ds["run"].values.tolist() == list(IDS.values())
    hostile.to_zarr(tmp_path / "h.zarr")
    back = xr.open_zarr(tmp_path / "h.zarr")
    zs = {
        v.attrs["runstore_series"]: (name, v)
        for name, v in back.variables.items()
        if v.attrs.get("runstore_series")
    }
    assert set(zs) == set(by_series) - {"blob"}  # bytes are left out of Zarr
    for series, (name, v) in by_series.items():
        if series == "blob":
            continue
        zname, z = zs[series]
        assert (name in ds.coords) == (zname in back.coords), series  # a coordinate stays one
        got, want = z.values, v.values
        if want.dtype.kind in "OT":
            want = ["" if w is None else w for w in want.tolist()]
            assert [str(g) for g in got.tolist()] == want, series
        else:
            np.testing.assert_array_equal(got, want, err_msg=series)
    assert [str(r) for r in back["run"].values.tolist()] == list(IDS.values())
    lowered = [n.lower() for n in back.variables]
    assert len(set(lowered)) == len(lowered)
    report(capsys, f"to_xarray, open_zarr: {len(zs)} variables and coordinates, each exact")


def _tool() -> list[str]:
    return [sys.executable, "-m", "runstore"]


def test_the_tools_csv_holds_every_string(hostile, tmp_path, capsys):
    """`runstore export csv` and `runstore cat --format csv` (the compiled tool)."""
    out = tmp_path / "csv"
    p = subprocess.run(
        [*_tool(), "export", "csv", hostile.path, str(out)], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    files = {s["series"]: s["file"] for s in manifest["series"]}
    assert set(files) == {*SERIES.values(), "text", "blob"}
    assert len({f.lower() for f in files.values()}) == len(files)
    cells = 0
    for name, file in files.items():
        rows = _csv((out / file).read_bytes())
        runs = [r[0] for r in rows[1:]]
        _text_cells_are_safe(runs, file)
        assert {text_from_cell(r) for r in runs} <= set(IDS.values()), file
        if name in ("text", "blob"):
            _text_cells_are_safe([r[2] for r in rows[1:]], file)
        cells += sum(len(r) for r in rows)
    text = hostile.scan("text")
    want = {(r, v) for r, v in zip(text["run"].tolist(), text["value"].tolist())}
    rows = _csv((out / files["text"]).read_bytes())[1:]
    assert {(text_from_cell(r[0]), text_from_cell(r[2])) for r in rows} == want
    p = subprocess.run(
        [*_tool(), "cat", hostile.path, "text", "--format", "csv"], capture_output=True
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout == (out / files["text"]).read_bytes()
    report(capsys, f"export csv, cat --format csv: {len(files)} files, {cells} cells")


# -- the tarball, property-based -----------------------------------------------------------------

_HOSTILE_TEXT = [v for v in STORABLE.values() if len(v) < 300]
_text = st.one_of(st.sampled_from(_HOSTILE_TEXT), st.text(max_size=12))
_names = st.one_of(st.sampled_from(list(SERIES.values())), st.text(min_size=1, max_size=10)).filter(
    lambda s: _fits_name(s, "~design/") and not s.startswith("~") and s != "experiment"
)


@st.composite
def _stores(draw):
    n = draw(st.integers(1, 6))
    ids = draw(
        st.lists(
            st.one_of(
                st.integers(-(2**63), 2**63 - 1),
                st.one_of(st.sampled_from(list(IDS.values())), st.text(min_size=1, max_size=8)),
            ),
            min_size=n,
            max_size=n,
            unique_by=lambda e: (type(e), e),
        ).filter(lambda xs: all(isinstance(x, int) or _fits_id(x) for x in xs))
    )
    params = draw(st.lists(_names, max_size=3, unique=True))
    design = {"experiment": ids}
    for p in params:
        kind = draw(st.sampled_from(["float", "str", "int"]))
        if kind == "float":
            design[p] = draw(st.lists(st.floats(), min_size=n, max_size=n))
        elif kind == "int":
            design[p] = np.array(draw(st.lists(st.integers(-5, 5), min_size=n, max_size=n)))
        else:
            design[p] = draw(st.lists(st.one_of(st.none(), _text), min_size=n, max_size=n))
    outcomes = draw(st.lists(_names, max_size=3, unique=True))
    records = []
    for o in outcomes:
        kind = draw(st.sampled_from(["float", "str", "bytes", "vec"]))
        for eid in ids:
            if not draw(st.booleans()):
                continue  # no value: a gap
            if kind == "float":
                v = draw(st.floats(width=64))
            elif kind == "str":
                v = draw(_text)
            elif kind == "bytes":
                v = draw(st.binary(max_size=6))
            else:
                v = np.array(draw(st.lists(st.floats(), min_size=2, max_size=2)))
            records.append((eid, o, v))
    states = draw(st.lists(st.sampled_from(["done", "failed", None]), min_size=n, max_size=n))
    errors = draw(st.lists(_text, min_size=n, max_size=n))
    return ids, design, records, states, errors


def test_the_tarball_round_trips_any_store(tmp_path_factory, capsys):
    """Random stores (ids, parameter and outcome names drawn from the hostile strings and
    from any text; values of every kind with gaps; states and error texts) export and import
    to the same results."""
    tried = 0

    @settings(deadline=None, max_examples=max(10, settings().max_examples // 3))
    @given(_stores())
    def round_trip(spec):
        nonlocal tried
        tried += 1
        ids, design, records, states, errors = spec
        where = tmp_path_factory.mktemp("prop")
        store = runstore.open(where / "store")
        try:
            store.define_experiments(pd.DataFrame(design))
        except ValueError:
            return  # two rows the same where a parameter of NaN hid none
        with store.writer(_allow_reserved=True) as w:
            for eid, state, error in zip(ids, states, errors):
                if state is not None:
                    w.log(eid, **{"~status/state": state, "~status/error": error})
            for eid, name, v in records:
                w.put(eid, name, v)
        store.refresh()
        store.export_tar(where / "t.tar.gz", progress=False)
        back = runstore.import_tar(where / "t.tar.gz", where / "back")
        assert_same_results(store, back)

    round_trip()
    report(capsys, f"tarball round trip (hypothesis): {tried} random stores")
