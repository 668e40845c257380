#!/usr/bin/env python3
"""Store.to_pandas and Store.to_arrow of series whose (run, step) keys differ.

S series of one record each (--series, default 500 2000), series i at run i, step i, so that no
two series share a key and the table is S rows by S series: the case whose cost grew with the
square of S when the series were joined one after another (an outer join per series). Also S
series of --records records each at shared keys but logged in a different order per series
(the path that sorts each series and lines them up). For each: seconds of to_pandas and
to_arrow (best of --repeat), and the table's size.

    .venv/bin/python bench/python/frame_bench.py --series 500 2000 8000

Target (docs/performance.md, "to_pandas of series with different keys"): 2,000 series of one
record each in at most 2 s.

Exit status: 0 when the target is met (or not measured), 3 when the run finished but missed it,
1 on error.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

import runstore


def disjoint(path: str, n_series: int) -> runstore.Store:
    store = runstore.open(path)
    with store.writer() as w:
        for i in range(n_series):
            w.log(i, step=i, values={f"s{i}": float(i)})
    store.refresh()
    return store


def shuffled(path: str, n_series: int, records: int, seed: int) -> runstore.Store:
    store = runstore.open(path)
    rng = np.random.default_rng(seed)
    runs = np.arange(records, dtype=np.int64)
    with store.writer() as w:
        for i in range(n_series):
            order = rng.permutation(records)
            w.log_many(runs[order], **{f"s{i}": runs[order] * 0.5})
    store.refresh()
    return store


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--series", type=int, nargs="+", default=[500, 2000])
    ap.add_argument("--records", type=int, default=1000, help="records per shuffled series")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=20261206)
    ap.add_argument("--dir", default=None, help="where the stores go (default: a temporary dir)")
    args = ap.parse_args()
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="runstore-frame-", dir=args.dir)
    print(f"to_pandas / to_arrow, best of {args.repeat} (seed {args.seed}); numpy {np.__version__}")
    print(f"{'layout':<28} {'series':>7} {'rows':>7} {'to_pandas s':>12} {'to_arrow s':>11}")
    target_ok = None
    try:
        for n in args.series:
            for layout in ("one record each, disjoint", "shared keys, shuffled"):
                path = os.path.join(tmp, f"{n}-{layout.split()[0]}")
                if layout.startswith("one"):
                    store = disjoint(path, n)
                else:
                    store = shuffled(path, n, args.records, args.seed)
                df = store.to_pandas()
                rows = len(df)
                assert df.shape[1] == n + 2, df.shape
                tp = best(store.to_pandas, args.repeat)
                ta = best(store.to_arrow, args.repeat)
                print(f"{layout:<28} {n:>7,} {rows:>7,} {tp:>12.3f} {ta:>11.3f}")
                if layout.startswith("one") and n == 2000:
                    target_ok = tp <= 2.0
                shutil.rmtree(path, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if target_ok is not None:
        print(f"2,000 disjoint series: target <= 2 s {'met' if target_ok else 'MISSED'}")
    return 3 if target_ok is False else 0


if __name__ == "__main__":
    sys.exit(main())
