"""A store's attributes: a small JSON document for metadata a user or an integration keeps.

Every revision of the document is a directory of its own, ``ATTRS.d/<revision>/``, holding one
file ``ATTRS`` (docs/format.md, "Attributes"; docs/design.md, "Attributes"):

    {"runstore_attrs": 2, "revision": 7, "token": "...", "lineage": [[6, "..."], [7, "..."]],
     "attrs": {...}}

Readers take the highest revision. An update is a compare-and-swap made of one rename: the
new document is written and fsynced in a temporary directory of its writer's own, which is
renamed to ``ATTRS.d/<r+1>``. A directory is renamed over another only when the other is empty,
and a revision directory never is, so of two writers that both read revision r exactly one
publishes r+1; the other re-reads and applies its change to the newer document. Nothing
waits on a lock, so a writer killed at any moment blocks nobody, and nothing compares clocks.
Old revisions are removed, which could let a writer that stalled for many updates rename its
document into a number freed that way: ``lineage`` (the last revisions' numbers and tokens,
carried from document to document) tells it whether the revision it published is the one the
newest document descends from, and if not it takes the update back and tries again.

The file ``ATTRS`` at the store's root is the layout before this one (layout 1: the whole
document, replaced by a rename, which lost concurrent updates). A store that has one
is moved to ``ATTRS.d`` by its first update, and ``ATTRS`` then becomes a small document of
layout 2 that names ``ATTRS.d``, which a reader of layout 1 refuses, saying to upgrade.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import secrets
import stat
import time
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any, NamedTuple

from ._checks import file_kind

FILE = "ATTRS"
DIR = "ATTRS.d"
LAYOUT = 2
MAX_BYTES = 16 << 20  #: attributes are metadata, not data: a larger document is refused
#: Revisions kept below the newest one (older ones are removed by each update).
KEEP = 8
#: Revisions a document's lineage names: how many updates may come between a writer's rename
#: and its check before it cannot tell whether its revision is the one that stands.
LINEAGE = 64
#: Conflicting updates (another writer published first) before an update gives up.
MAX_ATTEMPTS = 1000
#: A temporary left by a writer is removed by another writer once it is older than that
#: writer's own newest file by this much, both times set by the store's file system.
STALE_TEMPORARY_NS = 10 * 60 * 10**9

_REVISION = re.compile(r"(0|[1-9][0-9]{0,17})")
_TEMPORARY = re.compile(r"tmp\.[0-9a-f]{32}")  # inside ATTRS.d
_ROOT_TEMPORARY = re.compile(
    r"ATTRS(\.d\.tmp\.[0-9a-f]{32}|\.[0-9]+-[0-9a-f]{8}\.tmp|\.[0-9a-f]{32}\.tmp)"
)

#: Called as ``_fault(operation, path)`` before every file operation of an update, when set
#: (tests stop the process there, to crash an update at each of its steps).
_fault: Callable[[str, str], None] | None = None


class AttrsError(ValueError):
    """An ATTRS file that cannot be read as runstore attributes."""


class AttrsConflictError(RuntimeError):
    """An update that another writer's kept from being published (see the message)."""


class _Doc(NamedTuple):
    revision: int
    token: str
    lineage: list[tuple[int, str]]
    attrs: dict[str, Any]


# -- file operations ------------------------------------------------------------------------------


def _step(operation: str, path: str) -> None:
    if _fault is not None:
        _fault(operation, path)


