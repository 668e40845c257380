"""What every command of ``runstore`` done in Python shares (:mod:`runstore.commands`): the
exit codes, the parser of a command (its summary from ``cli/commands.tsv``, its help ending with
the exit codes), the global flags, integers in a range, opening a store for a command, and the
messages of a failure.

Exit codes are the tool's: 0 ok, 1 bad command line, 2 corruption, 3 not found, 4 I/O error
(also writing standard output), 5 anything else (OUT exists, OUT inside STORE, ...), 6 out of a
resource (file descriptors, memory). With --skip-damaged, the store is opened with
on_damaged="skip" and each segment left out is named on stderr, as the tool does. Names, ids and
messages from a store are printed through :func:`runstore._printable.printable`, never as
terminal commands.
"""

from __future__ import annotations

import argparse
import errno
import functools
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import _runstore_cli

import runstore

from .._printable import printable

EXIT_OK, EXIT_USAGE, EXIT_CORRUPTION, EXIT_NOT_FOUND, EXIT_IO, EXIT_OTHER = 0, 1, 2, 3, 4, 5
EXIT_RESOURCE = 6
#: The end of the message of an error opening a store meets in one segment file
#: (python/src/py_store.cc), which the command says in its own terms.
_PYTHON_HINT = ' (open with on_damaged="skip" to read the other segments)'
_SKIP_HELP = (
    "read the store around segment files that cannot be read, leaving them out "
    "(each is named on stderr)"
)


class _Parser(argparse.ArgumentParser):
    """Exits with the tool's usage code (1) on a bad command line; argparse's own is 2, which
    the tool uses for corruption."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


#: The end of every command's help: the tool's exit codes.
EXIT_CODES = """Exit codes:
  0  success
  1  usage error (bad command line)
  2  corruption: a checksum or structure check failed (the message names the
     file and offset)
  3  not found: no store at the path, or no such series, run or step
  4  I/O error reading the store or writing the output (standard output too)
  5  other errors: invalid argument (e.g. an output inside the store), an output
     that exists (without --force), unsupported (newer) format version, ...
  6  out of a resource: file descriptors (ulimit -n) or memory; nothing is wrong
     with the store, and the command may succeed with more of it"""


@functools.cache
def summaries() -> dict[str, str]:
    """Each command's one-line summary, from the table of the commands (``commands.tsv``, the
    package's copy of cli/commands.tsv, read by the front end's own reader), which is also
    what ``runstore --help`` lists."""
    table = _runstore_cli.command_table(Path(__file__).parent.parent)  # the package
    return {row["command"]: row["summary"] for row in table}


def command_parser(command: str, details: str, examples: str) -> _Parser:
    """The parser of ``runstore COMMAND`` done in Python: its help is the table's summary of it
    and ``details``, then its options, then ``examples`` and the exit codes. It takes the tool's
    global flags (--skip-damaged, --no-progress) as every command does; a command they do
    nothing for adds them hidden (:func:`ignore_global_flags`)."""
    return _Parser(
        prog=f"runstore {command}",
        description=f"{summaries()[command]}.\n\n{details}",
        epilog=f"Examples:\n{examples}\n\n{EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_global_flags(ap: argparse.ArgumentParser, progress: bool = True) -> None:
    """--skip-damaged and --no-progress, for a command that reads a store and draws progress
    (``progress=False``: one that draws none takes --no-progress hidden)."""
    ap.add_argument("--skip-damaged", action="store_true", help=_SKIP_HELP)
    if not progress:
        ignore_global_flags(ap, "--no-progress")
        return
    ap.add_argument(
        "--no-progress",
        action="store_true",
        help="never draw the progress line (drawn on stderr only when it is a terminal)",
    )


def ignore_global_flags(ap: argparse.ArgumentParser, *flags: str) -> None:
    """The tool's global ``flags`` taken and ignored by a command they do nothing for, as the
    tool's own commands take them."""
    for flag in flags or ("--skip-damaged", "--no-progress"):
        ap.add_argument(flag, action="store_true", help=argparse.SUPPRESS)


_DECIMAL = re.compile(r"-?[0-9]+\Z")
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1


def integer(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: decimal digits with an optional '-', from ``lo`` to ``hi``, as the
    tool's own integer options take them (cli/options.h, ``Integer``): 0x10, 010 as 8, 1_000,
    +5, ' 5', 1e3 and values out of range are refused, naming the value."""
    expected = f"expected an integer from {lo} to {hi}"

    def parse(text: str) -> int:
        if not _DECIMAL.match(text):
            raise argparse.ArgumentTypeError(f"'{text}' is not a decimal integer ({expected})")
        value = int(text)
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"'{text}' is out of range ({expected})")
        return value

    return parse


_positive = integer(1, INT32_MAX)


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
