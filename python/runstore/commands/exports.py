"""``runstore export tar|parquet|zarr``, ``import tar`` and ``plan``: the commands of the
package's exports and of the partition planner (``cli/commands.tsv`` names each one's function
here). Each declares its options, help and examples once, here; the compiled tool only lists
them. What they share with every Python command is :mod:`runstore.commands._common`.

Like the rest of the tool (and zstd or gzip), the exports refuse to replace an existing OUT
unless --force is given, where the Python API (Store.export_tar) replaces it as pandas and
numpy do. The exports draw a progress line on stderr when it is a terminal (--no-progress:
never), as the tool's commands do.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import runstore

from .._printable import printable
from ..integrations._plan import plan
from ._common import (
    COMMAND_ERRORS,
    EXIT_OTHER,
    INT32_MAX,
    INT64_MAX,
    _Parser,
    _positive,
    _print_report,
    add_global_flags,
    command_parser,
    fail_for,
    ignore_global_flags,
    integer,
    open_for_command,
)


def _export_parser(command: str, details: str, examples: str, out: str) -> _Parser:
    """The parser of an export, with its STORE and OUT (``out``: what OUT is); the caller adds
    its own options, then :func:`_export_flags`."""
    ap = command_parser(command, details, examples)
    ap.add_argument("store", metavar="STORE", help="store directory")
    ap.add_argument("out", metavar="OUT", help=out)
    return ap


def _export_flags(ap: _Parser, force: str = "replace OUT if it exists") -> None:
    """An export's --force and the global flags, after its own options."""
    ap.add_argument("-f", "--force", action="store_true", help=force)
    add_global_flags(ap)


def _export_tar_parser() -> _Parser:
    ap = _export_parser(
        "export tar",
        "Writes metadata.json (every column's and outcome's dtype and shape, and the member file\n"
        "of each outcome), experiments.csv (experiment id, parameters, status: state, error,\n"
        "host, started, finished, seconds, attempt), one CSV per outcome of up to two dimensions\n"
        "(rows in experiment order; one column per element, '<name>_i_j' for 2-d), and .npy for\n"
        "outcomes of three or more dimensions (with a .mask.npy of absent rows). Streamed in\n"
        "bounded memory; OUT appears whole when complete or not at all, with mode 0666 minus\n"
        "the umask; an existing OUT is replaced only with --force. A store without a design\n"
        "exports its runs as the experiments. runstore.import_tar (Python) and `runstore import\n"
        "tar` read it back with dtypes intact; docs/experiments.md specifies the layout.",
        "  runstore export tar /scratch/sweep results.tar.gz",
        "output .tar.gz (not inside the store)",
    )
    ap.add_argument(
        "--chunk-rows",
        type=_positive,
        default=10_000,
        help="experiments formatted at a time (default 10000)",
    )
    ap.add_argument(
        "--compresslevel", type=integer(0, 9), default=1, metavar="0-9", help="gzip level (1)"
    )
    _export_flags(ap)
    return ap


def _export_parquet_parser() -> _Parser:
    ap = _export_parser(
        "export parquet",
        "Writes one row per experiment in design order: experiment, parameters, status columns\n"
        "and every outcome (scalars as columns, fixed-shape arrays as fixed-size lists), row\n"
        "group by row group in bounded memory. A store without a design writes its records as\n"
        "run, step and one column per series. OUT is written as 'export tar' writes its own\n"
        "(replaced only with --force). Needs pyarrow (pip install 'runstore[arrow]').",
        "  runstore export parquet /scratch/sweep results.parquet\n"
        "  duckdb -c \"SELECT state, count(*) FROM 'results.parquet' GROUP BY state\"",
        "output .parquet (not inside the store)",
    )
    ap.add_argument(
        "--row-group-rows",
        type=_positive,
        default=10_000,
        help="rows per row group (default 10000)",
    )
    ap.add_argument("--compression", default="zstd", help="Parquet codec (default zstd)")
    _export_flags(ap)
    return ap


