"""Store.to_xarray and the Zarr export (Store.to_zarr, `runstore export zarr`): a row per
experiment (or run), parameters and status as coordinates, variables by step with gaps, lazy
dask arrays equal to the eager ones, and a Zarr store that xarray opens without runstore,
written in bounded memory, whole or not at all."""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

import runstore
from runstore.commands import exports as _commands
from runstore.export import _xarray

xr = pytest.importorskip("xarray")
pytest.importorskip("zarr")
da = pytest.importorskip("dask.array")


def train(lr, opt, seed):
    """A sweep's function: scalars of three dtypes, a float curve, an int array; one
    experiment fails."""
    if (lr, opt, seed) == (0.1, "sgd", 1):
        raise RuntimeError("diverged")
    return {
        "loss": lr * (seed + 1),
        "epochs": 10 + seed,
        "curve": np.linspace(0, lr, 5),
        "counts": np.arange(3, dtype=np.int32) + seed,
        "tag": f"{opt}-{seed}",
    }


@pytest.fixture
def sweep(store):
    design = pd.DataFrame(
        {
            "lr": np.repeat([0.1, 0.01], 3),
            "opt": pd.Categorical(["adam", "sgd", "sgd"] * 2),
            "seed": np.arange(6) % 3,
        }
    )
    store.define_experiments(design)
    runstore.run_experiments(store, train, workers=0, progress=False)
    return store.refresh()


def by_step(store, rng, runs=5, steps=40):
    """A store logged step by step: each run at a random subset of the steps."""
    expect = {}
    with store.writer() as w:
        for run in range(runs):
            for step in sorted(rng.choice(steps, size=int(rng.integers(1, steps)), replace=False)):
                loss = float(rng.random())
                expect[run, int(step)] = loss
                w.log(run, step=int(step), loss=loss, ep=np.int32(step), obs=np.full(2, loss))
    return store.refresh(), expect


# -- a row per experiment -------------------------------------------------------------------------


def test_a_sweep_gives_a_row_per_experiment_with_parameters_and_status_as_coordinates(sweep):
    ds = sweep.to_xarray()
    experiments, outcomes = runstore.load_results(sweep)
    ids = experiments["experiment"].tolist()
    assert ds.sizes["run"] == 6 and ds.run.values.tolist() == ids
    assert all(isinstance(i, str) and i.startswith("e") and len(i) == 17 for i in ids)
    assert ds.run.attrs["runstore_role"] == "id"
    # Parameters and status are coordinates along run, named as load_results names them.
    for c in ("lr", "opt", "seed", "state", "error", "host", "started", "attempt"):
        assert c in ds.coords and ds[c].dims == ("run",), c
    assert ds.lr.values.tolist() == experiments["lr"].tolist()
    assert ds.opt.values.tolist() == experiments["opt"].astype(str).tolist()
    assert ds.seed.dtype == np.int64 and ds.attempt.values.tolist() == [1] * 6
    failed = ids.index(runstore.experiment_id({"lr": 0.1, "opt": "sgd", "seed": 1}))
    assert ds.state.values.tolist() == ["failed" if i == failed else "done" for i in range(6)]
    assert "diverged" in ds.error.values[failed]
    assert ds.error.isnull().values.tolist() == [i != failed for i in range(6)]
    assert ds.state.attrs["runstore_role"] == "status"
    # Outcomes: scalars (run,), arrays (run, <name>_dim_k); NaN for the failed experiment.
    assert ds.loss.dims == ("run",) and ds.curve.dims == ("run", "curve_dim_0")
    np.testing.assert_array_equal(ds.loss.values, outcomes["loss"])
    np.testing.assert_array_equal(ds.curve.values, outcomes["curve"])
    assert np.isnan(ds.curve.values[failed]).all() and np.isnan(ds.loss.values[failed])
    # int outcomes with a gap: float64, NaN there, the stored dtype in attrs.
    assert ds.epochs.dtype == np.float64 and ds.counts.dtype == np.float64
    assert ds.counts.attrs["runstore_dtype"] == "int32" and ds.counts.shape == (6, 3)
    done = [i for i in range(6) if i != failed]
    np.testing.assert_array_equal(ds.counts.values[done], outcomes["counts"][done])
    assert np.isnan(ds.counts.values[failed]).all()
    assert ds.tag.values[done].tolist() == outcomes["tag"][done].tolist()
    assert ds.tag.isnull().values[failed]
    assert ds.attrs["runstore_rows"] == "experiments" and ds.attrs["runstore_store"] == sweep.path
    # The Store method and the module function are one.
    assert runstore.Store.to_xarray.__doc__ == runstore.export.to_xarray.__doc__


