"""Where the time of a cold lazy read goes: runstore's Store.array and Store.get against
np.load(mmap_mode="r") and against the bare system calls Store.get issues, on the same arrays,
alternating.

Writes n arrays of 8 MiB float64 once into a runstore store and as .npy files, then, for each
repetition, drops the page cache (needs root; otherwise the figures are warm) and reads a strided
sample (every 16th row) of k random arrays each way:

  array      runstore.open + Store.array(i, "result")[::16].sum(): reads and checks only the
             4 KiB chunks the rows reach (format version 3)
  get        runstore.open + Store.get(i, "result")[::16].sum(): checks the whole array first
  syscalls   the reads of `get` without runstore: posix_fadvise(WILLNEED) of the array's bytes in
             128 KiB calls, then pread in 256 KiB pieces (what Store.get does to verify an
             uncompressed array of 1 MiB or more before handing out its view)
  pread      one pread of each array's whole byte range from the segment, on a descriptor
             with readahead off (POSIX_FADV_RANDOM): the plainest read of the same bytes
  npy-pread  one pread of each .npy file's data, readahead off: np.load's bytes, read plainly
  np.load    np.load(path, mmap_mode="r")[::16].sum(), one file per array

    .venv/bin/python bench/python/lazy_io_probe.py [--reps 5] [--dir /var/tmp/runstore-lazy-probe]

Prints each repetition and the medians. If `syscalls` is as slow as `get`, the time is the
system calls'; `pread` against `npy-pread` compares ranges of one large file with whole small
files read the same way, and `npy-pread` against `np.load` the two ways of reading the same files.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

import numpy as np

import runstore

# The comparison suite's helpers (bench/compare).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "compare"))
from common import drop_caches

MIB8 = (1024, 1024)


def store_dir(root: str) -> str:
    """Written by this format version: an earlier one's arrays have no chunk checksums."""
    return os.path.join(root, f"store-v{runstore.FORMAT_VERSION}")


def prepare(root: str, n: int) -> None:
    npy_dir = os.path.join(root, "npy")
    if os.path.exists(os.path.join(npy_dir, f"{n - 1}.npy")) and os.path.exists(store_dir(root)):
        return
    os.makedirs(npy_dir, exist_ok=True)
    rng = np.random.default_rng(1)
    with runstore.open(store_dir(root)).writer() as w:
        for i in range(n):
            a = rng.standard_normal(MIB8)
            w.put(i, "result", a)
            w.commit()
            np.save(os.path.join(npy_dir, f"{i}.npy"), a)


def payload_ranges(root: str, n: int) -> tuple[str, list[tuple[int, int]]]:
    """The segment file and each array's byte range in it, found from the values' bytes."""
    seg_dir = os.path.join(store_dir(root), "segments")
    (seg,) = [os.path.join(seg_dir, f) for f in os.listdir(seg_dir) if f.endswith(".rss")]
    with open(seg, "rb") as f:
        data = f.read()
    store = runstore.open(store_dir(root), mode="r")
    ranges = []
    for i in range(n):
        a = store.get(i, "result")
        start = data.index(a.tobytes()[:64])
        ranges.append((start, a.nbytes))
    return seg, ranges


def read_array(root, sample, **_):
    store = runstore.open(store_dir(root), mode="r")
    return sum(float(store.array(i, "result")[::16].sum()) for i in sample)


def read_get(root, sample, **_):
    store = runstore.open(store_dir(root), mode="r")
    return sum(float(store.get(i, "result")[::16].sum()) for i in sample)


def read_syscalls(root, sample, seg, ranges, **_):
    fd = os.open(seg, os.O_RDONLY)
    try:
        for i in sample:
            off, n = ranges[i]
            for d in range(0, n, 128 << 10):
                os.posix_fadvise(fd, off + d, min(128 << 10, n - d), os.POSIX_FADV_WILLNEED)
            for d in range(0, n, 256 << 10):
                os.pread(fd, min(256 << 10, n - d), off + d)
    finally:
        os.close(fd)
    return 0.0


def read_pread(root, sample, seg, ranges, **_):
    fd = os.open(seg, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        for i in sample:
            off, n = ranges[i]
            os.pread(fd, n, off)
    finally:
        os.close(fd)
    return 0.0


def read_npy_pread(root, sample, ranges, **_):
    for i in sample:
        fd = os.open(os.path.join(root, "npy", f"{i}.npy"), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            os.pread(fd, ranges[i][1], 128)  # past the .npy header
        finally:
            os.close(fd)
    return 0.0


def read_npy(root, sample, **_):
    return sum(
        float(np.load(os.path.join(root, "npy", f"{i}.npy"), mmap_mode="r")[::16].sum())
        for i in sample
    )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--dir", default="/var/tmp/runstore-lazy-probe")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    prepare(args.dir, args.n)
    seg, ranges = payload_ranges(args.dir, args.n)
    ways = {
        "array": read_array,
        "get": read_get,
        "syscalls": read_syscalls,
        "pread": read_pread,
        "npy-pread": read_npy_pread,
        "np.load": read_npy,
    }
    times = {w: [] for w in ways}
    cold = True
    for rep in range(args.reps):
        sample = random.Random(rep).sample(range(args.n), args.k)
        order = list(ways)[rep % len(ways) :] + list(ways)[: rep % len(ways)]
        row, sums = [], {}
        for way in order:
            cold = drop_caches() and cold
            t = time.perf_counter()
            sums[way] = ways[way](args.dir, sample, seg=seg, ranges=ranges)
            ms = (time.perf_counter() - t) * 1e3
            times[way].append(ms)
            row.append(f"{way} {ms:.0f} ms")
        print(f"rep {rep + 1}: " + ", ".join(row))
        for way in ("array", "get"):  # the same bytes, summed in the same order
            if sums[way] != sums["np.load"]:
                print(f"rep {rep + 1}: {way}'s sum {sums[way]!r} != np.load's {sums['np.load']!r}")
                return 1
    print(
        f"medians over {args.reps} repetitions ({'cold' if cold else 'WARM: not root'} page cache, "
        f"{args.k} arrays of 8 MiB, every 16th row):"
    )
    for way, ts in times.items():
        print(f"  {way:9s} {statistics.median(ts):6.1f} ms  (min {min(ts):.1f}, max {max(ts):.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
