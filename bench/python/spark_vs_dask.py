#!/usr/bin/env python3
"""Dask, Spark and Ray side by side on a MsPASS-like workload, ended by runstore, by collecting,
or by each engine's own writer.

The workload: N objects of S MiB each (float64 "seismograms" a worker makes from its index,
``default_rng(i).standard_normal``), through a chain of three maps (demean, a cosine taper of
the first and last 5%, a scale), then a terminator:

  save      runstore.dask.save (+ collect), runstore.spark.save, runstore.ray.Datasink: every
            partition written on its worker or executor, the driver gathering one receipt a
            partition
  collect   ``bag.compute()``, ``rdd.collect()``, ``ds.take_all()``: every object gathered
            into the driver
  native    each engine's own way to files: Dask a ``.npy`` an object written on the workers
            (``map_partitions``), Spark ``saveAsPickleFile``, Ray Data ``write_parquet``

The engines get the same number of workers (--workers, one core each), the same memory a
worker (--memory: Dask's ``memory_limit``, Spark's ``spark.executor.memory``; Ray has no limit a
worker: its shared object store gets --workers x --memory) and the same partitions
(--per-partition objects each; Ray's blocks). Ray runs a local Ray (``ray.init``), its workers
the ``ray::`` processes. Dask runs a LocalCluster of worker processes (its
scheduler in the driver's process, as Spark's scheduler is in its driver's JVM); Spark a
standalone cluster of this machine (runstore.spark.StandaloneCluster: a master and a worker
daemon per worker, each executor a JVM with its Python workers). Each case runs in a process of
its own with a new cluster. The resident set of each process tree is sampled every 0.1 s:
the driver (this Python process, and for Spark the driver JVM it starts) and each worker (Dask's
worker process; Spark's executor JVM with its Python workers); the table gives the driver's
peak and the largest worker's peak, wall time and the result (an error, such as Spark's
``spark.driver.maxResultSize``, is where a case overflows).

    .venv/bin/python bench/python/spark_vs_dask.py --objects 1000 --mib 4
    .venv/bin/python bench/python/spark_vs_dask.py --objects 16 --mib 1 --terminators save

Exit status: 0 when the targets hold (with save, each engine's driver peak at most 1.5x its peak
at the smallest size of the run, i.e. flat in N, and every save case ok), 3 when the run
finished but missed one, 1 on error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np
import psutil

MIB = 2**20


# -- the workload -------------------------------------------------------------------------------


def make(i: int, mib: float) -> np.ndarray:
    return np.random.default_rng(i).standard_normal(int(mib * MIB) // 8)


def demean(a: np.ndarray) -> np.ndarray:
    return a - a.mean()


def taper(a: np.ndarray) -> np.ndarray:
    n = max(1, len(a) // 20)
    ramp = 0.5 * (1 - np.cos(np.linspace(0, np.pi, n)))
    out = a.copy()
    out[:n] *= ramp
    out[-n:] *= ramp[::-1]
    return out


def scale(a: np.ndarray) -> np.ndarray:
    return a * 0.5


# -- memory of process trees --------------------------------------------------------------------


class TreeSampler:
    """Samples the summed RSS of labelled groups of processes every ``interval`` seconds: each
    group a list of (pid, with its descendants), the descendants found again at each sample;
    ``peaks`` maps a label to its peak in bytes."""

    def __init__(self, roots: Any, interval: float = 0.1) -> None:
        # A dict, or a function returning one at each sample (processes that come and go).
        self.roots = roots
        self.interval = interval
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _rss(self, group: list[tuple[int, bool]]) -> int:
        total = 0
        seen: set[int] = set()
        for pid, tree in group:
            try:
                p = psutil.Process(pid)
                procs = [p, *p.children(recursive=True)] if tree else [p]
            except psutil.Error:
                continue
            for q in procs:
                if q.pid in seen:
                    continue
                seen.add(q.pid)
                try:
                    total += q.memory_info().rss
                except psutil.Error:
                    pass
        return total

    def sample(self) -> None:
        roots = self.roots() if callable(self.roots) else self.roots
        for label, group in roots.items():
            self.peaks[label] = max(self.peaks.get(label, 0), self._rss(group))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


# -- one case in this process -------------------------------------------------------------------


def error_text(e: BaseException) -> str:
    """The first line of an exception, or of the Java exception behind a Py4JJavaError."""
    java = getattr(e, "java_exception", None)
    text = str(java.toString()) if java is not None else f"{type(e).__name__}: {e}"
    return text.splitlines()[0][:300] if text else type(e).__name__


def terminate(sampler: TreeSampler, objects: int, terminator: str, ends: dict) -> dict:
    """Runs one end of the workflow (``ends[terminator]``, a function) under the sampler: "save"
    returns summarize()'s dict of the receipts, "collect" the objects, "native" anything."""
    t0 = time.perf_counter()
    error = ""
    with sampler:
        try:
            out = ends[terminator]()
            if terminator == "save":
                ok = out["failed"] == 0 and out["records"] == objects
                error = "" if ok else json.dumps(out["errors"])[:300]
            elif terminator == "collect":
                ok = len(out) == objects
            else:
                ok = True
            del out
        except Exception as e:  # noqa: BLE001 - where a case overflows: its error is the figure
            ok = False
            error = error_text(e)
    return dict(seconds=time.perf_counter() - t0, peaks=sampler.peaks, ok=ok, error=error)


