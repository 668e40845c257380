"""Workload 1, sweep: n experiments of 5 float parameters, 3 scalar outcomes and a float64 time
series each, committed (or flushed) every `batch` experiments.

Every writer gets the data of experiment i from a pool of POOL experiments (row i % POOL), so
the generation of random numbers is not timed. Each writer function creates its output under
the directory `path`, and returns a dict with at least "seconds" (the timed part: from opening
the output to the last commit/flush/close having returned). `progress(count)` is called after
each commit/flush has returned, with the number of experiments it covers.

Readback functions open the output in a fresh process and count the experiments whose every
value is present and equal to what was written.
"""

from __future__ import annotations

import io
import os
import time

import numpy as np
from common import OUTCOMES, PARAMS, POOL, Clock, sweep_pool

# tool -> (label, mode, what a commit/flush guarantees)
META = {
    "runstore_one": (
        "runstore, Writer.log per experiment",
        "one",
        "commit: fdatasync, durable (survives power loss)",
    ),
    "runstore_batch": (
        "runstore, Writer.log_many per 1,000",
        "batch",
        "commit: fdatasync, durable (survives power loss)",
    ),
    "runstore_batch_async": (
        "runstore, Writer.log_many + commit(wait=False) per 1,000, wait for the last",
        "batch",
        "commit: fdatasync, durable; the caller does not wait for it "
        "(commits queued meanwhile share one sync)",
    ),
    "runstore_batch_flush": (
        "runstore, Writer.log_many per 1,000, Writer.flush per 1,000",
        "batch",
        "flush: written to the OS, survives a process kill; durable at close",
    ),
    "runstore_one_endcommit": (
        "runstore, Writer.log per experiment, one commit at the end (reference)",
        "one",
        "nothing durable until the end",
    ),
    "runstore_batch_endcommit": (
        "runstore, Writer.log_many per 1,000, one commit at the end (reference)",
        "batch",
        "nothing durable until the end",
    ),
    "h5py_one": (
        "h5py, chunked resizable datasets, one row at a time",
        "one",
        "File.flush(): in the OS page cache, not fsynced",
    ),
    "h5py_batch": (
        "h5py, chunked resizable datasets, 1,000 rows at a time",
        "batch",
        "File.flush(): in the OS page cache, not fsynced",
    ),
    "h5py_batch_fsync": (
        "h5py batched + os.fsync after each flush (reference)",
        "batch",
        "flush + fsync: durable",
    ),
    "zarr_batch": (
        "zarr v3, Array.append of 1,000 rows (default zstd codec)",
        "batch",
        "append returned: chunk and metadata files renamed into place, not fsynced",
    ),
    "sqlite_full": (
        "sqlite3 WAL, executemany + commit per 1,000, synchronous=FULL",
        "batch",
        "commit: WAL fsynced, durable",
    ),
    "sqlite_normal": (
        "sqlite3 WAL, executemany + commit per 1,000, synchronous=NORMAL",
        "batch",
        "commit: survives a process kill; may roll back on power loss",
    ),
    "tarball": (
        "all results in memory, tarball of CSVs (pandas + tarfile) at the end",
        "one",
        "nothing until the end (one write of the tarball, not fsynced)",
    ),
}


def _names(p):
    return list(PARAMS), list(OUTCOMES), p["trace_len"]


# -- runstore ----------------------------------------------------------------------------------


def _ender(w, end):
    """What ends a batch: "commit" (durable), "flush" (visible, survives a process kill) or None
    (nothing until the with-block closes the writer)."""
    return {"commit": w.commit, "flush": w.flush, None: None}[end]


