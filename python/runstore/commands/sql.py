"""``runstore sql STORE "SELECT ..."``: SQL over a store with DuckDB (the ``sql`` extra): each
series is a view of its name (columns run, step, value; ``Store.table``), and ``experiments``
the experiments table (``Store.experiments_table``), both read in place as Arrow streams. The
result is printed as ``runstore cat`` prints records: text, CSV or JSON lines."""

from __future__ import annotations

import base64
import csv
import io
import json
import math
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from .._arrow_stream import connect
from .._printable import _UNSAFE, printable
from ._common import (
    COMMAND_ERRORS,
    EXIT_CORRUPTION,
    EXIT_OK,
    INT64_MAX,
    _fail,
    add_global_flags,
    command_parser,
    fail_for,
    integer,
    open_for_command,
)

#: Exit code of a query DuckDB refuses (a syntax error, an unknown table or column): the
#: command line was wrong, as argparse's 1 says of its options.
EXIT_QUERY = 1
#: Ctrl-C (SIGINT) while the query runs or its rows are printed: the shell's 128 + SIGINT.
EXIT_INTERRUPTED = 130
#: Rows fetched (and aligned, as text) at a time.
FETCH_ROWS = 1000


def sql_main(argv: list[str]) -> int:
    """``runstore sql STORE QUERY [--format F] [--limit N]``; the exit codes of the tool."""
    ap = command_parser(
        "sql",
        "Runs one SQL query (DuckDB) over the store, read in place: each series is a view\n"
        'named as the series (columns run, step, value; quote names such as "train/loss"),\n'
        "and 'experiments' is the experiments table (a row per experiment: id, parameters,\n"
        "status, outcomes; also '\"~experiments\"'). Prints the result as 'runstore cat'\n"
        "prints records. The query reads those views and no file (no COPY TO, read_csv or\n"
        "ATTACH). A query DuckDB refuses exits with 1, naming what was wrong; Ctrl-C with\n"
        "130. Needs DuckDB (pip install 'runstore[sql]').",
        '  runstore sql results/sweep "SELECT run, min(value) FROM loss GROUP BY run"\n'
        "  runstore sql results/sweep \"SELECT * FROM experiments WHERE state = 'failed'\""
        " -f csv",
    )
    ap.add_argument("store", metavar="STORE", help="store directory")
    ap.add_argument("query", metavar="QUERY", help="one SQL statement")
    ap.add_argument(
        "-f", "--format", choices=("text", "csv", "jsonl"), default="text", help="output format"
    )
    ap.add_argument(
        "-n", "--limit", type=integer(0, INT64_MAX), default=None, metavar="N",
        help="print at most N rows",
    )  # fmt: skip
    add_global_flags(ap, progress=False)
    args = ap.parse_args(argv)
    stop_watching: Callable[[], None] | None = None
    try:
        import duckdb

        store = open_for_command(args.store, args.skip_damaged)
        try:
            con = connect(store, duckdb, args.query, own=True)
            # The command reads the store's views and nothing else: no file is read or written
            # (COPY ... TO, read_csv, ATTACH), no extension installed; it never writes.
            con.execute("SET enable_external_access = false")
            stop_watching = _interrupt_at_sigint(con)
            cursor = con.execute(args.query)
        except duckdb.Error as e:
            return _query_failed(e)
        columns = [d[0] for d in cursor.description or []]
        out = _Output(args.format, columns)
        left = args.limit
        while left is None or left > 0:
            try:
                rows = cursor.fetchmany(FETCH_ROWS if left is None else min(left, FETCH_ROWS))
            except duckdb.Error as e:
                return _query_failed(e)
            if not rows:
                break
            out.rows(rows)
            if left is not None:
                left -= len(rows)
        out.end()
    except BrokenPipeError:
        return EXIT_OK  # `| head`: the reader has what it wanted
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except RuntimeError as e:
        # DuckDB stops a query at SIGINT and says so as a RuntimeError of its own.
        if str(e) == "Query interrupted":
            return EXIT_INTERRUPTED
        return fail_for("sql", e, "pip install 'runstore[sql]'")
    except COMMAND_ERRORS as e:
        return fail_for("sql", e, "pip install 'runstore[sql]'")
    finally:
        if stop_watching is not None:
            stop_watching()
    return EXIT_OK


