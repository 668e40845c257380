"""Workload 3, concurrent: `writers` processes each append `rows` rows (run, step, value) to one
shared store, with a durable commit every `batch` rows.

The case process (the coordinator) creates the store, starts the writer processes, waits until
every one has imported its tool and opened the store, then releases them all at once; the time
is from that release to the end of the last writer's final commit/close.

runstore: each writer process opens its own Writer (Writer.log per row, Writer.commit every
batch): writers share no file and take no lock. "Waiting" is the writer's back-pressure time
(Writer.stats()["backpressure_seconds"]): time an append waited for buffer space.

sqlite3: one database in WAL mode; each writer buffers its rows and, every batch, runs
BEGIN IMMEDIATE; executemany(INSERT); COMMIT (connection timeout 600 s, so a busy database is
waited for, never an error). "Waiting" is the total time spent in BEGIN IMMEDIATE, i.e. blocked
acquiring the database's write lock (uncontended it takes a few microseconds).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import numpy as np
from common import concurrent_value

META = {
    "runstore": (
        "runstore, a Writer per process, log per row, commit per 1,000",
        "-",
        "commit: fdatasync, durable",
    ),
    "sqlite_full": (
        "sqlite3, one database in WAL mode, synchronous=FULL",
        "-",
        "commit: WAL fsynced, durable",
    ),
    "sqlite_normal": (
        "sqlite3, one database in WAL mode, synchronous=NORMAL (reference)",
        "-",
        "commit: survives a process kill; may roll back on power loss",
    ),
}

HERE = os.path.dirname(os.path.abspath(__file__))


def _db(path):
    return os.path.join(path, "rows.db")


def _store(path):
    return os.path.join(path, "store")


# -- one writer process ------------------------------------------------------------------------


def writer_main(tool: str, path: str, index: int, rows: int, batch: int) -> None:
    """Runs in a writer process. Prints "ready", waits for a line on stdin, then writes, printing
    "C <rows committed>" after every commit and a JSON line at the end."""
    out = sys.stdout
    run = index
    if tool == "runstore":
        import runstore

        store = runstore.open(_store(path), "r+")
        w = store.writer()
        out.write("ready\n")
        out.flush()
        sys.stdin.readline()
        t_start = time.monotonic()
        commit_s = 0.0
        log = w.log
        for i in range(rows):
            log(run, step=i, value=concurrent_value(run, i))
            if (i + 1) % batch == 0 or i + 1 == rows:
                c0 = time.perf_counter()
                w.commit()
                commit_s += time.perf_counter() - c0
                out.write(f"C {i + 1}\n")
                out.flush()
        stats = w.stats()
        w.close()
        t_end = time.monotonic()
        res = {
            "wait_seconds": stats["backpressure_seconds"],
            "commit_seconds": commit_s,
            "backpressure_waits": stats["backpressure_waits"],
        }
    else:
        import sqlite3

        con = sqlite3.connect(_db(path), isolation_level=None, timeout=600.0)
        con.execute("PRAGMA synchronous=" + ("FULL" if tool == "sqlite_full" else "NORMAL"))
        out.write("ready\n")
        out.flush()
        sys.stdin.readline()
        t_start = time.monotonic()
        wait_s = commit_s = 0.0
        max_wait = 0.0
        buf = []
        for i in range(rows):
            buf.append((run, i, concurrent_value(run, i)))
            if (i + 1) % batch == 0 or i + 1 == rows:
                t0 = time.perf_counter()
                con.execute("BEGIN IMMEDIATE")
                t1 = time.perf_counter()
                con.executemany("INSERT INTO rows (run, step, value) VALUES (?, ?, ?)", buf)
                con.execute("COMMIT")
                t2 = time.perf_counter()
                wait_s += t1 - t0
                max_wait = max(max_wait, t1 - t0)
                commit_s += t2 - t1
                buf.clear()
                out.write(f"C {i + 1}\n")
                out.flush()
        con.close()
        t_end = time.monotonic()
        res = {"wait_seconds": wait_s, "commit_seconds": commit_s, "max_wait_seconds": max_wait}
    from common import vm_hwm_mib

    res.update({"t_start": t_start, "t_end": t_end, "peak_rss_mib": vm_hwm_mib(), "rows": rows})
    out.write("J " + json.dumps(res) + "\n")
    out.flush()


# -- the coordinator (the case process) --------------------------------------------------------


class _Proc:
    def __init__(self, cmd, index):
        self.index = index
        self.p = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.committed = 0
        self.result = None
        self.ready = threading.Event()
        self.reports = threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.p.stdout:
            if line.startswith("ready"):
                self.ready.set()
            elif line.startswith("C "):
                with self.reports:
                    self.committed = int(line[2:])
                    self.reports.notify_all()
            elif line.startswith("J "):
                self.result = json.loads(line[2:])
        with self.reports:
            self.reports.notify_all()


def coordinate(tool, path, p, progress, kill_writer_after=None, seed=0):
    """Runs the workload; with `kill_writer_after` = K, SIGKILLs writer 0 once it has reported K
    commits (after a random delay of up to one batch), lets the others finish, and reports
    what each writer had committed."""
    n, rows, batch = p["writers"], p["rows"], p["batch"]
    if tool == "runstore":
        import runstore

        runstore.open(_store(path))  # create the store before the writers open it
    else:
        import sqlite3

        con = sqlite3.connect(_db(path), isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE rows (run INTEGER, step INTEGER, value REAL)")
        con.close()
    cmd = [
        sys.executable,
        os.path.join(HERE, "bench.py"),
        "--writer",
        tool,
        "--path",
        path,
        "--rows",
        str(rows),
        "--batch",
        str(batch),
        "--index",
    ]
    procs = [_Proc(cmd + [str(i)], i) for i in range(n)]
    for pr in procs:
        if not pr.ready.wait(600):
            raise RuntimeError(f"writer {pr.index} did not start")
    t_go = time.monotonic()
    for pr in procs:
        pr.p.stdin.write("go\n")
        pr.p.stdin.flush()
    killed = None
    if kill_writer_after is not None:
        rng = random.Random(seed)
        victim = procs[0]
        with victim.reports:
            while victim.committed < kill_writer_after and victim.p.poll() is None:
                victim.reports.wait(1.0)
        time.sleep(rng.uniform(0, 0.02))
        victim.p.send_signal(signal.SIGKILL)
        killed = 0
    deadline = t_go + p.get("timeout", 1800)
    timed_out = False
    for pr in procs:
        left = deadline - time.monotonic()
        try:
            pr.p.wait(timeout=max(0.1, left))
        except subprocess.TimeoutExpired:
            timed_out = True
            for q in procs:
                if q.p.poll() is None:
                    q.p.send_signal(signal.SIGKILL)
            break
    for pr in procs:
        pr.p.wait()
        pr.thread.join(5)
    t_all = time.monotonic()
    results = [pr.result for pr in procs]
    done = [r for r in results if r]
    seconds = (max(r["t_end"] for r in done) - t_go) if done and not timed_out else t_all - t_go
    out = {
        "seconds": seconds,
        "timed_out": timed_out,
        "committed_rows": [pr.committed for pr in procs],
        "finished_writers": len(done),
        "wait_seconds": sum(r["wait_seconds"] for r in done),
        "max_writer_wait_seconds": max((r["wait_seconds"] for r in done), default=0.0),
        "commit_seconds": sum(r["commit_seconds"] for r in done),
        "writer_peak_rss_mib_max": max((r["peak_rss_mib"] for r in done), default=float("nan")),
        "writer_peak_rss_mib_sum": sum(r["peak_rss_mib"] for r in done),
    }
    if tool == "runstore":
        out["backpressure_waits"] = sum(r.get("backpressure_waits", 0) for r in done)
    else:
        out["max_single_lock_wait_seconds"] = max(
            (r.get("max_wait_seconds", 0) for r in done), default=0
        )
    if killed is not None:
        out["killed_writer"] = killed
        out["killed_committed"] = procs[0].committed
    progress(sum(pr.committed for pr in procs))
    return out


def make_writer(tool):
    def fn(path, p, progress):
        return coordinate(tool, path, p, progress)

    return fn


WRITERS = {tool: make_writer(tool) for tool in META}


def readback(tool):
    def fn(path, p):
        """Rows read back per writer (correct values only)."""
        n = p["writers"]
        if tool == "runstore":
            import runstore

            store = runstore.open(_store(path), "r")
            if "value" not in store.names():
                return {"opens": True, "read_back": 0, "per_writer": [0] * n}
            d = store.scan("value")
            run = np.asarray(d["run"], dtype=np.int64)
            step = np.asarray(d["step"], dtype=np.int64)
            val = np.asarray(d["value"])
        else:
            import sqlite3

            con = sqlite3.connect(f"file:{_db(path)}?mode=ro", uri=True)
            rows = con.execute("SELECT run, step, value FROM rows").fetchall()
            con.close()
            a = np.array(rows, dtype=np.float64).reshape(-1, 3)
            run, step, val = a[:, 0].astype(np.int64), a[:, 1].astype(np.int64), a[:, 2]
        ok = val == concurrent_value(run.astype(np.float64), step.astype(np.float64))
        per = []
        for w in range(n):
            sel = ok & (run == w)
            per.append(int(np.unique(step[sel]).size))
        return {
            "opens": True,
            "read_back": int(sum(per)),
            "per_writer": per,
            "wrong": int((~ok).sum()),
        }

    return fn


READBACK = {tool: readback(tool) for tool in META}


def payload_bytes(p) -> int:
    return p["writers"] * p["rows"] * 24
