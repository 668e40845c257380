"""Helpers shared by the driver and the case processes of bench/compare.

Nothing here imports runstore, h5py, zarr or pandas: a case imports the one tool it measures.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import numpy as np

# -- the data of each workload -----------------------------------------------------------------

PARAMS = ("alpha", "beta", "gamma", "delta", "epsilon")
OUTCOMES = ("loss", "accuracy", "runtime")
POOL = 1000  # sweep: distinct experiments generated up front and reused cyclically
ARRAY_POOL = 8  # arrays: distinct arrays generated up front; array i is pool[i % 8] with [0, 0] = i


def sweep_pool(seed: int, trace_len: int):
    """params (POOL, 5), outcomes (POOL, 3), trace (POOL, trace_len): experiment i uses row
    i % POOL."""
    rng = np.random.default_rng(seed)
    params = rng.random((POOL, len(PARAMS)))
    outcomes = rng.random((POOL, len(OUTCOMES)))
    trace = rng.standard_normal((POOL, trace_len)).cumsum(axis=1)
    return params, outcomes, trace


def array_shape(mib: float) -> tuple[int, int]:
    """A 2-d float64 shape of `mib` MiB with rows of 1024 values (8 KiB)."""
    rows = max(1, int(round(mib * (1 << 20) / 8 / 1024)))
    return (rows, 1024)


def array_pool(seed: int, mib: float) -> list[np.ndarray]:
    rng = np.random.default_rng(seed + 1)
    shape = array_shape(mib)
    return [rng.standard_normal(shape) for _ in range(ARRAY_POOL)]


def array_result(pool: list[np.ndarray], i: int) -> np.ndarray:
    """The i-th result of the arrays workload (mutates and returns a pool array: no copy)."""
    a = pool[i % len(pool)]
    a[0, 0] = float(i)
    return a


def expected_array(pool: list[np.ndarray], i: int) -> np.ndarray:
    a = pool[i % len(pool)].copy()
    a[0, 0] = float(i)
    return a


def lazy_sample(n_arrays: int, k: int, seed: int) -> list[int]:
    """The k arrays (of n) that the lazy workload reads, in the order it reads them."""
    rng = np.random.default_rng(seed + 2)
    return [int(x) for x in rng.choice(n_arrays, size=min(k, n_arrays), replace=False)]


def concurrent_value(run, step):
    """The value of row (run, step) in the concurrent workload (exact in float64)."""
    return run * 1_000_000.0 + step + 0.25


# -- measurement -------------------------------------------------------------------------------


def vm_hwm_mib() -> float:
    """Peak RSS of this process (VmHWM), MiB."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def du_bytes(path: str) -> tuple[int, int]:
    """(allocated bytes, apparent bytes) of a file or a directory tree, like du and du -b."""
    alloc = apparent = 0
    if not os.path.exists(path):
        return 0, 0
    if os.path.isfile(path):
        st = os.stat(path)
        return st.st_blocks * 512, st.st_size
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            alloc += st.st_blocks * 512
            apparent += st.st_size
    return alloc, apparent


def fs_type(path: str) -> str:
    """File-system type of the mount holding `path` (longest mount-point prefix in /proc/mounts)."""
    path = os.path.realpath(path)
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mnt = parts[1].replace("\\040", " ")
                if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(
                    best
                ):
                    best, kind = mnt, parts[2]
    except OSError:
        pass
    return kind


def drop_caches() -> bool:
    """Writes back dirty pages and drops the page cache (needs root); False if not permitted."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


class Progress:
    """How a writer case tells the driver what it has committed (or flushed).

    In a timed run this does nothing; in a crash run it writes "<count>\\n" to a pipe after every
    commit/flush has returned, so the driver knows how many results were durable (or flushed)
    before it killed the process.
    """

    def __init__(self, fd: int | None):
        self.fd = fd

    def __call__(self, count: int) -> None:
        if self.fd is not None:
            os.write(self.fd, b"%d\n" % count)

    def produced(self, count: int) -> None:
        """For a tool that commits nothing until the end: `count` results computed so far."""
        if self.fd is not None:
            os.write(self.fd, b"P%d\n" % count)


class Clock:
    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def seconds(self) -> float:
        return time.perf_counter() - self.t0


def write_json(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=float)
    os.replace(tmp, path)


#: The exit status of a benchmark that ran but missed a target (bench/python/*_bench.py).
TARGET_MISSED = 3


def finish_targets(targets, results, json_path, widths=(40, 40, 10), **meta) -> int:
    """Prints the (target, measured, goal, met) rows, writes them with ``results`` and ``meta``
    to ``json_path`` if given, and returns the exit status: 1 if a case failed (an error, not a
    missed target), TARGET_MISSED if a target was missed (met is False), 0 otherwise."""
    wt, wm, wg = widths
    print()
    print(f"{'target':{wt}s} {'measured':{wm}s} {'goal':{wg}s} met")
    for t, m, goal, ok in targets:
        print(f"{t:{wt}s} {m:{wm}s} {goal:{wg}s} {'-' if ok is None else 'yes' if ok else 'NO'}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(
                {
                    **meta,
                    "results": results,
                    "targets": [
                        dict(zip(("target", "measured", "goal", "met"), t)) for t in targets
                    ],
                },
                f,
                indent=2,
            )
    if any("error" in r for r in results.values()):
        return 1
    return 0 if all(t[3] is not False for t in targets) else TARGET_MISSED


def run_json_child(cmd: list[str]) -> dict:
    """Runs a benchmark's child process and returns the JSON object its last line of output is,
    or {"error": its last line of stderr, "returncode": ...} if it failed."""
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return {
            "error": (out.stderr.strip().splitlines() or ["?"])[-1],
            "returncode": out.returncode,
        }
    return json.loads(out.stdout.strip().splitlines()[-1])