def runstore_one(path, p, progress, end="commit"):
    import runstore

    n, batch = p["n"], p["batch"]
    params, outcomes, trace = sweep_pool(p["seed"], p["trace_len"])
    prow, orow = params.tolist(), outcomes.tolist()
    commit_s = 0.0
    clock = Clock()
    store = runstore.open(os.path.join(path, "store"))
    with store.writer() as w:
        log, finish = w.log, _ender(w, end)
        for i in range(n):
            k = i % POOL
            a, o = prow[k], orow[k]
            log(
                i,
                alpha=a[0],
                beta=a[1],
                gamma=a[2],
                delta=a[3],
                epsilon=a[4],
                loss=o[0],
                accuracy=o[1],
                runtime=o[2],
                trace=trace[k],
            )
            if finish and ((i + 1) % batch == 0 or i + 1 == n):
                c0 = time.perf_counter()
                finish()
                commit_s += time.perf_counter() - c0
                progress(i + 1)
        stats = w.stats()
    seconds = clock.seconds()
    return {
        "seconds": seconds,
        "commit_seconds": commit_s,
        "commits": stats["commits"],
        "bytes_written": stats["bytes_written"],
        "backpressure_seconds": stats["backpressure_seconds"],
    }


def runstore_batch(path, p, progress, end="commit"):
    """end "async": each batch's commit is started with commit(wait=False) and never waited for
    but the last; progress counts the experiments whose commits are durable (durable_ticket)."""
    import runstore

    n, batch = p["n"], p["batch"]
    params, outcomes, trace = sweep_pool(p["seed"], p["trace_len"])
    pcols = [np.ascontiguousarray(params[:, j]) for j in range(len(PARAMS))]
    ocols = [np.ascontiguousarray(outcomes[:, j]) for j in range(len(OUTCOMES))]
    commit_s = 0.0
    clock = Clock()
    store = runstore.open(os.path.join(path, "store"))
    with store.writer() as w:
        finish = _ender(w, end) if end != "async" else None
        pending = []  # async: (ticket, experiments committed with it), oldest first
        for start in range(0, n, batch):
            m = min(batch, n - start)
            idx = np.arange(start, start + m) % POOL
            runs = np.arange(start, start + m, dtype=np.int64)
            w.log_many(
                runs,
                **{name: c[idx] for name, c in zip(PARAMS, pcols)},
                **{name: c[idx] for name, c in zip(OUTCOMES, ocols)},
                trace=trace[idx],
            )
            if finish:
                c0 = time.perf_counter()
                finish()
                commit_s += time.perf_counter() - c0
                progress(start + m)
            elif end == "async":
                c0 = time.perf_counter()
                pending.append((w.commit(wait=False), start + m))
                if start + m == n:
                    w.wait_for_commit(pending[-1][0])
                commit_s += time.perf_counter() - c0
                durable = w.durable_ticket
                while pending and pending[0][0] <= durable:
                    progress(pending.pop(0)[1])
        stats = w.stats()
    seconds = clock.seconds()
    return {
        "seconds": seconds,
        "commit_seconds": commit_s,
        "commits": stats["commits"],
        "syncs": stats["syncs"],
        "bytes_written": stats["bytes_written"],
        "backpressure_seconds": stats["backpressure_seconds"],
    }


def readback_runstore(path, p):
    import runstore

    n = p["n"]
    params, outcomes, trace = sweep_pool(p["seed"], p["trace_len"])
    store = runstore.open(os.path.join(path, "store"), "r")
    good = np.ones(n, dtype=bool)
    expected = {name: params[:, j] for j, name in enumerate(PARAMS)}
    expected.update({name: outcomes[:, j] for j, name in enumerate(OUTCOMES)})
    expected["trace"] = trace
    names = set(store.names())
    presented = np.zeros(n, dtype=bool)
    for name, exp in expected.items():
        ok_here = np.zeros(n, dtype=bool)
        if name in names:
            d = store.scan(name)
            run = np.asarray(d["run"], dtype=np.int64)
            val = np.asarray(d["value"])
            inside = (run >= 0) & (run < n)
            run, val = run[inside], val[inside]
            presented[run] = True
            e = exp[run % POOL]
            ok = (val == e) if val.ndim == 1 else (val == e).all(axis=1)
            ok_here[run[ok]] = True
        good &= ok_here
    return {
        "opens": True,
        "read_back": int(good.sum()),
        "presented": int(presented.sum()),
        "wrong": int(presented.sum() - good.sum()),
    }


# -- h5py --------------------------------------------------------------------------------------


