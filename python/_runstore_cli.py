"""The ``runstore`` command of an environment where the package is installed.

Each command has one engine, and ``commands.tsv`` (the package's copy of ``cli/commands.tsv``,
the one table of the commands) says which: the commands of a Python engine (the package's
:mod:`runstore.commands`: the tar, Parquet and Zarr exports, ``import tar`` and ``plan``, the
partition planner of :mod:`runstore.dask`; ``status``, ``watch`` and ``report``) are called
here, with the
arguments after their words and the tool's global flags wherever they were given; every other
command (``info``, ``ls``, ``cat``, ``get``, ``verify``, ``export csv``, ``--help``,
``--version``, ...) is the compiled tool the wheel carries as ``runstore/_bin/runstore``, which
this module becomes (``exec``), so that its output, exit codes and signals are the tool's own.
``python -m runstore`` is the same command.

A module beside the package rather than in it: importing anything of ``runstore`` imports the
package, and with it numpy (about 0.1 s), which the commands of the tool do not need.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

#: The options of the tool that come before or after a command and take no value; the
#: commands of a Python engine take them too.
GLOBAL_FLAGS = ("--skip-damaged", "--no-progress")


def package_dir() -> Path | None:
    """The directory of the installed package, found without importing it (None if absent)."""
    spec = importlib.util.find_spec("runstore")
    locations = spec.submodule_search_locations if spec is not None else None
    return Path(next(iter(locations))) if locations else None


#: The cells of a row of commands.tsv, in order.
COLUMNS = ("command", "engine", "writes", "install", "summary", "usage")


def command_table(directory: Path | None = None) -> list[dict[str, str]]:
    """The rows of the package's commands.tsv (in ``directory``, else the installed package's),
    each a dict of :data:`COLUMNS` ("-" cells as they are); [] without a package."""
    here = directory or package_dir()
    if here is None:
        return []
    text = (here / "commands.tsv").read_text(encoding="utf-8")
    return [
        dict(zip(COLUMNS, line.split("\t")))
        for line in text.splitlines()
        if line and not line.startswith("#")
    ]


def python_commands() -> dict[tuple[str, ...], str]:
    """The commands of a Python engine: their words -> their engine, "module:function"."""
    return {
        tuple(row["command"].split()): row["engine"]
        for row in command_table()
        if ":" in row["engine"]
    }


def tool_path() -> Path:
    """Where the compiled tool of this installation is (it may be missing: see :func:`main`);
    found without importing the package."""
    here = package_dir()
    if here is None:
        return Path("runstore") / "_bin" / "runstore"  # no package: main() says so
    return here / "_bin" / "runstore"


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
    commands = python_commands()
    command = next((c for c in (tuple(words[:2]), tuple(words[:1])) if c in commands), None)
    if command is not None:
        _one_blas_thread()
        # The engine parses the arguments after the command's words, with the global flags
        # given anywhere (`runstore --skip-damaged export tar S O`) after them.
        args = [a for a in argv if a not in GLOBAL_FLAGS]
        for word in command:
            del args[args.index(word)]
        args += [a for a in GLOBAL_FLAGS if a in argv]
        module, function = commands[command].split(":")
        return getattr(importlib.import_module(module), function)(args)
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
