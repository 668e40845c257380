"""Run ids, steps and step windows as the core takes them, checked before they reach it; and
the one way the package opens a file of a store itself (``open_regular``)."""

from __future__ import annotations

import errno
import io
import operator
import os
import stat
from typing import Any

import numpy as np

RunId = int | str
#: A window of steps, start <= step < stop: ``range(start, stop)`` or ``(start, stop)``.
StepWindow = range | tuple[int, int]
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def check_step(step: Any, what: str = "step") -> int:
    """``step`` as an int; TypeError for a bool ("step must be an int, got bool"), a float or
    anything else that is not an integer, as the core refuses them (python/src/convert.h)."""
    if isinstance(step, (bool, np.bool_)) or not hasattr(type(step), "__index__"):
        raise TypeError(f"{what}: step must be an int, got {type(step).__name__}")
    return operator.index(step)


def check_run_id(run: Any, what: str = "run id") -> RunId:
    """``run`` as an int or a str; TypeError for a bool ("run id must be an int or a str, got
    bool") and anything else that is neither, as the core refuses them."""
    if isinstance(run, str):
        return run
    if isinstance(run, (bool, np.bool_)) or not hasattr(type(run), "__index__"):
        raise TypeError(f"{what} must be an int or a str, got {type(run).__name__}")
    return operator.index(run)


def step_range(steps: StepWindow | None) -> tuple[int, int] | None:
    """``start <= step < stop`` as the inclusive (first, last) the core takes."""
    if steps is None:
        return None
    if isinstance(steps, range):
        if steps.step != 1:
            raise ValueError(f"steps must be a range with step 1, got {steps!r}")
        start, stop = steps.start, steps.stop
    else:
        try:
            start, stop = steps
        except (TypeError, ValueError):
            raise TypeError(
                f"steps must be (start, stop) or a range of ints, got {steps!r}"
            ) from None
        start, stop = check_step(start, "steps"), check_step(stop, "steps")
    if stop <= start or stop <= _INT64_MIN or start > _INT64_MAX:
        return (1, 0)  # no step
    return (max(start, _INT64_MIN), min(stop - 1, _INT64_MAX))


def file_kind(mode: int) -> str:
    """ "a FIFO", "a socket", ...: what a path is, for the error that refuses it."""
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _not_regular(path: str, mode: int) -> OSError:
    code = errno.EISDIR if stat.S_ISDIR(mode) else errno.ELOOP if stat.S_ISLNK(mode) else 0
    text = f"is {file_kind(mode)}, not a regular file"
    if stat.S_ISLNK(mode):
        text += " (runstore never follows a link in place of a store's file)"
    return OSError(code, text, path) if code else OSError(f"{path}: {text}")


def open_regular(path: str | os.PathLike[str]) -> io.BufferedReader:
    """The regular file at ``path``, opened for reading in binary mode, as runstore opens every
    file of a store (src/env/posix_env.cc): never following a symbolic link (O_NOFOLLOW), never
    waiting for a FIFO's writer (O_NONBLOCK), and checked with fstat to be a regular file.

    Raises FileNotFoundError if there is none, and OSError naming the file and what it is
    ("ATTRS: is a FIFO, not a regular file") for a FIFO, a socket, a device, a directory or a
    symbolic link in its place.
    """
    path = os.fspath(path)
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags)
    except OSError as e:
        # ELOOP (a link), ENXIO (a socket), EISDIR...: say what is there instead.
        if e.errno not in (errno.ENOENT, errno.EACCES, errno.EMFILE, errno.ENFILE, errno.ENOMEM):
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                raise e from None
            if not stat.S_ISREG(mode):
                raise _not_regular(path, mode) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