def _interrupt_at_sigint(con: Any) -> Callable[[], None]:
    """Ctrl-C stops the query: DuckDB looks for SIGINT itself only at some points of a query, and
    Python's handler runs only once DuckDB returns, so a thread woken by the signal (Python's
    wakeup file descriptor) interrupts the connection, which the query then ends with. Returns
    what stops that thread (before the connection goes: it holds it)."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    signal.set_wakeup_fd(w, warn_on_full_buffer=False)

    def watch() -> None:
        while got := os.read(r, 64):
            if signal.SIGINT in got:
                con.interrupt()

    thread = threading.Thread(target=watch, name="runstore sql: Ctrl-C", daemon=True)
    thread.start()

    def stop() -> None:
        signal.set_wakeup_fd(-1)
        os.close(w)  # the watcher reads the end of the pipe
        thread.join()
        os.close(r)

    return stop


def _query_failed(e: Exception) -> int:
    if type(e).__name__ == "InterruptException":  # Ctrl-C met while rows are fetched
        return EXIT_INTERRUPTED
    text = str(e)
    if "Corruption" in text:  # a damaged block met while a stream was read
        return _fail("sql", "Corruption", text, EXIT_CORRUPTION)
    return _fail("sql", type(e).__name__, text, EXIT_QUERY)


# -- output ---------------------------------------------------------------------------------------


def _json_value(v: Any) -> Any:
    """A cell as JSON holds it: NaN and infinities null, bytes base64, others their text."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, (bytes, bytearray, memoryview)):
        return "base64:" + base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _json_value(x) for k, x in v.items()}
    if v is None or isinstance(v, (bool, int, str)):
        return v
    return str(v)  # dates, decimals, UUIDs: as DuckDB writes them


def _number(v: float) -> str:
    if math.isfinite(v):
        return repr(v)
    return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


def _escaped_json(s: str) -> str:
    """``s`` JSON-quoted, with the characters a terminal acts on as \\u escapes."""
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(s, ensure_ascii=False))


def _cell(v: Any, fmt: str) -> str:
    """A cell in text (terminal-safe) or CSV (exact)."""
    if v is None:
        return "" if fmt == "csv" else "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return _number(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return v if fmt == "csv" else _escaped_json(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return "base64:" + base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, (list, tuple, dict)):
        text = json.dumps(_json_value(v), separators=(",", ":"), ensure_ascii=False)
        return text if fmt == "csv" else _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return str(v) if fmt == "csv" else printable(v)


class _Output:
    """The rows of a result on standard output, a fetch at a time."""

    def __init__(self, fmt: str, columns: list[str]) -> None:
        self.fmt = fmt
        self.columns = columns
        self.widths: list[int] | None = None
        if fmt == "csv":
            # RFC 4180 quoting of a cell that holds a CR too (csv quotes only the characters of
            # its line terminator): rows are made ending in CRLF, then end in LF, as cat's do.
            self.buffer = io.StringIO()
            self.csv = csv.writer(self.buffer, lineterminator="\r\n")
            self._csv_row(columns)

    def rows(self, rows: list[tuple[Any, ...]]) -> None:
        if self.fmt == "jsonl":
            for r in rows:
                d = {c: _json_value(v) for c, v in zip(self.columns, r)}
                sys.stdout.write(json.dumps(d, separators=(",", ":"), ensure_ascii=True) + "\n")
        elif self.fmt == "csv":
            for r in rows:
                self._csv_row([_cell(v, "csv") for v in r])
        else:
            cells = [[_cell(v, "text") for v in r] for r in rows]
            if self.widths is None:  # aligned on the first fetch, and the header with it
                header = [printable(c) for c in self.columns]
                self.widths = [
                    max([len(h)] + [len(row[k]) for row in cells]) for k, h in enumerate(header)
                ]
                self._line(header)
            for row in cells:
                self._line(row)

    def _csv_row(self, cells: list[str]) -> None:
        self.buffer.seek(0)
        self.buffer.truncate()
        self.csv.writerow(cells)
        sys.stdout.write(self.buffer.getvalue()[:-2] + "\n")

    def _line(self, cells: list[str]) -> None:
        assert self.widths is not None
        sys.stdout.write("  ".join(c.rjust(w) for c, w in zip(cells, self.widths)) + "\n")

    def end(self) -> None:
        if self.fmt == "text" and self.widths is None:
            self.widths = [len(printable(c)) for c in self.columns]
            self._line([printable(c) for c in self.columns])
        sys.stdout.flush()
