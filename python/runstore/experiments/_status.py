"""Where a sweep stands, from the experiments' status records: what ``runstore status``
(:mod:`runstore.commands.status`), ``runstore watch`` and the report show.

Counts of pending, running, done and failed experiments; the rate at which experiments finished
over the last minutes and the time left at that rate; the slowest experiments, the longest
running ones and the failures with the first line of their errors. Read from one snapshot of
the store (read-only: it never blocks or slows a sweep's writers), as a dict (``--json``) or
text. Ids, hosts and errors come from the store: the text shows them through
:func:`runstore._printable.printable`, never a terminal command; the JSON is ASCII.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from .._printable import printable
from . import _records as ex

#: The states of an experiment, in the order they are reported.
STATES = ("done", "running", "pending", "failed")


class StatusArrays:
    """Every experiment's status, in definition order, as arrays: where the summary reads it.

    Made from the store by :meth:`read` (one aligned scan of the status series, no Python object
    per experiment: ids, hosts and errors become objects only for the rows shown) or from a
    ``Store.status()`` frame by :meth:`of_frame`. State, host and error are codes into their
    lists of names (-1: none recorded; no state reads as pending)."""

    def __init__(
        self,
        state: tuple[np.ndarray, list[Any]],
        host: tuple[np.ndarray, list[Any]],
        error: tuple[np.ndarray, list[Any]],
        started: np.ndarray,
        finished: np.ndarray,
        seconds: np.ndarray,
        attempt: np.ndarray,
        runs: Any,
    ) -> None:
        self.n = len(started)
        self.state, self.names = state
        self.hosts, self.host_names = host
        self.errors, self.error_names = error
        self.started, self.finished, self.seconds = started, finished, seconds
        self.attempt = attempt
        #: The experiments' ids: a RunList (of scan_aligned), or a list.
        self.runs = runs

    def is_state(self, state: str) -> np.ndarray:
        hit = np.isin(self.state, [i for i, s in enumerate(self.names) if s == state])
        return hit | (self.state < 0) if state == "pending" else hit

    def host_at(self, i: int) -> Any:
        return self.host_names[self.hosts[i]] if self.hosts[i] >= 0 else None

    def error_at(self, i: int) -> Any:
        return self.error_names[self.errors[i]] if self.errors[i] >= 0 else None

    def id_at(self, i: int) -> Any:
        return self.runs[i] if isinstance(self.runs, list) else self.runs.take([i])[0]

    def ids(self) -> list[Any]:
        """Every experiment id (a Python object each)."""
        return list(self.runs) if isinstance(self.runs, list) else self.runs.all()

    def same_experiments(self, other: StatusArrays | None) -> bool:
        """Whether ``other`` holds the same experiments in the same order."""
        if other is None or other.n != self.n:
            return False
        if isinstance(self.runs, list):
            return self.runs == other.runs
        return self.runs.same(other.runs)

    @classmethod
    def read(cls, store: Any, runs: Any = None) -> StatusArrays:
        """The status of every experiment of ``store``; ``runs``: its experiments' ids in
        definition order (an :class:`ex.RunList` of the design's aligned read) if the caller
        holds them already, else they are kept from this read."""
        infos = ex.reserved_series(store, counts=False)
        if not ex.aligned_design(infos):
            return cls.of_frame(store.status())
        r = store._core.scan_aligned(ex.ROW, ex.status_series(infos), ordered=True)
        return cls.of_columns(r.pop("columns"), len(r["order"]), runs or ex.RunList(r))

    @classmethod
    def of_columns(cls, cols: dict[str, Any], n: int, runs: Any) -> StatusArrays:
        """Of the status series' columns as ``scan_aligned`` or ``read_aligned`` give them
        (changed in place), for ``n`` experiments whose ids are ``runs``."""

        def numbers(series: str, dtype: Any, missing: Any) -> np.ndarray:
            if series not in cols:
                return np.full(n, missing, dtype=dtype)
            c = cols[series]
            values = c["value"].astype(dtype, copy=False)  # the read's own: changed in place
            if missing != 0:  # where absent, the read left zero
                values[~c["present"]] = missing
            return values

        def strings(series: str) -> tuple[np.ndarray, list[Any]]:
            if series not in cols:
                return np.full(n, -1, dtype=np.int32), []
            c = cols[series]
            if "categories" not in c:  # not a str series: no state, host or error in it
                return np.where(c["present"], 0, -1).astype(np.int32), [None]
            return c["value"], c["categories"]

        return cls(
            strings(ex.STATE), strings(ex.HOST), strings(ex.ERROR),
            numbers(ex.STARTED, np.float64, np.nan),
            numbers(ex.FINISHED, np.float64, np.nan),
            numbers(ex.SECONDS, np.float64, np.nan),
            numbers(ex.ATTEMPT, np.int64, 0),
            runs,
        )  # fmt: skip

    @classmethod
    def of_frame(cls, st: Any) -> StatusArrays:
        def codes(values: Any) -> tuple[np.ndarray, list[Any]]:
            names: dict[Any, int] = {}
            out = np.fromiter(
                (
                    -1 if v is None or (isinstance(v, float) and math.isnan(v))
                    else names.setdefault(v, len(names))
                    for v in values.tolist()
                ),
                np.int32,
                len(values),
            )  # fmt: skip
            return out, list(names)

        return cls(
            codes(st["state"].to_numpy()), codes(st["host"].to_numpy()),
            codes(st["error"].to_numpy()),
            st["started"].to_numpy(dtype=np.float64),
            st["finished"].to_numpy(dtype=np.float64),
            st["seconds"].to_numpy(dtype=np.float64),
            st["attempt"].to_numpy(),
            st["experiment"].tolist(),
        )  # fmt: skip


def _first(candidates: np.ndarray, key: np.ndarray, top: int) -> np.ndarray:
    """The ``top`` positions of ``candidates`` of smallest ``key``, ties in position order,
    without sorting them all: only those within the top-th smallest key are sorted."""
    if top <= 0 or len(candidates) == 0:
        return candidates[:0]
    k = key[candidates]
    if len(k) > top:
        bound = np.partition(k, top - 1)[top - 1]
        keep = k <= bound
        candidates, k = candidates[keep], k[keep]
    return candidates[np.argsort(k, kind="stable")][:top]


class Summary:
    """The summary of :func:`summary`, gathered from the status of one window of experiments
    after another (:meth:`add`, in definition order): what it holds is bounded by ``top``, not
    by the experiments."""

    def __init__(self, now: float | None = None, window_s: float = 300.0, top: int = 5) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, got {window_s}")
        self.now = time.time() if now is None else float(now)
        self.window_s = float(window_s)
        self.top = max(0, top)
        self.n = 0
        self.counts = dict.fromkeys(STATES, 0)
        self.first_start = math.inf
        self.finished_in_window = 0
        # (key, position, entry): the least keys, ties in position order.
        self._slowest: list[tuple[float, int, dict]] = []
        self._running: list[tuple[float, int, dict]] = []
        self._failed: list[dict] = []

    def add(self, st: StatusArrays) -> None:
        """Adds the experiments of ``st``, which follow those added before."""
        offset, self.n = self.n, self.n + st.n
        is_state = {s: st.is_state(s) for s in STATES}
        for s in STATES:
            self.counts[s] += int(np.count_nonzero(is_state[s]))
        started, finished, seconds = st.started, st.finished, st.seconds
        if np.isfinite(started).any():
            self.first_start = min(self.first_start, float(np.nanmin(started)))
        ended = is_state["done"] | is_state["failed"]
        now, window_s = self.now, self.window_s
        in_window = ended & np.isfinite(finished) & (finished > now - window_s) & (finished <= now)
        self.finished_in_window += int(np.count_nonzero(in_window))

        def host(i: int) -> str | None:
            h = st.host_at(i)  # None where none was recorded (NaN in a frame is none too)
            return None if h is None else str(h)

        top = self.top
        done_idx = np.flatnonzero(is_state["done"] & np.isfinite(seconds))
        self._slowest = _least(
            self._slowest,
            [
                (-float(seconds[i]), offset + int(i), {
                    "experiment": _plain(st.id_at(i)), "seconds": float(seconds[i]),
                    "host": host(i),
                })
                for i in _first(done_idx, -seconds, top)
            ],
            top,
        )  # fmt: skip
        run_idx = np.flatnonzero(is_state["running"] & np.isfinite(started))
        self._running = _least(
            self._running,
            [
                (float(started[i]), offset + int(i), {
                    "experiment": _plain(st.id_at(i)), "running_s": float(now - started[i]),
                    "host": host(i),
                })
                for i in _first(run_idx, started, top)
            ],
            top,
        )  # fmt: skip
        for i in np.flatnonzero(is_state["failed"])[: top - len(self._failed)]:
            self._failed.append(
                {
                    "experiment": _plain(st.id_at(i)),
                    "attempt": int(st.attempt[i]),
                    "host": host(i),
                    "error": _first_line(st.error_at(i)),
                }
            )

    def result(self, store: Any) -> dict:
        """The summary of every experiment added (ValueError if there is none)."""
        if self.n == 0:
            raise ValueError(
                f"{store.path}: the store has no experiments (no design: "
                "define_experiments or run_experiments writes one)"
            )
        counts, window_s = self.counts, self.window_s
        started_any = math.isfinite(self.first_start)
        span = window_s
        if started_any:
            span = max(min(window_s, self.now - self.first_start), 1e-9)
        rate = self.finished_in_window / span if started_any else 0.0
        remaining = counts["pending"] + counts["running"]
        eta_s = remaining / rate if rate > 0 else (0.0 if remaining == 0 else None)
        return {
            "store": str(store.path),
            "experiments": self.n,
            "counts": dict(counts),
            "complete": remaining == 0,
            "window_s": window_s,
            "finished_in_window": self.finished_in_window,
            "rate": rate,
            "eta_s": eta_s,
            "slowest": [e for _, _, e in self._slowest],
            "running": [e for _, _, e in self._running],
            "failed": list(self._failed),
        }


def _least(
    held: list[tuple[float, int, dict]], new: list[tuple[float, int, dict]], top: int
) -> list[tuple[float, int, dict]]:
    """The ``top`` entries of ``held`` and ``new`` of least (key, position)."""
    return sorted(held + new, key=lambda e: (e[0], e[1]))[:top]


def summary(
    store: Any,
    now: float | None = None,
    window_s: float = 300.0,
    top: int = 5,
    frame: Any = None,
    arrays: StatusArrays | None = None,
) -> dict:
    """Where the sweep of ``store`` stands, as a dict (what ``runstore status --json`` prints).

    ``rate`` is experiments finished (done or failed) per second over the last ``window_s``
    seconds before ``now`` (or since the first experiment started, if that is later);
    ``eta_s`` is the pending and running experiments at that rate (None when nothing finished
    in the window). ``frame``: ``store.status()``, or ``arrays``: its StatusArrays, if already
    read (otherwise the status series are read into arrays, with no Python object per
    experiment). ValueError for a store without experiments.
    """
    acc = Summary(now, window_s, top)  # checks window_s before anything is read
    if arrays is not None:
        st = arrays
    else:
        st = StatusArrays.read(store) if frame is None else StatusArrays.of_frame(frame)
    acc.add(st)
    return acc.result(store)


def _plain(v: Any) -> Any:
    """A run id as JSON holds it: an int or a str."""
    return int(v) if isinstance(v, (int, np.integer)) else str(v)


def _first_line(error: Any) -> str:
    """The line of a stored error that says what it was: the last line of a traceback
    ("ValueError: ..."), else the first line of the message."""
    if error is None or (isinstance(error, float) and math.isnan(error)):
        return ""
    lines = [ln for ln in str(error).strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    if lines[0].startswith("Traceback"):
        return lines[-1].strip()
    return lines[0].strip()


def duration(s: float | None) -> str:
    """``s`` seconds as a person reads them: "42 s", "3 min 5 s", "2 h 14 min"."""
    if s is None or not math.isfinite(s):
        return "unknown"
    s = max(0.0, s)
    if s < 60:
        return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"
    m, sec = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m} min {sec} s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h} h {m} min"
    return f"{h // 24} d {h % 24} h"


def format_summary(s: dict) -> str:
    """The text ``runstore status`` prints for a :func:`summary`."""
    n = s["experiments"]
    width = len(f"{n:,}")
    out = [
        f"{printable(s['store'])}: {n:,} experiments" + (", all finished" if s["complete"] else "")
    ]
    for state in STATES:
        c = s["counts"][state]
        out.append(f"  {state:<8} {c:>{width},}  {100.0 * c / n:5.1f}%")
    out.append(rate_line(s))
    if s["slowest"]:
        out.append("slowest:")
        out += [_row(e["experiment"], duration(e["seconds"]), e["host"]) for e in s["slowest"]]
    if s["running"]:
        out.append("running longest:")
        out += [_row(e["experiment"], duration(e["running_s"]), e["host"]) for e in s["running"]]
    if s["counts"]["failed"]:
        shown = len(s["failed"])
        more = s["counts"]["failed"] - shown
        out.append("failed" + (f" (first {shown} of {s['counts']['failed']:,}):" if more else ":"))
        out += [
            _row(e["experiment"], f"attempt {e['attempt']}", e["host"])
            + f"  {printable(e['error'])}"
            for e in s["failed"]
        ]
    return "\n".join(out)


def rate_line(s: dict) -> str:
    """The line of a :func:`summary` that gives its rate and ETA (status and watch print it)."""
    window = duration(s["window_s"])
    if s["complete"]:
        return f"rate: {s['finished_in_window']:,} finished in the last {window}"
    if s["rate"] > 0:
        return (
            f"rate: {_rate(s['rate'])} over the last {window} "
            f"({s['finished_in_window']:,} finished); ETA {duration(s['eta_s'])}"
        )
    return f"rate: none finished in the last {window}; ETA unknown"


def _rate(r: float) -> str:
    if r >= 1:
        return f"{r:,.1f} experiments/s"
    if r * 60 >= 1:
        return f"{r * 60:,.1f} experiments/min"
    return f"{r * 3600:,.1f} experiments/h"


def _row(experiment: Any, what: str, host: str | None) -> str:
    return f"  {printable(experiment):<20} {what:>14}" + (f"  on {printable(host)}" if host else "")