def _h5_datasets(f, batch, trace_len):
    return {
        "run": f.create_dataset("run", shape=(0,), maxshape=(None,), dtype="i8", chunks=(batch,)),
        "params": f.create_dataset(
            "params",
            shape=(0, len(PARAMS)),
            maxshape=(None, len(PARAMS)),
            dtype="f8",
            chunks=(batch, len(PARAMS)),
        ),
        "outcomes": f.create_dataset(
            "outcomes",
            shape=(0, len(OUTCOMES)),
            maxshape=(None, len(OUTCOMES)),
            dtype="f8",
            chunks=(batch, len(OUTCOMES)),
        ),
        "trace": f.create_dataset(
            "trace",
            shape=(0, trace_len),
            maxshape=(None, trace_len),
            dtype="f8",
            chunks=(batch, trace_len),
        ),
    }


def h5py_one(path, p, progress):
    import h5py

    n, batch = p["n"], p["batch"]
    params, outcomes, trace = sweep_pool(p["seed"], p["trace_len"])
    prow, orow = params.tolist(), outcomes.tolist()
    file = os.path.join(path, "sweep.h5")
    clock = Clock()
    with h5py.File(file, "w") as f:
        ds = _h5_datasets(f, batch, p["trace_len"])
        d_run, d_par, d_out, d_tr = ds["run"], ds["params"], ds["outcomes"], ds["trace"]
        capacity = 0
        for i in range(n):
            k = i % POOL
            if i == capacity:  # grow by a whole chunk, not per row
                capacity += batch
                for d in ds.values():
                    d.resize(capacity, axis=0)
            d_run[i] = i
            d_par[i] = prow[k]
            d_out[i] = orow[k]
            d_tr[i] = trace[k]
            if (i + 1) % batch == 0 or i + 1 == n:
                if i + 1 == n:
                    for d in ds.values():
                        d.resize(n, axis=0)
                f.flush()
                progress(i + 1)
    return {"seconds": clock.seconds()}


def _h5py_batch(path, p, progress, fsync):
    import h5py

    n, batch = p["n"], p["batch"]
    params, outcomes, trace = sweep_pool(p["seed"], p["trace_len"])
    file = os.path.join(path, "sweep.h5")
    clock = Clock()
    with h5py.File(file, "w") as f:
        fd = os.open(file, os.O_RDONLY) if fsync else None
        ds = _h5_datasets(f, batch, p["trace_len"])
        for start in range(0, n, batch):
            m = min(batch, n - start)
            idx = np.arange(start, start + m) % POOL
            for d in ds.values():
                d.resize(start + m, axis=0)
            ds["run"][start : start + m] = np.arange(start, start + m)
            ds["params"][start : start + m] = params[idx]
            ds["outcomes"][start : start + m] = outcomes[idx]
            ds["trace"][start : start + m] = trace[idx]
            f.flush()
            if fd is not None:
                os.fsync(fd)
            progress(start + m)
        if fd is not None:
            os.close(fd)
    return {"seconds": clock.seconds()}


def h5py_batch(path, p, progress):
    return _h5py_batch(path, p, progress, fsync=False)


def h5py_batch_fsync(path, p, progress):
    return _h5py_batch(path, p, progress, fsync=True)


def _count_good(p, run, par, out, tr):
    """Experiments read back complete and correct."""
    return _check(p, run, par, out, tr)["read_back"]


def _check(p, run, par, out, tr):
    """read_back: experiments complete and correct; presented: rows the output holds; wrong:
    rows it holds that are not a correct experiment (e.g. fill values of an unfinished write)."""
    n = p["n"]
    params, outcomes, trace = sweep_pool(p["seed"], p["trace_len"])
    m = min(len(run), len(par), len(out), len(tr))
    run = np.asarray(run[:m], dtype=np.int64)
    inside = (run >= 0) & (run < n)
    k = np.where(inside, run, 0) % POOL
    ok = inside & (np.asarray(par[:m]) == params[k]).all(axis=1)
    ok &= (np.asarray(out[:m]) == outcomes[k]).all(axis=1)
    ok &= (np.asarray(tr[:m]) == trace[k]).all(axis=1)
    good = np.zeros(n, dtype=bool)
    good[run[ok]] = True
    return {"read_back": int(good.sum()), "presented": int(m), "wrong": int(m - ok.sum())}


