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

Exit status: 0 when every target is met, 3 when the run finished but missed a target, 1 on an
error (a case that failed or read back wrong).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

# The workload's writers, its data and its measurements are the comparison suite's
# (bench/compare/cases_sweep.py): this script runs the same code, for runstore and h5py only.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "compare"))
import cases_sweep
from common import vm_hwm_mib as peak_rss_mib

TRACE_LEN = 100
TARGET_MISSED = 3  # the exit status of a run that finished but missed a target


# -- cases (run in a child process) ----------------------------------------------------------
# Each writes into the empty directory `path` and returns at least "seconds".


def _suite_params(n: int, batch: int, seed: int) -> dict:
    return {"n": n, "batch": batch, "seed": seed, "trace_len": TRACE_LEN}


def _no_progress(count: int) -> None:
    pass


def _runstore_case(writer, end):
    """A runstore writer of the suite (log or log_many per batch, `end` per batch: "commit" or
    "flush"), then the peak RSS with the writer closed and a check that every record is there."""

    def case(path: str, n: int, batch: int, seed: int) -> dict:
        import runstore

        result = writer(path, _suite_params(n, batch, seed), _no_progress, end=end)
        result["write_peak_rss_mib"] = peak_rss_mib()
        store = runstore.open(os.path.join(path, "store"), mode="r")
        assert store.series_info("trace").count == n and store.series_info("loss").count == n
        return result

    return case


def _h5py_case(writer):
    def case(path: str, n: int, batch: int, seed: int) -> dict:
        import h5py

        result = writer(path, _suite_params(n, batch, seed), _no_progress)
        with h5py.File(os.path.join(path, "sweep.h5"), "r") as f:
            assert f["trace"].shape == (n, TRACE_LEN)
        return result

    return case


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
    return {
        "median_us": float(np.median(times)) / 1e3,
        "p99_us": float(np.percentile(times, 99)) / 1e3,
        "first_us": cold_ns / 1e3,
        "calls": calls,
    }


CASES = {
    "runstore_log": _runstore_case(cases_sweep.runstore_one, "commit"),
    "runstore_log_many": _runstore_case(cases_sweep.runstore_batch, "commit"),
    "runstore_log_many_flush": _runstore_case(cases_sweep.runstore_batch, "flush"),
    "h5py_one": _h5py_case(cases_sweep.h5py_one),
    "h5py_batch": _h5py_case(cases_sweep.h5py_batch),
    "h5py_batch_fsync": _h5py_case(cases_sweep.h5py_batch_fsync),
    "get_8mib": case_get_8mib,
}


def run_child(args) -> None:
    path = os.path.join(args.dir, args.case)
    # Every run starts from nothing (a repeated run must not append to the last one's store).
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    result = CASES[args.case](path, args.n, args.batch, args.seed)
    result["peak_rss_mib"] = peak_rss_mib()
    print(json.dumps(result))


# -- driver ----------------------------------------------------------------------------------