def test_a_complete_int_column_keeps_its_dtype_and_selection_by_name(store):
    store.define_experiments(runstore.grid(n=[1, 2, 3]))
    runstore.run_experiments(store, lambda n: None, workers=0, progress=False)
    with store.writer() as w:
        for e in store.design()["experiment"]:
            w.log(e, size=np.uint16(7), ok=True)
    store.refresh()
    ds = store.to_xarray("size")
    assert list(ds.data_vars) == ["size"] and ds["size"].dtype == np.uint16
    assert store.to_xarray(["ok", "size", "ok"])["ok"].dtype == bool


def test_categories_and_attributes_of_the_store_are_kept(sweep):
    sweep.attrs.update(categories={"opt": ["sgd", "adam"]}, units={"loss": "nats"})
    ds = sweep.to_xarray()
    assert ds.opt.attrs["categories"] == ["sgd", "adam"]
    assert ds.attrs["units"] == {"loss": "nats"} and "categories" in ds.attrs


# -- by step -------------------------------------------------------------------------------------


def test_a_store_logged_by_step_gives_run_by_step_variables_with_gaps(store, rng):
    store, expect = by_step(store, rng)
    ds = store.to_xarray()
    steps = sorted({s for _, s in expect})
    assert ds.step.values.tolist() == steps and ds.run.values.tolist() == list(range(5))
    assert ds.loss.dims == ("run", "step") and ds.obs.dims == ("run", "step", "obs_dim_0")
    assert ds.ep.dtype == np.float64 and ds.ep.attrs["runstore_dtype"] == "int32"
    for run in range(5):
        for k, step in enumerate(steps):
            want = expect.get((run, step), np.nan)
            np.testing.assert_equal(ds.loss.values[run, k], want)
            np.testing.assert_equal(ds.obs.values[run, k], [want, want])
            np.testing.assert_equal(ds.ep.values[run, k], step if (run, step) in expect else np.nan)
    assert int(ds.loss.notnull().sum()) == len(expect)
    # Step 0 only, a row per run.
    flat = store.to_xarray(by_step=False)
    assert "step" not in flat.dims and flat.loss.dims == ("run",)
    np.testing.assert_equal(flat.loss.values, [expect.get((r, 0), np.nan) for r in range(5)])


def test_a_sweep_by_step_keeps_the_experiments_as_rows(sweep):
    ids = sweep.design()["experiment"].tolist()
    with sweep.writer() as w:
        for step in (1, 5):
            w.log(ids[2], step=step, loss=float(step))
    ds = sweep.to_xarray("loss", by_step=True)
    assert ds.step.values.tolist() == [0, 1, 5] and ds.loss.dims == ("run", "step")
    assert ds.run.values.tolist() == ids and "lr" in ds.coords
    np.testing.assert_array_equal(ds.loss.values[2], [0.1 * 3, 1.0, 5.0])
    assert np.isnan(ds.loss.values[0, 1:]).all()