def readback_h5py(path, p):
    import h5py

    with h5py.File(os.path.join(path, "sweep.h5"), "r") as f:
        r = _check(p, f["run"][()], f["params"][()], f["outcomes"][()], f["trace"][()])
    return {"opens": True, **r}


# -- zarr --------------------------------------------------------------------------------------


def zarr_batch(path, p, progress):
    import zarr

    n, batch, tl = p["n"], p["batch"], p["trace_len"]
    params, outcomes, trace = sweep_pool(p["seed"], tl)
    clock = Clock()
    root = zarr.open_group(os.path.join(path, "sweep.zarr"), mode="w")
    z_run = root.create_array("run", shape=(0,), chunks=(batch,), dtype="i8")
    z_par = root.create_array(
        "params", shape=(0, len(PARAMS)), chunks=(batch, len(PARAMS)), dtype="f8"
    )
    z_out = root.create_array(
        "outcomes", shape=(0, len(OUTCOMES)), chunks=(batch, len(OUTCOMES)), dtype="f8"
    )
    z_tr = root.create_array("trace", shape=(0, tl), chunks=(batch, tl), dtype="f8")
    for start in range(0, n, batch):
        m = min(batch, n - start)
        idx = np.arange(start, start + m) % POOL
        z_run.append(np.arange(start, start + m, dtype=np.int64))
        z_par.append(params[idx])
        z_out.append(outcomes[idx])
        z_tr.append(trace[idx])
        progress(start + m)
    return {"seconds": clock.seconds()}


def readback_zarr(path, p):
    import zarr

    root = zarr.open_group(os.path.join(path, "sweep.zarr"), mode="r")
    r = _check(p, root["run"][:], root["params"][:], root["outcomes"][:], root["trace"][:])
    return {"opens": True, **r}


# -- sqlite3 -----------------------------------------------------------------------------------


