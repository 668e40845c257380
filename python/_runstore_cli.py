"""The ``runstore`` command of an environment where the package is installed.

Each command has one engine. The tar, Parquet and Zarr exports and ``import tar`` are the
package's own (:mod:`runstore._commands`; pandas, pyarrow, xarray and zarr do the work), and so
are ``plan`` (the partition planner of :mod:`runstore.dask`), ``status``, ``watch`` and
``report``; every other command (``info``, ``ls``, ``cat``, ``get``, ``verify``, ``export csv``,
``--help``, ``--version``) is the compiled tool the wheel carries as ``runstore/_bin/runstore``,
which this module becomes (``exec``), so that its output, exit codes and signals are the tool's
own. ``python -m runstore`` is the same command.

A module beside the package rather than in it: importing anything of ``runstore`` imports the
package, and with it numpy (about 0.1 s), which the commands of the tool do not need.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

#: The options of the tool that come before a command and take no value.
_GLOBAL_FLAGS = {"--no-progress", "--skip-damaged"}
#: The commands done in Python, as (command, subcommand).
_PYTHON_COMMANDS = {("export", "tar"), ("export", "parquet"), ("export", "zarr"), ("import", "tar")}
#: The commands done in Python whatever follows their first word.
_PYTHON_FIRST_WORDS = {"plan", "status", "watch", "report", "import"}


def tool_path() -> Path:
    """Where the compiled tool of this installation is (it may be missing: see :func:`main`);
    found without importing the package."""
    spec = importlib.util.find_spec("runstore")
    locations = spec.submodule_search_locations if spec is not None else None
    if not locations:
        return Path("runstore") / "_bin" / "runstore"  # no package: main() says so
    return Path(next(iter(locations))) / "_bin" / "runstore"


def _command_words(argv: list[str]) -> list[str]:
    """The words of ``argv`` that name a command, up to the first argument of one: ``runstore
    --skip-damaged export tar S O`` -> ``["export", "tar", "S", ...]``."""
    return [a for a in argv if not a.startswith("-")]


def _one_blas_thread() -> None:
    """Before numpy is imported for a command done in Python: none of them multiplies matrices
    (and none runs user code), but numpy's OpenBLAS starts a thread per core that spins a while
    after the import, about 0.1 s of a command's wall time on a 2-core machine (`runstore
    status` of 1,000,000 experiments: 1.0 s, 0.9 s with one thread). A value the user set
    stays."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    words = _command_words(argv)
    if words[:1] and words[0] in _PYTHON_FIRST_WORDS or tuple(words[:2]) in _PYTHON_COMMANDS:
        _one_blas_thread()
    if words[:1] == ["plan"]:
        # The partition planner of runstore.dask (docs/dask.md), without dask.
        from runstore._plan import plan_main

        args = [a for a in argv if a not in _GLOBAL_FLAGS]
        del args[args.index("plan")]
        return plan_main(args)
    if words[:1] in (["status"], ["watch"]):
        # From the experiments' status records (runstore._status, runstore._watch).
        from runstore._status import status_main
        from runstore._watch import watch_main

        args = [a for a in argv if a not in _GLOBAL_FLAGS]
        del args[args.index(words[0])]
        if "--skip-damaged" in argv:
            args.append("--skip-damaged")
        return (status_main if words[0] == "status" else watch_main)(args)
    if words[:1] == ["report"]:
        # The HTML page of a store (runstore.report); it draws progress, so --no-progress counts.
        from runstore.report import report_main

        args = [a for a in argv if a not in _GLOBAL_FLAGS]
        del args[args.index("report")]
        args += [a for a in ("--skip-damaged", "--no-progress") if a in argv]
        return report_main(args)
    if tuple(words[:2]) in _PYTHON_COMMANDS or words[:1] == ["import"]:
        # The tool's global flags may come anywhere (`runstore --skip-damaged export tar ...`):
        # the exports take them as options of their own (import tar draws no progress).
        args = [a for a in argv if a not in _GLOBAL_FLAGS]
        if words[0] == "export":
            args += [a for a in ("--skip-damaged", "--no-progress") if a in argv]
        from runstore import _commands  # the package and numpy: only for the commands in Python

        return _commands.main(args)
    tool = tool_path()
    if not os.access(tool, os.X_OK):
        print(
            f"runstore: this installation of the runstore package has no command-line tool "
            f"({tool} is missing; the package was built with RUNSTORE_BUILD_CLI=OFF). Reinstall "
            "it with its default build options (pip install runstore, or pip install . in a "
            "clone), or build the tool with CMake (README.md).",
            file=sys.stderr,
        )
        return 5  # the tool's "other error"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(tool, ["runstore", *argv])
    return 5  # not reached: execv returns only by raising OSError