def test_mixed_int_and_str_run_ids_become_text_and_colliding_ones_are_refused(store):
    with store.writer() as w:
        w.log(2, loss=1.0)
        w.log("b", loss=2.0)
    ds = store.refresh().to_xarray()
    assert ds.run.values.tolist() == ["2", "b"]
    assert ds.loss.values.ravel().tolist() == [1.0, 2.0]
    with store.writer() as w:
        w.log("2", loss=3.0)
    with pytest.raises(ValueError, match=r"run ids 2 and '2' are both '2' as text"):
        store.refresh().to_xarray()


def test_arrays_with_a_zero_dimension_are_variables_too(store):
    with store.writer() as w:
        for run in range(3):
            w.put(run, "empty", np.zeros((4, 0)))
    ds = store.refresh().to_xarray(by_step=False)
    assert ds.empty.shape == (3, 4, 0) and ds.empty.dims == ("run", "empty_dim_0", "empty_dim_1")


# -- lazy ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sweep", "by_step"])
def test_a_lazy_dataset_is_dask_backed_and_equal_to_the_eager_one(kind, store, rng, request):
    if kind == "sweep":
        store = request.getfixturevalue("sweep")
        chunks = {"run": 4}
    else:
        store, _ = by_step(store, rng, runs=7, steps=30)
        chunks = {"run": 3, "step": 4}
    eager = store.to_xarray()
    lazy = store.to_xarray(chunks=chunks)
    for name, var in lazy.data_vars.items():
        assert isinstance(var.data, da.Array), name
        assert var.chunks[0][0] == min(chunks["run"], lazy.sizes["run"]), name
        if "step" in var.dims:
            assert var.chunks[1][0] == chunks["step"], name
    xr.testing.assert_identical(lazy.compute(), eager)
    xr.testing.assert_identical(store.to_xarray(lazy=True).compute(), eager)
    # It pickles (to dask workers of other processes, which open the store again).
    xr.testing.assert_identical(pickle.loads(pickle.dumps(lazy)).compute(), eager)
    # A block read through dask's getter with an arbitrary slice is numpy's slice of the whole.
    for name in lazy.data_vars:
        xr.testing.assert_identical(lazy[name][1:3].compute(), eager[name][1:3])


def test_lazy_is_the_default_when_the_dataset_exceeds_half_the_memory_available(sweep, monkeypatch):
    need = _xarray.Layout(sweep, None, None).nbytes
    monkeypatch.setattr(_xarray, "memory_available", lambda: 4 * need)
    assert not isinstance(sweep.to_xarray().curve.data, da.Array)
    monkeypatch.setattr(_xarray, "memory_available", lambda: need)
    assert isinstance(sweep.to_xarray().curve.data, da.Array)
    assert not isinstance(sweep.to_xarray(lazy=False).curve.data, da.Array)
    monkeypatch.setitem(sys.modules, "dask.array", None)  # dask not installed
    with pytest.raises(MemoryError, match="more than 50% of the memory available.*needs dask"):
        sweep.to_xarray()
    assert not isinstance(sweep.to_xarray(lazy=False).curve.data, da.Array)


def test_bad_chunks_are_named(sweep):
    with pytest.raises(ValueError, match="chunks: 'run' needs a positive int, got 0"):
        sweep.to_xarray(chunks=0)
    with pytest.raises(ValueError, match=r"not \['curve_dim_0'\]"):
        sweep.to_xarray(chunks={"curve_dim_0": 2})
    with pytest.raises(ValueError, match="chunks= is for a lazy Dataset"):
        sweep.to_xarray(lazy=False, chunks=2)


# -- errors --------------------------------------------------------------------------------------


