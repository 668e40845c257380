"""The command line is one grammar: cli/commands.tsv names every command of ``runstore``, its
engine and whether it writes to a store, and both halves follow it. The compiled tool lists
exactly the table's commands, in its order, and declares no option of a command done in
Python; the package's front end hands exactly the table's Python commands to their engines,
whose parsers are the only ones of those commands; every command answers ``--help``; and every
command the table calls read-only leaves a store as it found it, file for file."""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import _runstore_cli
import numpy as np
import pytest

import runstore

TABLE = Path(runstore.__file__).parent / "commands.tsv"
SOURCE_TABLE = Path(__file__).resolve().parents[2] / "cli" / "commands.tsv"
FRONT = [sys.executable, "-c", "import _runstore_cli, sys; sys.exit(_runstore_cli.main())"]
TOOL = str(_runstore_cli.tool_path())


def rows() -> list[dict[str, str]]:
    out = []
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            path, engine, writes, install, summary, usage = line.split("\t")
            out.append(dict(path=path, engine=engine, writes=writes, summary=summary))
    return out


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, **kw)


def listed(help_text: str) -> list[str]:
    """The commands a CLI11 help lists (its "Subcommands:" section)."""
    section = help_text.split("Subcommands:\n", 1)[1].split("\n\n", 1)[0]
    return [ln.split()[0] for ln in section.splitlines() if ln.startswith("  ")]


def test_the_installed_table_is_the_one_of_the_source():
    if SOURCE_TABLE.exists():
        assert TABLE.read_bytes() == SOURCE_TABLE.read_bytes()


def test_the_tool_lists_the_commands_of_the_table_in_its_order():
    table = rows()
    r = run([TOOL, "--help"])
    assert r.returncode == 0, r.stderr
    assert listed(r.stdout) == [t["path"] for t in table if " " not in t["path"]]
    for group in (t for t in table if t["engine"] == "group"):
        r = run([TOOL, group["path"], "--help"])
        assert r.returncode == 0, r.stderr
        inside = [t["path"].split()[1] for t in table if t["path"].startswith(group["path"] + " ")]
        assert listed(r.stdout) == inside
    for t in table:
        line = f"  {t['path'].split()[-1]}"
        parent = run([TOOL, *t["path"].split()[:-1], "--help"]).stdout
        assert any(ln.startswith(line) and ln.endswith(t["summary"]) for ln in parent.splitlines())


def test_which_commands_write_is_said_once_and_the_help_says_it():
    writes = [t["path"] for t in rows() if t["writes"] == "yes" and t["engine"] != "group"]
    assert writes == ["compact", "catalog", "import tar", "sync"]
    said = ", ".join(writes[:-1]) + " and " + writes[-1]
    assert f"Only {said} may write to a store" in run([TOOL, "--help"]).stdout


def test_a_python_command_has_one_parser_its_engine():
    """The front end's Python commands are the table's; the tool declares none of their options
    (its help lists -h alone and says where they are done); the engine's help is argparse's,
    with the command's own options."""
    python = {tuple(t["path"].split()): t["engine"] for t in rows() if ":" in t["engine"]}
    assert _runstore_cli.python_commands() == python
    assert len(python) == 9
    for words, engine in python.items():
        module, function = engine.split(":")
        assert callable(getattr(importlib.import_module(module), function))
        tool = run([TOOL, *words, "--help"])
        assert tool.returncode == 0, tool.stderr
        options = re.findall(r"^\s+(-[-\w,]+)", tool.stdout.split("Options:\n", 1)[1], re.M)
        assert options == ["-h,--help"], (words, options)
        assert "Done by the Python package's runstore command" in tool.stdout
        front = run([*FRONT, *words, "--help"])
        assert front.returncode == 0, front.stderr
        assert front.stdout.startswith(f"usage: runstore {' '.join(words)} ")
        assert "Exit codes:" in front.stdout and "Examples:" in front.stdout
        assert "--skip-damaged" in run([*FRONT, *words, "--help"]).stdout or words in (
            ("import", "tar"),
            ("plan",),
        )


def test_every_command_answers_help_through_the_front_end_with_the_tables_summary():
    for t in rows():
        r = run([*FRONT, *t["path"].split(), "--help"])
        assert r.returncode == 0, (t["path"], r.stderr)
        if ":" in t["engine"]:  # argparse's help: usage, then the description
            assert f"\n\n{t['summary']}.\n\n" in r.stdout, t["path"]
        else:  # the tool's: the summary first
            assert r.stdout.startswith(t["summary"] + "\n"), t["path"]


def tree(path: Path) -> dict[str, tuple]:
    """Every file and directory under ``path``: its type, size, modification time and (for a
    file) the hash of its bytes."""
    out = {}
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            p = Path(root) / name
            st = p.lstat()
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
            out[str(p.relative_to(path))] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    st = path.stat()
    out["."] = (st.st_mode, st.st_mtime_ns)
    return out


def _sweep_fn(x: int) -> dict:
    if x == 3:
        raise ValueError("x is three")
    return {"loss": x * 0.5, "curve": np.arange(4.0) * x}


def test_every_read_only_command_leaves_the_store_as_it_found_it(tmp_path):
    """Each command the table calls read-only, run on a sweep's store (a design, status,
    scalar and array outcomes, a series at many steps): the store's files, sizes, times and
    bytes are the same after it. A command added to the table read-only must be added here."""
    store = runstore.open(tmp_path / "s")
    store.define_experiments([{"x": i} for i in range(6)])
    runstore.run_experiments(store, _sweep_fn, workers=1, progress=False)
    with store.writer() as w:
        w.log_many("curve-run", steps=np.arange(50), reward=np.arange(50.0))
    del store
    s, out = str(tmp_path / "s"), tmp_path / "out"
    args = {
        "info": [s],
        "ls": [s, "--runs"],
        "cat": [s, "reward"],
        "get": [s, "curve-run", "reward", "--run-str", "--step", "3", "-o", str(out / "v.npy")],
        "verify": [s],
        "export csv": [s, str(out / "csv")],
        "export tar": [s, str(out / "e.tar.gz")],
        "export parquet": [s, str(out / "e.parquet")],
        "export zarr": [s, str(out / "e.zarr")],
        "plan": None,  # it reads no store
        "status": [s, "--json"],
        "watch": [s, "--interval", "0.1"],
        "report": [s, "-o", str(out / "r.html")],
        "sql": [s, 'SELECT count(*) FROM "~experiments" JOIN reward ON experiment = run'],
    }
    read_only = [t["path"] for t in rows() if t["writes"] == "no" and t["engine"] != "group"]
    assert sorted(read_only) == sorted(args), "a read-only command of the table is not tried here"
    out.mkdir()
    optional = {
        "export parquet": "pyarrow",
        "export zarr": "zarr",
        "report": "plotly",
        "sql": "duckdb",
    }
    before = tree(tmp_path / "s")
    for path, argv in args.items():
        if argv is None:
            continue
        module = optional.get(path)
        if module is not None and importlib.util.find_spec(module) is None:
            continue
        r = run([*FRONT, "--no-progress", *path.split(), *argv])
        assert r.returncode == 0, (path, r.stderr)
        assert tree(tmp_path / "s") == before, f"'runstore {path}' changed the store"


@pytest.mark.parametrize("path", ["compact", "catalog", "sync"])
def test_the_commands_that_write_are_the_tools_own(path):
    assert next(t for t in rows() if t["path"] == path)["engine"] == "tool"