def _read_regular(path: str) -> bytes | None:
    """The bytes of the regular file at ``path`` (at most MAX_BYTES + 1); None if it does not
    exist. Never opens a FIFO or a device in a way that could block, never reads more than
    a document may hold."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise AttrsError(
            f"{path}: a part of the path is not a directory; the store's attributes are damaged"
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise AttrsError(
                f"{path}: not a regular file ({file_kind(st.st_mode)}); not runstore attributes"
            )
        chunks, left = [], MAX_BYTES + 1
        while left > 0:
            b = os.read(fd, min(left, 1 << 20))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _write_new(path: str, data: bytes) -> None:
    """Creates ``path`` (O_EXCL), writes ``data`` and fsyncs it."""
    _step("create", path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        view = memoryview(data)
        while view:
            _step("write", path)
            view = view[os.write(fd, view) :]
        _step("fsync", path)
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_dir(path: str) -> None:
    _step("fsync", path)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_tree(path: str) -> None:
    """Removes a revision or temporary directory: the ``ATTRS`` files and revision directories
    in it, then itself. Best effort: what holds anything else, or what another process removes
    first, is left."""
    for name in _listdir(path):
        child = os.path.join(path, name)
        if _REVISION.fullmatch(name):
            _remove_tree(child)
        elif name == FILE:
            try:
                _step("unlink", child)
                os.unlink(child)
            except OSError:
                pass
    try:
        _step("rmdir", path)
        os.rmdir(path)
    except OSError:
        pass


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _is_taken(e: OSError) -> bool:
    """Whether a rename of a directory failed because its target is a non-empty directory."""
    return e.errno in (errno.EEXIST, errno.ENOTEMPTY)


# -- documents ------------------------------------------------------------------------------------


def _parse(path: str, raw: bytes) -> dict[str, Any]:
    """The JSON object in ``raw``, its layout checked; AttrsError naming ``path`` otherwise."""
    if len(raw) > MAX_BYTES:
        raise AttrsError(f"{path}: larger than {MAX_BYTES} bytes; not a runstore ATTRS file")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise AttrsError(f"{path}: not JSON ({e}); the store's attributes are damaged") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("attrs"), dict):
        raise AttrsError(f"{path}: not a runstore attributes document (no 'attrs' object)")
    layout, revision = doc.get("runstore_attrs"), doc.get("revision")
    if not _is_int(layout) or not _is_int(revision) or layout < 1 or revision < 0:
        raise AttrsError(f"{path}: 'runstore_attrs' and 'revision' must be positive integers")
    if layout > LAYOUT:
        raise AttrsError(
            f"{path}: attributes layout {layout}; this runstore reads layouts 1 to {LAYOUT} "
            "(upgrade it)"
        )
    return doc


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _revision_doc(store_path: str, revision: int) -> _Doc | None:
    """Revision ``revision``'s document; None if its directory or file is gone (removed as
    old since the listing)."""
    path = os.path.join(store_path, DIR, str(revision), FILE)
    raw = _read_regular(path)
    if raw is None:
        return None
    doc = _parse(path, raw)
    token, lineage = doc.get("token"), doc.get("lineage")
    if (
        doc["runstore_attrs"] != LAYOUT
        or doc["revision"] != revision
        or not isinstance(token, str)
        or not isinstance(lineage, list)
        or not all(
            isinstance(e, list) and len(e) == 2 and _is_int(e[0]) and isinstance(e[1], str)
            for e in lineage
        )
    ):
        raise AttrsError(
            f"{path}: not the document of revision {revision} (layout {LAYOUT}, 'revision', "
            "'token' and 'lineage' as docs/format.md says); the store's attributes are damaged"
        )
    return _Doc(revision, token, [(e[0], e[1]) for e in lineage], doc["attrs"])


def _revisions(store_path: str) -> list[int] | None:
    """The revisions in ATTRS.d, ascending; None if there is no ATTRS.d."""
    path = os.path.join(store_path, DIR)
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise AttrsError(f"{path}: not a directory; the store's attributes are damaged") from None
    return sorted(int(n) for n in names if _REVISION.fullmatch(n))


def _newest(store_path: str) -> _Doc | None:
    """The newest revision's document; None if the store has no ATTRS.d."""
    for _ in range(MAX_ATTEMPTS):
        revisions = _revisions(store_path)
        if revisions is None:
            return None
        if not revisions:
            raise AttrsError(
                f"{os.path.join(store_path, DIR)}: holds no revision; the store's attributes "
                "are damaged"
            )
        doc = _revision_doc(store_path, revisions[-1])
        if doc is not None:
            return doc
        # Removed as old between the listing and the read (newer ones exist now), or damaged:
        # a newest revision is never removed, and is whole from the moment it has its name.
        again = _revisions(store_path)
        if again and again[-1] == revisions[-1]:
            raise AttrsError(
                f"{os.path.join(store_path, DIR, str(revisions[-1]))}: the newest revision "
                f"holds no {FILE}; the store's attributes are damaged"
            )
    raise AttrsError(f"{os.path.join(store_path, DIR)}: its newest revision kept vanishing")


def read(store_path: str) -> tuple[int, dict[str, Any]]:
    """(revision, attributes) of the store at ``store_path``; (0, {}) if it has none."""
    doc = _newest(store_path)
    if doc is not None:
        return doc.revision, doc.attrs
    path = os.path.join(store_path, FILE)
    raw = _read_regular(path)
    if raw is None:
        return 0, {}
    old = _parse(path, raw)
    if old["runstore_attrs"] == 1:
        return old["revision"], old["attrs"]
    doc = _newest(store_path)  # the file names ATTRS.d: created after our first look?
    if doc is None:
        raise AttrsError(
            f"{path}: says the attributes are in {DIR}, which is missing; the store's "
            "attributes are damaged"
        )
    return doc.revision, doc.attrs