def test_an_empty_store_and_series_it_does_not_have_are_named(store, tmp_path):
    with pytest.raises(ValueError, match=f"the store {store.path} holds no records"):
        store.to_xarray()
    with pytest.raises(ValueError, match="holds no records"):
        store.to_zarr(tmp_path / "out.zarr")
    assert not os.path.exists(tmp_path / "out.zarr")
    assert [n for n in os.listdir(tmp_path) if "runstore-tmp" in n] == []
    with store.writer() as w:
        w.log(1, loss=0.5)
        w.define("trace", "float64", variable_shape=True)
        w.put(1, "trace", np.arange(3.0))
    store.refresh()
    with pytest.raises(KeyError, match=r"series 'los' not found in the store .*'loss', 'trace'"):
        store.to_xarray("los")
    with pytest.raises(ValueError, match="series '~status/state' is reserved for runstore"):
        store.to_xarray(["~status/state"])
    with pytest.raises(ValueError, match="series 'trace' has a variable shape.*Store.scan"):
        store.to_xarray("trace")
    assert list(store.to_xarray().data_vars) == ["loss"]  # variable shapes left out


def test_a_design_without_results_gives_its_coordinates(store):
    store.define_experiments(runstore.grid(x=[1, 2]))
    ds = store.to_xarray()
    assert list(ds.data_vars) == [] and ds.state.values.tolist() == ["pending", "pending"]


# -- Zarr ----------------------------------------------------------------------------------------

READ_WITHOUT_RUNSTORE = textwrap.dedent("""
    import pickle, sys
    sys.modules["runstore"] = None  # importing it fails: xarray alone reads the store
    import xarray
    ds = xarray.open_zarr(sys.argv[1]).load()
    with open(sys.argv[2], "wb") as f:
        pickle.dump(ds, f)
""")


def open_without_runstore(path, tmp_path):
    out = tmp_path / "read.pickle"
    subprocess.run(
        [sys.executable, "-c", READ_WITHOUT_RUNSTORE, str(path), str(out)], check=True, timeout=120
    )
    with open(out, "rb") as f:
        return pickle.load(f)


def assert_same_as_zarr_holds(back, ds):
    """``back`` (read from Zarr) holds ``ds``: absent strings empty, names escaped."""
    from runstore.export._zarr import zarr_name, zarr_names

    names = zarr_names(ds.variables, coordinates=ds.coords)
    dims = {d: names.get(d, zarr_name(d)) for d in ds.dims}
    assert sorted(back.variables) == sorted(names.values())
    assert set(back.coords) == {names[n] for n in ds.coords}
    for n, var in ds.variables.items():
        got = back[names[n]]
        assert got.dims == tuple(dims[d] for d in var.dims), n
        assert {k: v for k, v in got.attrs.items()} == var.attrs, n
        if var.dtype.kind in "OT":  # str: Zarr's strings have no missing value
            want = [v if isinstance(v, str) else "" for v in var.values.ravel().tolist()]
            assert got.dtype.kind in "OT", n
            assert [str(v) for v in got.values.ravel().tolist()] == want, n
        else:
            assert got.dtype == var.dtype, n
            np.testing.assert_array_equal(got.values, var.values, err_msg=n)
    assert back.attrs == ds.attrs


def test_export_zarr_round_trip_read_by_xarray_without_runstore(sweep, tmp_path):
    r = sweep.to_zarr(tmp_path / "sweep.zarr")
    assert r["runs"] == 6 and r["steps"] is None and r["variables"] == 5 and r["left_out"] == []
    assert r["path"] == str(tmp_path / "sweep.zarr") and r["chunks"] > 0
    back = open_without_runstore(tmp_path / "sweep.zarr", tmp_path)
    assert_same_as_zarr_holds(back, sweep.to_xarray())
    assert runstore.Store.to_zarr.__doc__ == runstore.export.to_zarr.__doc__


