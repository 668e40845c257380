#!/usr/bin/env python3
"""Fails when a file includes a layer above its own (docs/design.md#layers).

Each directory of the library is a layer that may include only the layers
below it and some of the public headers; test code (src/testing) is never
included by the library; the presentation layer (present/) and the front ends
(cli/, python/src) use only the public API. `--self-test` checks that the
rules catch what they must, on a tree it makes.

    python3 scripts/check_layers.py [ROOT]
    python3 scripts/check_layers.py --self-test
"""

from __future__ import annotations

import pathlib
import re
import sys
import tempfile

PUBLIC_ALL = {"status.h", "types.h", "env.h", "reader.h", "writer.h", "store.h", "sync.h"}
# The presentation layer's headers (present/runstore/), which the front ends include.
PRESENT = {"text.h", "csv.h"}
# directory -> (internal layers it may include, public headers it may include)
RULES = {
    "src/util": ({"util"}, {"status.h", "types.h", "env.h"}),
    "src/env": ({"util", "env"}, {"status.h", "types.h", "env.h"}),
    "src/codec": ({"util", "codec"}, {"status.h", "types.h"}),
    "src/format": ({"util", "env", "codec", "format"}, {"status.h", "types.h", "env.h"}),
    "src/store": ({"util", "env", "codec", "format", "store"}, PUBLIC_ALL),
    "src/testing": ({"util", "env", "testing"}, PUBLIC_ALL),
    "present": (set(), PUBLIC_ALL | PRESENT),
    "cli": (set(), PUBLIC_ALL | PRESENT),
    "python/src": (set(), PUBLIC_ALL | PRESENT),
}
INTERNAL = {"util", "env", "codec", "format", "store", "testing"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def check(root: pathlib.Path) -> list[str]:
    problems = []
    for where, (layers, public) in RULES.items():
        base = root / where
        if not base.is_dir():
            continue
        for f in sorted(base.rglob("*")):
            if f.suffix not in (".h", ".cc") or f.name.endswith("_test.cc"):
                continue
            rel = f.relative_to(root)
            for inc in INCLUDE.findall(f.read_text(errors="replace")):
                head, _, tail = inc.partition("/")
                if not tail:
                    continue  # a header of the same directory
                if head == "runstore":
                    if tail not in public:
                        problems.append(
                            f"{rel}: includes public header {inc}, which {where} may not"
                        )
                elif head in INTERNAL:
                    if head not in layers:
                        problems.append(f"{rel}: includes {inc}: layer {head} is not below {where}")
    return problems


def self_test() -> int:
    with tempfile.TemporaryDirectory() as d:
        root = pathlib.Path(d)
        cases = {
            "src/format/a.cc": '#include "store/snapshot.h"\n',  # format including store
            "src/util/b.cc": '#include "env/path.h"\n',  # util including env
            "src/store/c.cc": '#include "testing/fault_injection_env.h"\n',  # library, test code
            "cli/d.cc": '#include "format/format.h"\n',  # a front end, an internal header
            "src/codec/e.cc": '#include "runstore/store.h"\n',  # codec, the store's API
            "src/store/ok.cc": '#include "format/format.h"\n#include "runstore/store.h"\n',
        }
        for name, text in cases.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        found = check(root)
        caught = {p.split(":")[0] for p in found}
        want = {k for k in cases if "ok" not in k}
        if caught != want:
            print(f"check_layers self-test: caught {sorted(caught)}, expected {sorted(want)}")
            return 1
    print("check_layers self-test: every violation caught")
    return 0


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    problems = check(root)
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