def _encode(doc: dict[str, Any]) -> bytes:
    _check_json(doc["attrs"], "")
    try:
        text = json.dumps(doc, ensure_ascii=False, allow_nan=True, indent=1)
    except TypeError as e:
        raise TypeError(f"store attributes must be JSON values (str, number, ...): {e}") from None
    except RecursionError:
        raise ValueError("store attributes nest too deeply to be a JSON document") from None
    data = text.encode("utf-8")
    if len(data) > MAX_BYTES:
        raise ValueError(
            f"store attributes of {len(data)} bytes; at most {MAX_BYTES} (keep data in records)"
        )
    return data


def _check_json(v: Any, where: str) -> None:
    """Refuses what JSON would not give back as it was given: keys that are not str (JSON
    makes them strings) and text that is not Unicode (a lone surrogate)."""
    stack = [(v, where)]
    while stack:
        v, where = stack.pop()
        if isinstance(v, str):
            _check_text(v, where or "value")
        elif isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, str):
                    raise TypeError(
                        f"attribute names must be str, not {type(k).__name__} ({k!r})"
                        + (f", in {where}" if where else "")
                    )
                _check_text(k, f"attribute name {k!r}")
                stack.append((x, f"{where}[{k!r}]" if where else f"attribute {k!r}"))
        elif isinstance(v, (list, tuple)):
            stack.extend((x, f"{where}[{i}]") for i, x in enumerate(v))


def _check_text(s: str, where: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"{where}: not valid Unicode text ({e.reason} at index {e.start}); store attributes "
            "are UTF-8 JSON"
        ) from None


# -- publishing a revision ------------------------------------------------------------------------


def _ensure_revisions(store_path: str) -> None:
    """Makes sure ATTRS.d exists, holding the document of ATTRS (layout 1) or an empty one as
    its first revision, and that ATTRS names it (so readers of layout 1 refuse the store)."""
    root_file = os.path.join(store_path, FILE)
    if _revisions(store_path) is None:
        raw = _read_regular(root_file)
        revision, attrs = 0, {}
        if raw is not None:
            old = _parse(root_file, raw)
            if old["runstore_attrs"] != 1:
                raise AttrsError(
                    f"{root_file}: says the attributes are in {DIR}, which is missing; the "
                    "store's attributes are damaged"
                )
            revision, attrs = old["revision"], old["attrs"]
        token = secrets.token_hex(16)
        doc = {
            "runstore_attrs": LAYOUT,
            "revision": revision,
            "token": token,
            "lineage": [[revision, token]],
            "attrs": attrs,
        }
        temp = os.path.join(store_path, f"{DIR}.tmp.{token}")
        first = os.path.join(temp, str(revision))
        try:
            _step("mkdir", temp)
            os.mkdir(temp)
            _step("mkdir", first)
            os.mkdir(first)
            _write_new(os.path.join(first, FILE), _encode(doc))
            _sync_dir(first)
            _sync_dir(temp)
            _step("rename", temp)
            os.rename(temp, os.path.join(store_path, DIR))
        except OSError as e:
            _remove_tree(temp)
            if not _is_taken(e):  # else another writer made ATTRS.d first: as good
                raise
        _sync_dir(store_path)
    raw = _read_regular(root_file)
    if raw is None or _parse(root_file, raw)["runstore_attrs"] == 1:
        _publish_pointer(store_path)


def _publish_pointer(store_path: str) -> None:
    """Replaces ATTRS with the document of layout 2 that names ATTRS.d (publish protocol)."""
    doc = {"runstore_attrs": LAYOUT, "revision": 1, "attrs": {}, "revisions": DIR}
    path = os.path.join(store_path, FILE)
    temp = os.path.join(store_path, f"{FILE}.{secrets.token_hex(16)}.tmp")
    try:
        _write_new(temp, json.dumps(doc).encode())
        _step("rename", temp)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    _sync_dir(store_path)


