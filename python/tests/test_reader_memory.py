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


SCAN_PEAK = """
import sys, numpy as np, runstore
s = runstore.open(sys.argv[1], "r")
runs = [r for r in s._core.runs()]
rng = np.random.default_rng(3)
pick = [runs[i] for i in rng.choice(len(runs), len(runs) // 20, replace=False)]
def hwm():
    return int([l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")][0])
before = hwm()
d = s._core.scan("x", runs=pick, steps=(0, 0))
assert len(d["run"]) == len(pick), len(d["run"])
print((hwm() - before) // 1024)
"""


def test_a_scan_of_runs_spread_over_every_block_keeps_few_pages(tmp_path):
    """A scan filtered to 5% of the runs of a compacted series (blocks sorted by run, so every
    block holds some of them: what an export's chunk of a compacted sweep reads) releases the
    pages it maps as it goes: its peak grows by less than 24 MiB for a 64 MiB series (it grew
    by the series' size: the pages faulted in around each row it copies)."""
    path = str(tmp_path / "s")
    s = runstore.open(path)
    n = 16_384
    rng = np.random.default_rng(1)
    with s.writer() as w:
        for start in range(0, n, 1024):
            ids = [f"e{i * 2654435761 % 2**32:016x}" for i in range(start, start + 1024)]
            w.log_many(ids, x=rng.random((1024, 512)))
            w.commit()
    s.compact(retain=0)
    p = subprocess.run([sys.executable, "-c", SCAN_PEAK, path], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    grew = int(p.stdout.split()[-1])
    print(f"scan of 5% of {n:,} runs over every block of a 64 MiB series: peak grew {grew} MiB")
    assert grew < 24
