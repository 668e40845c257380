#!/usr/bin/env python3
"""Exporting a sweep to a tarball of CSVs: runstore's streamed export against pandas + tarfile.

The sweep: 200,000 experiments (--n), 5 float parameters, 3 scalar outcomes and a 100-point
float64 series each, run with runstore.run_experiments (every experiment "done", with its
status). Then, each case in a subprocess of its own so that its peak RSS (VmHWM) is its own:

  runstore_tar      Store.export_tar: experiments.csv, one CSV per outcome, metadata.json,
                    streamed chunk by chunk through temporary files into a .tar.gz
  pandas_tarfile    what tools do today: the results in memory (read with
                    runstore.load_results), one DataFrame per CSV, DataFrame.to_csv into memory,
                    tarfile "w:gz" from the in-memory bytes. The same members and columns.
  runstore_parquet  (for reference, no target) Store.export_parquet of the same sweep
  runstore_import   runstore.import_tar of the tarball runstore_tar writes (written first,
                    by a process of its own) into a new store: the whole archive checked,
                    streamed, and published at once (its "output" is the store)

Both tarballs use gzip level 1 (--compresslevel): level 6 compresses float text only ~6%
smaller and takes ~5x longer, so the default of tarfile (9) would measure gzip, not the export.

Targets: runstore_tar peak RSS < 150 MiB and runstore_import peak RSS < 250 MiB (the whole
process: interpreter, numpy and pandas included). The table also gives wall time and peak RSS
of each.

    .venv/bin/python bench/python/export_bench.py            # 200,000 experiments
    .venv/bin/python bench/python/export_bench.py --n 20000  # a quick run

Exit status: 0 when every target is met, 3 when the run finished but missed a target, 1 on an
error (a case that failed or read back wrong).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

import numpy as np

# The data, the measurements and the h5py layout of the comparison suite (bench/compare).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "compare"))
from common import PARAMS, finish_targets, run_json_child
from common import vm_hwm_mib as peak_rss_mib

SERIES_LEN = 100


def sweep_fn(alpha: float, beta: float, gamma: float, delta: float, epsilon: float) -> dict:
    """One experiment's outcomes: 3 scalars and a 100-point series (deterministic)."""
    rng = np.random.default_rng([int(alpha * 2**52), int(beta * 2**52)])
    trace = np.cumsum(rng.standard_normal(SERIES_LEN)) * alpha + beta
    return {
        "loss": float(trace[-1] ** 2),
        "accuracy": float(gamma * delta),
        "runtime": float(epsilon + 1.0),
        "trace": trace,
    }


def build_sweep(path: str, n: int, seed: int, workers: int | None) -> dict:
    import runstore

    rng = np.random.default_rng(seed)
    p = rng.random((n, len(PARAMS)))
    design = {"experiment": np.arange(n)}
    design.update({name: p[:, k] for k, name in enumerate(PARAMS)})
    import pandas as pd

    store = runstore.open(path)
    t0 = time.perf_counter()
    store.define_experiments(pd.DataFrame(design))
    t_define = time.perf_counter() - t0
    s = runstore.run_experiments(
        store, sweep_fn, workers=workers, commit_every=1000, progress=False
    )
    on_disk = sum(e.stat().st_size for e in os.scandir(os.path.join(path, "segments")))
    return {
        "define_s": t_define,
        "run_s": s.seconds,
        "done": s.done,
        "workers": s.workers,
        "store_mib": on_disk / 2**20,
    }


# -- cases (each in a child process) -------------------------------------------------------------


def case_runstore_tar(store_path: str, out: str, level: int) -> dict:
    import runstore

    t0 = time.perf_counter()
    r = runstore.open(store_path, "r").export_tar(out, compresslevel=level)
    return {"seconds": time.perf_counter() - t0, "members": len(r["members"])}


def case_runstore_parquet(store_path: str, out: str, level: int) -> dict:
    import runstore

    t0 = time.perf_counter()
    runstore.open(store_path, "r").export_parquet(out)
    return {"seconds": time.perf_counter() - t0}


def case_pandas_tarfile(store_path: str, out: str, level: int) -> dict:
    """The in-memory way: every table as a DataFrame, every CSV as a string, then the tar."""
    import pandas as pd

    import runstore

    t0 = time.perf_counter()
    experiments, outcomes = runstore.load_results(runstore.open(store_path, "r"))
    t_load = time.perf_counter() - t0
    ids = experiments["experiment"].to_numpy()
    members = {"experiments.csv": experiments.to_csv(index=False)}
    for name, values in outcomes.items():
        values = np.asarray(values)
        if values.ndim == 1:
            df = pd.DataFrame({"experiment": ids, name: values})
        else:
            flat = values.reshape(len(values), -1)
            df = pd.DataFrame(flat, columns=[f"{name}_{i}" for i in range(flat.shape[1])])
            df.insert(0, "experiment", ids)
        members[f"outcomes/{name}.csv"] = df.to_csv(index=False)
    members["metadata.json"] = json.dumps(
        {"columns": list(experiments.columns), "outcomes": list(outcomes)}
    )
    with tarfile.open(out, "w:gz", compresslevel=level) as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return {"seconds": time.perf_counter() - t0, "load_seconds": t_load, "members": len(members)}