def _publish(store_path: str, parent: _Doc, attrs: dict[str, Any]) -> _Doc | None:
    """Publishes ``attrs`` as revision parent.revision + 1; the new document, or None if
    another writer published that revision first (nothing of this one is left)."""
    revision = parent.revision + 1
    token = secrets.token_hex(16)
    lineage = [*parent.lineage, (revision, token)][-LINEAGE:]
    data = _encode(
        {
            "runstore_attrs": LAYOUT,
            "revision": revision,
            "token": token,
            "lineage": [list(e) for e in lineage],
            "attrs": attrs,
        }
    )
    revisions = os.path.join(store_path, DIR)
    temp = os.path.join(revisions, f"tmp.{token}")
    target = os.path.join(revisions, str(revision))
    try:
        _step("mkdir", temp)
        os.mkdir(temp)
        _write_new(os.path.join(temp, FILE), data)
        _sync_dir(temp)
        _step("rename", temp)
        os.rename(temp, target)
    except OSError as e:
        _remove_tree(temp)
        if _is_taken(e):
            return None
        if isinstance(e, NotADirectoryError):
            raise AttrsError(
                f"{target}: not a directory; the store's attributes are damaged"
            ) from None
        if isinstance(e, FileNotFoundError) and os.path.isdir(revisions):
            return None  # our temporary was removed as stale meanwhile: try again
        raise
    # The document is durable before the rename; the rename is, once the directory is synced.
    _sync_dir(revisions)
    try:
        mine = os.stat(target).st_mtime_ns
    except OSError:
        mine = 0
    doc = _Doc(revision, token, lineage, attrs)
    newest = _newest(store_path)
    if newest is None or newest.revision < revision:
        raise AttrsError(f"{target}: removed right after it was published; damaged attributes")
    ours = dict(newest.lineage).get(revision)
    if ours is None:
        raise AttrsConflictError(
            f"{target}: published, but {newest.revision - revision} later updates came before "
            "this writer could check it, more than a document's lineage names; whether this "
            "update stands cannot be told: read the attributes and redo it if it is missing"
        )
    if ours != token:
        # The number was freed by the removal of old revisions after a writer published it
        # (this writer stalled meanwhile): nothing descends from this document. Take it back.
        _remove_tree(target)
        return None
    _remove_old(store_path, newest.revision, mine)
    return doc


def _remove_old(store_path: str, newest: int, mine_ns: int) -> None:
    """Removes revisions older than the newest by more than KEEP, and temporaries older than
    this writer's revision (``mine_ns``, its modification time) by STALE_TEMPORARY_NS."""
    revisions = os.path.join(store_path, DIR)
    try:
        names = os.listdir(revisions)
    except OSError:
        return
    for n in names:
        if _REVISION.fullmatch(n) and int(n) <= newest - KEEP:
            _remove_tree(os.path.join(revisions, n))
    if mine_ns == 0:
        return
    old = mine_ns - STALE_TEMPORARY_NS
    for directory, pattern in ((revisions, _TEMPORARY), (store_path, _ROOT_TEMPORARY)):
        for n in _listdir(directory):
            if not pattern.fullmatch(n):
                continue
            path = os.path.join(directory, n)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if st.st_mtime_ns >= old:
                continue
            if stat.S_ISDIR(st.st_mode):
                _remove_tree(path)
            elif stat.S_ISREG(st.st_mode):
                try:
                    os.unlink(path)
                except OSError:
                    pass


def modify(store_path: str, change: Callable[[dict[str, Any]], Mapping[str, Any]]) -> int:
    """Publishes ``change(attributes)`` as the store's attributes; returns its revision.

    ``change`` gets the newest document (a dict it may modify) and returns the new one. When
    another writer publishes first, ``change`` is applied again to the document that writer
    published, so every update lands, or raises: ``change`` must compute from its argument
    only (an exception from it publishes nothing and is raised)."""
    for attempt in range(MAX_ATTEMPTS):
        _ensure_revisions(store_path)
        parent = _newest(store_path)
        if parent is None:  # ATTRS.d was removed since: a damaged store
            raise AttrsError(f"{os.path.join(store_path, DIR)}: vanished during an update")
        new = change(parent.attrs)
        _check_top(new)
        doc = _publish(store_path, parent, dict(new))
        if doc is not None:
            return doc.revision
        # Another writer published first: wait a random while, growing, so that writers that
        # collide do not collide again in step.
        time.sleep(random.uniform(0, 0.001 * (1 << min(attempt, 7))))
    raise AttrsConflictError(
        f"{os.path.join(store_path, DIR)}: {MAX_ATTEMPTS} other updates were published while "
        "this one was tried; nothing of it was published"
    )


