"""One progress line on stderr for what a user waits on (runs, exports, the report).

Drawn only when stderr is a terminal and the caller allows it, redrawn in place at most five
times a second, and erased at the end (or kept, for a summary the user wants to see), so that
it never ends up in a log or a pipe. The compiled tool draws its own (cli/progress.h) the same
way. What it draws goes through :func:`runstore._printable.printable`: a name from a store in
it is never a terminal command.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from ._printable import printable

_INTERVAL_S = 0.2
_BAR_CELLS = 30


class Line:
    """``label: text``, redrawn in place; :meth:`bar` draws a count as a bar."""

    def __init__(self, label: str, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        self.enabled = bool(enabled) and self.stream is not None and self.stream.isatty()
        self.t0 = time.perf_counter()
        self._last = -1.0
        self._width = 0

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def show(self, text: str, force: bool = False) -> None:
        """Draws ``label: text`` unless the last draw was less than 0.2 s ago (``force``: draw)."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and self._width and now - self._last < _INTERVAL_S:
            return
        self._last = now
        line = printable(f"{self.label}: {text}")
        self.stream.write("\r" + line.ljust(self._width))
        self.stream.flush()
        self._width = len(line)

    def bar(self, done: int, total: int, unit: str, force: bool = False) -> None:
        """``label:  37% [###.......] 37,000/100,000 unit (1.2 s)``; the end is always drawn, so
        that the last line seen says it."""
        if not self.enabled:
            return
        force = force or (total > 0 and done >= total)
        f = min(1.0, done / total) if total > 0 else 1.0
        cells = int(f * _BAR_CELLS)
        self.show(
            f"{int(f * 100):3d}% [{'#' * cells}{'.' * (_BAR_CELLS - cells)}] "
            f"{done:,}/{total:,} {unit} ({self.elapsed():.1f} s)",
            force,
        )

    def __enter__(self) -> Line:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, keep: bool = False) -> None:
        """Erases the line, or with ``keep`` ends it so that it stays on the screen."""
        if self.enabled and self._width:
            self.stream.write("\n" if keep else "\r" + " " * self._width + "\r")
            self.stream.flush()
        self._width = 0
        self.enabled = False


class Work:
    """A count of units done out of a total, drawn as a bar on a :class:`Line`: ``add(n)`` as
    parts finish. Work of several phases (a tar's members, each a pass over the experiments)
    adds up to one total."""

    def __init__(self, line: Line, total: int, unit: str) -> None:
        self.line = line
        self.total = total
        self.unit = unit
        self.done = 0

    def add(self, n: int) -> None:
        self.done += n
        self.line.bar(self.done, self.total, self.unit)


def quiet() -> Work:
    """Work that draws nothing."""
    return Work(Line("", enabled=False), 0, "")


def size_text(n: float) -> str:
    """``n`` bytes as the messages say them: "1.5 GiB", "512 B"."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"