def save_npy(objects: Any, directory: str) -> list[str]:
    """Dask's own way to end with files: one .npy an object, written by the worker."""
    names = []
    for a in objects:
        name = os.path.join(directory, f"{os.getpid()}-{time.monotonic_ns()}.npy")
        np.save(name, a)
        names.append(name)
    return names


def run_dask(args: argparse.Namespace, terminator: str, store_path: str) -> dict:
    import dask.bag as db
    from distributed import Client, LocalCluster

    import runstore
    from runstore import dask as rsd

    parts = max(1, args.objects // args.per_partition)
    with (
        LocalCluster(
            n_workers=args.workers,
            threads_per_worker=1,
            processes=True,
            memory_limit=args.memory,
            dashboard_address=":0",
        ) as cluster,
        Client(cluster) as client,
    ):
        workers = list(client.run(os.getpid).values())
        # The driver's process alone: its descendants are the workers, counted on their own.
        roots = {"driver": [(os.getpid(), False)]}
        roots |= {f"worker {i}": [(p, True)] for i, p in enumerate(workers)}
        sampler = TreeSampler(roots)
        bag = (
            db.from_sequence(range(args.objects), npartitions=parts)
            .map(make, args.mib)
            .map(demean)
            .map(taper)
            .map(scale)
        )
        native = os.path.join(os.path.dirname(store_path), "npy")
        os.makedirs(native, exist_ok=True)
        ends = {
            "save": lambda: rsd.summarize(
                rsd.collect(rsd.save(bag, runstore.open(store_path, "a"), name="trace"), client)
            ),
            "collect": bag.compute,
            "native": lambda: bag.map_partitions(save_npy, native).compute(),
        }
        out = terminate(sampler, args.objects, terminator, ends)
    return out


def run_spark(args: argparse.Namespace, terminator: str, store_path: str) -> dict:
    import runstore
    from runstore import spark as rss

    parts = max(1, args.objects // args.per_partition)
    with rss.StandaloneCluster(workers=args.workers, cores=1, memory=args.memory) as cluster:
        spark = cluster.session("spark-vs-dask", {"spark.driver.memory": args.driver_memory})
        spark.sparkContext.setLogLevel("ERROR")
        daemons = {p.pid for p in cluster.procs}
        me = psutil.Process()
        driver_jvms = [c.pid for c in me.children() if c.pid not in daemons]
        # Each worker daemon's descendants: its executor JVM and that executor's Python workers.
        roots = {"driver": [(os.getpid(), False)] + [(p, True) for p in driver_jvms]}
        for i, p in enumerate(cluster.procs[1:]):
            roots[f"worker {i}"] = [(c.pid, True) for c in psutil.Process(p.pid).children()]
        sampler = TreeSampler(roots)
        rdd = (
            spark.sparkContext.parallelize(range(args.objects), parts)
            .map(lambda i: make(i, args.mib))
            .map(demean)
            .map(taper)
            .map(scale)
        )
        native = os.path.join(os.path.dirname(store_path), "pickles")
        ends = {
            "save": lambda: rss.summarize(
                rss.save(rdd, runstore.open(store_path, "a"), name="trace")
            ),
            "collect": rdd.collect,
            "native": lambda: rdd.saveAsPickleFile(native),
        }
        # Executors started after the roots were taken (a lost one replaced) are not counted.
        out = terminate(sampler, args.objects, terminator, ends)
    return out


def run_ray(args: argparse.Namespace, terminator: str, store_path: str) -> dict:
    import ray

    import runstore
    from runstore import ray as rsr
    from runstore.integrations._plan import parse_size

    # Ray has no memory limit a worker; its shared object store gets the workers' memory. Its
    # session directory holds Unix sockets, whose paths may not pass 107 bytes: a short one.
    ray_dir = tempfile.mkdtemp(prefix="ray-")
    ray.init(
        num_cpus=args.workers,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=args.workers * parse_size(args.memory, "memory"),
        _temp_dir=ray_dir,
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    me = os.getpid()

    def roots() -> dict:
        # Ray's workers, found at each sample (it starts them as tasks come): "ray::" processes.
        out = {"driver": [(me, False)]}
        workers = []
        for p in psutil.Process(me).children(recursive=True):
            try:
                if p.name().startswith("ray::"):
                    workers.append(p.pid)
            except psutil.Error:
                pass
        for i, pid in enumerate(sorted(workers)):
            out[f"worker {i}"] = [(pid, False)]
        return out

    mib = args.mib
    parts = max(1, args.objects // args.per_partition)
    ds = (
        ray.data.range(args.objects, override_num_blocks=parts)
        .map(lambda r: {"trace": make(r["id"], mib)})
        .map(lambda r: {"trace": scale(taper(demean(r["trace"])))})
    )
    native = os.path.join(os.path.dirname(store_path), "parquet")

    def save() -> dict:
        sink = rsr.Datasink(runstore.open(store_path, "a"))
        ds.write_datasink(sink)
        return rsr.summarize(sink.receipts)

    ends = {"save": save, "collect": ds.take_all, "native": lambda: ds.write_parquet(native)}
    try:
        return terminate(TreeSampler(roots), args.objects, terminator, ends)
    finally:
        ray.shutdown()
        shutil.rmtree(ray_dir, ignore_errors=True)


def python_workers(cluster) -> list[psutil.Process]:
    """The Python processes under the executors of a StandaloneCluster (each executor's pyspark
    daemon and the workers it forked)."""
    out = []
    for daemon in cluster.procs[1:]:
        for p in psutil.Process(daemon.pid).children(recursive=True):
            try:
                if "python" in p.name():
                    out.append(p)
            except psutil.Error:
                pass
    return out


def measure_k(args: argparse.Namespace) -> int:
    """Spark's k for runstore.spark.save (docs/spark.md, "How big a partition on Spark"): saves
    of partitions of s objects of --mib each, the largest Python worker's peak RSS and address
    space against s, fitted as base + c * s * D; then k = (M - base) / (c * M) for a Python
    worker's share M of spark.executor.pyspark.memory (--memory over one core)."""
    import runstore
    from runstore import spark as rss
    from runstore.integrations._plan import parse_size

    D = int(args.mib * MIB)
    M = parse_size(args.memory, "memory")
    sizes = [4, 8, 16, 24, 32]
    with (
        tempfile.TemporaryDirectory(dir=args.dir) as tmp,
        rss.StandaloneCluster(workers=args.workers, cores=1, memory="1g") as cluster,
    ):
        spark = cluster.session("spark-k", {"spark.driver.memory": args.driver_memory})
        spark.sparkContext.setLogLevel("ERROR")
        sc = spark.sparkContext
        sc.parallelize(range(4), 4).map(lambda i: make(i, 0.01)).count()  # Python workers up
        rss_of = lambda p: p.memory_info().rss  # noqa: E731
        vms_of = lambda p: p.memory_info().vms  # noqa: E731
        base_rss = max(rss_of(p) for p in python_workers(cluster))
        base_vms = max(vms_of(p) for p in python_workers(cluster))
        print(f"Python worker before: RSS {base_rss / MIB:.0f} MiB, address space "
              f"{base_vms / MIB:.0f} MiB; D = {args.mib:g} MiB, T = 1")  # fmt: skip
        rows = []
        for s in sizes:
            n = s * args.workers * 2
            store = runstore.open(os.path.join(tmp, f"s{s}"), "a")
            peak = {"rss": 0, "vms": 0}
            stop = threading.Event()

            def sample(peak=peak, stop=stop) -> None:
                while not stop.is_set():
                    for p in python_workers(cluster):
                        try:
                            info = p.memory_info()
                        except psutil.Error:
                            continue
                        peak["rss"] = max(peak["rss"], info.rss)
                        peak["vms"] = max(peak["vms"], info.vms)
                    stop.wait(0.05)

            t = threading.Thread(target=sample, daemon=True)
            t.start()
            rdd = sc.parallelize(range(n), n // s).map(lambda i: make(i, args.mib)).map(demean)
            if args.materialize:  # a pipeline that holds its partition whole
                rdd = rdd.mapPartitions(lambda it: list(it))
            receipts = rss.save(rdd, store, name="trace")
            stop.set()
            t.join()
            assert all(r.ok for r in receipts), receipts
            rows.append((s, peak["rss"], peak["vms"]))
            mib = {k: v / MIB for k, v in peak.items()}
            print(
                f"  s = {s:2d} objects ({s * D / MIB:4.0f} MiB a partition): Python worker "
                f"peak RSS {mib['rss']:5.0f} MiB, address space {mib['vms']:5.0f} MiB"
            )
    x = np.array([s * D for s, _, _ in rows], dtype=float)
    for what, col in (("RSS", 1), ("address space", 2)):
        y = np.array([r[col] for r in rows], dtype=float)
        c, base = np.polyfit(x, y, 1)
        k = (M - base) / (c * M)
        print(f"fit ({what}): peak = {base / MIB:.0f} MiB + {c:.2f} x partition bytes; "
              f"k = (M - base) / (c * M) = ({M / MIB:.0f} - {base / MIB:.0f}) / ({c:.2f} * "
              f"{M / MIB:.0f}) = {k:.2f}")  # fmt: skip
    return 0


def run_case(args: argparse.Namespace) -> None:
    engine, terminator = args.case.split(":")
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        fn = {"dask": run_dask, "spark": run_spark, "ray": run_ray}[engine]
        out = fn(args, terminator, os.path.join(tmp, "store"))
    out.update(engine=engine, terminator=terminator, objects=args.objects, mib=args.mib)
    print("RESULT " + json.dumps(out), flush=True)


# -- the driver of the benchmark ----------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, nargs="+", default=[200, 1000])
    ap.add_argument("--mib", type=float, default=4.0, help="size of an object, MiB")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory", default="1g", help="memory of a worker (Dask) or executor (Spark)")
    ap.add_argument("--driver-memory", default="1g", help="spark.driver.memory")
    ap.add_argument("--per-partition", type=int, default=8, help="objects in a partition")
    ap.add_argument("--engines", default="dask,spark,ray")
    ap.add_argument("--terminators", default="save,collect,native")
    ap.add_argument("--dir", default=os.environ.get("RUNSTORE_BENCH_DIR"), help="scratch dir")
    ap.add_argument("--json", help="write every result to this file")
    ap.add_argument("--plot", help="draw the peaks and times to this PNG")
    ap.add_argument("--from-json", help="draw --plot from a --json file of an earlier run")
    ap.add_argument("--measure-k", action="store_true", help="measure Spark's k instead")
    ap.add_argument(
        "--materialize", action="store_true", help="with --measure-k: partitions held whole"
    )
    ap.add_argument("--case", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure_k:
        return measure_k(args)
    if args.case:
        args.objects = args.objects[0]
        run_case(args)
        return 0
    if args.from_json:
        with open(args.from_json) as f:
            results = json.load(f)
        for r in results:
            print_row(r)
        if args.plot:
            plot(results, args.plot)
        return check_targets(results)
    results = []
    for n in args.objects:
        for engine in args.engines.split(","):
            for terminator in args.terminators.split(","):
                cmd = [sys.executable, __file__, "--case", f"{engine}:{terminator}"]
                cmd += ["--objects", str(n), "--mib", str(args.mib), "--workers", str(args.workers)]
                cmd += ["--memory", args.memory, "--driver-memory", args.driver_memory]
                cmd += ["--per-partition", str(args.per_partition)]
                if args.dir:
                    cmd += ["--dir", args.dir]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
                if proc.returncode != 0 or not lines:
                    print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
                    print(f"spark_vs_dask: the case {engine}:{terminator} N={n} failed")
                    return 1
                r = json.loads(lines[-1][len("RESULT ") :])
                results.append(r)
                print_row(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.plot:
        plot(results, args.plot)
    return check_targets(results)


def worker_peak(r: dict) -> int:
    return max((v for k, v in r["peaks"].items() if k.startswith("worker")), default=0)


def print_row(r: dict) -> None:
    worker = worker_peak(r)
    data = r["objects"] * r["mib"]
    status = "ok" if r["ok"] else f"FAILED: {r['error']}"
    print(
        f"{r['engine']:<6} {r['terminator']:<8} N={r['objects']:<6} ({data:,.0f} MiB) "
        f"{r['seconds']:7.2f} s  driver peak {r['peaks']['driver'] / MIB:7.0f} MiB  "
        f"largest worker peak {worker / MIB:7.0f} MiB  {status}",
        flush=True,
    )


def plot(results: list[dict], path: str) -> None:
    """Peak RSS of the driver and of the largest worker, and wall time, against the data's size:
    a line per engine and terminator, a cross where the case failed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    styles = {"dask": "tab:blue", "spark": "tab:orange", "ray": "tab:green"}
    for engine in sorted({r["engine"] for r in results}):
        for terminator, dash in (("save", "-"), ("collect", ":"), ("native", "--")):
            rows = sorted(
                (r for r in results if r["engine"] == engine and r["terminator"] == terminator),
                key=lambda r: r["objects"],
            )
            if not rows:
                continue
            x = [r["objects"] * r["mib"] / 1024 for r in rows]
            ys = (
                [r["peaks"]["driver"] / MIB for r in rows],
                [worker_peak(r) / MIB for r in rows],
                [r["seconds"] for r in rows],
            )
            for ax, y in zip(axes, ys):
                ax.plot(
                    x, y, dash, color=styles[engine], marker="o", label=f"{engine} {terminator}"
                )
                bad = [(xi, yi) for xi, yi, r in zip(x, y, rows) if not r["ok"]]
                if bad:
                    ax.plot(*zip(*bad), "x", color="red", markersize=12, mew=2)
    for ax, title in zip(
        axes, ("driver peak RSS (MiB)", "largest worker peak RSS (MiB)", "wall time (s)")
    ):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("data (GiB)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(
        "Dask, Spark and Ray, ended by runstore (save), by collecting, or by their own writers "
        "(native); x: the case failed",
        fontsize=10,
    )
    fig.savefig(path, dpi=80, bbox_inches="tight")
    plt.close(fig)


def check_targets(results: list[dict]) -> int:
    missed = []
    for engine in {r["engine"] for r in results}:
        saves = sorted(
            (r for r in results if r["engine"] == engine and r["terminator"] == "save"),
            key=lambda r: r["objects"],
        )
        for r in saves:
            if not r["ok"]:
                missed.append(f"{engine} save of {r['objects']} failed: {r['error']}")
        if len(saves) > 1 and saves[-1]["peaks"]["driver"] > 1.5 * saves[0]["peaks"]["driver"]:
            missed.append(
                f"{engine}: the driver's peak grew from {saves[0]['peaks']['driver'] / MIB:.0f} "
                f"to {saves[-1]['peaks']['driver'] / MIB:.0f} MiB with save"
            )
    for m in missed:
        print("MISSED: " + m)
    return 3 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
