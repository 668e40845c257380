"""The package's layers: module-level imports form no cycle, and no module imports one of the
package's modules inside a function (which is how a cycle hides until a call runs into it).

Bottom-up: _core, the helpers (_checks, _version, _frame, _output), the experiments and export
modules and their private parts, _store (which imports experiments and export for Store's
delegations), then __init__ (docs/design.md#python-package). Imports under
``if TYPE_CHECKING:`` never run, so they are left out; lazy imports of optional third-party
modules (pandas, pyarrow) inside functions are fine.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: Front ends, which nothing in the package imports: they may import the package inside a
#: function (to parse arguments before numpy loads). Their imports still count as edges.
ENTRY_POINTS = {"__main__"}


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)  # finds the package without importing it
    assert spec is not None and spec.submodule_search_locations, f"{name} is not a package"
    return Path(next(iter(spec.submodule_search_locations)))


def modules(pkg_dir: Path, pkg: str) -> dict[str, Path | None]:
    """Every module of the package by dotted name: its source, or None for a compiled one."""
    out: dict[str, Path | None] = {}
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    for path in sorted(pkg_dir.rglob("*")):
        rel = path.relative_to(pkg_dir)
        if "__pycache__" in rel.parts:
            continue
        parts = [pkg, *rel.parent.parts]
        if path.name == "__init__.py":
            out[".".join(parts)] = path
        elif path.suffix == ".py":
            out[".".join([*parts, path.stem])] = path
        elif path.name.endswith(suffixes) or path.suffix == ".pyi":
            name = ".".join([*parts, path.name.split(".", 1)[0]])
            out.setdefault(name, None)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(
    module: str, source: Path, known: dict[str, Path | None], type_checking: bool = False
) -> list[tuple[str, int, bool]]:
    """(imported package module, line, inside a function) for each import statement of
    ``module`` that names a module of the package, leaving out ``if TYPE_CHECKING:`` blocks
    (``type_checking``: counting them, as the picture of the package's imports does).
    A dynamic import (importlib.import_module, __import__) of the package counts as one made
    inside a function: it is invisible to this graph."""
    pkg = module.split(".")[0]
    is_package = source.name == "__init__.py"
    here = module if is_package else module.rpartition(".")[0]
    found: list[tuple[str, int, bool]] = []

    def target(name: str) -> str | None:
        while name and name not in known:  # an attribute of a module: that module
            name = name.rpartition(".")[0]
        return name or None

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
            for child in node.orelse:
                visit(child, in_function)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == pkg:
                    found.append((target(alias.name) or pkg, node.lineno, in_function))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            if base.split(".")[0] == pkg:
                for alias in node.names:
                    t = f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else target(base)
                    if t is not None and t != module and (t, node.lineno, in_function) not in found:
                        found.append((t, node.lineno, in_function))
        elif isinstance(node, ast.Call):
            f = node.func
            fname = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            arg = node.args[0] if node.args else None
            if (
                fname in ("import_module", "__import__")
                and isinstance(arg, ast.Constant)
                and isinstance(arg.value, str)
                and (arg.value.split(".")[0] == pkg or arg.value.startswith("."))
            ):
                name = arg.value if not arg.value.startswith(".") else here + arg.value
                found.append((target(name) or pkg, node.lineno, True))
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(ast.parse(source.read_text(), str(source)), False)
    return found


def layout_problems(pkg_dir: Path, pkg: str, type_checking: bool = False) -> list[str]:
    """What is wrong with the package's imports: each import of one of its modules inside a
    function, and each cycle of module-level imports as the chain that closes it
    (``type_checking``: imports for annotations counted too)."""
    known = modules(pkg_dir, pkg)
    problems: list[str] = []
    graph: dict[str, list[tuple[str, int]]] = {m: [] for m in known}
    for m, source in known.items():
        if source is None:
            continue
        entry_point = m.rpartition(".")[2] in ENTRY_POINTS
        for t, line, in_function in imports(m, source, known, type_checking):
            if in_function and not entry_point:
                problems.append(
                    f"{source.name}:{line}: {m} imports {t} inside a function; import it at the "
                    "top (or under `if TYPE_CHECKING:` for annotations)"
                )
            else:
                graph[m].append((t, line))
    # Depth-first search; a module met again while on the stack closes a cycle.
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[tuple[str, int]] = []
    seen_cycles: set[frozenset[str]] = set()

    def dfs(m: str) -> None:
        state[m] = 1
        for t, line in graph.get(m, []):
            stack.append((m, line))
            if state.get(t) == 1:
                start = next(i for i, (n, _) in enumerate(stack) if n == t)
                cycle = stack[start:]
                if frozenset(n for n, _ in cycle) not in seen_cycles:
                    seen_cycles.add(frozenset(n for n, _ in cycle))
                    chain = " -> ".join(f"{n} (line {ln})" for n, ln in cycle)
                    problems.append(f"import cycle: {chain} -> {t}")
            elif t not in state:
                dfs(t)
            stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            dfs(m)
    return problems


def import_first(module: str, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Imports ``module`` first thing in a fresh interpreter (``path`` first on sys.path)."""
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


# -- runstore ------------------------------------------------------------------------------------

RUNSTORE = package_dir("runstore")
#: Modules of an optional integration, importable only with its package.
OPTIONAL_DEPENDENCIES = {
    "runstore.ema": "ema_workbench",
    "runstore.integrations.ema": "ema_workbench",
    "runstore.mlinstrument": "ml_instrumentation",
    "runstore.integrations.mlinstrument": "ml_instrumentation",
    "runstore.ray": "ray",
    "runstore.integrations.ray": "ray",
}
RUNSTORE_MODULES = sorted(m for m, source in modules(RUNSTORE, "runstore").items() if source)


def test_runstore_imports_form_layers():
    problems = layout_problems(RUNSTORE, "runstore")
    assert not problems, f"{RUNSTORE}:\n" + "\n".join(problems)


def test_the_public_modules_are_the_layers_the_design_names():
    known = modules(RUNSTORE, "runstore")
    for public in ("runstore", "runstore.experiments", "runstore.export"):
        assert known.get(public) is not None, f"{public} has no source in {RUNSTORE}"
    # experiments and export are functions over a Store: they never import _store.
    for m in ("runstore.experiments", "runstore.export"):
        below = reachable(m, known)
        assert "runstore._store" not in below and "runstore" not in below, (m, sorted(below))


def test_no_module_below_the_store_imports_it_even_for_annotations():
    """The modules Store reaches (its methods delegate to them) name what they need of a store
    as ``runstore._reader.StoreReader``: none imports ``_store``, not even under
    ``TYPE_CHECKING``, so the picture of the package's imports, annotations included, has no
    circle around Store."""
    known = modules(RUNSTORE, "runstore")
    below = reachable("runstore._store", known)
    assert {"runstore.experiments._records", "runstore.export._table", "runstore.export"} <= below
    offenders = [
        f"{m} (line {line})"
        for m in sorted(below)
        if known.get(m) is not None
        for t, line, _ in imports(m, known[m], known, type_checking=True)
        if t == "runstore._store"
    ]
    assert not offenders, offenders


#: The package's wings (docs/design.md#python-package) and what each may import besides its own
#: modules: the wings below it, and the root's modules (``ROOT``: every module of the package
#: not in a wing; ``ROOT_BELOW``: the root's helpers, without ``runstore`` itself, ``_store``
#: and the alias modules of the integrations). Annotation imports count.
ALIASES = {
    "runstore.dask",
    "runstore.ema",
    "runstore.mlinstrument",
    "runstore.ray",
    "runstore.spark",
}
WINGS_MAY_IMPORT = {
    "runstore.commands": {"*"},
    "runstore.integrations": {"runstore.export", "runstore.experiments", "ROOT"},
    "runstore.report": {"runstore.export", "runstore.experiments", "ROOT"},
    "runstore.export": {"runstore.experiments", "ROOT_BELOW"},
    "runstore.experiments": {"ROOT_BELOW"},
}


def wing_of(module: str) -> str | None:
    return next((w for w in WINGS_MAY_IMPORT if module == w or module.startswith(w + ".")), None)


def wing_problems(pkg_dir: Path) -> list[str]:
    """Each import that points up the wings, or from the root into a wing above Store."""
    known = modules(pkg_dir, "runstore")
    problems = []
    for m, source in sorted(known.items()):
        if source is None:
            continue
        here = wing_of(m)
        if here is None and m in ALIASES:
            allowed = {"runstore.integrations." + m.rpartition(".")[2]}
        elif here is None:
            allowed = {"runstore.export", "runstore.experiments", "ROOT"}
        else:
            allowed = {here} | WINGS_MAY_IMPORT[here]
        for t, line, _ in imports(m, source, known, type_checking=True):
            there = wing_of(t)
            if "*" in allowed or (there is not None and there in allowed) or t in allowed:
                continue
            if there is None and t not in ALIASES:
                if "ROOT" in allowed:
                    continue
                if "ROOT_BELOW" in allowed and t not in ("runstore", "runstore._store"):
                    continue
            problems.append(f"{source.relative_to(pkg_dir)}:{line}: {m} imports {t}")
    return problems


def test_the_wings_import_only_the_wings_below_them():
    problems = wing_problems(RUNSTORE)
    assert not problems, "\n".join(problems)


def test_the_wing_check_finds_an_import_up_the_wings(tmp_path):
    """The check above, on a copy of the package where export imports the report, the records
    import export, and a root helper imports a command: each is named."""
    import shutil

    copy = tmp_path / "runstore"
    shutil.copytree(RUNSTORE, copy, ignore=shutil.ignore_patterns("*.so", "__pycache__", "_bin"))
    for rel, line in (
        ("export/_table.py", "from ..report import _data\n"),
        ("experiments/_records.py", "from ..export import _table\n"),
        ("_checks.py", "from .commands import _common\n"),
    ):
        f = copy / rel
        f.write_text(f.read_text() + line)
    problems = wing_problems(copy)
    assert any("runstore.export._table imports runstore.report._data" in p for p in problems)
    assert any(
        "runstore.experiments._records imports runstore.export._table" in p for p in problems
    )
    assert any("runstore._checks imports runstore.commands._common" in p for p in problems)
    assert len(problems) == 3, problems


def test_the_old_names_of_the_integrations_are_the_same_modules():
    import runstore.dask
    import runstore.integrations.dask

    assert runstore.dask is runstore.integrations.dask
    assert runstore.dask.summarize is runstore.integrations.dask.summarize


def test_the_import_picture_has_no_circle_annotations_included():
    problems = layout_problems(RUNSTORE, "runstore", type_checking=True)
    assert not problems, f"{RUNSTORE}:\n" + "\n".join(problems)


def test_the_store_is_what_the_modules_below_it_ask_for(tmp_path):
    import runstore
    from runstore._reader import StoreReader

    assert isinstance(runstore.open(tmp_path / "s"), StoreReader)


def reachable(start: str, known: dict[str, Path | None]) -> set[str]:
    out: set[str] = set()
    todo = [start]
    while todo:
        m = todo.pop()
        source = known.get(m)
        if source is None:
            continue
        for t, _, _ in imports(m, source, known):
            if t not in out:
                out.add(t)
                todo.append(t)
    return out


@pytest.mark.parametrize("module", ["runstore.experiments, runstore.export", *RUNSTORE_MODULES])
def test_each_module_imports_first_in_a_fresh_interpreter(module):
    dependency = OPTIONAL_DEPENDENCIES.get(module)
    if dependency and importlib.util.find_spec(dependency) is None:
        pytest.skip(
            f"{module} needs {dependency}, not installed here "
            "(tested in the environment scripts/test.sh makes for it)"
        )
    p = import_first(module)
    assert p.returncode == 0, p.stderr


# -- the check itself, on a package that breaks both rules -----------------------------------------

TOY = {
    "__init__.py": "from . import a\n",
    # a and b import each other at the top: importing a first fails half way.
    "a.py": "from .b import y\n\nx = 1\n",
    "b.py": "from .a import x\n\ny = 2\n",
    # c imports a inside a function, and b under TYPE_CHECKING only (which is allowed).
    "c.py": textwrap.dedent("""
        from typing import TYPE_CHECKING

        if TYPE_CHECKING:
            from .b import y

        def f():
            from . import a
            return a.x
    """),
    "d.py": "import importlib\n\n\ndef g():\n    return importlib.import_module('toypkg.a')\n",
}


def test_the_check_finds_a_cycle_and_imports_inside_functions(tmp_path):
    pkg = tmp_path / "toypkg"
    pkg.mkdir()
    for name, text in TOY.items():
        (pkg / name).write_text(text)
    problems = layout_problems(pkg, "toypkg")
    assert problems == [
        "c.py:8: toypkg.c imports toypkg.a inside a function; import it at the top (or under "
        "`if TYPE_CHECKING:` for annotations)",
        "d.py:5: toypkg.d imports toypkg.a inside a function; import it at the top (or under "
        "`if TYPE_CHECKING:` for annotations)",
        "import cycle: toypkg.a (line 1) -> toypkg.b (line 1) -> toypkg.a",
    ], problems
    p = import_first("toypkg.b", tmp_path)  # __init__ imports a, which imports b half way
    assert p.returncode != 0 and "partially initialized module" in p.stderr, p.stderr
