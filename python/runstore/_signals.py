"""SIGTERM and SIGINT while runstore has something to commit (docs/experiments.md, "Signals").

Python turns SIGINT (Ctrl-C) into KeyboardInterrupt, so ``finally`` clauses, ``with`` blocks and
atexit handlers run on the way out; SIGTERM, which a batch system sends to preempt a job (SLURM:
SIGTERM, then SIGKILL after the grace period), kills the process at once by default, and what a
writer holds uncommitted is lost. Two remedies, for the two kinds of process:

- :func:`enter` / :func:`leave`: while a writer is in a ``with`` block, an EMA callback is open or
  a sweep runs in the main thread, SIGTERM raises :class:`Terminated` (a ``SystemExit`` with code
  143 = 128 + SIGTERM) there, as SIGINT raises KeyboardInterrupt: the ``with`` block commits on
  the way out and the process exits with status 143, as a shell reports a process that SIGTERM
  killed. A second SIGTERM while the first is being handled does nothing (a batch system may
  send it to every process of a job and again through its launcher); SIGKILL is the hard stop.
- :func:`on_stop`: in a process whose main thread does not run the work (a Dask worker runs
  tasks on threads of its own), SIGTERM and SIGINT run the callbacks registered there (commit
  what is complete, mark what was interrupted) in the main thread, then end the process by the
  signal's default action, so that its parent sees it killed by that signal.

Either only where the program has no handler of its own (SIGTERM's is SIG_DFL, SIGINT's
Python's default), and only from the main thread, the one Python runs signal handlers in.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any


class Terminated(SystemExit):
    """Raised in the main thread by SIGTERM while runstore has something to commit; uncaught,
    the process exits with status 128 + SIGTERM (143). A ``SystemExit``, so ``except
    Exception`` does not catch it."""


_depth = 0  # enter() calls not yet left
_raised = False  # Terminated was raised since the first enter()


def _on_sigterm(signum: int, frame: Any) -> None:
    global _raised
    if _raised:
        return  # the first one is being handled: the process is on its way out
    if _depth == 0:
        # It arrived while the last leave() restored the default: that action, as if runstore
        # had never been here.
        _die(signum)
    _raised = True
    raise Terminated(128 + signum)


def _die(signum: int) -> None:
    """Ends the process by the default action of ``signum``."""
    signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    os.kill(os.getpid(), signum)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def enter() -> bool:
    """Makes SIGTERM raise :class:`Terminated` in the main thread until the matching
    :func:`leave` (calls nest). True if it did; False (and nothing changed) outside the main
    thread or where the program handles SIGTERM itself."""
    global _depth, _raised
    if not _in_main_thread():
        return False
    if _depth == 0:
        current = signal.getsignal(signal.SIGTERM)
        if current is not _on_sigterm:  # (still in place if a leave came from another thread)
            if current is not signal.SIG_DFL:
                return False
            signal.signal(signal.SIGTERM, _on_sigterm)
        _raised = False
    _depth += 1
    return True


def leave(entered: bool) -> None:
    """Undoes the :func:`enter` that returned ``entered``; the last one gives SIGTERM its
    default back (a SIGTERM that came meanwhile then ends the process, by that default). From
    another thread (a callback closed by the garbage collector) the handler stays, and at depth
    0 acts as the default would."""
    global _depth
    if not entered:
        return
    _depth -= 1
    if (
        _depth == 0
        and _in_main_thread()
        and signal.getsignal(signal.SIGTERM) is _on_sigterm  # not one the program set since
    ):
        # signal.signal runs a pending handler first: it finds _depth 0 and ends the process.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


# -- processes whose work runs on other threads ------------------------------------------------

_stop_callbacks: dict[str, Callable[[], None]] = {}
_stop_installed: dict[int, Any] = {}  # signal -> its handler before ours


def _on_stop(signum: int, frame: Any) -> None:
    for callback in list(_stop_callbacks.values()):
        try:
            callback()
        except BaseException:  # noqa: BLE001 - the others must run; the process ends anyway
            pass
    _die(signum)


def on_stop(key: str, callback: Callable[[], None]) -> bool:
    """Runs ``callback`` (under ``key``, replacing one registered under it) in the main thread
    when SIGTERM or SIGINT arrives, then ends the process by the signal's default action. The
    handlers are installed from the main thread only, and only over the defaults; True if they
    are in place."""
    _stop_callbacks[key] = callback
    if not _in_main_thread():
        return bool(_stop_installed)
    for sig in (signal.SIGTERM, signal.SIGINT):
        if sig not in _stop_installed and _is_default(sig, signal.getsignal(sig)):
            _stop_installed[sig] = signal.signal(sig, _on_stop)
    return bool(_stop_installed)


def _is_default(sig: int, handler: Any) -> bool:
    """Whether ``handler`` is what the process has for ``sig`` without a program's own: the
    default, or for SIGINT Python's, or the one asyncio.run puts in place (which cancels the
    event loop's main task: a Dask worker's, while its task threads go on)."""
    if sig == signal.SIGTERM:
        return handler is signal.SIG_DFL
    if handler is signal.default_int_handler:
        return True
    fn = getattr(handler, "func", handler)  # asyncio's is a functools.partial of a method
    return (
        getattr(fn, "__qualname__", "") == "Runner._on_sigint"
        and getattr(fn, "__module__", "") == "asyncio.runners"
    )


def forget_stop(key: str) -> None:
    """Unregisters the callback under ``key``."""
    _stop_callbacks.pop(key, None)


def _after_fork_in_child() -> None:
    # The parent's callbacks are for the parent's writers, which a child cannot use.
    _stop_callbacks.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
