"""import_tar against archives that lie: reserved names, cut and damaged archives, links and
special members, broken metadata, gzip bombs, sheets sorted in a spreadsheet; and that an
import appears whole or not at all (docs/experiments.md, "Importing a tarball")."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import runstore

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "exports"


# -- archives ------------------------------------------------------------------------------------


def assert_same_results(a: runstore.Store, b: runstore.Store) -> None:
    """Design, status and every outcome equal: dtypes, shapes, gaps, values (NaN equal to NaN,
    the sign of zero kept), arrays of varying shapes element by element."""
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
            keep = ~x.mask.reshape(len(x), -1).any(1)
            x, y = x.data[keep], y.data[keep]
        if x.dtype == object:
            for u, v in zip(x.tolist(), y.tolist()):
                if isinstance(u, np.ndarray):
                    assert u.dtype == v.dtype and u.shape == v.shape, name
                    np.testing.assert_array_equal(u, v, err_msg=name)
                else:
                    assert u == v, name
        else:
            np.testing.assert_array_equal(x, y, err_msg=name)
            if x.dtype.kind == "f":  # -0.0 stays -0.0 (a NaN's sign is not data)
                real = ~np.isnan(x)
                assert np.array_equal(np.signbit(x[real]), np.signbit(y[real])), name


def fill(store: runstore.Store) -> None:
    """The store tests/data/exports/v1.tar.gz was exported from, by runstore 0.1.0 at commit
    0527008 (export layout version 1: no text cell is prefixed)."""
    design = pd.DataFrame(
        {
            "experiment": ["a", "=b", "c,d", "e\nf"],
            "lr": [0.1, 1e-300, float("nan"), -2.5],
            "seed": np.array([1, -2, 3, 4], dtype=np.int32),
            "opt": ["adam", "", None, "'=literal"],
            "flag": [True, False, True, False],
        }
    )
    store.define_experiments(design)
    with store.writer(_allow_reserved=True) as w:
        for k, eid in enumerate(["a", "=b", "c,d"]):
            state = "failed" if k == 1 else "done"
            w.log(
                eid,
                **{
                    "~status/state": state,
                    "~status/error": 'boom, "quoted"\n  trace' if k == 1 else "",
                    "~status/host": "node-1",
                    "~status/started": 1000.0 + k,
                    "~status/finished": 1001.5 + k,
                    "~status/seconds": 1.5,
                    "~status/attempt": 1,
                },
            )
            if state == "done":
                w.log(eid, loss=-float(k), note=["-1+1", "'=x", ""][k], blob=bytes([0xF8, k]))
                w.put(eid, "vec", np.arange(3, dtype=np.float32) * k)
                w.put(eid, "cube", np.full((2, 2, 2), k, dtype=np.int16))
        w.define("ragged", "float64", variable_shape=True)
        w.put("a", "ragged", np.arange(6.0).reshape(2, 3))
    store.refresh()


@pytest.fixture
def source(tmp_path) -> runstore.Store:
    store = runstore.open(tmp_path / "source")
    fill(store)
    return store


@pytest.fixture
def archive(source, tmp_path) -> Path:
    out = tmp_path / "export.tar.gz"
    source.export_tar(out)
    return out


def read_members(path: Path) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    with tarfile.open(path) as t:
        return [(m, t.extractfile(m).read() if m.isreg() else None) for m in t.getmembers()]


def write_archive(path: Path, items: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as t:
        for info, data in items:
            info = tarfile.TarInfo(info.name) if data is not None else info
            if data is None:
                t.addfile(info)
            else:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return path


def member(items, name: str) -> int:
    return next(k for k, (m, _) in enumerate(items) if m.name == name)


def with_meta(items, change) -> list:
    k = member(items, "metadata.json")
    meta = json.loads(items[k][1])
    meta = change(meta)
    out = list(items)
    out[k] = (items[k][0], json.dumps(meta).encode() if not isinstance(meta, bytes) else meta)
    return out


def csv_rows(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode(), newline="")))


def csv_bytes(rows: list[list[str]]) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().encode()


def temporaries(directory: Path) -> list[str]:
    return [n for n in os.listdir(directory) if ".runstore-tmp-" in n]


def snapshot(store: runstore.Store) -> tuple:
    """What a reader sees of a store: its segment files and every record of every series."""
    store.refresh()
    records = {}
    for name in store._core.names(True):
        d = store.scan(name) if not name.startswith("~") else store._core.scan(name)
        records[name] = (d["run"].tolist(), d["step"].tolist(), repr(d["value"].tolist()))
    return sorted(os.listdir(Path(store.path) / "segments")), records


def existing_store(tmp_path) -> runstore.Store:
    """A store with a run of 10 steps and an experiment: what a hostile import must not touch."""
    store = runstore.open(tmp_path / "existing")
    store.define_experiments([{"experiment": "zz", "lr": 0.1}])
    with store.writer() as w:
        for step in range(10):
            w.log("a", step=step, curve=float(step))
        w.log("zz", loss=-5.0)
    store.refresh()
    return store


def refused(archive: Path, tmp_path: Path, match: str) -> str:
    """Imports ``archive`` into a new store and into an existing one: both must raise
    ValueError matching ``match``, leave no new store, the existing one as it was, and no
    temporary directory. Returns the message."""
    new = tmp_path / "new-store"
    with pytest.raises(ValueError, match=match) as e:
        runstore.import_tar(archive, new)
    assert not new.exists() and not temporaries(tmp_path)
    target = existing_store(tmp_path) if not (tmp_path / "existing").exists() else None
    target = target or runstore.open(tmp_path / "existing")
    before = snapshot(target)
    with pytest.raises(ValueError, match=match):
        runstore.export.import_tar(archive, target)
    assert snapshot(target) == before and not temporaries(tmp_path)
    return str(e.value)


# -- the round trip ------------------------------------------------------------------------------


def test_an_export_round_trips_with_formulas_prefixed(source, archive, tmp_path):
    """Text cells that a spreadsheet would run are prefixed in the CSVs, numbers are not, and
    the import reads back exactly what was stored."""
    items = read_members(archive)
    exp = items[member(items, "experiments.csv")][1].decode()
    assert (
        exp.splitlines()[0]
        == "experiment,lr,seed,opt,flag,state,error,host,started,finished,seconds,attempt"
    )
    rows = exp.splitlines()
    assert rows[2].startswith("'=b,1e-300,-2,,false,failed")  # the id prefixed, -2 a number
    assert rows[-1] == "f\",-2.5,4,''=literal,false,pending,,,,,,0"
    note = items[member(items, "outcomes/note.csv")][1].decode()
    assert note.splitlines()[1:3] == ["a,'-1+1", "'=b,"]  # failed: no value
    assert note.splitlines()[3] == '"c,d",'  # the empty string (metadata says it is no gap)
    loss = items[member(items, "outcomes/loss.csv")][1].decode()
    assert loss.splitlines()[1:4] == ["a,-0", "'=b,", '"c,d",-2']
    blob = items[member(items, "outcomes/blob.csv")][1].decode()
    assert blob.splitlines()[1] == "a,'+AA="  # base64 beginning with + is text too
    meta = json.loads(items[member(items, "metadata.json")][1])
    assert meta["version"] == 2 and meta["csv"]["formula_prefix"] == "'"
    back = runstore.import_tar(archive, tmp_path / "back")
    assert_same_results(source, back)
    assert runstore.load_results(back)[1]["note"][0] == "-1+1"


def test_version_1_exports_are_read_without_removing_quotes(source, tmp_path):
    """An export of layout version 1 (tests/data/exports/v1.tar.gz, written by runstore 0.1.0)
    prefixed nothing: its cells are read as they are ("'=literal" stays)."""
    back = runstore.import_tar(DATA / "v1.tar.gz", tmp_path / "back")
    assert_same_results(source, back)
    assert back.design()["opt"].tolist()[3] == "'=literal"


def test_rows_sorted_or_left_out_in_a_spreadsheet_import_by_experiment(source, archive, tmp_path):
    """An outcome's rows are placed by their experiment cell: sorted by value, or with rows
    deleted, every value still goes to its experiment (an experiment without a row has none)."""
    items = read_members(archive)
    k = member(items, "outcomes/loss.csv")
    head, *rows = csv_rows(items[k][1])
    rows = sorted(rows, key=lambda r: r[-1])  # by the loss, as a sheet sorts
    rows = [r for r in rows if r[0] != "a"]  # and one deleted
    items[k] = (items[k][0], csv_bytes([head, *rows]))
    v = member(items, "outcomes/vec.csv")
    head, *rows = csv_rows(items[v][1])
    items[v] = (items[v][0], csv_bytes([head, *reversed(rows)]))
    back = runstore.import_tar(write_archive(tmp_path / "sorted.tar.gz", items), tmp_path / "b")
    _, got = runstore.load_results(back)
    _, want = runstore.load_results(source)
    assert np.isnan(got["loss"][0]) and got["loss"][2] == want["loss"][2] == -2.0
    np.testing.assert_array_equal(got["vec"], want["vec"])


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda rows: rows + [rows[-1]], "has a second row"),
        (lambda rows: rows + [["zz", "1"]], "'zz' is not an experiment"),
        (lambda rows: rows + [["'=b", "1", "2"]], "3 cells, expected 2"),
        (lambda rows: [["a", "1e999x"]] + rows[1:], "'1e999x' is not a value of float64"),
    ],
)
def test_rows_that_name_no_experiment_once_are_refused(archive, tmp_path, edit, match):
    items = read_members(archive)
    k = member(items, "outcomes/loss.csv")
    head, *rows = csv_rows(items[k][1])
    items[k] = (items[k][0], csv_bytes([head, *edit(rows)]))
    message = refused(write_archive(tmp_path / "edited.tar.gz", items), tmp_path, match)
    assert "outcomes/loss.csv" in message and "line" in message


# -- what the archive may not do -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["~resume", "~status/state", "~design/~row", "~time", "~"])
def test_an_outcome_named_like_a_reserved_series_is_refused(archive, tmp_path, name):
    """An outcome named ~resume would write resume markers that hide the store's records;
    ~status/state would mark experiments done. Refused before anything is written."""

    def rename(meta):
        meta["outcomes"][0]["name"] = name
        return meta

    items = with_meta(read_members(archive), rename)
    refused(write_archive(tmp_path / "r.tar.gz", items), tmp_path, "runstore's own")


def test_a_cut_archive_is_refused_wherever_it_is_cut(archive, tmp_path, capsys):
    """Cut at every 97th byte and in the last 12 (the gzip trailer): never an import of part."""
    data = archive.read_bytes()
    cuts = sorted(set(range(0, len(data), 97)) | set(range(len(data) - 12, len(data))))
    target = existing_store(tmp_path)
    before = snapshot(target)
    for n in cuts:
        cut = tmp_path / "cut.tar.gz"
        cut.write_bytes(data[:n])
        with pytest.raises(ValueError, match="cut short|not a .tar.gz|damaged"):
            runstore.import_tar(cut, tmp_path / "new")
        with pytest.raises(ValueError):
            runstore.export.import_tar(cut, target)
        assert not (tmp_path / "new").exists()
    assert snapshot(target) == before and not temporaries(tmp_path)
    with capsys.disabled():
        print(f"\ncut archives: {len(cuts)} cuts of {len(data)} bytes, each refused")


def test_a_member_left_out_is_refused(archive, tmp_path):
    items = read_members(archive)
    del items[member(items, "outcomes/cube.npy")]
    refused(write_archive(tmp_path / "m.tar.gz", items), tmp_path, "lacks 1 member.*cube.npy")


def test_flipped_bytes_are_refused(source, archive, tmp_path, capsys):
    """A byte flipped anywhere in the compressed stream: gzip's CRC (or the deflate stream,
    or a tar header's checksum) catches it, or the flip changed nothing the stream holds (a
    deflate stream has bits no decoder reads: the padding of its empty stored blocks) and the
    import is exact. Never a wrong value."""
    data = bytearray(archive.read_bytes())
    rng = random.Random(1234)
    places = sorted(rng.sample(range(10, len(data) - 8), 40))
    refused = 0
    for at in places:
        bad = bytearray(data)
        bad[at] ^= 0x55
        p = tmp_path / "flipped.tar.gz"
        p.write_bytes(bytes(bad))
        try:
            runstore.import_tar(p, tmp_path / "new")
        except ValueError:
            refused += 1
            assert not (tmp_path / "new").exists()
            continue
        assert_same_results(source, runstore.open(tmp_path / "new", mode="r"))
        shutil.rmtree(tmp_path / "new")
    assert refused >= len(places) - 4, f"only {refused} of {len(places)} flips were refused"
    with capsys.disabled():
        print(
            f"\nflipped bytes: {len(places)} places (seed 1234), {refused} refused, the others "
            "changed no byte of the archive's contents"
        )


@pytest.mark.parametrize(
    "kind", ["symbolic link", "hard link", "FIFO", "character device", "block device"]
)
def test_links_and_special_members_are_refused(archive, tmp_path, kind):
    items = read_members(archive)
    k = member(items, "outcomes/loss.csv")
    info = tarfile.TarInfo("outcomes/loss.csv")
    info.type = {
        "symbolic link": tarfile.SYMTYPE,
        "hard link": tarfile.LNKTYPE,
        "FIFO": tarfile.FIFOTYPE,
        "character device": tarfile.CHRTYPE,
        "block device": tarfile.BLKTYPE,
    }[kind]
    info.linkname = "/etc/passwd"
    items[k] = (info, None)
    message = refused(write_archive(tmp_path / "l.tar.gz", items), tmp_path, f"is a {kind}")
    assert "outcomes/loss.csv" in message


@pytest.mark.parametrize(
    "content, match",
    [
        (b"", "cut short"),
        (b"not gzip at all" * 20, "not a .tar.gz"),
        (gzip.compress(b"plain text, not a tar" * 40, mtime=0), "damaged tar header"),
        (gzip.compress(bytes(1024), mtime=0), "holds no metadata.json"),
    ],
    ids=["empty", "not-gzip", "gzip-not-tar", "tar-without-metadata"],
)
def test_a_file_that_is_not_an_export_is_refused(tmp_path, content, match):
    p = tmp_path / "x.tar.gz"
    p.write_bytes(content)
    refused(p, tmp_path, match)


def test_a_fifo_or_a_directory_as_the_archive_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo.tar.gz"
    os.mkfifo(fifo)
    refused(fifo, tmp_path, "not a regular file")
    with pytest.raises((ValueError, IsADirectoryError, PermissionError)):
        runstore.import_tar(tmp_path, tmp_path / "new")


def _set(path: list, value):
    def change(meta):
        d = meta
        for key in path[:-1]:
            d = d[key]
        if value is KeyError:
            del d[path[-1]]
        else:
            d[path[-1]] = value
        return meta

    return change


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda m: [m], "is a JSON list, not an object"),
        (lambda m: "text", "is a JSON str, not an object"),
        (lambda m: b"{not json", "is not JSON text"),
        (lambda m: b"\xff\xfe{}", "is not JSON text"),
        (_set(["columns"], KeyError), "has no key 'columns'"),
        (_set(["outcomes"], KeyError), "has no key 'outcomes'"),
        (_set(["format"], "something"), "not a runstore export"),
        (_set(["version"], 99), "reads versions 1 to 2"),
        (_set(["version"], "2"), "reads versions 1 to 2"),
        (_set(["experiments"], -1), "not a count"),
        (_set(["experiments"], 3), "holds more than the 3 rows metadata.json gives"),
        (_set(["experiments"], 5), "holds 4 rows; metadata.json gives 5"),
        (_set(["columns"], {}), "'columns' must be a non-empty list"),
        (_set(["columns", 0, "role"], "parameter"), "the first column must be the id"),
        (_set(["columns", 1, "dtype"], "float128"), "not a runstore dtype"),
        (_set(["columns", 1, "name"], 5), "'name' must be a string"),
        (_set(["columns", 1, "name"], "~x"), "reserved for runstore"),
        (_set(["columns", 1, "missing_rows"], "all"), "list of row numbers"),
        (_set(["columns", 5, "field"], "owner"), "status field 'owner'"),
        (_set(["columns", 5, "dtype"], "int64"), "status 'state' is string, not int64"),
        (_set(["columns", 1, "name"], "seed"), "a second column of that name"),
        (_set(["outcomes", 0], "loss"), "outcome 1 is not an object"),
        (_set(["outcomes", 0, "shape"], [-1]), "'shape' must be a list of sizes"),
        (_set(["outcomes", 0, "shape"], [10**12]), "'shape' must be a list of sizes"),
        (_set(["outcomes", 0, "member"], "experiments.csv"), "'member' must be a new name"),
        (_set(["outcomes", 0, "member"], None), "'member' must be a new name"),
        (_set(["outcomes", 0, "format"], "exe"), "format 'exe'"),
        (_set(["outcomes", 0, "variable_shape"], "no"), "'variable_shape' must be true"),
        (_set(["outcomes", 0, "dtype"], "object"), "not a runstore dtype"),
        (_set(["outcomes", 0, "name"], ""), "'name' must be a non-empty string"),
    ],
)
def test_metadata_that_is_not_what_an_export_writes_is_refused(archive, tmp_path, change, match):
    """Each key import reads is checked before any data is: one clear error naming
    metadata.json (or the member that disagrees with it), never a traceback or a bare key."""
    items = with_meta(read_members(archive), change)
    message = refused(write_archive(tmp_path / "m.tar.gz", items), tmp_path, match)
    assert "metadata.json" in message or "experiments.csv" in message


def test_a_header_that_is_not_the_one_metadata_gives_is_refused(archive, tmp_path):
    """Columns moved in a spreadsheet would put values under the wrong name."""
    items = read_members(archive)
    k = member(items, "experiments.csv")
    text = items[k][1].decode().replace("experiment,lr,seed", "experiment,seed,lr", 1)
    items[k] = (items[k][0], text.encode())
    message = refused(write_archive(tmp_path / "h.tar.gz", items), tmp_path, "its header")
    assert "column 2 is 'seed', expected 'lr'" in message


def test_an_outcome_that_does_not_fit_the_store_is_refused(archive, tmp_path):
    """The store holds loss as int64: float64 records in another segment could not be read."""
    target = runstore.open(tmp_path / "existing")
    with target.writer() as w:
        w.log("x", loss=np.int64(3))
    target.refresh()
    before = snapshot(target)
    with pytest.raises(ValueError, match="outcome 'loss' is float64 of shape .*holds it as int64"):
        runstore.export.import_tar(archive, target)
    assert snapshot(target) == before and not temporaries(tmp_path)


# -- gzip bombs and memory -----------------------------------------------------------------------


def _bomb(path: Path, where: str, decompressed: int) -> Path:
    """A .tar.gz of about ``decompressed / 1000`` bytes: gzip members of 1 MiB of zeros each
    (about 1 KiB compressed), one after another, behind the header of ``where``."""
    zeros = zlib.compressobj(9, zlib.DEFLATED, 31)
    one = zeros.compress(bytes(1 << 20)) + zeros.flush()
    meta = json.dumps(
        {
            "format": "runstore-experiments",
            "version": 2,
            "experiments": 1,
            "experiments_member": "experiments.csv",
            "columns": [{"name": "experiment", "role": "id", "dtype": "int64"}],
            "outcomes": [],
        }
    ).encode()

    def header(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> bytes:
        info = tarfile.TarInfo(name)
        info.size = size
        info.type = kind
        return info.tobuf(format=tarfile.USTAR_FORMAT)

    head = b""
    if where == "metadata":
        head = header("metadata.json", decompressed)
    elif where == "pax header":
        head = header("././@PaxHeader", decompressed, tarfile.XHDTYPE)
    else:
        pad = -len(meta) % 512
        head = header("metadata.json", len(meta)) + meta + bytes(pad)
        if where == "member":
            head += header("padding.bin", decompressed)
        else:  # a CSV row without an end
            head += header("experiments.csv", decompressed) + b"experiment\n1" + b" " * 500
    with open(path, "wb") as f:
        f.write(gzip.compress(head, 1))
        for _ in range(decompressed >> 20):
            f.write(one)
    return path


@pytest.mark.parametrize(
    "where, match",
    [
        ("member", "decompresses to more than"),
        ("metadata", "declares .* bytes, more than"),
        ("pax header", "extended tar header"),
        ("row", "a row longer than|decompresses to more than"),
    ],
)
def test_a_gzip_bomb_is_refused_in_bounded_memory(tmp_path, where, match, capsys):
    """1 GiB of zeros in a 1 MiB archive: refused with a clear error, the import process's
    peak RSS (VmHWM, started again after its imports) growing by less than 64 MiB."""
    bomb = _bomb(tmp_path / "bomb.tar.gz", where, 1 << 30)
    assert bomb.stat().st_size < 2 << 20
    script = textwrap.dedent(
        """
        import sys
        import numpy, pandas
        import runstore

        def kib(field):
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) for l in f if l.startswith(field + ":"))

        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak (VmHWM) starts again from here
        before = kib("VmRSS")
        try:
            runstore.import_tar(sys.argv[1], sys.argv[2])
        except ValueError as e:
            print("refused:", e)
        print((kib("VmHWM") - before) // 1024)
        """
    )
    p = subprocess.run(
        [sys.executable, "-c", script, str(bomb), str(tmp_path / "new")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    message, growth = p.stdout.rsplit("\n", 2)[:2]
    with capsys.disabled():
        print(f"\ngzip bomb in {where}: peak RSS grew by {growth} MiB; {message[:160]}")
    assert message.startswith("refused:") and re.search(match, message), message
    assert int(growth) < 64, f"peak RSS grew by {growth} MiB: {message}"
    assert not (tmp_path / "new").exists() and not temporaries(tmp_path)


def test_importing_keeps_memory_flat(tmp_path, capsys):
    """An export of 2,000 experiments with a 1,000-float outcome (32 MiB of CSV text) is
    imported by a process whose peak RSS (VmHWM, started again after its imports) grows by
    less than 40 MiB (it grew by about 1 GiB for a 320 MB export when CSV members were read by
    pandas 10,000 rows at a time)."""
    make = textwrap.dedent(
        """
        import sys
        import numpy as np
        import runstore
        store = runstore.open(sys.argv[1])
        n, k = 2000, 1000
        store.define_experiments([{"experiment": i, "x": float(i)} for i in range(n)])
        with store.writer(_allow_reserved=True) as w:
            for start in range(0, n, 500):
                ids = np.arange(start, start + 500)
                series = np.random.default_rng(start).random((500, k))
                w.log_many(ids, series=series, score=ids * 0.5)
                w.log_many(ids, **{"~status/state": ["done"] * 500})
        store.export_tar(sys.argv[2], chunk_rows=500)
        """
    )
    load = textwrap.dedent(
        """
        import sys
        import numpy as np
        import pandas
        import runstore

        def kib(field):
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) for l in f if l.startswith(field + ":"))

        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak (VmHWM) starts again from here
        before = kib("VmRSS")
        back = runstore.import_tar(sys.argv[1], sys.argv[2])
        after = kib("VmHWM")
        want = np.random.default_rng(1500).random((500, 1000))[499, 7]
        assert back.get(1999, "series")[7] == want
        print((after - before) // 1024)
        """
    )
    archive = tmp_path / "e.tar.gz"
    for script, args in ((make, [tmp_path / "s", archive]), (load, [archive, tmp_path / "b"])):
        p = subprocess.run(
            [sys.executable, "-c", script, *map(str, args)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert p.returncode == 0, p.stderr
    growth = int(p.stdout.split()[-1])
    with capsys.disabled():
        print(f"\nimport of 32 MiB of CSV: peak RSS grew by {growth} MiB")
    assert growth < 40, f"peak RSS grew by {growth} MiB importing 32 MiB of CSV"


# -- whole or nothing ----------------------------------------------------------------------------


def test_an_import_into_an_existing_store_is_one_segment_published_at_once(archive, tmp_path):
    target = existing_store(tmp_path)
    before = set(os.listdir(Path(target.path) / "segments"))
    runstore.export.import_tar(archive, target)
    added = set(os.listdir(Path(target.path) / "segments")) - before
    assert len(added) == 1 and not temporaries(tmp_path)
    # The store's own records are still there, and the import's too.
    assert target.scan("curve")["step"].tolist() == list(range(10))
    assert target.get("c,d", "loss") == -2.0
    assert target.design()["experiment"].tolist() == ["zz", "a", "=b", "c,d", "e\nf"]


def test_a_failure_in_the_last_member_leaves_the_store_as_it_was(archive, tmp_path):
    """Every member before it was read and written: none of it reaches the store."""
    items = read_members(archive)
    info, data = items.pop(member(items, "outcomes/ragged.csv"))
    head, *rows = csv_rows(data)
    rows[0][2] = rows[0][2][:-1]  # the JSON of experiment a's value, cut
    items.append((info, csv_bytes([head, *rows])))  # outcomes may come in any order
    message = refused(write_archive(tmp_path / "late.tar.gz", items), tmp_path, "ragged.csv")
    assert "line 2" in message


def test_a_killed_import_leaves_no_store_and_the_next_one_cleans_up(archive, tmp_path, capsys):
    """SIGKILL at random moments of an import into a new store and into an existing one: the
    new store is not there or complete, the existing one as before or with the whole import;
    what a killed import left beside them is removed by the next import there."""
    big = runstore.open(tmp_path / "big")
    n = 3000
    big.define_experiments([{"experiment": i, "x": float(i)} for i in range(n)])
    y = np.random.default_rng(0).random((n, 200))
    with big.writer() as w:
        w.log_many(np.arange(n), y=y)
    big.refresh()
    big.export_tar(tmp_path / "big.tar.gz")
    target = existing_store(tmp_path)
    before = snapshot(target)
    seed = random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    script = "import sys, runstore; runstore.import_tar(sys.argv[1], sys.argv[2]); print('done')"
    finished = []
    for attempt in range(4):
        dest = tmp_path / "new" if attempt % 2 == 0 else Path(target.path)
        p = subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path / "big.tar.gz"), str(dest)],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(rng.uniform(0.3, 1.5))
        p.send_signal(signal.SIGKILL)
        finished.append("done" in p.communicate()[0])
        if dest.name == "new":
            if dest.exists():  # renamed into place just before the kill: complete
                np.testing.assert_array_equal(runstore.open(dest).get(n - 1, "y"), y[-1])
                shutil.rmtree(dest)
            continue
        now = snapshot(target)
        if now != before:  # the one segment was linked in before the kill: all of it
            assert len(set(now[0]) - set(before[0])) == 1 and set(before[0]) <= set(now[0])
            np.testing.assert_array_equal(target.get(n - 1, "y"), y[-1])
            assert len(target.design()) == n + 1
            before = now
    # The next import beside each removes what the killed ones left.
    runstore.import_tar(archive, tmp_path / "new")
    runstore.export.import_tar(archive, target)
    assert not temporaries(tmp_path)
    with capsys.disabled():
        print(f"\nkilled imports: seed {seed}, finished before the kill: {finished}")


def test_an_empty_directory_becomes_the_store_or_stays_empty(archive, tmp_path):
    target = tmp_path / "empty"
    target.mkdir()
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"not an archive")
    with pytest.raises(ValueError, match="not a .tar.gz"):
        runstore.import_tar(bad, target)
    assert target.is_dir() and not os.listdir(target) and not temporaries(tmp_path)
    back = runstore.import_tar(archive, target)
    assert back.path == str(target) and len(back.design()) == 4
