#!/usr/bin/env python3
"""Ending a Dask workflow: runstore.dask.save against np.save, to_zarr and compute().

On a cluster of 2 worker processes (1 thread each, 1 GiB memory limit each) and a scheduler in a
process of its own (``distributed``'s SubprocessCluster), N outputs
(--outputs, several sizes in one run) of 8 MiB each (float64 arrays a worker makes from its index:
``default_rng(i).random(1 Mi)``), in partitions of 10 outputs, are ended four ways:

  runstore   ``runstore.dask.collect(runstore.dask.save(bag, store))``: each worker's writer
             logs its partitions and commits; the client gathers one small receipt a partition
  np.save    ``bag.map_partitions`` writing one ``.npy`` per output on the workers, returning the
             file names, ``.compute()`` gathering the names (not durable: left in the page cache;
             the time of a ``sync(2)`` right after it is printed, the writeback it left behind)
  np.save+fsync  the same with each file fsynced before the task returns, as a commit is
  to_zarr    the same outputs as a dask array of (1, 1 Mi) chunks, ``to_zarr`` into a directory
  compute    ``bag.compute()``: every output gathered into the client (only where N x 8 MiB is at
             most --compute-limit; larger sizes are skipped with the reason printed)

Each case runs in a client process of its own with a new cluster, so that one case's memory does
not stay in the next one's figures. For each: wall time and the peak RSS of the client, the
scheduler and the workers (``runstore.dask.MemoryMonitor``, sampled every 50 ms). Targets
(docs/performance.md): runstore at least as fast as np.save on the workers (ratio <= 1.0), and the
client's peak RSS flat as N grows (at most 50 MiB more at the largest N than at the smallest).

--measure-k instead measures the k of ``runstore.dask.plan`` (docs/dask.md): the same save with
partitions of s = 4 .. 32 outputs, the workers' peak RSS against s, fitted as
``base + c * s * D``; then k = (pause * M - base) / (c * M), where pause is Dask's
``distributed.worker.memory.pause`` fraction (0.8) at which a worker stops taking tasks. The
save streams a bag's partition (c ~ 0); ``--materialize`` measures a pipeline that holds its
partition whole (``map_partitions(list)``), which the bound is for.

    .venv/bin/python bench/python/dask_bench.py --outputs 200 2000
    .venv/bin/python bench/python/dask_bench.py --measure-k [--materialize]

Exit status: 0 when the targets are met, 3 when the run finished but missed one, 1 on error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import dask
import dask.array as da
import dask.bag as db
import numpy as np
from distributed import Client
from distributed.deploy.subprocess import SubprocessCluster

import runstore
from runstore import dask as rsd

MIB = 2**20
OUTPUT_BYTES = 8 * MIB
PER_PARTITION = 10
WORKER_MEMORY = 2**30  # each worker's memory_limit, M in docs/dask.md


def make(i: int) -> np.ndarray:
    return np.random.default_rng(i).random(OUTPUT_BYTES // 8)


def save_npy_part(indices, directory, durable=False):
    names = []
    for i in indices:
        name = os.path.join(directory, f"out-{i:06d}.npy")
        with open(name, "wb") as f:
            np.save(f, make(i))
            if durable:
                f.flush()
                os.fsync(f.fileno())
        names.append(name)
    if durable:
        fd = os.open(directory, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    return names


def monitored(client, fn):
    with rsd.MemoryMonitor(client) as mon:
        t0 = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - t0
    peaks = mon.peaks
    workers = [v for k, v in peaks.items() if k.startswith("worker")]
    return result, {
        "seconds": seconds,
        "client_mib": peaks.get("client", 0) / MIB,
        "scheduler_mib": peaks.get("scheduler", 0) / MIB,
        "worker_mib": max(workers, default=0) / MIB,
    }


def run_case(client, case: str, n: int, work: str) -> dict:
    os.makedirs(work, exist_ok=True)
    bag = db.from_sequence(range(n), partition_size=PER_PARTITION)
    if case == "runstore":
        store = runstore.open(os.path.join(work, "store"))

        def go():
            receipts = rsd.collect(rsd.save(bag.map(make), store, name="out"), client)
            s = rsd.summarize(receipts)
            if s["failed"] or s["records"] != n:
                raise RuntimeError(f"runstore save: {s}")
            return s

        _, fig = monitored(client, go)
        store.refresh()
        check = store.get((n - 1) // PER_PARTITION, "out", (n - 1) % PER_PARTITION)
        if not np.array_equal(check, make(n - 1)):
            raise RuntimeError("runstore: the last output reads back wrong")
    elif case in ("np.save", "np.save+fsync"):
        durable = case == "np.save+fsync"

        def go():
            names = bag.map_partitions(save_npy_part, work, durable).compute()
            if len(names) != n:
                raise RuntimeError(f"np.save: {len(names)} files")
            return names

        names, fig = monitored(client, go)
        # What the plain np.save left to the kernel when it returned: the writeback of its dirty
        # pages, timed as a sync(2) right after (0 for the fsynced case, which waited for it).
        t0 = time.perf_counter()
        os.sync()
        fig["sync_after_s"] = time.perf_counter() - t0
        if not np.array_equal(np.load(names[-1]), make(n - 1)):
            raise RuntimeError("np.save: the last output reads back wrong")
    elif case == "to_zarr":
        blocks = [
            da.from_delayed(dask.delayed(make)(i)[None, :], (1, OUTPUT_BYTES // 8), np.float64)
            for i in range(n)
        ]
        arr = da.concatenate(blocks)
        target = os.path.join(work, "out.zarr")
        _, fig = monitored(client, lambda: arr.to_zarr(target))
        back = da.from_zarr(target)[n - 1].compute()
        if not np.array_equal(back, make(n - 1)):
            raise RuntimeError("to_zarr: the last output reads back wrong")
    elif case == "compute":
        out, fig = monitored(client, lambda: bag.map(make).compute())
        if len(out) != n:
            raise RuntimeError("compute: wrong count")
        del out
    else:
        raise ValueError(case)
    shutil.rmtree(work, ignore_errors=True)
    return fig


CASES = ("runstore", "np.save", "np.save+fsync", "to_zarr", "compute")


@contextlib.contextmanager
def new_cluster():
    """A client on a new cluster of two one-thread worker processes of WORKER_MEMORY each."""
    with (
        SubprocessCluster(
            n_workers=2,
            worker_kwargs={"nthreads": 1, "memory_limit": WORKER_MEMORY},
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(2)
        yield client


def one_case(args, base: str) -> int:
    """--case: one case in this process, on a new cluster; prints its figures as JSON."""
    with new_cluster() as client:
        try:
            fig = run_case(client, args.case, args.n, os.path.join(base, f"{args.case}-{args.n}"))
        except MemoryError as e:
            if args.case != "compute":
                raise
            # What the MsPASS team met: the gather does not fit. A result, not an error.
            fig = dict(seconds=float("nan"), client_mib=0.0, scheduler_mib=0.0, worker_mib=0.0)
            fig["error"] = f"MemoryError: {str(e)[:160]}"
    fig.update(case=args.case, outputs=args.n, gib=args.n * OUTPUT_BYTES / 2**30)
    print("FIGURES " + json.dumps(fig), flush=True)
    return 0


def termination(args, base: str) -> int:
    rows = []
    for n in args.outputs:
        for case in CASES:
            if case == "compute" and n * OUTPUT_BYTES > args.compute_limit * MIB:
                print(
                    f"  compute at N={n}: skipped, {n * OUTPUT_BYTES / 2**30:.1f} GiB would be "
                    f"gathered into the client (--compute-limit {args.compute_limit} MiB)",
                    flush=True,
                )
                continue
            cmd = [sys.executable, __file__, "--case", case, "--n", str(n), "--dir", base]
            r = subprocess.run(cmd, capture_output=True, text=True)
            lines = [x for x in r.stdout.splitlines() if x.startswith("FIGURES ")]
            if r.returncode != 0 or not lines:
                print(r.stdout[-2000:], r.stderr[-4000:], file=sys.stderr)
                raise RuntimeError(f"{case} at N={n} failed (exit status {r.returncode})")
            fig = json.loads(lines[-1][len("FIGURES ") :])
            rows.append(fig)
            if "error" in fig:
                print(f"  {case:<13} N={n:>5} ({fig['gib']:.1f} GiB): {fig['error']}", flush=True)
                continue
            print(
                f"  {case:<13} N={n:>5} ({fig['gib']:.1f} GiB): {fig['seconds']:7.1f} s, "
                f"client {fig['client_mib']:5.0f} MiB, scheduler {fig['scheduler_mib']:5.0f} MiB,"
                f" worker peak {fig['worker_mib']:5.0f} MiB"
                + (
                    f", sync(2) after it {fig['sync_after_s']:.1f} s"
                    if "sync_after_s" in fig
                    else ""
                ),
                flush=True,
            )
    print(
        "\n| case | outputs | GiB | seconds | client peak MiB | scheduler peak MiB "
        "| sync(2) after, s |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['case']} | {r['outputs']:,} | {r['gib']:.1f} | fails: MemoryError | | | |")
            continue
        print(
            f"| {r['case']} | {r['outputs']:,} | {r['gib']:.1f} | {r['seconds']:.1f} | "
            f"{r['client_mib']:.0f} | {r['scheduler_mib']:.0f} | "
            + (f"{r['sync_after_s']:.1f} |" if "sync_after_s" in r else " |")
        )
    missed = []
    for n in args.outputs:
        by = {r["case"]: r for r in rows if r["outputs"] == n}
        ratio = by["runstore"]["seconds"] / by["np.save"]["seconds"]
        durable = by["runstore"]["seconds"] / by["np.save+fsync"]["seconds"]
        print(
            f"N={n}: runstore / np.save time = {ratio:.2f} (target <= 1.0); "
            f"runstore / np.save+fsync = {durable:.2f}"
        )
        if ratio > 1.0:
            missed.append(f"runstore slower than np.save at N={n}")
    rs = [r for r in rows if r["case"] == "runstore"]
    growth = rs[-1]["client_mib"] - rs[0]["client_mib"]
    print(
        f"client peak RSS of runstore from N={rs[0]['outputs']} to N={rs[-1]['outputs']}: "
        f"{growth:+.0f} MiB (target <= 50)"
    )
    if growth > 50:
        missed.append("client RSS grew")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if missed:
        print("MISSED: " + "; ".join(missed))
        return 3
    return 0


def measure_k(args, base: str) -> int:
    with new_cluster() as client:
        return _measure_k(client, base, args.materialize)


def _measure_k(client, base: str, materialize: bool) -> int:
    memory = WORKER_MEMORY
    sizes = [4, 8, 16, 24, 32]
    base_rss = max(client.run(lambda: __import__("psutil").Process().memory_info().rss).values())
    print(f"worker RSS before: {base_rss / MIB:.0f} MiB; M = {memory / MIB:.0f} MiB, T = 1")
    print("partitions held whole (map_partitions(list))" if materialize else "maps that stream")
    points = []
    for s in sizes:
        work = os.path.join(base, f"k-{s}")
        store = runstore.open(os.path.join(work, "store"))
        n = 8 * s
        bag = db.from_sequence(range(n), partition_size=s).map(make)
        if materialize:  # a pipeline that holds its partition whole
            bag = bag.map_partitions(list)
        _, fig = monitored(
            client, lambda bag=bag, store=store: rsd.collect(rsd.save(bag, store), client)
        )
        part_mib = s * OUTPUT_BYTES / MIB
        points.append((part_mib, fig["worker_mib"]))
        print(
            f"  s = {s:>2} outputs ({part_mib:4.0f} MiB a partition): worker peak "
            f"{fig['worker_mib']:5.0f} MiB, {fig['seconds']:.1f} s",
            flush=True,
        )
        shutil.rmtree(work, ignore_errors=True)
    x = np.array([p[0] for p in points])
    y = np.array([p[1] for p in points])
    c, b = np.polyfit(x, y, 1)
    pause = dask.config.get("distributed.worker.memory.pause")
    k = (pause * memory / MIB - b) / (c * memory / MIB)
    print(f"fit: worker peak = {b:.0f} MiB + {c:.2f} x partition bytes")
    if c < 0.05:  # the partition streams: its size costs nothing
        alive = (y.max() - base_rss / MIB) / (OUTPUT_BYTES / MIB)
        print(f"c ~ 0: no k needed; the save holds {alive:.1f} outputs above the idle worker")
        return 0
    print(
        f"k = (pause * M - base) / (c * M) = ({pause} * {memory / MIB:.0f} - {b:.0f}) / "
        f"({c:.2f} * {memory / MIB:.0f}) = {k:.2f}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--outputs", type=int, nargs="+", default=[200, 2000])
    p.add_argument("--compute-limit", type=int, default=4096, help="MiB gathered by compute()")
    p.add_argument("--measure-k", action="store_true")
    p.add_argument(
        "--materialize", action="store_true", help="with --measure-k: partitions held whole"
    )
    p.add_argument("--dir", help="scratch directory (default: a new one under /var/tmp)")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    base = args.dir or tempfile.mkdtemp(prefix="runstore-dask-bench-", dir="/var/tmp")
    os.makedirs(base, exist_ok=True)
    try:
        if args.case:
            return one_case(args, base)
        print(
            f"2 worker processes, 1 thread and 1 GiB each, the scheduler in its own process; "
            f"outputs of {OUTPUT_BYTES // MIB} MiB, {PER_PARTITION} a partition; scratch {base}",
            flush=True,
        )
        return measure_k(args, base) if args.measure_k else termination(args, base)
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
