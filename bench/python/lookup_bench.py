#!/usr/bin/env python3
"""Lookups by run id: runstore's default (hashed) experiment ids against integer ids.

Two stores of the same sweep, written by 4 writers in commits of 1,000 experiments (as the
runner's worker processes write them): N experiments (--n) defined with
``store.define_experiments`` (one parameter, ``seed``), each a scalar ``y`` and a 100-point
float64 ``curve`` (its own, ``k + linspace(0, 1, 100)`` for experiment k). One store uses
experiment ids as runstore makes them (``e`` and 16 hex digits of a hash of the parameters),
the other the integers 0..N-1 (an ``experiment`` column). With --no-design the stores hold the
outcomes only, under run ids ``e`` + 16 hex digits of a hash of k and under k, and are exported
in the order of their run ids (sorted, so the hashed store's rows come in random order). For
each:

  get      Store.get(id, "curve") of 10,000 ids in random order (the first one builds the
           series' run index), microseconds per lookup
  get1     the first lookup of a fresh store object (what a one-off `runstore get` pays)
  export   Store.export_tar of the whole store (a get per experiment and outcome)

Targets (docs/performance.md): hashed-id get at most 20 us; hashed-id export at most 1.5x the
integer-id export.

    .venv/bin/python bench/python/lookup_bench.py --n 100000

Exit status: 0 when the targets are met, 3 when the run finished but missed one, 1 on error.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import sys
import tempfile
import time

import numpy as np
import pandas as pd

import runstore


def hashed_id(i: int) -> str:
    return "e" + hashlib.blake2b(i.to_bytes(8, "little"), digest_size=8).hexdigest()


def define(path: str, n: int, hashed: bool) -> list:
    """The sweep's design: ids as define_experiments makes them, or the integers 0..n-1."""
    design = pd.DataFrame({"seed": np.arange(n, dtype=np.int64)})
    if not hashed:
        design.insert(0, "experiment", np.arange(n, dtype=np.int64))
    return runstore.open(path).define_experiments(design)["experiment"].tolist()


def write(path: str, ids: list, writers: int = 4, batch: int = 1000) -> float:
    store = runstore.open(path)
    t0 = time.perf_counter()
    ws = [store.writer() for _ in range(writers)]
    curve = np.linspace(0.0, 1.0, 100)
    for start in range(0, len(ids), batch):
        w = ws[(start // batch) % writers]
        chunk = ids[start : start + batch]
        k = np.arange(len(chunk), dtype=np.float64) + start
        w.log_many(
            runs=chunk,
            steps=[0] * len(chunk),
            y=k,
            curve=k[:, None] + curve,
        )
        w.commit()
    for w in ws:
        w.close()
    return time.perf_counter() - t0


def measure(path: str, ids: list, lookups: int, rng: random.Random, tmp: str) -> dict:
    store = runstore.open(path, mode="r")
    t0 = time.perf_counter()
    first = store.get(ids[0], "curve")
    get1 = time.perf_counter() - t0
    assert first[0] == 0.0, first
    sample = rng.sample(ids, min(lookups, len(ids)))
    t0 = time.perf_counter()
    for run in sample:
        store.get(run, "curve")
    get = (time.perf_counter() - t0) / len(sample)
    # Right answers: the value at position k of the sweep is its start offset.
    pos = {run: k for k, run in enumerate(ids)}
    for run in sample[:200]:
        k = pos[run]
        assert store.get(run, "y") == float(k), (run, k)
    out = os.path.join(tmp, "out.tar.gz")
    t0 = time.perf_counter()
    r = runstore.open(path, mode="r").export_tar(out)
    export = time.perf_counter() - t0
    assert r["experiments"] == len(ids), r
    os.remove(out)
    return {"get_us": get * 1e6, "get1_ms": get1 * 1e3, "export_s": export}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="experiments (default 100,000)")
    ap.add_argument("--lookups", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--dir", default=None, help="where the stores go (default: a temporary dir)")
    ap.add_argument(
        "--no-design",
        action="store_true",
        help="outcomes only, no define_experiments: exported in the order of the run ids",
    )
    args = ap.parse_args()
    rng = random.Random(args.seed)
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="runstore-lookup-", dir=args.dir)
    try:
        results = {}
        for kind in ("hashed", "integer"):
            path = os.path.join(tmp, kind)
            if args.no_design:
                ids = [hashed_id(i) for i in range(args.n)] if kind == "hashed" else []
                ids = ids or list(range(args.n))
            else:
                ids = define(path, args.n, kind == "hashed")
            w = write(path, ids)
            results[kind] = measure(path, ids, args.lookups, rng, tmp)
            results[kind]["write_s"] = w
        what = "outcomes only (--no-design)" if args.no_design else "a defined sweep"
        print(
            f"lookups, {args.n:,} experiments, {what} (seed {args.seed}), 4 writers, "
            "commits of 1,000"
        )
        print(f"{'ids':<8} {'write s':>8} {'get us':>8} {'first get ms':>13} {'export_tar s':>13}")
        for kind, r in results.items():
            print(
                f"{kind:<8} {r['write_s']:8.2f} {r['get_us']:8.1f} {r['get1_ms']:13.1f} "
                f"{r['export_s']:13.2f}"
            )
        ratio = results["hashed"]["export_s"] / results["integer"]["export_s"]
        ok_get = results["hashed"]["get_us"] <= 20
        print(
            f"hashed get {results['hashed']['get_us']:.1f} us (target <= 20: "
            f"{'met' if ok_get else 'MISSED'}); hashed/integer export {ratio:.2f}x "
            f"(target <= 1.5: {'met' if ratio <= 1.5 else 'MISSED'})"
        )
        return 0 if ok_get and ratio <= 1.5 else 3
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