def run_case(name: str, args, work: str) -> dict:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--case",
        name,
        "--n",
        str(args.n),
        "--batch",
        str(args.batch),
        "--seed",
        str(args.seed),
        "--dir",
        work,
    ]
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
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=200_000, help="experiments (default 200,000)")
    ap.add_argument(
        "--batch", type=int, default=1000, help="experiments per commit/flush (default 1,000)"
    )
    ap.add_argument("--seed", type=int, default=20261129, help="seed of the generated data")
    ap.add_argument(
        "--dir", default=None, help="where the stores go (default: a temporary directory)"
    )
    ap.add_argument(
        "--cases", default=",".join(CASES), help="comma-separated subset of " + ", ".join(CASES)
    )
    ap.add_argument(
        "--repeat", type=int, default=1, help="runs of each case; the median is reported"
    )
    ap.add_argument("--json", default=None, help="also write the results to this file")
    ap.add_argument("--case", default=None, help=argparse.SUPPRESS)  # child mode
    args = ap.parse_args()
    if args.case:
        run_child(args)
        return 0

    import h5py

    import runstore

    print(
        f"sweep_bench: n={args.n} batch={args.batch} seed={args.seed} "
        f"python={platform.python_version()} "
        f"numpy={np.__version__} h5py={h5py.__version__} (HDF5 {h5py.version.hdf5_version}) "
        f"runstore={runstore.__version__} cpus={os.cpu_count()} repeat={args.repeat} "
        f"load average={os.getloadavg()[0]:.2f}"
    )
    work = args.dir or tempfile.mkdtemp(prefix="sweep_bench_")
    os.makedirs(work, exist_ok=True)
    results = {}
    fsync_before = fsync_probe(work)
    print(f"  disk: append 1 MiB + fdatasync, median {fsync_before:.2f} ms", flush=True)
    try:
        for name in args.cases.split(","):
            runs = []
            for _ in range(args.repeat):
                r = run_case(name, args, work)
                runs.append(r)
                print(
                    f"  {name:18s} "
                    + ", ".join(
                        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()
                    ),
                    flush=True,
                )
            results[name] = combine(runs)
        fsync_after = fsync_probe(work)
        print(f"  disk: append 1 MiB + fdatasync, median {fsync_after:.2f} ms", flush=True)
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)

    n = args.n
    print()
    print(
        f"{'case':24s} {'seconds':>9s} {'us/experiment':>14s} {'in commit/flush s':>18s} "
        f"{'peak RSS MiB':>13s}"
    )
    for name, r in results.items():
        if "seconds" in r:
            commit = f"{r['commit_seconds']:18.3f}" if "commit_seconds" in r else f"{'-':>18s}"
            rss = r.get("write_peak_rss_mib", r["peak_rss_mib"])
            print(
                f"{name:24s} {r['seconds']:9.3f} {r['seconds'] / n * 1e6:14.2f} {commit} "
                f"{rss:13.1f}"
            )
    if "get_8mib" in results:
        g = results["get_8mib"]
        print(
            f"{'get_8mib':20s} median {g['median_us']:.2f} us, p99 {g['p99_us']:.2f} us, "
            f"first call {g['first_us']:.1f} us, peak RSS {g['peak_rss_mib']:.1f} MiB"
        )

    def sec(name):
        return results[name]["seconds"] if name in results else None

    targets = []
    if sec("runstore_log") and sec("h5py_one"):
        ratio = sec("h5py_one") / sec("runstore_log")
        targets.append(
            (
                "(a) log vs h5py one-at-a-time",
                f"runstore {ratio:.1f}x faster",
                ">= 25x",
                ratio >= 25,
            )
        )
    if sec("runstore_log") and sec("h5py_batch"):
        ratio = sec("runstore_log") / sec("h5py_batch")
        targets.append(
            (
                "(a) log vs h5py batches",
                f"runstore takes {ratio:.2f}x h5py's time",
                "<= 5x",
                ratio <= 5,
            )
        )
    if sec("runstore_log_many") and sec("h5py_batch"):
        ratio = sec("runstore_log_many") / sec("h5py_batch")
        targets.append(
            (
                "(b) log_many vs h5py batches",
                f"runstore takes {ratio:.2f}x h5py's time",
                "<= 1x",
                ratio <= 1,
            )
        )
    if sec("runstore_log_many_flush") and sec("h5py_batch"):
        ratio = sec("runstore_log_many_flush") / sec("h5py_batch")
        targets.append(
            (
                "(b') log_many+flush vs h5py batches",
                f"runstore takes {ratio:.2f}x h5py's time",
                "<= 1x",
                ratio <= 1,
            )
        )
    for name in ("runstore_log", "runstore_log_many", "runstore_log_many_flush"):
        if name in results:
            rss = results[name]["write_peak_rss_mib"]
            targets.append((f"(c) peak RSS {name}", f"{rss:.1f} MiB", "< 100 MiB", rss < 100))
    if sec("runstore_log_many") and sec("h5py_batch_fsync"):
        ratio = sec("runstore_log_many") / sec("h5py_batch_fsync")
        targets.append(
            ("(info) log_many vs h5py+fsync", f"runstore takes {ratio:.2f}x h5py's time", "-", None)
        )
    if "get_8mib" in results:
        med = results["get_8mib"]["median_us"]
        targets.append(("(d) get 8 MiB uncompressed", f"median {med:.2f} us", "< 20 us", med < 20))
    print()
    print(f"{'target':36s} {'measured':36s} {'goal':10s} met")
    for t, m, goal, ok in targets:
        print(f"{t:36s} {m:36s} {goal:10s} {'-' if ok is None else 'yes' if ok else 'NO'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "n": n,
                    "batch": args.batch,
                    "seed": args.seed,
                    "results": results,
                    "fsync_ms": [fsync_before, fsync_after],
                    "targets": [
                        dict(zip(("target", "measured", "goal", "met"), t)) for t in targets
                    ],
                },
                f,
                indent=2,
            )
    return 0 if all(t[3] is not False for t in targets) else TARGET_MISSED


if __name__ == "__main__":
    sys.exit(main())
