#!/usr/bin/env python3
"""Reading one run back, by how the runs were written: run by run, step by step, or split.

--runs runs of --steps float64 steps each go into series "loss", in one of three ways, each into
a store of its own:

  run_major   every step of run 0, then of run 1, ...       (a sweep, a job per run)
  step_major  step 0 of every run, then step 1, ...          (vectorised environments)
  split       run i by writer i % 8, each run whole          (ranks of a sweep, a worker pool)

Then, for each store, --repeat times: drop the page cache (root only; otherwise warm), open the
store and read one run with ``store.scan("loss", runs=[run])``, then scan the whole series in the
same snapshot. The first scan of a snapshot also resolves keys written twice: in step_major and
split, where blocks' key ranges overlap, that reads the keys of every block. Prints the medians;
the records read back are checked against what was written.

    .venv/bin/python bench/python/layout_bench.py                      # 64 runs x 50,000 steps
    .venv/bin/python bench/python/layout_bench.py --runs 8 --steps 1000 --repeat 1

Exit status: 0, or 1 when a scan returned wrong records.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "compare"))

from common import drop_caches

import runstore

CHUNK_STEPS = 100  # steps per log_many call in step_major
WRITERS = 8  # writers of split


def write(path: str, layout: str, runs: int, steps: int) -> None:
    store = runstore.open(path)
    writers = [store.writer() for _ in range(WRITERS if layout == "split" else 1)]
    if layout == "step_major":
        for start in range(0, steps, CHUNK_STEPS):
            step = np.repeat(np.arange(start, min(start + CHUNK_STEPS, steps)), runs)
            run = np.tile(np.arange(runs), len(step) // runs)
            writers[0].log_many(run, steps=step, loss=value(run, step))
    else:  # run by run: run i whole, by writer i % len(writers)
        every_step = np.arange(steps)
        for run in range(runs):
            writers[run % len(writers)].log_many(
                np.full(steps, run), steps=every_step, loss=value(run, every_step)
            )
    for w in writers:
        w.close()


def value(run, step):
    return np.asarray(run) * 1e6 + np.asarray(step) * 0.5


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=64)
    ap.add_argument("--steps", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--dir", default=None, help="where the stores go (default: a temporary directory)"
    )
    args = ap.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="layout_bench_", dir="/var/tmp")
    os.makedirs(work, exist_ok=True)
    run = args.runs // 3
    print(
        f"layout_bench: {args.runs} runs x {args.steps:,} steps, reading run {run}, "
        f"repeat {args.repeat}, runstore {runstore.__version__}"
    )
    ok = True
    try:
        for layout in ("run_major", "step_major", "split"):
            path = os.path.join(work, layout)
            shutil.rmtree(path, ignore_errors=True)
            t = time.perf_counter()
            write(path, layout, args.runs, args.steps)
            write_s = time.perf_counter() - t
            one, full, cold = [], [], True
            for _ in range(args.repeat):
                cold = drop_caches() and cold
                t = time.perf_counter()
                store = runstore.open(path, mode="r")
                d = store.scan("loss", runs=[run])
                one.append(time.perf_counter() - t)
                t = time.perf_counter()
                everything = store.scan("loss", keys=False)
                full.append(time.perf_counter() - t)
                order = np.argsort(d["step"])
                ok = (
                    ok
                    and np.array_equal(d["step"][order], np.arange(args.steps))
                    and np.array_equal(d["value"][order], value(run, np.arange(args.steps)))
                    and len(everything["value"]) == args.runs * args.steps
                )
            print(
                f"  {layout:10s} written in {write_s:6.2f} s; {'cold' if cold else 'WARM'} open + "
                f"scan(runs=[{run}]) {1e3 * statistics.median(one):8.1f} ms (min "
                f"{1e3 * min(one):.1f}); "
                f"then the whole series {1e3 * statistics.median(full):7.1f} ms"
            )
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    if not ok:
        print("layout_bench: a scan returned wrong records")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