def test_export_zarr_of_a_store_by_step_escapes_names_zarr_would_split(store, rng, tmp_path):
    store, _ = by_step(store, rng, runs=4, steps=12)
    with store.writer() as w:
        w.log(1, step=3, **{"train/loss": 0.5, "100%": 1.0, "__x": 2.0, ".hidden": 3.0})
        w.log(2, step=0, note="hello")
        w.put(2, "blob", b"a\x00")
    store.refresh()
    r = store.to_zarr(tmp_path / "steps.zarr", chunks={"run": 3, "step": 5})
    assert r["left_out"] == ["blob"] and r["steps"] == store.to_xarray().sizes["step"]
    back = open_without_runstore(tmp_path / "steps.zarr", tmp_path)
    ds = store.to_xarray()
    assert_same_as_zarr_holds(back, ds.drop_vars("blob"))
    assert {"train%2Floss", "100%25", "%5F_x", "%2Ehidden"} <= set(back.data_vars)
    assert back["train%2Floss"].attrs["runstore_series"] == "train/loss"
    with pytest.raises(ValueError, match="series 'blob' holds bytes: Zarr format 3 has no"):
        store.to_zarr(tmp_path / "blob.zarr", names=["blob"])


def test_export_zarr_keeps_every_name_that_a_file_system_or_zarr_would_merge(store, tmp_path):
    """A series a\\b became the array b of a group a (xarray.open_zarr saw one variable fewer)
    and one called zarr.json failed the export. Every name is a variable of its own: names
    Zarr, Windows or a case-insensitive file system would split, merge or refuse are escaped,
    and attrs["runstore_series"] keeps the name."""
    names = ["a\\b", "a", "zarr.json", "Loss", "loss", "CON", "nul.txt", "x:y", "t.", "q?"]
    names += ["line\nfeed", "run", "step", "vec_dim_0", "x" * 255]
    with store.writer() as w:
        for k, n in enumerate(names):
            w.log(1, step=0, values={n: float(k)})
            w.log(2, step=1, values={n: float(-k)})
        w.log(1, vec=np.arange(3.0))
    store.refresh()
    ds = store.to_xarray()
    assert len(ds.data_vars) == len(names) + 1  # run, step: outcome.run, outcome.step
    series = sorted(v.attrs["runstore_series"] for v in ds.data_vars.values())
    assert series == sorted([*names, "vec"])
    assert ds["vec"].dims == ("run", "step", "vec_dim_0~2")  # not the series vec_dim_0
    store.to_zarr(tmp_path / "names.zarr")
    back = open_without_runstore(tmp_path / "names.zarr", tmp_path)
    assert_same_as_zarr_holds(back, ds)
    got = {v.attrs["runstore_series"]: v for v in back.data_vars.values()}
    assert sorted(got) == series
    for k, n in enumerate(names):
        np.testing.assert_array_equal(got[n].values[:, :2], [[k, np.nan], [np.nan, -k]], n)
    lowered = [v.lower() for v in back.variables]
    assert len(set(lowered)) == len(lowered)  # no two directories on macOS or Windows
    top = set(os.listdir(tmp_path / "names.zarr"))
    assert {"a%5Cb", "%7Aarr.json", "%43ON", "%6Eul.txt", "x%3Ay", "t%2E", "q%3F"} <= top
    assert max(len(n.encode()) for n in top) <= 200


