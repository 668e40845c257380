"""``runstore report STORE -o OUT.html``: the command line of :func:`runstore.report.write`."""

from __future__ import annotations

from .. import report
from ..report import _data as _report_data
from ._common import (
    COMMAND_ERRORS,
    INT32_MAX,
    INT64_MAX,
    _print_report,
    add_global_flags,
    command_parser,
    fail_for,
    integer,
    open_for_command,
)


def report_main(argv: list[str]) -> int:
    """``runstore report STORE -o OUT.html [--force] ...``; the exit codes of the tool."""
    ap = command_parser(
        "report",
        "Writes one self-contained HTML file (plotly.js inline: it opens without a network):\n"
        "the status of the experiments as 'runstore status' computes it, the failures grouped\n"
        "by error with their tracebacks, each scalar outcome against each parameter (scatter\n"
        "plots of a seeded sample of --max-points experiments; box plots for text, bool and\n"
        "few-valued parameters), array outcomes as quantile bands over their index, and the\n"
        "curves of series logged at many steps, with a choice of metric and runs. The page\n"
        "appears whole or not at all, and an existing one is replaced only with --force. Needs\n"
        "plotly (pip install runstore plotly).",
        "  runstore report results/sweep -o report.html\n"
        "  runstore report results/sweep -o report.html --force --max-points 5000",
    )
    ap.add_argument("store", metavar="STORE", help="store directory")
    ap.add_argument("-o", "--output", required=True, metavar="OUT.html", help="the page to write")
    ap.add_argument("-f", "--force", action="store_true", help="replace OUT.html if it exists")
    ap.add_argument("--title", default=None, help="the page's title (default: the store's path)")
    ap.add_argument(
        "--max-points",
        type=integer(1, INT32_MAX),
        default=_report_data.MAX_POINTS,
        metavar="N",
        help=f"points of a scatter plot at most (default {_report_data.MAX_POINTS:,})",
    )
    ap.add_argument(
        "--max-runs",
        type=integer(0, INT32_MAX),
        default=_report_data.MAX_RUNS,
        metavar="N",
        help=f"runs whose curves are shown (default {_report_data.MAX_RUNS})",
    )
    ap.add_argument(
        "--sample",
        type=integer(1, INT64_MAX),
        default=_report_data.SAMPLE,
        metavar="N",
        help="experiments read whole at most; beyond, they are read a window at a time and "
        "medians, box plots and scatter plots are of a seeded sample of N (counts, means, "
        f"histograms and failures stay exact; default {_report_data.SAMPLE:,})",
    )
    ap.add_argument(
        "--seed",
        type=integer(0, INT64_MAX),
        default=_report_data.SEED,
        help=f"seed of the samples (default {_report_data.SEED})",
    )
    add_global_flags(ap)
    args = ap.parse_args(argv)
    try:
        store = open_for_command(args.store, args.skip_damaged)
        r = report.write(
            store,
            args.output,
            overwrite=args.force,
            title=args.title,
            max_points=args.max_points,
            max_runs=args.max_runs,
            seed=args.seed,
            sample=args.sample,
            progress=not args.no_progress,
        )
    except COMMAND_ERRORS as e:
        return fail_for("report", e, "pip install plotly")
    what = f"{r['experiments']:,} experiments, " if r["experiments"] else ""
    return _print_report(
        "report",
        f"{r['path']}: {what}{r['plots']} plots, {r['bytes'] / 2**20:.1f} MiB in "
        f"{r['seconds']:.1f} s",
    )
