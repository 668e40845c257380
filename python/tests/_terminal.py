"""Runs the ``runstore`` command with its stderr (or its stdout and stderr) on a pseudo-terminal,
as a user at a terminal meets it, and returns what was drawn there (for the tests of progress
lines, and of what a store's strings do to a terminal)."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time

#: The command of the installed package (``_runstore_cli``), with the interpreter of the tests.
CLI = [sys.executable, "-c", "import _runstore_cli, sys; sys.exit(_runstore_cli.main())"]


def run_on_terminal(*args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess, bytes]:
    """(the finished process, with its stdout; the bytes written to its terminal stderr)."""
    main, other = pty.openpty()
    try:
        p = subprocess.run(
            [*CLI, *args], stdout=subprocess.PIPE, stderr=other, timeout=timeout, text=True
        )
        os.close(other)
        other = -1
        drawn = b""
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # EIO: the other end is closed and read empty
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(main)
        if other >= 0:
            os.close(other)
    return p, drawn


def run_in_terminal(
    *args: str,
    cli: list[str] | None = None,
    size: tuple[int, int] = (50, 200),
    timeout: float = 120,
) -> tuple[int, bytes]:
    """Runs ``runstore ARGS`` (or ``cli ARGS``) with stdout and stderr on one pseudo-terminal of
    ``size`` (rows, columns) and returns (its exit code, every byte it wrote there, untranslated:
    the terminal's output processing, which would turn LF into CR LF, is off)."""
    main, other = pty.openpty()
    try:
        attrs = termios.tcgetattr(other)
        attrs[1] &= ~termios.OPOST
        termios.tcsetattr(other, termios.TCSANOW, attrs)
        fcntl.ioctl(other, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
        p = subprocess.Popen(
            [*(CLI if cli is None else cli), *args],
            stdin=subprocess.DEVNULL,
            # The size is the terminal's, as at a terminal: not $COLUMNS or $LINES of the tests.
            env={k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
            stdout=other,
            stderr=other,
            start_new_session=True,
        )
        os.close(other)
        other = -1
        drawn = bytearray()
        end = time.monotonic() + timeout
        while True:  # read while it runs: the terminal's buffer holds a few KiB only
            ready, _, _ = select.select([main], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                raise TimeoutError(f"runstore {' '.join(args)} ran for {timeout} s")
            try:
                chunk = os.read(main, 1 << 16)
            except OSError:  # EIO: every descriptor of the other end is closed
                break
            if not chunk:
                break
            drawn += chunk
        return p.wait(timeout=timeout), bytes(drawn)
    finally:
        os.close(main)
        if other >= 0:
            os.close(other)