def case_runstore_import(store_path: str, out: str, level: int) -> dict:
    import runstore

    archive = out + ".tar.gz"
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, runstore; runstore.open(sys.argv[1], 'r').export_tar(sys.argv[2], "
            "compresslevel=int(sys.argv[3]), progress=False)",
            store_path,
            archive,
            str(level),
        ],
        check=True,
    )
    import pandas  # noqa: F401 - imported before the clock, as the other cases have it

    t0 = time.perf_counter()
    back = runstore.import_tar(archive, out)
    seconds = time.perf_counter() - t0
    n = len(back.design())
    os.remove(archive)
    return {"seconds": seconds, "experiments": n}


CASES = {
    "runstore_tar": (case_runstore_tar, ".tar.gz"),
    "pandas_tarfile": (case_pandas_tarfile, ".tar.gz"),
    "runstore_parquet": (case_runstore_parquet, ".parquet"),
    "runstore_import": (case_runstore_import, ".rs"),
}


def run_child(args) -> None:
    fn, ext = CASES[args.case]
    out = os.path.join(args.dir, args.case + ext)
    result = fn(os.path.join(args.dir, "sweep.rs"), out, args.compresslevel)
    result["peak_rss_mib"] = peak_rss_mib()
    if os.path.isdir(out):  # a store (runstore_import)
        result["out_mib"] = (
            sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs)
            / 2**20
        )
        shutil.rmtree(out)
    else:
        result["out_mib"] = os.path.getsize(out) / 2**20
        os.remove(out)
    print(json.dumps(result))


def run_case(name: str, args, work: str) -> dict:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--case",
        name,
        "--dir",
        work,
        "--compresslevel",
        str(args.compresslevel),
    ]
    return run_json_child(cmd)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=200_000, help="experiments (default 200,000)")
    ap.add_argument("--seed", type=int, default=20261129, help="seed of the generated sweep")
    ap.add_argument(
        "--workers", type=int, default=None, help="processes running the sweep (default: all cores)"
    )
    ap.add_argument(
        "--compresslevel", type=int, default=1, help="gzip level of both tarballs (default 1)"
    )
    ap.add_argument(
        "--dir",
        default=None,
        help="where the store and outputs go (default: a temporary directory)",
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

    import pandas as pd

    import runstore

    print(
        f"export_bench: n={args.n} seed={args.seed} compresslevel={args.compresslevel} "
        f"python={platform.python_version()} numpy={np.__version__} pandas={pd.__version__} "
        f"runstore={runstore.__version__} cpus={os.cpu_count()} load "
        f"average={os.getloadavg()[0]:.2f}"
    )
    work = args.dir or tempfile.mkdtemp(prefix="export_bench_")
    os.makedirs(work, exist_ok=True)
    store_path = os.path.join(work, "sweep.rs")
    results = {}
    try:
        shutil.rmtree(store_path, ignore_errors=True)
        sweep = build_sweep(store_path, args.n, args.seed, args.workers)
        print(
            f"  sweep: define_experiments {sweep['define_s']:.1f} s, run_experiments "
            f"{sweep['run_s']:.1f} s "
            f"on {sweep['workers']} processes ({sweep['done']:,} done), store "
            f"{sweep['store_mib']:.1f} MiB",
            flush=True,
        )
        for name in args.cases.split(","):
            r = run_case(name, args, work)
            results[name] = r
            print(
                f"  {name:18s} "
                + ", ".join(
                    f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()
                ),
                flush=True,
            )
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"{'case':18s} {'seconds':>9s} {'peak RSS MiB':>13s} {'output MiB':>11s}")
    for name, r in results.items():
        if "error" in r:
            print(f"{name:18s} failed: {r['error']}")
            continue
        print(f"{name:18s} {r['seconds']:9.2f} {r['peak_rss_mib']:13.1f} {r['out_mib']:11.1f}")
    targets = []
    rs, pdt = results.get("runstore_tar", {}), results.get("pandas_tarfile", {})
    if "peak_rss_mib" in rs:
        targets.append(
            (
                "runstore_tar peak RSS",
                f"{rs['peak_rss_mib']:.1f} MiB",
                "< 150 MiB",
                rs["peak_rss_mib"] < 150,
            )
        )
    ri = results.get("runstore_import", {})
    if "peak_rss_mib" in ri:
        targets.append(
            (
                "runstore_import peak RSS",
                f"{ri['peak_rss_mib']:.1f} MiB",
                "< 250 MiB",
                ri["peak_rss_mib"] < 250,
            )
        )
    if "peak_rss_mib" in rs and "peak_rss_mib" in pdt:
        targets.append(
            (
                "(info) pandas_tarfile / runstore_tar",
                f"{pdt['peak_rss_mib'] / rs['peak_rss_mib']:.1f}x the memory, "
                f"{pdt['seconds'] / rs['seconds']:.1f}x the time",
                "-",
                None,
            )
        )
    status = finish_targets(
        targets, results, args.json, (40, 40, 10), n=args.n, seed=args.seed, sweep=sweep
    )
    return status


if __name__ == "__main__":
    sys.exit(main())
