"""What every process that opens a store holds per block: the index of each block (its
header, key range and name) and the snapshot's reference to it. A store written in small
commits (a dozen blocks an experiment, committed one by one) pays it a dozen times an
experiment in every reader until it is compacted. A bound on the growth of the peak, not a
clock."""

import subprocess
import sys

import numpy as np

import runstore

PEAK = """
import sys, runstore
s = runstore.open(sys.argv[1], "r")
blocks = sum(g.blocks for g in s.segments())
hwm = [l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")]
print(blocks, int(hwm[0]) * 1024)
"""


def _store_of_small_blocks(path: str, n: int) -> None:
    """n flushes of one record in each of four series (hashed-length string ids): 4n blocks,
    each of its own commit, as a writer that commits experiment by experiment leaves them."""
    s = runstore.open(path)
    with s.writer() as w:
        for i in range(n):
            w.log(f"e{i:016x}", a=float(i), b=i, c=f"{i}", d=np.zeros(4))
            w.flush()


def _peak(path: str) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", PEAK, path], capture_output=True, text=True, check=True
    ).stdout.split()
    return int(out[0]), int(out[1])


def test_a_reader_holds_a_few_hundred_bytes_per_block(tmp_path):
    # Measured: 459 bytes a block before block headers held short run ids inline and shared
    # their series names (two std::strings a key, one per name), 345 since.
    sizes = {}
    for n in (2_000, 20_000):
        path = str(tmp_path / f"s{n}")
        _store_of_small_blocks(path, n)
        sizes[n] = _peak(path)
    (b0, p0), (b1, p1) = sizes[2_000], sizes[20_000]
    assert (b0, b1) == (8_000, 80_000)
    per_block = (p1 - p0) / (b1 - b0)
    print(
        f"opening: peak {p0 >> 20} MiB with {b0:,} blocks, {p1 >> 20} MiB with {b1:,}: "
        f"{per_block:.0f} bytes a block"
    )
    assert per_block < 400
