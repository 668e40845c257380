#!/usr/bin/env python3
"""A sweep as an xarray Dataset (Store.to_xarray) and as a Zarr store (Store.to_zarr, what
`runstore export zarr` runs): memory against the size of the data, and time.

The sweep: 200,000 experiments (--n) with ids derived from their parameters (the default:
"e" + 16 hex digits, str run ids, looked up through the run index), 4 float parameters, run
with runstore.run_experiments (every experiment "done", with its status), each returning 2
float outcomes, an int outcome and a float64 array of 100 points (--width). Then, each case in
a subprocess of its own, measured from a baseline taken after the imports (runstore, numpy,
pandas, xarray, zarr, dask) and runstore.open of the store, with the peak of the resident set
started again there (/proc/self/clear_refs, so that the imports' own peak does not hide the
case's):

  to_xarray       store.to_xarray(): the Dataset in memory, eager. Its peak RSS above the
                  baseline against the Dataset's nbytes (coordinates included; object arrays
                  of ids and strings count 8 bytes an entry there, their str objects are extra)
  to_xarray_lazy  (for reference) store.to_xarray(lazy=True), then ds.curve.mean().compute()
  to_zarr         store.to_zarr(OUT): streamed chunk by chunk; its peak RSS above the baseline,
                  time and bytes written, then read back with xarray.open_zarr and checked

Target (issue: xarray and Zarr support): to_xarray peak RSS above the baseline at most 1.5x the
nbytes of the Dataset it returns.

    .venv/bin/python bench/python/xarray_bench.py            # 200,000 experiments
    .venv/bin/python bench/python/xarray_bench.py --n 20000  # a quick run

Exit status: 0 when every target is met, 3 when the run finished but missed a target, 1 on an
error (a case that failed or read back wrong).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time

import numpy as np

# The measurements and the report of targets shared by the benchmarks (bench/compare).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "compare"))
from common import finish_targets, run_json_child

PARAMS = ("alpha", "beta", "gamma", "delta")
TARGET_RATIO = 1.5


def sweep_fn(alpha: float, beta: float, gamma: float, delta: float, width: int = 100) -> dict:
    """One experiment's outcomes: two floats, an int and a curve of ``width`` points
    (deterministic in the parameters)."""
    rng = np.random.default_rng([int(alpha * 2**52), int(beta * 2**52)])
    curve = np.cumsum(rng.standard_normal(width)) * gamma + delta
    return {
        "loss": float(curve[-1] ** 2),
        "accuracy": float(gamma * delta),
        "epochs": int(alpha * 100),
        "curve": curve,
    }


def build_sweep(path: str, n: int, width: int, seed: int, workers: int | None) -> dict:
    import functools

    import pandas as pd

    import runstore

    rng = np.random.default_rng(seed)
    p = rng.random((n, len(PARAMS)))
    store = runstore.open(path)
    t0 = time.perf_counter()
    store.define_experiments(pd.DataFrame({name: p[:, k] for k, name in enumerate(PARAMS)}))
    t_define = time.perf_counter() - t0
    fn = functools.partial(sweep_fn, width=width)
    s = runstore.run_experiments(store, fn, workers=workers, commit_every=1000, progress=False)
    on_disk = sum(e.stat().st_size for e in os.scandir(os.path.join(path, "segments")))
    return {
        "define_s": t_define,
        "run_s": s.seconds,
        "done": s.done,
        "workers": s.workers,
        "store_mib": on_disk / 2**20,
    }


# -- cases (each in a child process) -------------------------------------------------------------


def _status_mib(key: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(key))


def _start_peak() -> float:
    """Starts the peak of the resident set (VmHWM) again from the resident set now, and
    returns that baseline in MiB; where /proc/self/clear_refs cannot be written, the peak so
    far is the baseline (ru_maxrss minus baseline, which a high peak of the imports hides)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _status_mib("VmRSS")
    except OSError:
        return _status_mib("VmHWM")


def case_to_xarray(store_path: str, out: str, n: int) -> dict:
    import runstore

    store = runstore.open(store_path, "r")
    base = _start_peak()
    t0 = time.perf_counter()
    ds = store.to_xarray()
    seconds = time.perf_counter() - t0
    peak = _status_mib("VmHWM") - base
    assert ds.sizes["run"] == n and ds.curve.notnull().all(), "the Dataset reads back wrong"
    return {
        "seconds": seconds,
        "peak_rss_mib": peak,
        "nbytes_mib": ds.nbytes / 2**20,
        "curve_mib": ds.curve.nbytes / 2**20,
    }


def case_to_xarray_lazy(store_path: str, out: str, n: int) -> dict:
    import runstore

    store = runstore.open(store_path, "r")
    base = _start_peak()
    t0 = time.perf_counter()
    ds = store.to_xarray(lazy=True)
    t_build = time.perf_counter() - t0
    mean = float(ds.curve.mean().compute())
    seconds = time.perf_counter() - t0
    assert np.isfinite(mean), "the lazy Dataset reads back wrong"
    return {
        "seconds": seconds,
        "build_seconds": t_build,
        "peak_rss_mib": _status_mib("VmHWM") - base,
        "nbytes_mib": ds.nbytes / 2**20,
    }