def _check_top(attrs: Any) -> None:
    if not isinstance(attrs, Mapping):
        raise TypeError(f"store attributes are a mapping of str to JSON values, not {attrs!r}")
    for k in attrs:
        if not isinstance(k, str):
            raise TypeError(f"attribute names must be str, not {type(k).__name__} ({k!r})")


def write(store_path: str, attrs: Mapping[str, Any], expect_revision: int | None = None) -> int:
    """Publishes ``attrs`` as the store's whole attributes; returns the new revision.

    With ``expect_revision``, publishes only as the revision after that one, and raises
    AttrsConflictError (a RuntimeError) if another update got in first: a compare-and-swap."""
    if expect_revision is None:
        return modify(store_path, lambda _: attrs)
    _check_top(attrs)
    _ensure_revisions(store_path)
    parent = _newest(store_path)
    doc = None
    if parent is not None and parent.revision == expect_revision:
        doc = _publish(store_path, parent, dict(attrs))
    if doc is None:
        now = read(store_path)[0]
        raise AttrsConflictError(
            f"the store's attributes changed meanwhile (revision {now}, expected "
            f"{expect_revision}); read them again and redo the update"
        )
    return doc.revision


_MISSING = object()


class _Found(Exception):
    """Ends an update without publishing anything: what it looked for was (not) there."""

    def __init__(self, value: Any) -> None:
        self.value = value


class Attrs(MutableMapping[str, Any]):
    """``Store.attrs``: the store's attributes as a mapping of str to JSON values.

    Every read looks at the store, so it sees what other processes wrote; every change
    (``attrs[k] = v``, ``del attrs[k]``, ``update``, ``pop``, ``setdefault``, ``clear``,
    ``modify``) is applied to the newest document and published whole, atomically: two
    processes that set different keys at once both keep theirs, and a change that cannot be
    published raises (docs/format.md, "Attributes"). Use ``update`` or ``modify`` to change
    several keys in one write."""

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

    def __contains__(self, key: object) -> bool:
        return key in read(self._path)[1]

    def get(self, key: str, default: Any = None) -> Any:
        return read(self._path)[1].get(key, default)

    def modify(self, change: Callable[[dict[str, Any]], Mapping[str, Any]]) -> int:
        """Applies ``change`` to the newest attributes (a dict) and publishes what it returns,
        as one update; returns the new revision. If another process publishes first,
        ``change`` runs again on the document it published, so it must compute from its
        argument only: ``attrs.modify(lambda a: {**a, "runs": a.get("runs", 0) + 1})``."""
        self._check_writable()
        return modify(self._path, change)

    def __setitem__(self, key: str, value: Any) -> None:
        self.update({key: value})

    def __delitem__(self, key: str) -> None:
        def change(attrs: dict[str, Any]) -> dict[str, Any]:
            del attrs[key]  # KeyError, and nothing published, if another removed it first
            return attrs

        self.modify(change)

    def update(self, other: Any = (), /, **kw: Any) -> None:  # type: ignore[override]
        """Sets every key given, in one write."""
        new = dict(other, **kw)
        _check_top(new)
        self.modify(lambda attrs: {**attrs, **new})

    def pop(self, key: str, default: Any = _MISSING) -> Any:
        """Removes ``key`` and returns its value, in one write; ``default`` (or KeyError) if
        the attributes have no ``key``, and then nothing is written."""
        found: list[Any] = []

        def change(attrs: dict[str, Any]) -> dict[str, Any]:
            if key not in attrs:
                raise _Found(_MISSING)
            found[:] = [attrs.pop(key)]
            return attrs

        try:
            self.modify(change)
        except _Found:
            if default is _MISSING:
                raise KeyError(key) from None
            return default
        return found[0]

    def setdefault(self, key: str, default: Any = None) -> Any:
        """The value of ``key``, set to ``default`` first (in one write) if it has none."""
        _check_json({key: default}, "")

        def change(attrs: dict[str, Any]) -> dict[str, Any]:
            if key in attrs:
                raise _Found(attrs[key])
            return {**attrs, key: default}

        got = read(self._path)[1]
        if key in got:
            return got[key]
        try:
            self.modify(change)
        except _Found as e:
            return e.value
        return default

    def clear(self) -> None:
        """Removes every attribute, in one write."""
        self.modify(lambda attrs: {})

    def replace(self, attrs: Mapping[str, Any]) -> None:
        """Makes ``attrs`` the whole document, in one write."""
        new = dict(attrs)
        _check_top(new)
        self.modify(lambda _: new)

    def __repr__(self) -> str:
        return f"Attrs({self.to_dict()!r})"
