"""``runstore status STORE``: the command line of :func:`runstore.experiments._status.summary`
(``--json`` prints its dict, the text :func:`~runstore.experiments._status.format_summary`)."""

from __future__ import annotations

import json

import runstore

from ..experiments._status import format_summary, summary
from ._common import (
    EXIT_CORRUPTION,
    EXIT_NOT_FOUND,
    EXIT_OTHER,
    INT32_MAX,
    _fail,
    _print_report,
    add_global_flags,
    command_parser,
    integer,
)


def status_main(argv: list[str]) -> int:
    """``runstore status STORE [--json] [--window S] [--top N]``; the exit codes of the tool."""
    ap = command_parser(
        "status",
        "Counts of pending, running, done and failed experiments, the rate at which they\n"
        "finished over the last --window seconds and the time left at that rate, the slowest\n"
        "and the longest running, and the failed with the first line of their errors. Reads\n"
        "one snapshot; never blocks the sweep's writers.",
        "  runstore status results/sweep\n  runstore status results/sweep --json --window 60",
    )
    ap.add_argument("store", metavar="STORE", help="store directory")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument(
        "--window",
        type=float,
        default=300.0,
        metavar="S",
        help="seconds over which the rate is measured (default 300)",
    )
    ap.add_argument(
        "--top", type=integer(0, INT32_MAX), default=5, metavar="N", help="rows per list (5)"
    )
    add_global_flags(ap, progress=False)
    args = ap.parse_args(argv)
    try:
        store = runstore.open(
            args.store, mode="r", on_damaged="skip" if args.skip_damaged else "raise"
        )
        s = summary(store, window_s=args.window, top=max(0, args.top))
    except runstore.CorruptionError as e:
        return _fail("status", "Corruption", e, EXIT_CORRUPTION)
    except (FileNotFoundError, KeyError) as e:
        return _fail("status", "NotFound", e, EXIT_NOT_FOUND)
    except (ValueError, OSError, RuntimeError) as e:
        return _fail("status", type(e).__name__, e, EXIT_OTHER)
    return _print_report("status", json.dumps(s, indent=2) if args.json else format_summary(s))