def test_export_zarr_streams_chunk_by_chunk_in_bounded_memory(store, tmp_path):
    n, width = 2_000, 4_000  # 61 MiB of float64 in the store
    curve = np.add.outer(np.arange(n, dtype=np.float64), np.arange(width) / width)
    store.define_experiments(pd.DataFrame({"experiment": np.arange(n), "x": np.arange(n) % 7}))
    with store.writer() as w:
        for start in range(0, n, 200):
            ids = np.arange(start, start + 200)
            w.log_many(ids, curve=curve[start : start + 200], best=curve[start : start + 200, -1])
    data_mib = curve.nbytes / 2**20
    del curve
    script = textwrap.dedent("""
        import json, sys
        import runstore, xarray, zarr, dask.array
        def status(key):  # MiB
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) / 1024 for l in f if l.startswith(key))
        store = runstore.open(sys.argv[1], "r")
        store.to_zarr(sys.argv[2] + ".warm", names=["best"])  # the code paths, once
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak (VmHWM) starts again from the resident set now
        before = status("VmRSS")
        r = store.to_zarr(sys.argv[2], chunks=25)
        print(json.dumps({"grew_mib": status("VmHWM") - before, "chunks": r["chunks"]}))
    """)
    out = tmp_path / "big.zarr"
    p = subprocess.run(
        [sys.executable, "-c", script, store.path, str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    m = json.loads(p.stdout.strip().splitlines()[-1])
    # Chunks of 25 experiments: 80 of curve, 0.8 MiB each; the process grows by a few of them,
    # never by the 61 MiB it writes.
    assert len(os.listdir(out / "curve" / "c")) == n // 25
    assert m["grew_mib"] < data_mib / 3, (m, data_mib)
    back = xr.open_zarr(out)
    assert back.curve.encoding["chunks"] == (25, width)
    np.testing.assert_array_equal(back.curve[1234, :3].values, 1234 + np.arange(3) / width)


def test_export_zarr_refuses_an_existing_target_unless_told_and_what_it_must_not_replace(
    sweep, tmp_path
):
    out = tmp_path / "out.zarr"
    sweep.to_zarr(out)
    with pytest.raises(FileExistsError):
        sweep.to_zarr(out)
    with sweep.writer() as w:
        w.log(sweep.design()["experiment"][0], extra=1.0)
    sweep.refresh()
    sweep.to_zarr(out, overwrite=True)  # a Zarr store is replaced
    assert "extra" in xr.open_zarr(out)
    (tmp_path / "file.zarr").write_text("x")
    sweep.to_zarr(tmp_path / "file.zarr", overwrite=True)  # and a file
    (tmp_path / "empty").mkdir()
    sweep.to_zarr(tmp_path / "empty", overwrite=True)  # and an empty directory
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "thesis.tex").write_text("mine")
    with pytest.raises(ValueError, match="refusing to replace a directory that is not a Zarr"):
        sweep.to_zarr(notes, overwrite=True)
    assert (notes / "thesis.tex").read_text() == "mine"
    with pytest.raises(ValueError, match="refusing to replace it: it holds the store"):
        sweep.to_zarr(tmp_path, overwrite=True)
    with pytest.raises(ValueError, match="refusing to write the export inside the store"):
        sweep.to_zarr(os.path.join(sweep.path, "segments", "x.zarr"))
    assert [n for n in os.listdir(tmp_path) if "runstore-tmp" in n] == []


def test_a_killed_exports_temporary_is_removed_by_the_next_one(sweep, tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    stale = tmp_path / f".out.zarr.runstore-tmp-{host}-{dead.pid}-0123abcd"
    (stale / "loss" / "c").mkdir(parents=True)
    sweep.to_zarr(tmp_path / "out.zarr")
    assert not stale.exists() and (tmp_path / "out.zarr" / "zarr.json").exists()


def test_the_export_zarr_command_exit_codes(sweep, tmp_path, capsys):
    out = str(tmp_path / "cmd.zarr")
    assert _commands.export_zarr_main([sweep.path, out, "--names", "loss,curve"]) == 0
    assert "6 runs, 2 variables" in capsys.readouterr().out
    assert _commands.export_zarr_main([sweep.path, out]) == 5
    assert f"AlreadyExists: {out} exists; use --force (-f) to replace it" in capsys.readouterr().err
    assert _commands.export_zarr_main([sweep.path, out, "--force", "--chunk-rows", "2"]) == 0
    assert xr.open_zarr(out).loss.encoding["chunks"] == (2,)
    inside = os.path.join(sweep.path, "x.zarr")
    assert _commands.export_zarr_main([sweep.path, inside]) == 5
    assert "refusing to write the export inside the store" in capsys.readouterr().err
    assert _commands.export_zarr_main([sweep.path, out, "-f", "--names", "nope"]) == 3
    assert "NotFound: series 'nope' not found" in capsys.readouterr().err
    assert _commands.export_zarr_main([str(tmp_path / "none"), out + "2"]) == 3
