"""The commands of ``runstore`` that the package does in Python (see the module ``_runstore_cli``).

    runstore export tar STORE OUT.tar.gz [--chunk-rows N] [--compresslevel L] [--force]
                                  [--skip-damaged]
    runstore export parquet STORE OUT.parquet [--row-group-rows N] [--force] [--skip-damaged]
    runstore export zarr STORE OUT.zarr [--names A,B] [--by-step] [--chunk-rows N] [--force]
                                  [--skip-damaged]
    runstore import tar ARCHIVE.tar.gz STORE [--chunk-rows N] [--max-expansion X|none]

Like the rest of the tool (and zstd or gzip), the exports refuse to replace an existing OUT
unless --force is given, where the Python API (Store.export_tar) replaces it as pandas and
numpy do. Exit codes are the tool's: 0 ok, 1 bad command line, 2 corruption, 3 not found, 4 I/O
error (also writing standard output), 5 anything else (OUT exists, OUT inside STORE, ...), 6 out
of a resource (file descriptors, memory). With
--skip-damaged, the store is opened with on_damaged="skip" and each segment left out is named on
stderr, as the tool does. The exports draw a progress line on stderr when it is a terminal
(--no-progress: never), as the tool's commands do. Names, ids and messages from a store are
printed through :func:`runstore._printable.printable`, never as terminal commands.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from typing import NoReturn

import runstore
from runstore._printable import printable

EXIT_OK, EXIT_USAGE, EXIT_CORRUPTION, EXIT_NOT_FOUND, EXIT_IO, EXIT_OTHER = 0, 1, 2, 3, 4, 5
EXIT_RESOURCE = 6
#: The end of the message of an error opening a store meets in one segment file
#: (python/src/py_store.cc), which the command says in its own terms.
_PYTHON_HINT = ' (open with on_damaged="skip" to read the other segments)'
_SKIP_HELP = (
    "read the store around segment files that cannot be read, leaving them out "
    "(each is named on stderr)"
)


#: An export's own --no-progress (also taken before the command): SUPPRESS, so that the
#: subcommand's default does not undo a --no-progress given before it.
_NO_PROGRESS: dict = {
    "action": "store_true",
    "default": argparse.SUPPRESS,
    "help": "never draw the progress line (drawn on stderr only when it is a terminal)",
}


class _Parser(argparse.ArgumentParser):
    """Exits with the tool's usage code (1) on a bad command line; argparse's own is 2, which
    the tool uses for corruption."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(
        prog="runstore", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--no-progress", action="store_true", help=argparse.SUPPRESS)
    sub = ap.add_subparsers(dest="command", required=True)
    exp = sub.add_parser("export", help="export a store's experiments")
    exp_sub = exp.add_subparsers(dest="format", required=True)
    tar = exp_sub.add_parser(
        "tar",
        help="a .tar.gz of CSVs (and .npy) that opens in a spreadsheet",
        description="Writes experiments.csv (id, parameters, status), one CSV per outcome of up to "
        "two dimensions, .npy for more, and metadata.json with every dtype and shape, "
        "streamed in bounded memory. Read it back with `runstore import tar`.",
    )
    tar.add_argument("store")
    tar.add_argument("out")
    tar.add_argument(
        "--chunk-rows", type=int, default=10_000, help="experiments formatted at a time"
    )
    tar.add_argument(
        "--compresslevel",
        type=int,
        default=1,
        choices=range(0, 10),
        metavar="0-9",
        help="gzip level (default 1)",
    )
    tar.add_argument("-f", "--force", action="store_true", help="replace OUT if it exists")
    tar.add_argument("--skip-damaged", action="store_true", help=_SKIP_HELP)
    tar.add_argument("--no-progress", **_NO_PROGRESS)
    pq = exp_sub.add_parser(
        "parquet",
        help="one Parquet file: a row per experiment",
        description="Writes one row per experiment (id, parameters, status, outcomes; arrays as "
        "fixed-size lists), row group by row group, for pandas, polars, DuckDB, Spark.",
    )
    pq.add_argument("store")
    pq.add_argument("out")
    pq.add_argument("--row-group-rows", type=int, default=10_000, help="rows per row group")
    pq.add_argument("--compression", default="zstd", help="Parquet codec (default zstd)")
    pq.add_argument("-f", "--force", action="store_true", help="replace OUT if it exists")
    pq.add_argument("--skip-damaged", action="store_true", help=_SKIP_HELP)
    pq.add_argument("--no-progress", **_NO_PROGRESS)
    zr = exp_sub.add_parser(
        "zarr",
        help="a Zarr store that xarray.open_zarr opens: a row per experiment (or run)",
        description="Writes the store's xarray Dataset (Store.to_xarray) as a Zarr store, chunk "
        "by chunk in bounded memory: dimension 'run' (experiment ids, or run ids), parameters "
        "and status as coordinates along it, each outcome a variable; a store without a design "
        "by run and step. xarray.open_zarr(OUT) reads it without runstore.",
    )
    zr.add_argument("store")
    zr.add_argument("out")
    zr.add_argument(
        "--names", type=_names, default=None, help="only these series (comma-separated)"
    )
    zr.add_argument(
        "--by-step",
        action="store_true",
        help="variables of (run, step) in a store with a design too (default: step 0 there)",
    )
    zr.add_argument(
        "--chunk-rows",
        type=_positive,
        default=None,
        help="runs per Zarr chunk (default: about 8 MiB of the largest variable)",
    )
    zr.add_argument("-f", "--force", action="store_true", help="replace OUT if it exists")
    zr.add_argument("--skip-damaged", action="store_true", help=_SKIP_HELP)
    zr.add_argument("--no-progress", **_NO_PROGRESS)
    imp = sub.add_parser("import", help="rebuild a store from an export")
    imp_sub = imp.add_subparsers(dest="format", required=True)
    itar = imp_sub.add_parser(
        "tar",
        help="from a tarball of `export tar`",
        description="Reads a tarball of `export tar` into STORE: a new store appears whole when "
        "the archive has been read, an existing one receives the import as one commit. The "
        "archive is checked, not trusted: links, special files, a cut or damaged archive and "
        "outcomes named like runstore's own series are refused, naming the member.",
    )
    itar.add_argument("archive")
    itar.add_argument("store")
    itar.add_argument(
        "--chunk-rows", type=_positive, default=10_000, help="rows parsed and written at a time"
    )
    itar.add_argument(
        "--max-expansion",
        type=_expansion,
        default=runstore.export.MAX_EXPANSION,
        metavar="X|none",
        help="refuse an archive that decompresses to more than X times its size (default "
        f"{runstore.export.MAX_EXPANSION:g}, and 64 MiB at least: a gzip bomb); none: no limit",
    )
    return ap


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return n


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