def _export_zarr_parser() -> _Parser:
    ap = _export_parser(
        "export zarr",
        "Writes the store's xarray Dataset as a Zarr store (format 3, consolidated metadata)\n"
        "that xarray.open_zarr(OUT) reads without runstore. Dimension 'run': the experiments\n"
        "in design order (their ids), with the parameters and the status (state, error, host,\n"
        "started, finished, seconds, attempt) as coordinates along it, and each outcome a\n"
        "variable of its step-0 records: (run) for scalars, (run, <name>_dim_0, ...) for\n"
        "arrays. A store without a design (or --by-step) has variables of (run, step, ...)\n"
        "over every step. Absent values are NaN (absent strings empty); int and bool arrays\n"
        "are float64 for that. Bytes series are left out. Written chunk by chunk of runs in\n"
        "bounded memory under a temporary name beside OUT, and renamed into place when\n"
        "complete; an existing OUT is replaced only with --force, and only if it is a Zarr\n"
        "store, an empty directory or a file. Needs xarray, zarr and dask (pip install\n"
        "'runstore[xarray]').",
        "  runstore export zarr /scratch/sweep results.zarr\n"
        "  python -c \"import xarray; print(xarray.open_zarr('results.zarr'))\"",
        "output Zarr directory (not inside the store)",
    )
    ap.add_argument(
        "--names", type=_names, default=None, help="only these series (comma-separated)"
    )
    ap.add_argument(
        "--by-step",
        action="store_true",
        help="variables of (run, step) in a store with a design too (default: step 0 there)",
    )
    ap.add_argument(
        "--chunk-rows",
        type=_positive,
        default=None,
        help="runs per Zarr chunk (default: about 8 MiB of the largest variable)",
    )
    _export_flags(ap, force="replace OUT if it is a Zarr store or empty")
    return ap


def _import_tar_parser() -> _Parser:
    ap = command_parser(
        "import tar",
        "Reads metadata.json, experiments.csv and the outcome members, and writes them into\n"
        "STORE with their dtypes and shapes (runstore.import_tar in Python). A new STORE appears\n"
        "whole once the archive has been read; an existing one receives the import as one\n"
        "commit. The archive is checked, not trusted: links, special files, a cut or damaged\n"
        "archive, a gzip bomb and outcomes named like runstore's own '~' series are refused,\n"
        "naming the member, and nothing is written.",
        "  runstore import tar results.tar.gz /scratch/sweep-again",
    )
    ap.add_argument("archive", metavar="ARCHIVE", help="a .tar.gz written by 'runstore export tar'")
    ap.add_argument("store", metavar="STORE", help="the store to write (created if missing)")
    ap.add_argument(
        "--chunk-rows",
        type=_positive,
        default=10_000,
        help="rows parsed and written at a time (default 10000)",
    )
    ap.add_argument(
        "--max-expansion",
        type=_expansion,
        default=runstore.export.MAX_EXPANSION,
        metavar="X|none",
        help="refuse an archive that decompresses to more than X times its size (default "
        f"{runstore.export.MAX_EXPANSION:g}, and 64 MiB at least: a gzip bomb); none: no limit",
    )
    ignore_global_flags(ap)  # the archive is read whole, and no progress is drawn
    return ap


def _expansion(text: str) -> float | None:
    if text.lower() == "none":
        return None
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number or 'none'") from None
    if not x > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return x


def _names(text: str) -> list[str]:
    names = [n for n in text.split(",") if n]
    if not names:
        raise argparse.ArgumentTypeError(f"{text!r} names no series")
    return names


def export_tar_main(argv: list[str]) -> int:
    """``runstore export tar``."""
    args = _export_tar_parser().parse_args(argv)

    def run(store: runstore.Store) -> tuple[str, str | None]:
        r = store.export_tar(
            args.out,
            chunk_rows=args.chunk_rows,
            compresslevel=args.compresslevel,
            overwrite=args.force,
            progress=not args.no_progress,
        )
        report = (
            f"{r['path']}: {r['experiments']:,} experiments, {len(r['members'])} members, "
            f"{r['bytes']:,} bytes in {r['seconds']:.1f} s"
        )
        note = None
        if r["left_out"]:
            note = (
                f"note: {sum(r['left_out'].values()):,} records at steps other than 0 "
                f"(or of runs that are not experiments) are not part of the table: "
                f"{', '.join(f'{k} ({v:,})' for k, v in r['left_out'].items())}; "
                "`runstore export csv` writes every record"
            )
        return report, note

    return _export("export tar", args, run, "pip install runstore")


def export_parquet_main(argv: list[str]) -> int:
    """``runstore export parquet``."""
    args = _export_parquet_parser().parse_args(argv)

    def run(store: runstore.Store) -> tuple[str, str | None]:
        r = store.export_parquet(
            args.out,
            row_group_rows=args.row_group_rows,
            compression=args.compression,
            overwrite=args.force,
            progress=not args.no_progress,
        )
        return (
            f"{r['path']}: {r['rows']:,} rows, {r['bytes']:,} bytes in {r['seconds']:.1f} s",
            None,
        )

    return _export("export parquet", args, run, "pip install pyarrow, or runstore[arrow]")


