"""The hostile strings every surface that shows or writes a user string is tested with.

One list, in ``tests/data/hostile_strings.json``, read here for the package's tests and for the
command-line tool's, which drive ``runstore`` from Python:
HTML and script breakers, prototype names, terminal escapes, NUL, lone surrogates, bidi marks,
path separators and reserved names of every export format, and 64 KiB names
(docs/reliability.md, "Surfaces a user touches").
"""

from __future__ import annotations

import json
from pathlib import Path

_FILE = Path(__file__).resolve().parents[2] / "tests" / "data" / "hostile_strings.json"


def _load() -> dict[str, str]:
    data = json.loads(_FILE.read_text(encoding="ascii"))
    out = {s["id"]: s["value"] for s in data["strings"]}
    for g in data["generated"]:
        out[g["id"]] = g["repeat"] * g["count"]
    return out


#: id -> the string, in the file's order.
HOSTILE: dict[str, str] = _load()


def encodable(s: str) -> bool:
    """Whether ``s`` can be UTF-8 (a lone surrogate cannot; a store refuses it with ValueError)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


#: The strings a store can hold (every one but those that are not valid Unicode text).
STORABLE: dict[str, str] = {k: v for k, v in HOSTILE.items() if encodable(v)}
