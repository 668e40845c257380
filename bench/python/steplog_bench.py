#!/usr/bin/env python3
"""Per-step logging against batched logging: what a training loop pays for ``w.log`` each step.

One process logs --steps steps (200,000) of 4 float metrics for one run with a hashed-looking
string id, committing every 1,000 steps, three ways, in this order, --repeat times (the best of
each is kept, the machine being shared):

  bare       the loop alone: computes the 4 values, calls nothing
  log        w.log(run, step=s, reward=..., loss=..., entropy=..., lr=...) every step
  log_many   the same values gathered per 1,000 steps and written with one
             w.log_many(run, steps=..., reward=..., ...) per 1,000
  log+time   log with Store.writer(record_time=True): what keeping each step's wall time costs
  log+async  log, with each commit made by commit(wait=False): the loop goes on while the
             background thread writes the commit and waits for its fdatasync (the same commits;
             close() waits for the last one)
  log-only   log with no commit but the one at close: what the call itself costs

Targets (issue: long runs that log every step): log within 1.3x of log_many per step (same data,
same commits), and per-step logging within 2x of the bare loop (printed for log and log+async).
Also printed: each case's microseconds per step and the ratio to the bare loop. A step's time is
the loop's, from the first call to the last commit call; opening the store and the writer and
closing it (the wait for the last commit, the seal) happen once per run and are printed apart.

    .venv/bin/python bench/python/steplog_bench.py
    .venv/bin/python bench/python/steplog_bench.py --steps 20000 --repeat 1   # a quick run

Exit status: 0 when both targets are met (the 2x by log or by log+async), 3 when the run
finished but missed one, 1 on an error
(a store that reads back wrong).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time

import numpy as np

import runstore

TARGET_MISSED = 3
RUN = "e3f1c2a9b4d5e6f70"
COMMIT_EVERY = 1000


def values(s: int) -> tuple[float, float, float, float]:
    return (math.sin(s * 1e-3), 1.0 / (s + 1), 0.5 + (s % 7) * 0.01, 3e-4 * 0.999 ** (s // 1000))


def bare(steps: int, path: str) -> float:
    t0 = time.perf_counter()
    acc = 0.0
    for s in range(steps):
        r, lo, e, lr = values(s)
        acc += r + lo + e + lr
        if s % COMMIT_EVERY == COMMIT_EVERY - 1:
            acc = 0.0
    return time.perf_counter() - t0


def per_step(steps: int, path: str, record_time: bool = False) -> float:
    with runstore.open(path).writer(record_time=record_time) as w:
        t0 = time.perf_counter()
        for s in range(steps):
            r, lo, e, lr = values(s)
            w.log(RUN, step=s, reward=r, loss=lo, entropy=e, lr=lr)
            if s % COMMIT_EVERY == COMMIT_EVERY - 1:
                w.commit()
        return time.perf_counter() - t0


def per_step_timed(steps: int, path: str) -> float:
    return per_step(steps, path, record_time=True)


def per_step_async(steps: int, path: str) -> float:
    with runstore.open(path).writer() as w:
        t0 = time.perf_counter()
        for s in range(steps):
            r, lo, e, lr = values(s)
            w.log(RUN, step=s, reward=r, loss=lo, entropy=e, lr=lr)
            if s % COMMIT_EVERY == COMMIT_EVERY - 1:
                w.commit(wait=False)
        return time.perf_counter() - t0


def per_step_only(steps: int, path: str) -> float:
    with runstore.open(path).writer() as w:
        t0 = time.perf_counter()
        for s in range(steps):
            r, lo, e, lr = values(s)
            w.log(RUN, step=s, reward=r, loss=lo, entropy=e, lr=lr)
        return time.perf_counter() - t0


def batched(steps: int, path: str) -> float:
    with runstore.open(path).writer() as w:
        t0 = time.perf_counter()
        buf: list[tuple[float, float, float, float]] = []
        for s in range(steps):
            buf.append(values(s))
            if s % COMMIT_EVERY == COMMIT_EVERY - 1 or s == steps - 1:
                cols = np.array(buf).T
                w.log_many(
                    RUN,
                    steps=np.arange(s + 1 - len(buf), s + 1),
                    reward=cols[0],
                    loss=cols[1],
                    entropy=cols[2],
                    lr=cols[3],
                )
                w.commit()
                buf.clear()
        return time.perf_counter() - t0


def check(path: str, steps: int) -> None:
    st = runstore.open(path, mode="r")
    got = st.scan("loss")
    if len(got["step"]) != steps or not np.array_equal(got["step"], np.arange(steps)):
        raise SystemExit(f"steplog_bench: {path} holds {len(got['step'])} loss records of {steps}")
    if got["value"][-1] != values(steps - 1)[1]:
        raise SystemExit(f"steplog_bench: {path}: the last loss reads back wrong")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", help="scratch directory (default: a temporary one, removed)")
    args = ap.parse_args()
    base = args.dir or tempfile.mkdtemp(prefix="steplog_bench.", dir=os.getcwd())
    os.makedirs(base, exist_ok=True)
    best: dict[str, float] = {}
    whole: dict[str, float] = {}  # opening and closing the writer
    try:
        for rep in range(args.repeat):
            cases = (("bare", bare), ("log", per_step), ("log_many", batched))
            extra = (
                ("log+time", per_step_timed),
                ("log+async", per_step_async),
                ("log-only", per_step_only),
            )
            for name, fn in (*cases, *extra):
                path = os.path.join(base, f"{name}-{rep}")
                t0 = time.perf_counter()
                loop = fn(args.steps, path)
                dt = time.perf_counter() - t0
                if name != "bare":
                    check(path, args.steps)
                    shutil.rmtree(path)
                best[name] = min(best.get(name, math.inf), loop)
                whole[name] = min(whole.get(name, math.inf), dt - loop)
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    us = {k: v / args.steps * 1e6 for k, v in best.items()}
    for k in ("bare", "log", "log_many", "log+time", "log+async", "log-only"):
        print(
            f"{k:<9} {us[k]:7.3f} us/step  ({us[k] / us['bare']:.2f}x the bare loop)"
            + (f"  opening and closing the writer: {whole[k] * 1e3:.1f} ms" if k != "bare" else "")
        )
    ratio = us["log"] / us["log_many"]
    ok = ratio <= 1.3
    print(
        f"per-step log / log_many per {COMMIT_EVERY}: {ratio:.2f}x "
        f"(target <= 1.3: {'PASS' if ok else 'MISS'}); {args.steps} steps x 4 metrics, "
        f"a commit every {COMMIT_EVERY}, best of {args.repeat}"
    )
    for k in ("log", "log+async"):
        print(
            f"{k} / the bare loop: {us[k] / us['bare']:.2f}x "
            f"(target <= 2: {'PASS' if us[k] <= 2 * us['bare'] else 'MISS'})"
        )
    within_2x = min(us["log"], us["log+async"]) <= 2 * us["bare"]
    return 0 if ok and within_2x else TARGET_MISSED


if __name__ == "__main__":
    sys.exit(main())
