"""The partition planner of :mod:`runstore.dask` (docs/dask.md) and :mod:`runstore.spark`
(docs/spark.md), in a module of its own so that ``runstore plan`` and :func:`plan` need neither
dask, distributed nor pyspark (matplotlib only to draw).
"""

from __future__ import annotations

import dataclasses
import os
import re

import numpy as np

from .._progress import size_text as _fmt

__all__ = ["Plan", "parse_size", "plan"]

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6}
_UNITS.update({"mib": 2**20, "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12})
_UNITS.update({"tib": 2**40})


def parse_size(text: str | int, what: str = "size") -> int:
    """``"16MiB"`` -> 16777216, ``"2GB"`` -> 2000000000, ``4096`` -> 4096 (bytes)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text <= 0:
            raise ValueError(f"{what} must be > 0, not {text}")
        return text
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"{what} must be a size like 4096, 16MiB or 2GB, not {text!r}")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise ValueError(f"{what} must be > 0, not {text!r}")
    return value


@dataclasses.dataclass(frozen=True)
class Plan:
    """How to partition ``n_objects`` objects of ``object_bytes`` each on the cluster given."""

    n_objects: int
    object_bytes: int
    worker_memory: int
    threads_per_worker: int
    n_workers: int
    k: float
    partition_size: int  # objects per partition
    n_partitions: int
    limited_by: str  # "memory" or "parallelism"
    engine: str = "dask"  # whose parameters M, T and W are: "dask" or "spark"

    def worker_peak(self, streaming: bool = True) -> int:
        """The predicted peak RSS of a worker process (Dask) or of one Python worker (Spark) in
        bytes, from the constants measured in docs/dask.md and docs/spark.md: while the maps
        stream (a save reads its partition element by element), ``B + T' * 3 * D``, a few
        objects at a time; for a stage that holds its partition whole, ``B + T' * c * s * D``.
        T' is T for a Dask worker (its threads share the process), 1 for a Spark Python worker
        (one task each)."""
        B, a, c = _MEASURED[self.engine]
        tasks = self.threads_per_worker if self.engine == "dask" else 1
        held = a * self.object_bytes if streaming else c * self.partition_size * self.object_bytes
        return int(B + tasks * held)

    @property
    def reasoning(self) -> str:
        M, T, D, N, k = (
            self.worker_memory,
            self.threads_per_worker,
            self.object_bytes,
            self.n_objects,
            self.k,
        )
        per_thread = k * M / T
        if self.engine == "spark":
            cluster = [
                f"executors W = {self.n_workers} (spark.executor.instances), Python memory per "
                f"executor M = {_fmt(M)} (spark.executor.pyspark.memory), cores T = {T} "
                "(spark.executor.cores)",
                f"an executor runs T tasks at once, each in a Python worker limited to M/T; a "
                f"partition may hold k*M/T = {k:g}*{_fmt(M)}/{T} = {_fmt(per_thread)}",
            ]
        else:
            cluster = [
                f"workers W = {self.n_workers}, memory per worker M = {_fmt(M)}, threads T = {T}",
                f"a worker runs T partitions at once; each may hold k*M/T = {k:g}*{_fmt(M)}/{T}"
                f" = {_fmt(per_thread)}",
            ]
        lines = [
            f"objects N = {N:,}, object size D = {_fmt(D)}, data set N*D = {_fmt(N * D)}",
            *cluster,
            f"objects per partition s = floor(k*M/(D*T)) = {int(per_thread // D):,}",
            f"parallelism: at least W*T = {self.n_workers * T} partitions keep every thread busy",
            f"-> {self.n_partitions:,} partitions of up to {self.partition_size:,} objects "
            f"({_fmt(self.partition_size * D)} each; limited by {self.limited_by})",
        ]
        who = "a worker" if self.engine == "dask" else "a Python worker"
        B = _MEASURED[self.engine][0]
        lines.append(
            f"predicted peak of {who} (B = {_fmt(B)} measured at rest with runstore's writer): "
            f"maps that stream, read by runstore's save element by element, "
            f"{_fmt(self.worker_peak(True))}; a stage holding its partition whole "
            f"{_fmt(self.worker_peak(False))}"
        )
        if self.engine == "spark":
            lines.append(
                f"   (sc.parallelize(items, {self.n_partitions}) or .repartition("
                f"{self.n_partitions}); maps that stream, which runstore.spark.save reads element "
                "by element, hold one object whatever s: the bound is for a stage that holds its "
                "partition whole)"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.reasoning

    def draw(self, path: str | os.PathLike[str]) -> None:
        """Draws the plan to a PNG: the data set as a row of partition boxes, each worker's memory
        as a box below it holding T partitions at a time."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle

        shown = min(self.n_partitions, 40)
        fig, ax = plt.subplots(figsize=(10, 3.6))
        w = 1.0 / shown
        for i in range(shown):
            ax.add_patch(Rectangle((i * w, 0.62), w * 0.9, 0.18, fc="#9ecae1", ec="#3182bd"))
        ax.text(
            0,
            0.86,
            f"data set: {self.n_objects:,} objects x {_fmt(self.object_bytes)} = "
            f"{_fmt(self.n_objects * self.object_bytes)} in {self.n_partitions:,} partitions of "
            f"{self.partition_size:,}" + (" (first 40 drawn)" if shown < self.n_partitions else ""),
            fontsize=9,
        )
        nw = min(self.n_workers, 8)
        ww = 1.0 / nw
        part_frac = self.partition_size * self.object_bytes / self.worker_memory
        for j in range(nw):
            x = j * ww
            ax.add_patch(Rectangle((x, 0.05), ww * 0.92, 0.4, fc="white", ec="black"))
            for t in range(self.threads_per_worker):
                h = 0.4 * part_frac
                ax.add_patch(
                    Rectangle(
                        (x + 0.01 * ww, 0.05 + t * h), ww * 0.9, h, fc="#fdae6b", ec="#e6550d"
                    )
                )
            ax.text(x, 0.47, f"worker {j}: M = {_fmt(self.worker_memory)}", fontsize=8)
        ax.text(
            0,
            -0.05,
            f"each worker holds T = {self.threads_per_worker} partitions at once "
            f"= {self.threads_per_worker * part_frac:.0%} of M (k = {self.k:g})",
            fontsize=9,
        )
        ax.set_xlim(0, 1)
        ax.set_ylim(-0.1, 0.95)
        ax.axis("off")
        fig.savefig(path, dpi=80, bbox_inches="tight")
        plt.close(fig)


#: (B: a worker's RSS with runstore's writer, a: objects a streaming task holds, c: bytes held
#: per byte of a partition held whole), measured with `dask_bench.py --measure-k
#: [--materialize]` and `spark_vs_dask.py --measure-k [--materialize]`.
_MEASURED = {"dask": (80 * 2**20, 3, 1.01), "spark": (78 * 2**20, 3, 1.03)}


def plan(
    n_objects: int,
    object_bytes: int | str,
    worker_memory: int | str,
    threads_per_worker: int,
    n_workers: int,
    k: float = 0.25,
    engine: str = "dask",
) -> Plan:
    """Partition count and size for a bag of ``n_objects`` objects of ``object_bytes`` bytes on
    ``n_workers`` workers of ``worker_memory`` bytes and ``threads_per_worker`` threads.

    ``engine="spark"``: the workers are executors, ``worker_memory`` is an executor's
    ``spark.executor.pyspark.memory`` (its Python workers' memory: the objects live there, not in
    the JVM's heap) and ``threads_per_worker`` its ``spark.executor.cores`` (docs/spark.md).

    A worker runs T tasks at once, each holding one partition; T partitions of s objects of D
    bytes must fit in the fraction k of M: ``s = floor(k*M/(D*T))``, and there are
    ``ceil(N/s)`` partitions, at least ``W*T`` (docs/dask.md derives it and measures k).
    Raises ValueError when one object alone does not fit (``D > k*M/T``) or an argument is out of
    range, TypeError for a non-integer count.
    """
    for arg, v in (
        ("n_objects", n_objects),
        ("threads_per_worker", threads_per_worker),
        ("n_workers", n_workers),
    ):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
            raise TypeError(f"{arg} must be an int, not {type(v).__name__}")
        if v <= 0:
            raise ValueError(f"{arg} must be > 0, not {v}")
    D = parse_size(object_bytes, "object_bytes")
    M = parse_size(worker_memory, "worker_memory")
    if not isinstance(k, (int, float)) or not 0 < k <= 1:
        raise ValueError(f"k must be a number in (0, 1], not {k!r}")
    if engine not in ("dask", "spark"):
        raise ValueError(f"engine must be 'dask' or 'spark', not {engine!r}")
    T, W, N = int(threads_per_worker), int(n_workers), int(n_objects)
    s = int(k * M // (D * T))
    if s < 1:
        raise ValueError(
            f"one object of {_fmt(D)} does not fit: k*M/T = {k:g}*{_fmt(M)}/{T} = "
            f"{_fmt(k * M / T)}; give the "
            + (
                "executors more Python memory or fewer cores"
                if engine == "spark"
                else "workers more memory or fewer threads"
            )
        )
    n_parts = -(-N // s)
    limited_by = "memory"
    if n_parts < W * T:
        n_parts = min(N, W * T)
        s = -(-N // n_parts)
        n_parts = -(-N // s)
        limited_by = "parallelism"
    return Plan(N, D, M, T, W, float(k), s, n_parts, limited_by, engine)
