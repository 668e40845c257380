#!/usr/bin/env python3
"""The sweep workload: runstore against h5py, in one run.

200,000 experiments (--n), each with 5 float parameters, 3 scalar outcomes and a 100-point
float64 time series, committed (runstore: Writer.commit, durable) or flushed (h5py: File.flush)
every 1,000 experiments (--batch). Cases, each in a subprocess of its own so that its peak RSS
(VmHWM) is its own:

  runstore_log       Writer.log, one experiment per call
  runstore_log_many  Writer.log_many, one call per batch of 1,000
  runstore_log_many_flush
                     the same with Writer.flush instead of Writer.commit per batch: h5py's
                     guarantee (visible, survives a kill of the process, not a power cut);
                     durable when the writer closes at the end
  h5py_one           h5py, one experiment at a time: resizable chunked datasets (run, params
                     (n, 5), outcomes (n, 3), trace (n, 100)); grown by a whole chunk when full
                     (not per row) and written row by row
  h5py_batch         h5py, the same datasets, resized and written one batch of 1,000 at a time
  h5py_batch_fsync   (for reference, no target) h5py_batch plus os.fsync after every flush, i.e.
                     durable like a runstore commit
  get_8mib           Store.get of an uncompressed 8 MiB float64 array: median of many calls

Peak RSS of a runstore case is VmHWM when its writer has closed, before the read-back check.

Targets: (a) runstore_log >= 25x faster than h5py_one and within 5x of h5py_batch;
(b) runstore_log_many no slower than h5py_batch, and (b') the same for runstore_log_many_flush;
(c) peak RSS < 100 MiB in both runstore cases; (d) get_8mib median < 20 us.

    .venv/bin/python bench/python/sweep_bench.py            # the full workload
    .venv/bin/python bench/python/sweep_bench.py --n 20000  # a quick run
    .venv/bin/python bench/python/sweep_bench.py --repeat 3 # the median of 3 runs of each case

Timings depend on the disk's fsync latency (a runstore commit is durable; an h5py flush is
not, see h5py_batch_fsync) and on other load on the machine: the header prints the load average.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

# The data, the measurements and the h5py layout of the comparison suite (bench/compare).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "compare"))
from cases_sweep import _h5_datasets as _h5_suite_datasets  # noqa: E402
from common import OUTCOMES, PARAMS, POOL, sweep_pool  # noqa: E402
from common import vm_hwm_mib as peak_rss_mib  # noqa: E402

TRACE_LEN = 100


def make_pool(seed: int):
    """Data of POOL experiments (experiment i uses row i % POOL)."""
    return sweep_pool(seed, TRACE_LEN)


# -- cases (run in a child process) ----------------------------------------------------------


def case_runstore_log(path: str, n: int, batch: int, seed: int) -> dict:
    import runstore

    params, outcomes, trace = make_pool(seed)
    prow, orow = params.tolist(), outcomes.tolist()
    store = runstore.open(path)
    commit_s = 0.0
    t0 = time.perf_counter()
    with store.writer() as w:
        for i in range(n):
            k = i % POOL
            p, o = prow[k], orow[k]
            w.log(i, alpha=p[0], beta=p[1], gamma=p[2], delta=p[3], epsilon=p[4],
                  loss=o[0], accuracy=o[1], runtime=o[2], trace=trace[k])
            if (i + 1) % batch == 0:
                c0 = time.perf_counter()
                w.commit()
                commit_s += time.perf_counter() - c0
        stats = w.stats()
    seconds = time.perf_counter() - t0
    write_rss = peak_rss_mib()
    store.refresh()
    assert store.series_info("trace").count == n and store.series_info("loss").count == n
    return {"seconds": seconds, "commit_seconds": commit_s, "commits": stats["commits"],
            "bytes_written": stats["bytes_written"], "write_peak_rss_mib": write_rss}


def case_runstore_log_many(path: str, n: int, batch: int, seed: int, flush: bool = False) -> dict:
    import runstore

    params, outcomes, trace = make_pool(seed)
    pcols = [np.ascontiguousarray(params[:, j]) for j in range(len(PARAMS))]
    ocols = [np.ascontiguousarray(outcomes[:, j]) for j in range(len(OUTCOMES))]
    store = runstore.open(path)
    commit_s = 0.0
    t0 = time.perf_counter()
    with store.writer() as w:
        finish = w.flush if flush else w.commit
        for start in range(0, n, batch):
            m = min(batch, n - start)
            runs = np.arange(start, start + m, dtype=np.int64)
            k = start % POOL
            sl = slice(k, k + m)  # batch divides POOL in the default setup
            w.log_many(runs, **{name: c[sl] for name, c in zip(PARAMS, pcols)},
                       **{name: c[sl] for name, c in zip(OUTCOMES, ocols)}, trace=trace[sl])
            c0 = time.perf_counter()
            finish()
            commit_s += time.perf_counter() - c0
        stats = w.stats()
    seconds = time.perf_counter() - t0
    write_rss = peak_rss_mib()
    store.refresh()
    assert store.series_info("trace").count == n and store.series_info("loss").count == n
    return {"seconds": seconds, "commit_seconds": commit_s, "commits": stats["commits"],
            "bytes_written": stats["bytes_written"], "write_peak_rss_mib": write_rss}


def _h5_datasets(f, batch: int):
    return _h5_suite_datasets(f, batch, TRACE_LEN)


def case_h5py_one(path: str, n: int, batch: int, seed: int) -> dict:
    import h5py

    params, outcomes, trace = make_pool(seed)
    prow, orow = params.tolist(), outcomes.tolist()
    t0 = time.perf_counter()
    with h5py.File(path, "w") as f:
        ds = _h5_datasets(f, batch)
        capacity = 0
        for i in range(n):
            k = i % POOL
            if i == capacity:  # grow by a whole chunk, not per row
                capacity += batch
                for d in ds.values():
                    d.resize(capacity, axis=0)
            ds["run"][i] = i
            ds["params"][i] = prow[k]
            ds["outcomes"][i] = orow[k]
            ds["trace"][i] = trace[k]
            if (i + 1) % batch == 0:
                f.flush()
        for d in ds.values():
            d.resize(n, axis=0)
    seconds = time.perf_counter() - t0
    with h5py.File(path, "r") as f:
        assert f["trace"].shape == (n, TRACE_LEN)
    return {"seconds": seconds}


def _h5py_batches(path: str, n: int, batch: int, seed: int, fsync: bool) -> dict:
    import h5py

    params, outcomes, trace = make_pool(seed)
    t0 = time.perf_counter()
    with h5py.File(path, "w") as f:
        fd = os.open(path, os.O_RDONLY) if fsync else -1  # fsync(2) on any descriptor will do
        ds = _h5_datasets(f, batch)
        for start in range(0, n, batch):
            m = min(batch, n - start)
            k = start % POOL
            for d in ds.values():
                d.resize(start + m, axis=0)
            ds["run"][start:start + m] = np.arange(start, start + m)
            ds["params"][start:start + m] = params[k:k + m]
            ds["outcomes"][start:start + m] = outcomes[k:k + m]
            ds["trace"][start:start + m] = trace[k:k + m]
            f.flush()
            if fsync:
                os.fsync(fd)
        if fsync:
            os.close(fd)
    seconds = time.perf_counter() - t0
    with h5py.File(path, "r") as f:
        assert f["trace"].shape == (n, TRACE_LEN)
    return {"seconds": seconds}


def case_h5py_batch(path: str, n: int, batch: int, seed: int) -> dict:
    return _h5py_batches(path, n, batch, seed, fsync=False)


def case_h5py_batch_fsync(path: str, n: int, batch: int, seed: int) -> dict:
    """h5py_batch made durable like a runstore commit: flush, then fsync the file."""
    return _h5py_batches(path, n, batch, seed, fsync=True)


def case_get_8mib(path: str, n: int, batch: int, seed: int) -> dict:
    import runstore

    calls = 20_000
    array = np.random.default_rng(seed).random(1 << 20)  # 8 MiB of float64
    store = runstore.open(path)
    with store.writer() as w:
        w.put(0, "matrix", array)
    store.refresh()
    t = time.perf_counter_ns()
    first = store.get(0, "matrix")
    cold_ns = time.perf_counter_ns() - t
    assert first.base.zero_copy and np.array_equal(first, array)
    times = np.empty(calls, dtype=np.int64)
    get = store.get
    for i in range(calls):
        t = time.perf_counter_ns()
        get(0, "matrix")
        times[i] = time.perf_counter_ns() - t
    return {"median_us": float(np.median(times)) / 1e3, "p99_us": float(np.percentile(times, 99)) / 1e3,
            "first_us": cold_ns / 1e3, "calls": calls}


CASES = {
    "runstore_log": case_runstore_log,
    "runstore_log_many": case_runstore_log_many,
    "runstore_log_many_flush": functools.partial(case_runstore_log_many, flush=True),
    "h5py_one": case_h5py_one,
    "h5py_batch": case_h5py_batch,
    "h5py_batch_fsync": case_h5py_batch_fsync,
    "get_8mib": case_get_8mib,
}


def run_child(args) -> None:
    path = os.path.join(args.dir, args.case + (".h5" if args.case.startswith("h5py") else ".rs"))
    # Every run starts from nothing (a repeated run must not append to the last one's store).
    shutil.rmtree(path, ignore_errors=True)
    if os.path.exists(path):
        os.remove(path)
    result = CASES[args.case](path, args.n, args.batch, args.seed)
    result["peak_rss_mib"] = peak_rss_mib()
    print(json.dumps(result))


# -- driver ----------------------------------------------------------------------------------


def run_case(name: str, args, work: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--case", name, "--n", str(args.n),
           "--batch", str(args.batch), "--seed", str(args.seed), "--dir", work]
    env = dict(os.environ)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def fsync_probe(directory: str, size: int = 1 << 20, count: int = 50) -> float:
    """Median milliseconds to append `size` bytes to a file and fdatasync it: the floor of a
    durable commit of one batch on this disk."""
    path = os.path.join(directory, "fsync_probe")
    buf = os.urandom(size)
    times = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(count):
            t = time.perf_counter()
            os.write(fd, buf)
            os.fdatasync(fd)
            times.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        os.remove(path)
    return float(np.median(times)) * 1e3


def combine(runs: list[dict]) -> dict:
    """The median of each timing over repeated runs; the largest peak RSS."""
    out = {}
    for key in runs[0]:
        values = [r[key] for r in runs]
        if key == "peak_rss_mib":
            out[key] = max(values)
        elif isinstance(values[0], float):
            out[key] = float(np.median(values))
        else:
            out[key] = values[0]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000, help="experiments (default 200,000)")
    ap.add_argument("--batch", type=int, default=1000, help="experiments per commit/flush (default 1,000)")
    ap.add_argument("--seed", type=int, default=20261129, help="seed of the generated data")
    ap.add_argument("--dir", default=None, help="where the stores go (default: a temporary directory)")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ", ".join(CASES))
    ap.add_argument("--repeat", type=int, default=1, help="runs of each case; the median is reported")
    ap.add_argument("--json", default=None, help="also write the results to this file")
    ap.add_argument("--case", default=None, help=argparse.SUPPRESS)  # child mode
    args = ap.parse_args()
    if POOL % args.batch != 0:
        ap.error(f"--batch must divide {POOL}")
    if args.case:
        run_child(args)
        return 0

    import h5py

    import runstore

    print(f"sweep_bench: n={args.n} batch={args.batch} seed={args.seed} python={platform.python_version()} "
          f"numpy={np.__version__} h5py={h5py.__version__} (HDF5 {h5py.version.hdf5_version}) "
          f"runstore={runstore.__version__} cpus={os.cpu_count()} repeat={args.repeat} "
          f"load average={os.getloadavg()[0]:.2f}")
    work = args.dir or tempfile.mkdtemp(prefix="sweep_bench_")
    os.makedirs(work, exist_ok=True)
    results = {}
    fsync_before = fsync_probe(work)
    print(f"  disk: append 1 MiB + fdatasync, median {fsync_before:.2f} ms", flush=True)
    try:
        for name in args.cases.split(","):
            runs = []
            for rep in range(args.repeat):
                r = run_case(name, args, work)
                runs.append(r)
                print(f"  {name:18s} " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                                    for k, v in r.items()), flush=True)
            results[name] = combine(runs)
        fsync_after = fsync_probe(work)
        print(f"  disk: append 1 MiB + fdatasync, median {fsync_after:.2f} ms", flush=True)
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)

    n = args.n
    print()
    print(f"{'case':24s} {'seconds':>9s} {'us/experiment':>14s} {'in commit/flush s':>18s} {'peak RSS MiB':>13s}")
    for name, r in results.items():
        if "seconds" in r:
            commit = f"{r['commit_seconds']:18.3f}" if "commit_seconds" in r else f"{'-':>18s}"
            rss = r.get("write_peak_rss_mib", r["peak_rss_mib"])
            print(f"{name:24s} {r['seconds']:9.3f} {r['seconds'] / n * 1e6:14.2f} {commit} {rss:13.1f}")
    if "get_8mib" in results:
        g = results["get_8mib"]
        print(f"{'get_8mib':20s} median {g['median_us']:.2f} us, p99 {g['p99_us']:.2f} us, "
              f"first call {g['first_us']:.1f} us, peak RSS {g['peak_rss_mib']:.1f} MiB")

    def sec(name):
        return results[name]["seconds"] if name in results else None

    targets = []
    if sec("runstore_log") and sec("h5py_one"):
        ratio = sec("h5py_one") / sec("runstore_log")
        targets.append(("(a) log vs h5py one-at-a-time", f"runstore {ratio:.1f}x faster", ">= 25x", ratio >= 25))
    if sec("runstore_log") and sec("h5py_batch"):
        ratio = sec("runstore_log") / sec("h5py_batch")
        targets.append(("(a) log vs h5py batches", f"runstore takes {ratio:.2f}x h5py's time", "<= 5x",
                        ratio <= 5))
    if sec("runstore_log_many") and sec("h5py_batch"):
        ratio = sec("runstore_log_many") / sec("h5py_batch")
        targets.append(("(b) log_many vs h5py batches", f"runstore takes {ratio:.2f}x h5py's time", "<= 1x",
                        ratio <= 1))
    if sec("runstore_log_many_flush") and sec("h5py_batch"):
        ratio = sec("runstore_log_many_flush") / sec("h5py_batch")
        targets.append(("(b') log_many+flush vs h5py batches", f"runstore takes {ratio:.2f}x h5py's time",
                        "<= 1x", ratio <= 1))
    for name in ("runstore_log", "runstore_log_many", "runstore_log_many_flush"):
        if name in results:
            rss = results[name]["write_peak_rss_mib"]
            targets.append((f"(c) peak RSS {name}", f"{rss:.1f} MiB", "< 100 MiB", rss < 100))
    if sec("runstore_log_many") and sec("h5py_batch_fsync"):
        ratio = sec("runstore_log_many") / sec("h5py_batch_fsync")
        targets.append(("(info) log_many vs h5py+fsync", f"runstore takes {ratio:.2f}x h5py's time",
                        "-", None))
    if "get_8mib" in results:
        med = results["get_8mib"]["median_us"]
        targets.append(("(d) get 8 MiB uncompressed", f"median {med:.2f} us", "< 20 us", med < 20))
    print()
    print(f"{'target':36s} {'measured':36s} {'goal':10s} met")
    for t, m, goal, ok in targets:
        print(f"{t:36s} {m:36s} {goal:10s} {'-' if ok is None else 'yes' if ok else 'NO'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"n": n, "batch": args.batch, "seed": args.seed, "results": results,
                       "fsync_ms": [fsync_before, fsync_after],
                       "targets": [dict(zip(("target", "measured", "goal", "met"), t)) for t in targets]},
                      f, indent=2)
    return 0 if all(t[3] is not False for t in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