def case_to_zarr(store_path: str, out: str, n: int) -> dict:
    import xarray as xr

    import runstore

    store = runstore.open(store_path, "r")
    base = _start_peak()
    t0 = time.perf_counter()
    r = store.to_zarr(out)
    seconds = time.perf_counter() - t0
    peak = _status_mib("VmHWM") - base
    back = xr.open_zarr(out)
    assert back.sizes["run"] == n and float(back.curve[n // 2, 0]) == float(
        store.get(back.run.values[n // 2], "curve")[0]
    ), "the Zarr store reads back wrong"
    return {
        "seconds": seconds,
        "peak_rss_mib": peak,
        "out_mib": r["bytes"] / 2**20,
        "chunks": r["chunks"],
        "nbytes_mib": back.nbytes / 2**20,
    }


CASES = {
    "to_xarray": case_to_xarray,
    "to_xarray_lazy": case_to_xarray_lazy,
    "to_zarr": case_to_zarr,
}


def run_child(args) -> None:
    # Everything the cases use is imported before the baseline.
    import dask.array  # noqa: F401
    import pandas  # noqa: F401
    import xarray  # noqa: F401
    import zarr  # noqa: F401

    import runstore  # noqa: F401

    out = os.path.join(args.dir, args.case + ".zarr")
    shutil.rmtree(out, ignore_errors=True)
    result = CASES[args.case](os.path.join(args.dir, "sweep.rs"), out, args.n)
    shutil.rmtree(out, ignore_errors=True)
    print(json.dumps(result))


def run_case(name: str, args, work: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--case", name, "--dir", work]
    cmd += ["--n", str(args.n)]
    return run_json_child(cmd)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=200_000, help="experiments (default 200,000)")
    ap.add_argument("--width", type=int, default=100, help="points of the array outcome")
    ap.add_argument("--seed", type=int, default=20261203, help="seed of the generated sweep")
    ap.add_argument(
        "--workers", type=int, default=None, help="processes running the sweep (default: all cores)"
    )
    ap.add_argument(
        "--dir", default=None, help="where the store and outputs go (default: a temporary one)"
    )
    ap.add_argument(
        "--cases", default=",".join(CASES), help="comma-separated subset of " + ", ".join(CASES)
    )
    ap.add_argument("--json", default=None, help="also write the results to this file")
    ap.add_argument("--case", default=None, help=argparse.SUPPRESS)  # child mode
    args = ap.parse_args()
    if args.case:
        run_child(args)
        return 0

    import xarray as xr
    import zarr

    import runstore

    print(
        f"xarray_bench: n={args.n} width={args.width} seed={args.seed} "
        f"python={platform.python_version()} numpy={np.__version__} xarray={xr.__version__} "
        f"zarr={zarr.__version__} runstore={runstore.__version__} cpus={os.cpu_count()} "
        f"load average={os.getloadavg()[0]:.2f}"
    )
    work = args.dir or tempfile.mkdtemp(prefix="xarray_bench_")
    os.makedirs(work, exist_ok=True)
    store_path = os.path.join(work, "sweep.rs")
    results = {}
    try:
        shutil.rmtree(store_path, ignore_errors=True)
        sweep = build_sweep(store_path, args.n, args.width, args.seed, args.workers)
        print(
            f"  sweep: define_experiments {sweep['define_s']:.1f} s, run_experiments "
            f"{sweep['run_s']:.1f} s on {sweep['workers']} processes ({sweep['done']:,} done), "
            f"store {sweep['store_mib']:.1f} MiB",
            flush=True,
        )
        for name in args.cases.split(","):
            r = run_case(name, args, work)
            results[name] = r
            print(
                f"  {name:15s} "
                + ", ".join(
                    f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()
                ),
                flush=True,
            )
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"{'case':15s} {'seconds':>9s} {'peak RSS MiB':>13s} {'Dataset MiB':>12s}")
    for name, r in results.items():
        if "error" in r:
            print(f"{name:15s} failed: {r['error']}")
            continue
        print(f"{name:15s} {r['seconds']:9.2f} {r['peak_rss_mib']:13.1f} {r['nbytes_mib']:12.1f}")
    targets = []
    x = results.get("to_xarray", {})
    if "peak_rss_mib" in x:
        ratio = x["peak_rss_mib"] / x["nbytes_mib"]
        targets.append(
            (
                "to_xarray peak RSS / Dataset nbytes",
                f"{ratio:.2f}x ({x['peak_rss_mib']:.1f} / {x['nbytes_mib']:.1f} MiB)",
                f"<= {TARGET_RATIO}x",
                ratio <= TARGET_RATIO,
            )
        )
    z = results.get("to_zarr", {})
    if "peak_rss_mib" in z:
        targets.append(
            (
                "(info) to_zarr peak RSS / Dataset nbytes",
                f"{z['peak_rss_mib'] / z['nbytes_mib']:.2f}x, {z['out_mib']:.1f} MiB written",
                "-",
                None,
            )
        )
    status = finish_targets(
        targets,
        results,
        args.json,
        (42, 38, 8),
        n=args.n,
        width=args.width,
        seed=args.seed,
        sweep=sweep,
    )
    return status


if __name__ == "__main__":
    sys.exit(main())