#: What to install for an export whose Python modules are missing.
_INSTALL = {
    "parquet": "pip install pyarrow, or runstore[arrow]",
    "zarr": "pip install xarray zarr dask, or runstore[xarray]",
}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    what = f"{args.command} {args.format}"
    note = None
    try:
        if args.command == "export":
            store = open_for_command(args.store, args.skip_damaged)
            if args.format == "tar":
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
                if r["left_out"]:
                    note = (
                        f"note: {sum(r['left_out'].values()):,} records at steps other than 0 "
                        f"(or of runs that are not experiments) are not part of the table: "
                        f"{', '.join(f'{k} ({v:,})' for k, v in r['left_out'].items())}; "
                        "`runstore export csv` writes every record"
                    )
            elif args.format == "parquet":
                r = store.export_parquet(
                    args.out,
                    row_group_rows=args.row_group_rows,
                    compression=args.compression,
                    overwrite=args.force,
                    progress=not args.no_progress,
                )
                report = (
                    f"{r['path']}: {r['rows']:,} rows, {r['bytes']:,} bytes in {r['seconds']:.1f} s"
                )
            else:
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
                if r["left_out"]:
                    note = (
                        f"note: bytes series are not written (Zarr has no specified type for "
                        f"them): {', '.join(r['left_out'])}; `runstore export parquet` writes them"
                    )
        else:
            store = runstore.import_tar(
                args.archive,
                args.store,
                chunk_rows=args.chunk_rows,
                max_expansion=args.max_expansion,
            )
            report = f"{store.path}: {len(store.design()):,} experiments imported"
    except (*COMMAND_ERRORS, NotImplementedError, MemoryError) as e:
        return fail_for(what, e, _INSTALL.get(args.format, "pip install runstore"))
    if note is not None:
        print(printable(note), file=sys.stderr)
    return _print_report(what, report)


