"""A parameter sweep split over MPI ranks with mpi4py: each rank is a runstore writer.

    mpirun -np 4 python examples/mpi_sweep.py --store PATH [--experiments 400]

Rank 0 defines the design (the same rows every time: defining again changes nothing), then
every rank runs its own shard of the pending experiments, ``shard=(rank, size)``, in its own
process with its own writer, committing each experiment as it finishes. No collective call is
made to write or to commit; the one barrier only makes the design visible before the ranks
read it. A rank that dies (SIGKILL, an out-of-memory kill, mpirun aborting the job) loses
nothing it committed, and running the same command again runs only what is not done.

``--kill-rank R --kill-after K`` makes rank R SIGKILL itself when it starts its (K+1)-th
experiment, after K commits: the crash test of the examples (python/tests/test_mpi.py).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

import numpy as np
from mpi4py import MPI

import runstore

_calls = 0
_kill_after = -1
_log = ""


def simulate(x: int, seed: int) -> dict[str, object]:
    """A small stand-in for real work: a noisy curve and its mean."""
    global _calls
    if _calls == _kill_after:
        os.kill(os.getpid(), signal.SIGKILL)
    _calls += 1
    if _log:  # one line per real invocation, appended in one write
        fd = os.open(_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, f"{x} {seed} {MPI.COMM_WORLD.Get_rank()}\n".encode())
        os.close(fd)
    rng = np.random.default_rng([x, seed])
    curve = x + rng.standard_normal(50)
    return {"mean": float(curve.mean()), "curve": curve, "rank": MPI.COMM_WORLD.Get_rank()}


def main() -> None:
    global _kill_after, _log
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--experiments", type=int, default=400)
    ap.add_argument("--kill-rank", type=int, default=-1)
    ap.add_argument("--kill-after", type=int, default=-1)
    ap.add_argument("--log", default="", help="append one line per invocation to this file")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank == args.kill_rank:
        _kill_after = args.kill_after
    _log = args.log

    store = runstore.open(args.store)
    if rank == 0:
        seeds = 10
        store.define_experiments(
            runstore.grid(x=range(max(1, args.experiments // seeds)), seed=range(seeds))
        )
    comm.Barrier()
    # workers=0: the rank's own process runs fn; mpirun already placed one rank per core.
    # commit_every=1: each experiment committed as it finishes, as the default does for
    # experiments of a second or more (a real simulation); the stand-in takes microseconds.
    s = runstore.run_experiments(
        store, simulate, workers=0, progress=False, shard=(rank, size), commit_every=1
    )
    # One write per line: ranks share mpirun's stdout, and print() writes the newline apart.
    sys.stdout.write(f"rank {rank} summary {s.done} {s.failed} {s.skipped}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
