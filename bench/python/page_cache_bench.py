"""The page-cache budget for large values, both ways: one writer ``put``s N arrays of 8 MiB with
a commit every 10, in a process of its own, with ``RUNSTORE_CACHED_LARGE_VALUES`` unset (the
default budget) and ``=0`` (every large value leaves the page cache once durable), alternating,
R rounds; then each process's wall time, system CPU time and the page cache its files hold at
the end (``mincore`` of the store's segments).

    .venv/bin/python bench/python/page_cache_bench.py [--arrays 1000] [--rounds 2]

The store goes under $RUNSTORE_BENCH_DIR, else /var/tmp (a disk, not tmpfs).
docs/performance.md "Read right after writing" has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, mmap, os, sys, time
import numpy as np
import runstore

path, n = sys.argv[1], int(sys.argv[2])
a = np.random.default_rng(1).random((1024, 1024))  # 8 MiB
t = time.perf_counter()
st = runstore.open(path)
with st.writer() as w:
    for i in range(n):
        a[0, 0] = i
        w.put(i, "result", a)
        if i % 10 == 9:
            w.commit()
seconds = time.perf_counter() - t
system = os.times().system


def resident(f):
    # Pages of f in the page cache: mincore of a mapping that faults nothing in (libc's mmap
    # through ctypes: Python's mmap of a read-only file gives no address to pass).
    import ctypes

    size = os.path.getsize(f)
    if size == 0:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    fd = os.open(f, os.O_RDONLY)
    try:
        base = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    finally:
        os.close(fd)
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * pages)()
    libc.mincore(base, size, vec)
    libc.munmap(base, size)
    return sum(v & 1 for v in vec) * mmap.PAGESIZE


seg = os.path.join(path, "segments")
cached = sum(resident(os.path.join(seg, f)) for f in os.listdir(seg))
print(json.dumps({"seconds": seconds, "system": system, "cached_mib": cached / 2**20}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--arrays", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    base = os.environ.get("RUNSTORE_BENCH_DIR") or "/var/tmp"
    print(f"page_cache_bench: {args.arrays} arrays of 8 MiB, a commit every 10, under {base}")
    for r in range(args.rounds):
        for budget in (None, "0"):
            env = dict(os.environ)
            env.pop("RUNSTORE_CACHED_LARGE_VALUES", None)
            if budget is not None:
                env["RUNSTORE_CACHED_LARGE_VALUES"] = budget
            with tempfile.TemporaryDirectory(dir=base) as d:
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, os.path.join(d, "store"), str(args.arrays)],
                    env=env,
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                subprocess.run(["sync"], check=False)
            res = json.loads(out)
            name = "default budget" if budget is None else "RUNSTORE_CACHED_LARGE_VALUES=0"
            print(
                f"round {r + 1}, {name:32s}: {res['seconds']:.2f} s, system {res['system']:.2f} s, "
                f"{res['cached_mib']:.0f} MiB of its segments in the page cache at the end"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