def _print_report(what: str, report: str) -> int:
    """Prints ``report`` on standard output, each of its lines through :func:`printable`: EXIT_OK,
    or EXIT_IO with a message if it could not be written (a full disk, a closed pipe), as a
    command whose output was lost has failed."""
    if sys.stdout is None:  # started with descriptor 1 closed
        return _fail(what, "IOError", f"standard output: {os.strerror(errno.EBADF)}", EXIT_IO)
    try:
        print("\n".join(printable(line) for line in report.split("\n")))
        sys.stdout.flush()
    except OSError as e:
        # Point the descriptor at /dev/null, or the interpreter's own flush at exit fails again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return _fail(what, "IOError", f"standard output: {e.strerror or e}", EXIT_IO)
    return EXIT_OK


#: The errors a command reports with an exit code (fail_for) rather than a traceback.
COMMAND_ERRORS = (
    runstore.CorruptionError,
    OSError,
    MemoryError,
    KeyError,
    ImportError,
    ValueError,
    TypeError,
    RuntimeError,
)


def open_for_command(path: str, skip_damaged: bool) -> runstore.Store:
    """The store at ``path`` opened read-only for a command; with ``skip_damaged``, around the
    segment files that cannot be read, each named on stderr as the tool names them."""
    store = runstore.open(path, mode="r", on_damaged="skip" if skip_damaged else "raise")
    for d in store.damaged_segments:
        print(
            printable(
                f"runstore: left out damaged segment {d.file}: {d.kind}: "
                f"{_without_file(d.message, d.file)}"
            ),
            file=sys.stderr,
        )
    return store


def fail_for(what: str, e: BaseException, install: str) -> int:
    """Prints command ``what``'s error ``e`` as the tool does and returns its exit code; an
    ImportError says what to install (``install``)."""
    if isinstance(e, runstore.CorruptionError):
        return _fail(what, "Corruption", e, EXIT_CORRUPTION)
    if isinstance(e, FileExistsError):
        return _fail(
            what,
            "AlreadyExists",
            f"{e.filename} exists; use --force (-f) to replace it",
            EXIT_OTHER,
        )
    if isinstance(e, runstore.ResourceExhaustedError):
        return _fail(what, "ResourceExhausted", e, EXIT_RESOURCE)
    if isinstance(e, MemoryError):
        return _fail(what, "ResourceExhausted", "out of memory", EXIT_RESOURCE)
    if isinstance(e, (FileNotFoundError, KeyError)):
        return _fail(what, "NotFound", e, EXIT_NOT_FOUND)
    if isinstance(e, OSError):
        return _fail(what, "IOError", e, EXIT_IO)
    if isinstance(e, ImportError):
        return _fail(what, "NotSupported", f"{e} ({install})", EXIT_OTHER)
    return _fail(what, type(e).__name__, e, EXIT_OTHER)


def _without_file(message: str, file: str) -> str:
    """A damaged segment's message without its leading file name (relative or full path)."""
    head, sep, rest = message.partition(file + ": ")
    return rest if sep and (not head or (head.endswith("/") and " " not in head)) else message


def _fail(what: str, kind: str, e: object, code: int) -> int:
    msg: object = e
    if isinstance(e, KeyError) and e.args:
        msg = e.args[0]
    elif isinstance(e, OSError) and e.strerror:
        msg = (
            e.strerror
            if e.filename is None or str(e.filename) in e.strerror
            else f"{e.filename}: {e.strerror}"
        )
    text = str(msg)
    damaged = text.endswith(_PYTHON_HINT)
    if damaged:
        text = text[: -len(_PYTHON_HINT)]
    print(f"runstore: {what}: {kind}: {printable(text)}", file=sys.stderr)
    if damaged:
        print(
            f"runstore: {what}: to read the other segments, leaving this one out, run with "
            "--skip-damaged",
            file=sys.stderr,
        )
    return code
