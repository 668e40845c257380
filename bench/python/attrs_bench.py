"""What `store.attrs` costs: an update (a revision file synced, and two directories) and a read
(a listing of ATTRS.d and one small file), each timed in one process on a fresh store.

    .venv/bin/python bench/python/attrs_bench.py [--updates 100] [--reads 1000] [--dir DIR]

The store is made under --dir, else RUNSTORE_BENCH_DIR (default /var/tmp): a file system like
the one users' stores are on, since an update is mostly its fsyncs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import runstore


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--updates", type=int, default=100)
    ap.add_argument("--reads", type=int, default=1000)
    ap.add_argument("--dir", help="where to make the store (its parent must exist)")
    args = ap.parse_args()
    base = args.dir or os.environ.get("RUNSTORE_BENCH_DIR") or "/var/tmp"
    os.makedirs(base, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="runstore-attrs-", dir=base) as d:
        store = runstore.open(os.path.join(d, "store"))
        updates = []
        for i in range(args.updates):
            t = time.perf_counter()
            store.attrs["step"] = i
            updates.append(time.perf_counter() - t)
        reads = []
        for _ in range(args.reads):
            t = time.perf_counter()
            value = store.attrs["step"]
            reads.append(time.perf_counter() - t)
        assert value == args.updates - 1
    print(
        f"attrs under {base}: update median {statistics.median(updates) * 1e3:.1f} ms "
        f"(p90 {statistics.quantiles(updates, n=10)[-1] * 1e3:.1f}), "
        f"read median {statistics.median(reads) * 1e3:.2f} ms "
        f"(p90 {statistics.quantiles(reads, n=10)[-1] * 1e3:.2f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
