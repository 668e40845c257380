#!/usr/bin/env python3
"""Long runs that log every step: runstore against tensorboardX and SQLite, 8 processes at once.

The workload of reinforcement-learning labs: --procs processes (8), one run each, log 4 float
metrics at every one of --steps steps (100,000), and make what they logged durable every 1,000
steps (a checkpoint). All processes run at once; each case in processes of its own:

  bare              the loop alone: computes the 4 values, stores nothing
  runstore_log      w.log(run, step=s, reward=..., ...) every step, w.commit() every 1,000; all
                    processes write into one store, a writer each
  runstore_batch    the same values gathered and written with w.log_many per 1,000, then commit
  tensorboardx      SummaryWriter.add_scalar of each metric every step, flush() every 1,000 (a
                    directory of event files per process, as TensorBoard is used; a flush is
                    not an fsync, so this is less durable than the others)
  sqlite_wal_full   one shared SQLite file in WAL mode with synchronous=FULL (as MLflow's
                    store): a row (run, step, name, value) per metric, a transaction per 1,000
                    steps, the processes taking turns at its write lock

Measured: wall time until every process is done, the largest peak RSS of a process, bytes on
disk, and the time to load every curve into pandas in a fresh process (runstore: to_pandas(), one
row per (run, step); tensorboard's EventAccumulator with every scalar kept, into a DataFrame;
SQLite: read_sql of the table). tensorboardX and tensorboard are installed into the running
environment from python/requirements-bench.txt when missing.

    .venv/bin/python bench/python/rl_log_bench.py                        # 8 x 100,000 steps
    .venv/bin/python bench/python/rl_log_bench.py --procs 2 --steps 2000 # a quick run

Exit status: 0 when every target is met, 3 when the run finished but missed one, 1 on an error
(a case that failed or read back the wrong number of records). Target (issue: long runs):
runstore_log within 1.3x of runstore_batch in wall time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "compare"))
from common import du_bytes, finish_targets, vm_hwm_mib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CASES = ("bare", "runstore_log", "runstore_batch", "tensorboardx", "sqlite_wal_full")
METRICS = ("reward", "loss", "entropy", "lr")
EVERY = 1000


def values(s: int) -> tuple[float, float, float, float]:
    return (math.sin(s * 1e-3), 1.0 / (s + 1), 0.5 + (s % 7) * 0.01, 3e-4 * 0.999 ** (s // 1000))


def run_id(i: int) -> str:
    return f"e{(i * 0x9E3779B97F4A7C15) & (2**64 - 1):016x}"  # a hashed-looking id


def child(case: str, i: int, steps: int, out: str) -> dict:
    """One process of a case: logs `steps` steps of run i; returns its seconds and peak RSS."""
    run = run_id(i)
    t0 = time.perf_counter()
    if case == "bare":
        acc = 0.0
        for s in range(steps):
            r, lo, e, lr = values(s)
            acc += r + lo + e + lr
    elif case in ("runstore_log", "runstore_batch"):
        import numpy as np

        import runstore

        with runstore.open(out).writer() as w:
            if case == "runstore_log":
                for s in range(steps):
                    r, lo, e, lr = values(s)
                    w.log(run, step=s, reward=r, loss=lo, entropy=e, lr=lr)
                    if s % EVERY == EVERY - 1:
                        w.commit()
            else:
                buf: list[tuple[float, float, float, float]] = []
                for s in range(steps):
                    buf.append(values(s))
                    if s % EVERY == EVERY - 1 or s == steps - 1:
                        cols = np.array(buf).T
                        first = s + 1 - len(buf)
                        w.log_many(
                            run,
                            steps=np.arange(first, s + 1),
                            **{m: cols[k] for k, m in enumerate(METRICS)},
                        )
                        w.commit()
                        buf.clear()
    elif case == "tensorboardx":
        from tensorboardX import SummaryWriter

        w = SummaryWriter(os.path.join(out, run), flush_secs=3600, max_queue=10 * EVERY)
        for s in range(steps):
            r, lo, e, lr = values(s)
            w.add_scalar("reward", r, s)
            w.add_scalar("loss", lo, s)
            w.add_scalar("entropy", e, s)
            w.add_scalar("lr", lr, s)
            if s % EVERY == EVERY - 1:
                w.flush()
        w.close()
    elif case == "sqlite_wal_full":
        import sqlite3

        # The file, its table and WAL mode (which persists) were made by the parent: processes
        # switching a new file's journal mode at once fail with "database is locked".
        con = sqlite3.connect(os.path.join(out, "metrics.db"), timeout=600)
        con.execute("PRAGMA synchronous=FULL")
        rows: list[tuple[str, int, str, float]] = []
        for s in range(steps):
            for m, v in zip(METRICS, values(s), strict=True):
                rows.append((run, s, m, v))
            if s % EVERY == EVERY - 1 or s == steps - 1:
                con.executemany("INSERT INTO metrics VALUES (?,?,?,?)", rows)
                con.commit()
                rows.clear()
        con.close()
    return {"seconds": time.perf_counter() - t0, "rss_mib": vm_hwm_mib()}


def load(case: str, out: str, procs: int, steps: int) -> dict:
    """Every curve into pandas, in this (fresh) process: seconds and the records found."""
    import pandas as pd

    t0 = time.perf_counter()
    if case.startswith("runstore"):
        import runstore

        df = runstore.open(out, mode="r").to_pandas()
        points = int(df[list(METRICS)].notna().sum().sum())
    elif case == "tensorboardx":
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        frames = []
        for d in sorted(os.listdir(out)):
            ea = EventAccumulator(os.path.join(out, d), size_guidance={"scalars": 0})
            ea.Reload()
            for tag in ea.Tags()["scalars"]:
                ev = ea.Scalars(tag)
                frames.append(
                    pd.DataFrame(
                        {
                            "run": d,
                            "name": tag,
                            "step": [e.step for e in ev],
                            "value": [e.value for e in ev],
                        }
                    )
                )
        df = pd.concat(frames)
        points = len(df)
    else:
        import sqlite3

        con = sqlite3.connect(os.path.join(out, "metrics.db"))
        df = pd.read_sql("SELECT * FROM metrics", con)
        points = len(df)
    return {"seconds": time.perf_counter() - t0, "points": points}


def ensure_peers() -> None:
    try:
        import tensorboard  # noqa: F401
        import tensorboardX  # noqa: F401
    except ImportError:
        req = os.path.join(ROOT, "python", "requirements-bench.txt")
        print(f"rl_log_bench: installing {req} into {sys.prefix}", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r", req], check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--dir", help="scratch directory (default: a temporary one, removed)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument(
        "--child", nargs=4, metavar=("CASE", "I", "STEPS", "OUT"), help=argparse.SUPPRESS
    )
    ap.add_argument(
        "--load", nargs=4, metavar=("CASE", "OUT", "PROCS", "STEPS"), help=argparse.SUPPRESS
    )
    args = ap.parse_args()
    if args.child:
        c, i, steps, out = args.child
        print(json.dumps(child(c, int(i), int(steps), out)))
        return 0
    if args.load:
        c, out, procs, steps = args.load
        print(json.dumps(load(c, out, int(procs), int(steps))))
        return 0

    cases = args.cases.split(",")
    if "tensorboardx" in cases:
        ensure_peers()
    base = args.dir or tempfile.mkdtemp(prefix="rl_log_bench.", dir=os.getcwd())
    os.makedirs(base, exist_ok=True)
    results: dict[str, dict] = {}
    want = args.procs * args.steps * len(METRICS)
    try:
        for case in cases:
            out = os.path.join(base, case)
            shutil.rmtree(out, ignore_errors=True)
            os.makedirs(out)
            if case == "sqlite_wal_full":
                import sqlite3

                con = sqlite3.connect(os.path.join(out, "metrics.db"))
                con.execute("PRAGMA journal_mode=WAL")
                con.execute("CREATE TABLE metrics(run TEXT, step INTEGER, name TEXT, value REAL)")
                con.commit()
                con.close()
            t0 = time.perf_counter()
            ps = [
                subprocess.Popen(
                    [sys.executable, __file__, "--child", case, str(i), str(args.steps), out],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for i in range(args.procs)
            ]
            outs = [p.communicate()[0] for p in ps]
            wall = time.perf_counter() - t0
            if any(p.returncode != 0 for p in ps):
                results[case] = {"error": f"a process exited with {[p.returncode for p in ps]}"}
                continue
            kids = [json.loads(o.strip().splitlines()[-1]) for o in outs]
            r = {"wall_s": wall, "rss_mib": max(k["rss_mib"] for k in kids)}
            if case != "bare":
                r["disk_mib"] = du_bytes(out)[0] / 2**20
                lp = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--load",
                        case,
                        out,
                        str(args.procs),
                        str(args.steps),
                    ],
                    capture_output=True,
                    text=True,
                )
                if lp.returncode != 0:
                    results[case] = {"error": lp.stderr[-2000:]}
                    continue
                loaded = json.loads(lp.stdout.strip().splitlines()[-1])
                r["load_s"] = loaded["seconds"]
                if loaded["points"] != want:
                    r["error"] = f"read back {loaded['points']} points of {want}"
            results[case] = r
            line = (
                f"{case:<16} {r.get('wall_s', 0):8.2f} s  peak RSS {r.get('rss_mib', 0):6.1f} MiB"
            )
            if "disk_mib" in r:
                line += f"  {r['disk_mib']:7.1f} MiB on disk  load {r['load_s']:6.2f} s"
            print(line + (f"  ERROR {r['error']}" if "error" in r else ""), flush=True)
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    targets = []
    lg, bt = results.get("runstore_log", {}), results.get("runstore_batch", {})
    if "wall_s" in lg and "wall_s" in bt:
        ratio = lg["wall_s"] / bt["wall_s"]
        targets.append(("runstore_log / runstore_batch", f"{ratio:.2f}x", "<= 1.3x", ratio <= 1.3))
    for peer in ("tensorboardx", "sqlite_wal_full"):
        p = results.get(peer, {})
        if "wall_s" in lg and "wall_s" in p and "load_s" in p:
            targets.append(
                (
                    f"(info) {peer} / runstore_log",
                    f"{p['wall_s'] / lg['wall_s']:.1f}x the time, "
                    f"{p['load_s'] / lg['load_s']:.1f}x the load, "
                    f"{p['disk_mib'] / lg['disk_mib']:.1f}x the disk",
                    "-",
                    None,
                )
            )
    return finish_targets(
        targets, results, args.json, (32, 52, 8), procs=args.procs, steps=args.steps
    )


if __name__ == "__main__":
    sys.exit(main())
