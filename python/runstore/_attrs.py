"""A store's attributes: a small JSON document for metadata a user or an integration keeps.

The document is the file ``ATTRS`` at the store's root (docs/format.md, "Attributes"):

    {"runstore_attrs": 1, "revision": 3, "attrs": {...}}

``runstore_attrs`` is the version of this layout (a reader refuses a greater one), ``revision``
counts the writes. It is published as the store's marker is: written under a temporary name of
its writer's own, fsynced, renamed over ``ATTRS``, and the directory fsynced, so a reader sees
the old document or the new one whole, also after a kill -9 or a power cut. A write replaces
the whole document; two processes updating it at once do not merge (the later rename wins), so
an update given the revision it read (``expect_revision``) refuses to go on when another got in
first.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

FILE = "ATTRS"
LAYOUT = 1
MAX_BYTES = 16 << 20  #: attributes are metadata, not data: a larger document is refused


class AttrsError(ValueError):
    """An ATTRS file that cannot be read as runstore attributes."""


def _path(store_path: str) -> str:
    return os.path.join(store_path, FILE)


def read(store_path: str) -> tuple[int, dict[str, Any]]:
    """(revision, attributes) of the store at ``store_path``; (0, {}) if it has none."""
    path = _path(store_path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return 0, {}
    if len(raw) > MAX_BYTES:
        raise AttrsError(f"{path}: larger than {MAX_BYTES} bytes; not a runstore ATTRS file")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise AttrsError(f"{path}: not JSON ({e}); the store's attributes are damaged") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("attrs"), dict):
        raise AttrsError(f"{path}: not a runstore attributes document (no 'attrs' object)")
    layout, revision = doc.get("runstore_attrs"), doc.get("revision")
    if not isinstance(layout, int) or not isinstance(revision, int) or revision < 1:
        raise AttrsError(f"{path}: 'runstore_attrs' and 'revision' must be positive integers")
    if layout > LAYOUT:
        raise AttrsError(
            f"{path}: attributes layout {layout}; this runstore reads layout {LAYOUT} (upgrade it)"
        )
    return revision, doc["attrs"]


def write(store_path: str, attrs: Mapping[str, Any], expect_revision: int | None = None) -> int:
    """Publishes ``attrs`` as the store's attributes; returns the new revision.

    With ``expect_revision``, refuses (RuntimeError) if the revision on disk is another: a
    concurrent update got in first (the check and the rename are not one atomic step, so two
    writers that race within it still both succeed, the later one winning)."""
    revision, _ = read(store_path)
    if expect_revision is not None and revision != expect_revision:
        raise RuntimeError(
            f"the store's attributes changed meanwhile (revision {revision}, expected "
            f"{expect_revision}); read them again and redo the update"
        )
    for k in attrs:
        if not isinstance(k, str):
            raise TypeError(f"attribute names must be str, not {type(k).__name__} ({k!r})")
    try:
        text = json.dumps(
            {"runstore_attrs": LAYOUT, "revision": revision + 1, "attrs": dict(attrs)},
            ensure_ascii=False,
            allow_nan=True,
            indent=1,
        )
    except TypeError as e:
        raise TypeError(f"store attributes must be JSON values (str, number, ...): {e}") from None
    data = text.encode("utf-8")
    if len(data) > MAX_BYTES:
        raise ValueError(
            f"store attributes of {len(data)} bytes; at most {MAX_BYTES} (keep data in records)"
        )
    path = _path(store_path)
    temp = f"{path}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    dfd = os.open(store_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return revision + 1


class Attrs(MutableMapping[str, Any]):
    """``Store.attrs``: the store's attributes as a mapping of str to JSON values.

    Every read looks at the file, so it sees what other processes wrote; every change
    (``attrs[k] = v``, ``del attrs[k]``, ``update``) publishes the whole document at once. Use
    ``update`` to change several keys in one write."""

    def __init__(self, store_path: str, read_only: bool) -> None:
        self._path = store_path
        self._read_only = read_only

    def _check_writable(self) -> None:
        if self._read_only:
            raise RuntimeError(f"store {self._path} is open read-only; its attributes too")

    @property
    def revision(self) -> int:
        """How many times the attributes were written (0: never)."""
        return read(self._path)[0]

    def to_dict(self) -> dict[str, Any]:
        return read(self._path)[1]

    def __getitem__(self, key: str) -> Any:
        return read(self._path)[1][key]

    def __iter__(self) -> Iterator[str]:
        return iter(read(self._path)[1])

    def __len__(self) -> int:
        return len(read(self._path)[1])

    def __setitem__(self, key: str, value: Any) -> None:
        self.update({key: value})

    def __delitem__(self, key: str) -> None:
        self._check_writable()
        revision, attrs = read(self._path)
        del attrs[key]
        write(self._path, attrs, expect_revision=revision)

    def update(self, other: Any = (), /, **kw: Any) -> None:  # type: ignore[override]
        """Sets every key given, in one write."""
        self._check_writable()
        revision, attrs = read(self._path)
        attrs.update(dict(other), **kw)
        write(self._path, attrs, expect_revision=revision)

    def replace(self, attrs: Mapping[str, Any]) -> None:
        """Makes ``attrs`` the whole document, in one write."""
        self._check_writable()
        write(self._path, attrs)

    def __repr__(self) -> str:
        return f"Attrs({self.to_dict()!r})"
