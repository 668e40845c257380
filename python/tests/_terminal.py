"""Runs the ``runstore`` command with its stderr on a pseudo-terminal, as a user at a terminal
meets it, and returns what was drawn there (for the tests of progress lines)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

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