def export_zarr_main(argv: list[str]) -> int:
    """``runstore export zarr``."""
    args = _export_zarr_parser().parse_args(argv)

    def run(store: runstore.Store) -> tuple[str, str | None]:
        r = store.to_zarr(
            args.out,
            args.names,
            by_step=True if args.by_step else None,
            chunks=args.chunk_rows,
            overwrite=args.force,
            progress=not args.no_progress,
        )
        steps = "" if r["steps"] is None else f" by {r['steps']:,} steps"
        report = (
            f"{r['path']}: {r['runs']:,} runs{steps}, {r['variables']} variables, "
            f"{r['chunks']:,} chunks, {r['bytes']:,} bytes in {r['seconds']:.1f} s"
        )
        note = None
        if r["left_out"]:
            note = (
                f"note: bytes series are not written (Zarr has no specified type for "
                f"them): {', '.join(r['left_out'])}; `runstore export parquet` writes them"
            )
        return report, note

    return _export("export zarr", args, run, "pip install xarray zarr dask, or runstore[xarray]")


def import_tar_main(argv: list[str]) -> int:
    """``runstore import tar``."""
    args = _import_tar_parser().parse_args(argv)
    try:
        store = runstore.import_tar(
            args.archive, args.store, chunk_rows=args.chunk_rows, max_expansion=args.max_expansion
        )
        report = f"{store.path}: {len(store.design()):,} experiments imported"
    except (*COMMAND_ERRORS, NotImplementedError, MemoryError) as e:
        return fail_for("import tar", e, "pip install runstore")
    return _print_report("import tar", report)


def _export(
    what: str,
    args: argparse.Namespace,
    run: Callable[[runstore.Store], tuple[str, str | None]],
    install: str,
) -> int:
    """An export: ``run`` on the store opened for it gives its report and a note (or None);
    errors are reported as the tool reports them, with what to install for a missing module."""
    try:
        report, note = run(open_for_command(args.store, args.skip_damaged))
    except (*COMMAND_ERRORS, NotImplementedError, MemoryError) as e:
        return fail_for(what, e, install)
    if note is not None:
        print(printable(note), file=sys.stderr)
    return _print_report(what, report)


def plan_main(argv: list[str]) -> int:
    """``runstore plan``: the partition planner of runstore.dask
    (:func:`runstore.integrations._plan.plan`, without dask); prints the plan's reasoning (and
    draws it with --draw FILE)."""
    count = integer(1, INT32_MAX)
    p = command_parser(
        "plan",
        "A worker runs T tasks at once, each holding one partition: T partitions of s objects\n"
        "of D bytes must fit in the fraction k of M, so s = floor(k*M/(D*T)), and there are\n"
        "ceil(N/s) partitions, at least W*T. Prints the reasoning; docs/dask.md derives it and\n"
        "measures k.",
        "  runstore plan --objects 100000 --object-bytes 16MiB --worker-memory 8GiB \\\n"
        "      --threads 4 --workers 16 --draw plan.png",
    )
    objects = integer(1, INT64_MAX)
    p.add_argument("--objects", type=objects, required=True, help="number of objects N")
    p.add_argument("--object-bytes", required=True, help="size of one object D, e.g. 16MiB")
    p.add_argument("--worker-memory", required=True, help="memory per worker M, e.g. 4GiB")
    p.add_argument("--threads", type=count, default=1, help="threads per worker T (default 1)")
    p.add_argument("--workers", type=count, default=1, help="number of workers W (default 1)")
    p.add_argument("--k", type=float, default=0.25, help="fraction of M for partitions")
    p.add_argument("--draw", metavar="PNG", help="also draw the plan to this file")
    p.add_argument(
        "--engine",
        choices=("dask", "spark"),
        default="dask",
        help="whose workers: Dask's, or Spark's executors (M: spark.executor.pyspark.memory, "
        "T: spark.executor.cores; docs/spark.md)",
    )
    ignore_global_flags(p)  # it reads no store and draws no progress
    a = p.parse_args(argv)
    try:
        result = plan(
            a.objects, a.object_bytes, a.worker_memory, a.threads, a.workers, k=a.k, engine=a.engine
        )
    except (TypeError, ValueError) as e:
        print(f"runstore plan: {e}", file=sys.stderr)
        return EXIT_OTHER  # an invalid argument, as the tool's exit codes say
    print(result.reasoning)
    if a.draw:
        result.draw(a.draw)
    return 0
