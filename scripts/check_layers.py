#!/usr/bin/env python3
"""Fails when a file includes a layer above its own (docs/design.md#layers).

Each directory of the library is a layer that may include only the layers
below it and some of the public headers; test code (src/testing) is never
included by the library; the presentation layer (present/) and the front ends
(cli/, python/src) use only the public API. The rules are read from the table
in docs/design.md#layer-rules, so the document and the check cannot disagree.
`--self-test` checks that the rules catch what they must, on a tree it makes,
and that a broken table is refused.

    python3 scripts/check_layers.py [ROOT]
    python3 scripts/check_layers.py --self-test
"""

from __future__ import annotations

import pathlib
import re
import sys
import tempfile

INTERNAL = {"util", "env", "codec", "format", "store", "testing"}
#: The wings of src/store (docs/design.md#store-wings): layers of their own inside it.
STORE_WINGS = {"store/read", "store/compact", "store/staging", "store/writer"}
INTERNAL |= STORE_WINGS
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
#: The table of rules in docs/design.md: the line after which it starts.
ANCHOR = '<a id="layer-rules"></a>'
ROW = re.compile(r"^\| `([^`]+)` \| ([^|]*) \| ([^|]*) \|$")

Rules = dict[str, tuple[set[str], set[str]]]


class RulesError(ValueError):
    """docs/design.md's table of layer rules is missing or does not read."""


def read_rules(root: pathlib.Path) -> Rules:
    """directory -> (internal layers it may include, public headers it may include), as the
    table of docs/design.md#layer-rules states them: "all public headers" is every header of
    include/runstore/, "present's headers" every one of present/runstore/, "-" none."""
    design = root / "docs" / "design.md"
    try:
        text = design.read_text()
    except OSError as e:
        raise RulesError(f"{design}: {e.strerror}") from None
    if ANCHOR not in text:
        raise RulesError(f"{design}: no table of layer rules (after {ANCHOR})")
    public = {f.name for f in (root / "include" / "runstore").glob("*.h")}
    present = {f.name for f in (root / "present" / "runstore").glob("*.h")}
    rules: Rules = {}
    for ln in text.split(ANCHOR, 1)[1].splitlines():
        if ln.startswith("#"):
            break  # the next section: the table is behind
        if not ln.startswith("| `"):
            continue
        m = ROW.match(ln.strip())
        if m is None:
            raise RulesError(f"{design}: a row of the layer rules does not read: {ln!r}")
        where, layers_cell, headers_cell = m.groups()
        layers = {x.strip() for x in layers_cell.split(",")} - {"-", ""}
        if layers - INTERNAL:
            raise RulesError(f"{design}: {where}: unknown layers {sorted(layers - INTERNAL)}")
        headers: set[str] = set()
        for item in (x.strip() for x in headers_cell.split(",")):
            if item == "all public headers":
                headers |= public
            elif item == "present's headers":
                headers |= present
            elif item.endswith(".h") and item in public:
                headers.add(item)
            elif item not in ("-", ""):
                raise RulesError(f"{design}: {where}: {item!r} is not a public header")
        rules[where] = (layers, headers)
    missing = {f"src/{x}" for x in INTERNAL} - set(rules)
    if missing:
        raise RulesError(f"{design}: the layer rules leave out {sorted(missing)}")
    return rules


def layer_of(include: str) -> str:
    """The layer an include names: "store/read/snapshot.h" -> "store/read", "format/block.h"
    -> "format"."""
    parts = include.split("/")
    if len(parts) == 3 and "/".join(parts[:2]) in STORE_WINGS:
        return "/".join(parts[:2])
    return parts[0]


def check(root: pathlib.Path, rules: Rules) -> list[str]:
    problems = []
    for where, (layers, public) in rules.items():
        base = root / where
        if not base.is_dir():
            continue
        for f in sorted(base.rglob("*")):
            if f.suffix not in (".h", ".cc") or f.name.endswith("_test.cc"):
                continue
            rel = f.relative_to(root)
            # Each file follows the rule of the deepest directory that has one (that of
            # src/store/read, not of src/store, for src/store/read/scan.cc).
            if max((w for w in rules if rel.as_posix().startswith(w + "/")), key=len) != where:
                continue
            for inc in INCLUDE.findall(f.read_text(errors="replace")):
                head, _, tail = inc.partition("/")
                if not tail:
                    continue  # a header of the same directory
                if head == "runstore":
                    if tail not in public:
                        problems.append(
                            f"{rel}: includes public header {inc}, which {where} may not"
                        )
                elif head in INTERNAL and layer_of(inc) not in layers:
                    problems.append(
                        f"{rel}: includes {inc}: layer {layer_of(inc)} is not below {where}"
                    )
    return problems


def self_test(repo: pathlib.Path) -> int:
    rules = read_rules(repo)
    with tempfile.TemporaryDirectory() as d:
        root = pathlib.Path(d)
        cases = {
            "src/format/a.cc": '#include "store/read/snapshot.h"\n',  # format including store
            "src/util/b.cc": '#include "env/path.h"\n',  # util including env
            "src/store/c.cc": '#include "testing/fault_injection_env.h"\n',  # library, test code
            "cli/d.cc": '#include "format/format.h"\n',  # a front end, an internal header
            "src/codec/e.cc": '#include "runstore/store.h"\n',  # codec, the store's API
            "src/store/read/f.cc": '#include "store/writer/writer_impl.h"\n',  # read, the writer
            "src/store/compact/g.cc": '#include "store/staging/staging.h"\n',  # compact, staging
            "src/store/ok.cc": '#include "format/format.h"\n#include "runstore/store.h"\n',
            "src/store/writer/ok.cc": '#include "store/compact/compacted.h"\n'
            '#include "store/schema.h"\n',
        }
        for name, text in cases.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        found = check(root, rules)
        caught = {p.split(":")[0] for p in found}
        want = {k for k in cases if "ok" not in k}
        if caught != want:
            print(f"check_layers self-test: caught {sorted(caught)}, expected {sorted(want)}")
            return 1
        # A table that leaves a layer out, or names what is not a header, is refused.
        (root / "docs").mkdir()
        design = (repo / "docs" / "design.md").read_text()
        for broken in (
            design.replace("| `src/codec` |", "| `src/codecs` |"),
            design.replace("| util, codec |", "| util, codec, nowhere |"),
            design.replace(ANCHOR, ""),
        ):
            (root / "docs" / "design.md").write_text(broken)
            try:
                read_rules(root)
            except RulesError:
                continue
            print("check_layers self-test: a broken table of layer rules was read")
            return 1
    print("check_layers self-test: every violation caught, every broken table refused")
    return 0


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test(pathlib.Path(__file__).resolve().parent.parent)
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    try:
        rules = read_rules(root)
    except RulesError as e:
        print(f"check_layers: {e}")
        return 1
    problems = check(root, rules)
    for p in problems:
        print(p)
    if problems:
        print(
            f"check_layers: {len(problems)} include(s) cross a layer upwards "
            "(docs/design.md#layers)"
        )
        return 1
    print("check_layers: every include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
