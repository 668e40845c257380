"""The disk's own floor for the sweep workload's durable commits: the same bytes appended to one
file in as many pieces as the workload has commits, with an fdatasync after each, and no work at
all besides (no encoding, no checksums, no Python objects).

The comparison suite's batched sweep makes 200 durable commits of ~0.83 MB each (165 MiB in all).
If this floor alone takes as long as h5py's whole batched run, which syncs nothing, no store that
makes those commits durable can be as fast as h5py there. Also prints the same bytes with one
fdatasync at the end, and runstore's batched sweep with commits, with commits whose sync
overlaps the next batch (commit(wait=False)), with commits never waited for but the last
(group commit: commits queued during a sync share the next one), and with flushes, alternating
with the floor so that all meet the same disk.

    .venv/bin/python bench/python/commit_floor.py [--mb 165] [--commits 200] [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time

import numpy as np

import runstore


def floor(path: str, total: int, commits: int, sync_each: bool) -> float:
    piece = bytes(np.random.default_rng(1).integers(0, 256, total // commits, dtype=np.uint8))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t = time.perf_counter()
        for _ in range(commits):
            os.write(fd, piece)
            if sync_each:
                os.fdatasync(fd)
        os.fdatasync(fd)
        return time.perf_counter() - t
    finally:
        os.close(fd)
        os.unlink(path)


def sweep(path: str, experiments: int, commits: int, end: str) -> float:
    """runstore's batched sweep case: 5 parameters, 3 outcomes and a 100-point trace per
    experiment, one log_many and one commit (or flush) per batch. end "pipelined": each
    batch's commit is started without waiting, and waited for after the next batch is
    appended, before the next commit starts (so every batch is durable before the next one's
    commit, and the conversion of a batch overlaps the sync of the one before). end "group":
    every commit is started without waiting and only the last is waited for, so commits
    queued while the writer syncs share the next sync (group commit)."""
    rng = np.random.default_rng(2)
    batch = experiments // commits
    cols = {f"p{i}": rng.random(batch) for i in range(5)}
    cols.update({f"y{i}": rng.random(batch) for i in range(3)})
    cols["trace"] = rng.random((batch, 100))
    shutil.rmtree(path, ignore_errors=True)
    store = runstore.open(path)
    t = time.perf_counter()
    with store.writer() as w:
        ticket = None
        for b in range(commits):
            w.log_many(np.arange(b * batch, (b + 1) * batch, dtype=np.int64), **cols)
            if end == "commit":
                w.commit()
            elif end == "flush":
                w.flush()
            elif end == "group":
                ticket = w.commit(wait=False)
            else:
                if ticket is not None:
                    w.wait_for_commit(ticket)
                ticket = w.commit(wait=False)
        if ticket is not None:
            w.wait_for_commit(ticket)
    seconds = time.perf_counter() - t
    shutil.rmtree(path, ignore_errors=True)
    return seconds


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--dir", default="/var/tmp/runstore-commit-floor")
    ap.add_argument("--mb", type=float, default=165.0, help="MiB written in all (the sweep's 165)")
    ap.add_argument("--commits", type=int, default=200)
    ap.add_argument("--experiments", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    total = int(args.mb * (1 << 20))
    ways = {
        "floor: append + fdatasync per commit": lambda: floor(
            os.path.join(args.dir, "floor.bin"), total, args.commits, True
        ),
        "floor: append, one fdatasync at the end": lambda: floor(
            os.path.join(args.dir, "floor.bin"), total, args.commits, False
        ),
        "runstore log_many + commit": lambda: sweep(
            os.path.join(args.dir, "store"), args.experiments, args.commits, "commit"
        ),
        "runstore log_many + commit(wait=False)": lambda: sweep(
            os.path.join(args.dir, "store"), args.experiments, args.commits, "pipelined"
        ),
        "runstore commit(wait=False), wait for the last": lambda: sweep(
            os.path.join(args.dir, "store"), args.experiments, args.commits, "group"
        ),
        "runstore log_many + flush": lambda: sweep(
            os.path.join(args.dir, "store"), args.experiments, args.commits, "flush"
        ),
    }
    times: dict[str, list[float]] = {w: [] for w in ways}
    for rep in range(args.reps):
        for way, fn in ways.items():
            times[way].append(fn())
        print(
            f"rep {rep + 1}: "
            + ", ".join(f"{w.split(':')[0]} {times[w][-1] * 1e3:.0f} ms" for w in ways),
            flush=True,
        )
    print(
        f"medians over {args.reps} repetitions ({args.mb:g} MiB in {args.commits} pieces; "
        f"{args.experiments:,} experiments):"
    )
    for way, ts in times.items():
        print(
            f"  {way:42s} {statistics.median(ts) * 1e3:7.1f} ms  "
            f"(min {min(ts) * 1e3:.1f}, max {max(ts) * 1e3:.1f})"
        )
    shutil.rmtree(args.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
