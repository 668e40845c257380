"""``runstore watch STORE``: the status of a running sweep as a live terminal view.

Every ``--interval`` seconds it refreshes its read-only store (reading only the segments written
since; the sweep's writers never wait for it) and redraws: the counts, rate and ETA of
``runstore status``, a progress bar for the whole sweep and one per shard (``--shards N``, as
``run_experiments(shard=(i, N))`` or a SLURM array of N tasks splits it) or else one per host,
and the latest failures. It exits with 0 once no experiment is pending or running (``--stay``
keeps it open), and at Ctrl-C with 130. On a terminal it redraws the screen in place; written
to a file or a pipe it prints one line per refresh instead. Ids, hosts and errors from the
store are shown through :func:`runstore._printable.printable`: the view's own escapes are the
only ones it writes.
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import Any, TextIO

import numpy as np

import runstore

from .._printable import printable
from ..experiments import _status
from ..experiments._runner import shard_of
from ._common import (
    EXIT_CORRUPTION,
    EXIT_NOT_FOUND,
    EXIT_OTHER,
    INT32_MAX,
    _fail,
    add_global_flags,
    command_parser,
    integer,
)

_CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen


def bar(fraction: float, width: int) -> str:
    """A progress bar of ``width`` cells, ``fraction`` (0..1) of them full, eighths drawn."""
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = int(round(fraction * width * 8))
    full, part = divmod(eighths, 8)
    cells = "█" * full + (" ▏▎▍▌▋▊▉"[part] if part and full < width else "")
    return cells.ljust(width)


class Groups:
    """Which group (shard, or host) each experiment is in, kept across refreshes."""

    def __init__(self, shards: int | None) -> None:
        self.shards = shards
        self._of: _status.StatusArrays | None = None  # the experiments _shard is for
        self._shard = np.zeros(0, dtype=np.int64)

    def rows(self, status: Any) -> list[tuple[str, int, int, int, int]]:
        """(label, done, failed, running, total) per group of ``status`` (StatusArrays, or a
        ``Store.status()`` frame): per shard when shards were given (each experiment's shard
        from its id, as the runner computes it, once for as long as the experiments stay the
        same), else per host of the experiments that ran (total: those that ran there)."""
        st = (
            status
            if isinstance(status, _status.StatusArrays)
            else _status.StatusArrays.of_frame(status)
        )
        if self.shards:
            if not st.same_experiments(self._of):
                self._shard = np.fromiter((shard_of(e, self.shards) for e in st.ids()), np.int64)
                self._of = st
            keys = self._shard
            shown = [f"shard {i}" for i in range(self.shards)]
            n_groups = self.shards
        else:
            # Hosts by name (codes of one read), of the experiments that ran on one.
            order = sorted(range(len(st.host_names)), key=lambda k: str(st.host_names[k]))
            rank = np.full(len(st.host_names) + 1, -1, dtype=np.int64)
            for r, k in enumerate(order):
                rank[k] = r
            keys = rank[st.hosts]  # code -1 -> the last entry, -1: no host
            shown = [printable(str(st.host_names[k])) for k in order]
            n_groups = len(order)
        ran = keys >= 0
        k = keys[ran]
        total = np.bincount(k, minlength=n_groups)
        per = {
            s: np.bincount(k, weights=st.is_state(s)[ran], minlength=n_groups)
            for s in ("done", "failed", "running")
        }
        return [
            (
                label,
                int(per["done"][g]),
                int(per["failed"][g]),
                int(per["running"][g]),
                int(total[g]),
            )
            for g, label in enumerate(shown)
        ]


def _cut(text: str, width: int) -> str:
    """``text``, or its start and "…" in ``width`` characters."""
    return text if len(text) <= width else text[: width - 1] + "…"


def render(s: dict, groups: list[tuple[str, int, int, int, int]], width: int, height: int) -> str:
    """The screen for summary ``s`` and group rows, at most ``height`` lines of ``width``."""
    n = s["experiments"]
    c = s["counts"]
    finished = c["done"] + c["failed"]
    bar_w = max(10, min(60, width - 40))
    lines = [f"runstore watch {printable(s['store'])}  ({time.strftime('%H:%M:%S')})"]
    lines.append(
        f"{bar(finished / n, bar_w)} {finished:,}/{n:,} {100.0 * finished / n:5.1f}%"
        + ("  all finished" if s["complete"] else "")
    )
    lines.append(
        f"done {c['done']:,}  running {c['running']:,}  pending {c['pending']:,}  "
        f"failed {c['failed']:,}"
    )
    lines.append(_status.rate_line(s))
    if groups:
        lines.append("")
        # A label (a host's name, from the store) takes a third of the line at most.
        label_w = min(max(len(g[0]) for g in groups), max(8, width // 3))
        room = height - len(lines) - 2 - min(3, len(s["failed"]))
        shown = groups if len(groups) <= room else groups[: max(room - 1, 0)]
        gbar = max(10, min(40, width - label_w - 36))
        for label, done, failed, running, total in shown:
            frac = (done + failed) / total if total else 0.0
            lines.append(
                f"{_cut(label, label_w):<{label_w}} {bar(frac, gbar)} {done + failed:,}/{total:,}"
                + (f"  {running} running" if running else "")
                + (f"  {failed} failed" if failed else "")
            )
        if len(shown) < len(groups):
            lines.append(f"... and {len(groups) - len(shown)} more")
    if s["failed"]:
        lines.append("")
        lines.append("failed:")
        for e in s["failed"][:3]:
            lines.append(f"  {printable(e['experiment'])}: {printable(e['error'])}")
    lines = lines[:height]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(line[:width] for line in lines)


def watch(
    store: Any,
    interval_s: float = 2.0,
    window_s: float = 300.0,
    shards: int | None = None,
    stay: bool = False,
    out: TextIO | None = None,
    tty: bool | None = None,
) -> dict:
    """Redraws the status of ``store`` every ``interval_s`` until the sweep is complete (or
    for ever with ``stay``); returns the last summary."""
    out = sys.stdout if out is None else out
    tty = out.isatty() if tty is None else tty
    groups = Groups(shards)
    while True:
        store.refresh()
        st = _status.StatusArrays.read(store)
        if st.n == 0:
            # Started before the sweep defined its experiments: wait for them.
            out.write(
                (_CLEAR if tty else "")
                + f"{time.strftime('%H:%M:%S')} {printable(store.path)}: "
                + "no experiments defined yet\n"
            )
            out.flush()
            time.sleep(interval_s)
            continue
        s = _status.summary(store, window_s=window_s, top=5, arrays=st)
        if tty:
            size = shutil.get_terminal_size((100, 30))
            screen = render(s, groups.rows(st), size.columns, size.lines - 1)
            out.write(_CLEAR + screen + "\n")
        else:
            c = s["counts"]
            eta = "" if s["complete"] else f" ETA {_status.duration(s['eta_s'])}"
            out.write(
                f"{time.strftime('%H:%M:%S')} done {c['done']} running {c['running']} "
                f"pending {c['pending']} failed {c['failed']}{eta}\n"
            )
        out.flush()
        if s["complete"] and not stay:
            return s
        time.sleep(interval_s)


def watch_main(argv: list[str]) -> int:
    """``runstore watch STORE [--interval S] [--window S] [--shards N] [--stay]``."""
    ap = command_parser(
        "watch",
        "Refreshes a read-only view of the store every --interval seconds (the sweep's writers\n"
        "never wait for it) and redraws what 'runstore status' says, with a progress bar for\n"
        "the sweep and one per shard or host; exits with 0 when nothing is pending or running,\n"
        "130 at Ctrl-C. Not on a terminal, it prints a line per refresh.",
        "  runstore watch results/sweep\n  runstore watch results/sweep --shards 100 --interval 5",
    )
    ap.add_argument("store", metavar="STORE", help="store directory")
    ap.add_argument(
        "--interval", type=float, default=2.0, metavar="S", help="seconds between refreshes (2)"
    )
    ap.add_argument(
        "--window", type=float, default=300.0, metavar="S", help="seconds of the rate (300)"
    )
    ap.add_argument(
        "--shards",
        type=integer(1, INT32_MAX),
        default=None,
        metavar="N",
        help="a bar per shard of N (else per host)",
    )
    ap.add_argument("--stay", action="store_true", help="keep watching once the sweep is done")
    add_global_flags(ap, progress=False)
    args = ap.parse_args(argv)
    if not args.interval > 0:
        ap.error("--interval must be positive")

    try:
        store = runstore.open(
            args.store, mode="r", on_damaged="skip" if args.skip_damaged else "raise"
        )
        watch(store, args.interval, args.window, args.shards, args.stay)
    except KeyboardInterrupt:
        return 130
    except runstore.CorruptionError as e:
        return _fail("watch", "Corruption", e, EXIT_CORRUPTION)
    except (FileNotFoundError, KeyError) as e:
        return _fail("watch", "NotFound", e, EXIT_NOT_FOUND)
    except (ValueError, OSError, RuntimeError) as e:
        return _fail("watch", type(e).__name__, e, EXIT_OTHER)
    return 0