def _sqlite(path, p, progress, synchronous):
    import sqlite3

    n, batch = p["n"], p["batch"]
    params, outcomes, trace = sweep_pool(p["seed"], p["trace_len"])
    prow, orow = params.tolist(), outcomes.tolist()
    tblob = [trace[k].tobytes() for k in range(POOL)]
    cols = ["run", *PARAMS, *OUTCOMES, "trace"]
    clock = Clock()
    con = sqlite3.connect(os.path.join(path, "sweep.db"), isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute(f"PRAGMA synchronous={synchronous}")
    con.execute(
        "CREATE TABLE experiments (run INTEGER PRIMARY KEY, "
        + ", ".join(f"{c} REAL" for c in (*PARAMS, *OUTCOMES))
        + ", trace BLOB)"
    )
    insert = f"INSERT INTO experiments ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    for start in range(0, n, batch):
        m = min(batch, n - start)
        rows = []
        for i in range(start, start + m):
            k = i % POOL
            rows.append((i, *prow[k], *orow[k], tblob[k]))
        con.execute("BEGIN")
        con.executemany(insert, rows)
        con.execute("COMMIT")
        progress(start + m)
    con.close()
    return {"seconds": clock.seconds()}


def sqlite_full(path, p, progress):
    return _sqlite(path, p, progress, "FULL")


def sqlite_normal(path, p, progress):
    return _sqlite(path, p, progress, "NORMAL")


def readback_sqlite(path, p):
    import sqlite3

    file = os.path.join(path, "sweep.db")
    if not os.path.exists(file):
        return {"opens": False, "read_back": 0, "error": "no database file"}
    con = sqlite3.connect(f"file:{file}?mode=ro", uri=True)
    rows = con.execute(
        "SELECT run, " + ", ".join((*PARAMS, *OUTCOMES)) + ", trace FROM experiments"
    ).fetchall()
    con.close()
    tl = p["trace_len"]
    run = np.array([r[0] for r in rows], dtype=np.int64)
    par = np.array([r[1:6] for r in rows], dtype=np.float64).reshape(-1, len(PARAMS))
    out = np.array([r[6:9] for r in rows], dtype=np.float64).reshape(-1, len(OUTCOMES))
    tr = np.array([np.frombuffer(r[9], dtype=np.float64) for r in rows]).reshape(-1, tl)
    return {"opens": True, **_check(p, run, par, out, tr)}


# -- in-memory tarball of CSVs -----------------------------------------------------------------


def tarball(path, p, progress):
    import tarfile

    import pandas as pd

    n, tl = p["n"], p["trace_len"]
    params, outcomes, trace = sweep_pool(p["seed"], tl)
    prow, orow = params.tolist(), outcomes.tolist()
    clock = Clock()
    rows, traces = [], []
    for i in range(n):  # each experiment's results are kept in memory until the end
        k = i % POOL
        a, o = prow[k], orow[k]
        rows.append(
            {
                "run": i,
                "alpha": a[0],
                "beta": a[1],
                "gamma": a[2],
                "delta": a[3],
                "epsilon": a[4],
                "loss": o[0],
                "accuracy": o[1],
                "runtime": o[2],
            }
        )
        traces.append(trace[k].copy())  # the experiment's own array
        if (i + 1) % p["batch"] == 0:
            progress.produced(i + 1)
    summary = pd.DataFrame(rows)
    tr = pd.DataFrame(np.stack(traces), columns=[f"t{j}" for j in range(tl)])
    tr.insert(0, "run", summary["run"].to_numpy())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, df in (("results.csv", summary), ("traces.csv", tr)):
            data = df.to_csv(index=False).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
    with open(os.path.join(path, "sweep.tar"), "wb") as f:
        f.write(buf.getbuffer())
    progress(n)
    return {"seconds": clock.seconds()}


def readback_tarball(path, p):
    import tarfile

    import pandas as pd

    file = os.path.join(path, "sweep.tar")
    if not os.path.exists(file):
        return {"opens": False, "read_back": 0, "error": "no tarball"}
    with tarfile.open(file) as tar:
        summary = pd.read_csv(tar.extractfile("results.csv"), float_precision="round_trip")
        tr = pd.read_csv(tar.extractfile("traces.csv"), float_precision="round_trip")
    run = summary["run"].to_numpy()
    assert (tr["run"].to_numpy() == run).all()
    return {
        "opens": True,
        **_check(
            p,
            run,
            summary[list(PARAMS)].to_numpy(),
            summary[list(OUTCOMES)].to_numpy(),
            tr.drop(columns="run").to_numpy(),
        ),
    }


WRITERS = {
    "runstore_one": runstore_one,
    "runstore_batch": runstore_batch,
    "runstore_batch_async": lambda path, p, progress: runstore_batch(
        path, p, progress, end="async"
    ),
    "runstore_batch_flush": lambda path, p, progress: runstore_batch(
        path, p, progress, end="flush"
    ),
    "runstore_one_endcommit": lambda path, p, progress: runstore_one(path, p, progress, end=None),
    "runstore_batch_endcommit": lambda path, p, progress: runstore_batch(
        path, p, progress, end=None
    ),
    "h5py_one": h5py_one,
    "h5py_batch": h5py_batch,
    "h5py_batch_fsync": h5py_batch_fsync,
    "zarr_batch": zarr_batch,
    "sqlite_full": sqlite_full,
    "sqlite_normal": sqlite_normal,
    "tarball": tarball,
}

READBACK = {
    "runstore_one": readback_runstore,
    "runstore_batch": readback_runstore,
    "runstore_batch_async": readback_runstore,
    "runstore_batch_flush": readback_runstore,
    "runstore_one_endcommit": readback_runstore,
    "runstore_batch_endcommit": readback_runstore,
    "h5py_one": readback_h5py,
    "h5py_batch": readback_h5py,
    "h5py_batch_fsync": readback_h5py,
    "zarr_batch": readback_zarr,
    "sqlite_full": readback_sqlite,
    "sqlite_normal": readback_sqlite,
    "tarball": readback_tarball,
}


def payload_bytes(p) -> int:
    """Bytes of the values written: run id, 5 parameters, 3 outcomes and the series, 8 bytes
    each."""
    return p["n"] * (1 + len(PARAMS) + len(OUTCOMES) + p["trace_len"]) * 8
