"""A whole sweep through run_experiments: the parent's and workers' peak memory, the blocks the
workers leave, and what the store then costs every process that opens it.

N experiments of default (hashed) ids and 5 float parameters are defined in a process of their
own; then ``run_experiments`` runs them all on 2 worker processes, each experiment returning 3
scalars and a 100-point float64 series (the shape of tools_bench's sweep), in a fresh process
that prints its own peak (VmHWM) and its largest worker's (``RUSAGE_CHILDREN``). Then a fresh
process opens the store read-only and prints what opening it cost (resident set before and
after). Once with chunks sized by rate (the default) and, where asked, once with
``commit_every=1`` (a commit per experiment, the default before).

    .venv/bin/python bench/python/runner_bench.py --n 100000 1000000
    .venv/bin/python bench/python/runner_bench.py --n 20000 --commit-every 1 None

Stores go under $RUNSTORE_BENCH_DIR, else /var/tmp. Figures: docs/performance.md, "Chunks
sized by rate".
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

DEFINE = r"""
import sys
import numpy as np, pandas as pd
import runstore
rng = np.random.default_rng(7)
n = int(sys.argv[2])
runstore.open(sys.argv[1]).define_experiments(
    pd.DataFrame({f"p{i}": rng.random(n) for i in range(5)}))
"""

SWEEP = r"""
import resource, sys, time
sys.path.insert(0, sys.argv[3])
import runstore, runner_bench

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024

if __name__ == "__main__":
    every = None if sys.argv[2] == "None" else int(sys.argv[2])
    t = time.perf_counter()
    s = runstore.run_experiments(sys.argv[1], runner_bench.outcomes, workers=2, progress=False,
                                 commit_every=every)
    assert s.done > 0 and s.failed == 0 and s.not_run == 0, s
    worker = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"{time.perf_counter() - t:.1f} {hwm():.0f} {worker:.0f}")
"""

OPEN = r"""
import sys
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
import runstore
before = rss()
s = runstore.open(sys.argv[1], "r")
segs = s.segments()
print(f"{rss() - before:.0f} {sum(g.blocks for g in segs)}")
"""


def outcomes(p0, p1, p2, p3, p4):
    import numpy as np

    return {"y0": p0 + p1, "y1": p2 * p3, "y2": p4, "trace": np.full(100, p0)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[20_000])
    ap.add_argument("--commit-every", nargs="+", default=["None"])
    ap.add_argument("--dir", help="where the stores go (default $RUNSTORE_BENCH_DIR, /var/tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the stores (their paths printed)")
    args = ap.parse_args()
    base = args.dir or os.environ.get("RUNSTORE_BENCH_DIR") or "/var/tmp"
    os.makedirs(base, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    print(f"runner_bench: {sys.executable}, under {base}, load {os.getloadavg()[0]:.2f}")
    rows = []
    for n in args.n:
        for every in args.commit_every:
            d = tempfile.mkdtemp(prefix=f"runstore-sweep-{n}-", dir=base)
            store = os.path.join(d, "store")
            try:
                subprocess.run([sys.executable, "-c", DEFINE, store, str(n)], check=True)
                out = subprocess.run(
                    [sys.executable, "-c", SWEEP, store, every, here],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout.split()
                seconds, parent, worker = (float(x) for x in out[-3:])
                opened = subprocess.run(
                    [sys.executable, "-c", OPEN, store], check=True, capture_output=True, text=True
                ).stdout.split()
                cost, blocks = float(opened[0]), int(opened[1])
            finally:
                if args.keep:
                    print(f"kept: {store}")
                else:
                    shutil.rmtree(d)
            row = (
                f"| {n:,} | {every} | {seconds:.1f} s | {parent:.0f} MiB | {worker:.0f} MiB | "
                f"{blocks:,} | {cost:.0f} MiB |"
            )
            print(row, flush=True)
            rows.append(row)
    print(
        "\n| experiments | commit_every | sweep | parent peak | largest worker | blocks "
        "| opening the store |"
    )
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
