"""The tools on a sweep of N experiments, each in a process of its own: wall time and peak RSS.

The sweep is what users run: default (hashed) experiment ids, 5 float parameters defined with
``define_experiments``, then ``run_experiments`` on 2 workers (each experiment's status,
"running" then "done" or "failed", and when done 3 scalar outcomes and a 100-point float64
series); 2% fail with an error, and 1% are set back to pending as an interrupted run leaves
them. Then each tool runs on it in a fresh process (the command line as a user types it, the
Python calls through ``python -c``), and its wall time and peak RSS (``ru_maxrss`` of the
process, from ``wait4``) are printed as one table, with the store's size.

    .venv/bin/python bench/python/tools_bench.py --n 10000 100000 1000000
    .venv/bin/python bench/python/tools_bench.py --n 100000 --keep   # keeps the store

The stores go under $RUNSTORE_BENCH_DIR, else /var/tmp (a disk, not tmpfs). The figures, before
and after each change to a tool, are in docs/performance.md ("The tools at 1,000,000
experiments").
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

BUILD = r"""
import sys, time
import numpy as np
import pandas as pd
import runstore
import runstore.experiments._records as ex

sys.path.insert(0, sys.argv[3])
import tools_bench

path, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(7)
design = pd.DataFrame({f"p{i}": rng.random(n) for i in range(5)})
store = runstore.open(path)
t = time.perf_counter()
store.define_experiments(design)
print(f"define {time.perf_counter() - t:.3f}", file=sys.stderr)
# The sweep as run_experiments runs it (its chunks, "running" then "done" or "failed" per
# experiment); then 1% set back to pending, as an interrupted run leaves them.
s = runstore.run_experiments(store, tools_bench.outcomes, workers=2, progress=False)
ids = runstore.experiments.design(store)["experiment"].tolist()
with store.writer(_allow_reserved=True) as w:
    w.log_many(ids[: n // 100], **{ex.STATE: ["pending"] * (n // 100)})
"""


def outcomes(p0: float, p1: float, p2: float, p3: float, p4: float) -> dict:
    """What each experiment of the sweep returns: 3 scalars and a 100-point series; 2% fail."""
    import numpy as np

    if p0 < 0.02:
        raise ValueError("diverged")
    return {"y0": p0 + p1, "y1": p2 * p3, "y2": p4, "trace": np.full(100, p0)}


TOOLS = {
    "info": ["{cli}", "info", "{store}"],
    "status": ["{cli}", "status", "{store}"],
    "status --json": ["{cli}", "status", "--json", "{store}"],
    "ls --runs": ["{cli}", "ls", "--runs", "{store}"],
    "verify": ["{cli}", "verify", "{store}"],
    "export tar": ["{cli}", "--no-progress", "export", "tar", "{store}", "{out}/r.tar.gz"],
    "export parquet": ["{cli}", "--no-progress", "export", "parquet", "{store}", "{out}/p"],
    "report": ["{cli}", "report", "{store}", "-o", "{out}/r.html"],
    "design()": [
        "{py}",
        "-c",
        "import runstore, runstore.experiments as ex; ex.design(runstore.open('{store}', 'r'))",
    ],
    "status()": [
        "{py}",
        "-c",
        "import runstore, runstore.experiments as ex; ex.status(runstore.open('{store}', 'r'))",
    ],
    "load_results()": ["{py}", "-c", "import runstore; runstore.load_results('{store}')"],
    # The parent of a sweep over the pending 1% (and the failed 2%, retried): it plans over every
    # experiment. Its own peak (its workers are other processes), printed by itself.
    "run_experiments() parent": [
        "{py}",
        "-c",
        "import resource, runstore; "
        "runstore.run_experiments('{store}', dict, workers=2, progress=False); "
        "print('own_peak_mib', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)",
    ],
}


def run(argv: list[str]) -> tuple[float, float, int, str]:
    """Wall seconds, peak RSS MiB, exit status and the tail of stderr of one process. The peak
    is wait4's (the process and the children it waited for), or the process's own where it
    prints it as "own_peak_mib X"."""
    t = time.perf_counter()
    with tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as out:
        p = subprocess.Popen(argv, stdout=out, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        seconds = time.perf_counter() - t
        err.seek(0)
        tail = err.read().decode(errors="replace").strip().splitlines()[-1:]
        out.seek(0)
        own = [ln.split()[1] for ln in out.read().decode().splitlines() if ln.startswith("own_")]
    peak = float(own[-1]) if own else usage.ru_maxrss / 1024
    return seconds, peak, os.waitstatus_to_exitcode(status), " ".join(tail)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--tools", help="comma-separated subset of: " + ", ".join(TOOLS))
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--plot", help="draw each tool's time and peak RSS against N to this PNG")
    args = ap.parse_args()
    tools = args.tools.split(",") if args.tools else list(TOOLS)
    base = os.environ.get("RUNSTORE_BENCH_DIR") or "/var/tmp"
    cli = shutil.which("runstore", path=os.path.dirname(sys.executable)) or "runstore"
    here = os.path.dirname(os.path.abspath(__file__))
    print(f"tools_bench: {sys.executable}, {cli}, under {base}, load {os.getloadavg()[0]:.2f}")
    results: dict[str, dict[int, str]] = {}
    for n in args.n:
        d = tempfile.mkdtemp(prefix=f"runstore-tools-{n}-", dir=base)
        store = os.path.join(d, "store")
        out = os.path.join(d, "out")
        os.mkdir(out)
        t = time.perf_counter()
        p = subprocess.run(
            [sys.executable, "-c", BUILD, store, str(n), here],
            capture_output=True,
            text=True,
        )
        if p.returncode != 0:
            print(p.stderr, file=sys.stderr)
            return 1
        size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(store) for f in fs)
        define = p.stderr.strip().split()[-1]
        print(
            f"n={n:,}: built in {time.perf_counter() - t:.1f} s, {size / 2**20:.0f} MiB; "
            f"define_experiments {float(define):.2f} s"
        )
        results.setdefault("define_experiments", {})[n] = f"{float(define):.2f} s"
        for tool in tools:
            argv = [a.format(cli=cli, py=sys.executable, store=store, out=out) for a in TOOLS[tool]]
            seconds, rss, rc, tail = run(argv)
            cell = f"{seconds:.2f} s, {rss:.0f} MiB" + ("" if rc == 0 else f" (exit {rc})")
            results.setdefault(tool, {})[n] = cell
            print(f"  {tool:16s} {cell}" + (f"  {tail}" if rc != 0 else ""), flush=True)
            for f in os.listdir(out):
                path = os.path.join(out, f)
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        if args.keep:
            print(f"  kept: {store}")
        else:
            shutil.rmtree(d)
    print("\n| tool | " + " | ".join(f"{n:,} experiments" for n in args.n) + " |")
    print("|---|" + "---|" * len(args.n))
    for tool, cells in results.items():
        print(f"| {tool} | " + " | ".join(cells.get(n, "-") for n in args.n) + " |")
    if args.plot:
        plot(results, args.plot)
    return 0


def plot(results: dict[str, dict[int, str]], path: str) -> None:
    """Each tool's wall time and peak RSS against the number of experiments, log-log: a cost
    that grows in proportion to N is a line of slope 1, a flat one a horizontal line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(13, 5.5))
    colors = plt.get_cmap("tab20").colors
    for k, (tool, cells) in enumerate(results.items()):
        style = {"color": colors[k % len(colors)], "marker": "osD^v<>"[k % 7], "label": tool}
        ns, secs, mibs = [], [], []
        for n, cell in sorted(cells.items()):
            parts = cell.split()
            ns.append(n)
            secs.append(float(parts[0]))
            mibs.append(float(parts[2]) if len(parts) > 2 else float("nan"))
        ax_t.plot(ns, secs, **style)
        if any(m == m for m in mibs):
            ax_m.plot(ns, mibs, **style)
    for ax, what in ((ax_t, "wall time (s)"), (ax_m, "peak RSS (MiB)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("experiments")
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = ax_t.get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="center right")
    fig.suptitle("runstore tools on a sweep that run_experiments wrote (tools_bench.py)")
    fig.tight_layout(rect=(0, 0, 0.83, 1))
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    sys.exit(main())
