"""Reading a .tar.gz as a stream that trusts nothing in it (import_tar's archive).

The archive may come from anywhere, so every size it states is checked before it is used:

- The gzip stream is decompressed as it is read, and its end is checked (gzip's CRC-32 and
  length): a cut archive is an error naming the member it cuts, never a shorter archive.
- The decompressed bytes may be at most ``max_expansion`` times the archive's size (and at
  least ``EXPANSION_FLOOR``): a gzip bomb is refused once it passes that, before it fills the
  disk. runstore's exports (gzip level 1 by default) expand at most about 230 times, even
  for outcomes of zeros; gzip's own limit is about 1,030.
- Tar headers are parsed here, not by ``tarfile`` (which reads a pax header of any declared
  size into memory): each header's checksum is checked, its size field parsed within the
  format's bounds, and the extended headers (pax ``x`` and ``g``, GNU ``L`` and ``K``) are at
  most ``MAX_EXTENDED_HEADER`` bytes.
- A member is handed out with its kind (regular file, directory, link, device, ...) and
  declared size, before any of its data is read, and its data is read through a reader that
  stops at that size. Nothing is ever written to disk from the archive: member names are only
  compared with the names metadata.json gives.
"""

from __future__ import annotations

import os
import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

#: Decompressed bytes any archive may hold, whatever its size.
EXPANSION_FLOOR = 64 << 20
#: The default of import_tar's max_expansion (decompressed bytes per archive byte).
MAX_EXPANSION = 300
#: Largest pax or GNU extended header (a long name, a path, a size).
MAX_EXTENDED_HEADER = 1 << 20
_BLOCK = 512

#: Tar type flags and what they are called in errors.
_KINDS = {
    b"0": "file",
    b"\0": "file",
    b"7": "file",  # contiguous file: a regular file
    b"1": "hard link",
    b"2": "symbolic link",
    b"3": "character device",
    b"4": "block device",
    b"5": "directory",
    b"6": "FIFO",
    b"S": "sparse file",
    b"V": "volume header",
    b"M": "multi-volume continuation",
}


class ArchiveError(ValueError):
    """An archive that is not what it should be: not gzip, cut short, damaged, a bomb, a
    member that is not a regular file, ..."""


@dataclass
class Member:
    """A member of the archive: its name (pax ``path`` or GNU long name where given), kind
    (``file``, ``directory``, ``symbolic link``, ...) and declared size."""

    name: str
    kind: str
    size: int


class _Gunzip:
    """The decompressed bytes of a .gz file (one gzip member or several, one after another),
    counted against ``cap``. Only what is asked for is decompressed, so that an archive cut
    short is reported where the reader is (``where``), not where a read-ahead ran out. zlib
    checks each member's header and its CRC-32 and length at its end."""

    def __init__(self, f: IO[bytes], path: str, cap: int | None) -> None:
        self._f = f
        self._path = path
        self._cap = cap
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._tail = b""  # compressed bytes given to zlib and not consumed yet
        self.total = 0
        self.where = "the start of the archive"  # what is being read, for errors

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes; fewer only at the end of the stream."""
        parts = []
        while n > 0:
            if self._d.eof:  # a gzip member ended: another one, or the end of the file
                rest = self._d.unused_data or self._f.read(1 << 16)
                if not rest:
                    break
                self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                self._tail = rest
            if not self._tail:
                self._tail = self._f.read(1 << 16)
                if not self._tail:
                    raise ArchiveError(
                        f"{self._path}: the archive is cut short in {self.where}: its gzip "
                        "stream ends before its end marker (an interrupted download or copy?)"
                    )
            try:
                data = self._d.decompress(self._tail, n)
            except zlib.error as e:
                if self.total == 0:
                    raise ArchiveError(
                        f"{self._path}: not a .tar.gz file: it does not start as a gzip stream "
                        f"({e})"
                    ) from None
                raise ArchiveError(
                    f"{self._path}: damaged gzip stream in {self.where} ({e})"
                ) from None
            self._tail = self._d.unconsumed_tail
            if data:
                parts.append(data)
                n -= len(data)
                self.total += len(data)
                if self._cap is not None and self.total > self._cap:
                    raise ArchiveError(
                        f"{self._path}: refused in {self.where}: the archive decompresses to "
                        f"more than {self._cap:,} bytes (the limit of max_expansion times its "
                        f"size, or {EXPANSION_FLOOR >> 20} MiB for a small archive); a runstore "
                        "export expands far less, unless written with a high --compresslevel "
                        "from outcomes of mostly equal bytes: then pass a larger max_expansion "
                        "(--max-expansion), or None (none) to take it as it is"
                    )
        return b"".join(parts)

    def read_exact(self, n: int) -> bytes:
        """Exactly ``n`` bytes, or fewer at the end of the stream."""
        parts = []
        while n > 0:
            data = self.read(min(n, 1 << 20))
            if not data:
                break
            parts.append(data)
            n -= len(data)
        return b"".join(parts)


def open_archive(path: str) -> IO[bytes]:
    """The archive at ``path`` opened for reading: a regular file (a FIFO, a device or a
    directory is refused without blocking on it)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ArchiveError(f"{path}: not a regular file: an archive is read from a file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class TarStream:
    """The members of a .tar.gz, read in order: :meth:`members` yields each member's header;
    :meth:`read` reads the data of the member last yielded (what is left unread of it is
    skipped before the next header)."""

    def __init__(self, f: IO[bytes], path: str, max_expansion: float | None) -> None:
        size = os.fstat(f.fileno()).st_size
        cap = None if max_expansion is None else max(EXPANSION_FLOOR, int(max_expansion * size))
        self.path = path
        self.archive_bytes = size
        self._gz = _Gunzip(f, path, cap)
        self._left = 0  # data bytes of the current member not read yet
        self._pad = 0  # padding after them
        self._name = ""

    # -- members -----------------------------------------------------------------------------

    def members(self) -> Iterator[Member]:
        """Every member in order, until the end-of-archive marker (or the end of the stream at
        a header's place). The rest of the stream is then read, so that gzip checks its CRC and
        length: a damaged or cut stream is an error, never a shorter archive."""
        while True:
            self._skip_rest()
            m = self._next_header()
            if m is None:
                break
            yield m
        self._gz.where = "the end of the archive (after its last member)"
        while self._gz.read(1 << 20):
            pass

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes of the current member's data; b"" at its end. A member cut short
        by the end of the stream is an error."""
        n = min(n, self._left)
        if n <= 0:
            return b""
        data = self._gz.read_exact(n)
        if len(data) < n:
            raise ArchiveError(
                f"{self.path}: member {self._name!r} is cut short: the archive ends "
                f"{self._left - len(data):,} bytes before the member's end"
            )
        self._left -= n
        return data

    def _skip_rest(self) -> None:
        while self._left:
            self.read(1 << 20)
        if self._pad:
            if len(self._gz.read_exact(self._pad)) < self._pad:
                raise ArchiveError(f"{self.path}: the archive is cut short after {self._name!r}")
            self._pad = 0

    # -- headers -----------------------------------------------------------------------------

    def _next_header(self) -> Member | None:
        pax: dict[str, str] = {}
        long_name: str | None = None
        after = f"after member {self._name!r}" if self._name else "at its start"
        while True:
            self._gz.where = f"the tar header {after}"
            block = self._gz.read_exact(_BLOCK)
            if not block:
                return None  # the stream ends where a header would start: no more members
            if len(block) < _BLOCK:
                raise ArchiveError(f"{self.path}: the archive is cut short in the header {after}")
            if block == bytes(_BLOCK):
                return None  # the end-of-archive marker
            self._check_sum(block, after)
            kind_flag = block[156:157]
            size = self._size(block, after)
            if kind_flag in (b"x", b"g", b"L", b"K"):
                data = self._extended(kind_flag, size, after)
                if kind_flag == b"x":
                    pax.update(_pax_records(data, self.path, after))
                elif kind_flag == b"L":
                    long_name = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
                continue
            name = pax.get("path") or long_name or _header_name(block)
            if "size" in pax:
                try:
                    size = int(pax["size"])
                except ValueError:
                    size = -1
                if size < 0:
                    raise ArchiveError(
                        f"{self.path}: the pax header of member {name!r} gives the size "
                        f"{pax['size']!r}"
                    )
            kind = _KINDS.get(kind_flag, f"member of tar type {kind_flag!r}")
            if kind == "file" and name.endswith("/") and kind_flag == b"\0":
                kind = "directory"  # the old (V7) way of writing a directory
            self._name = name
            self._left = size if kind in ("file", "sparse file") else 0
            self._pad = -self._left % _BLOCK
            self._gz.where = f"member {name!r}"
            return Member(name, kind, size)

    def _check_sum(self, block: bytes, after: str) -> None:
        field = block[148:156].split(b"\0", 1)[0].strip()
        try:
            stored = int(field, 8)
        except ValueError:
            stored = -1
        unsigned = sum(block[:148]) + 8 * 32 + sum(block[156:])
        signed = unsigned - 2 * sum(b for b in block[:148] + block[156:] if b >= 128)
        if stored not in (unsigned, signed):
            raise ArchiveError(
                f"{self.path}: damaged tar header {after} (its checksum does not match): not a "
                "tar archive, or a damaged one"
            )

    def _size(self, block: bytes, after: str) -> int:
        field = block[124:136]
        if field[0] & 0x80:  # base-256 (GNU, star): a big-endian number in the other bytes
            if field[0] & 0x40:
                raise ArchiveError(f"{self.path}: the tar header {after} gives a negative size")
            return int.from_bytes(bytes([field[0] & 0x3F]) + field[1:], "big")
        text = field.split(b"\0", 1)[0].strip()
        try:
            return int(text, 8) if text else 0
        except ValueError:
            raise ArchiveError(
                f"{self.path}: the tar header {after} gives the size {text!r}, not an octal number"
            ) from None

    def _extended(self, flag: bytes, size: int, after: str) -> bytes:
        if size > MAX_EXTENDED_HEADER:
            raise ArchiveError(
                f"{self.path}: the extended tar header {after} declares {size:,} bytes; more than "
                f"the {MAX_EXTENDED_HEADER:,} a name or a size needs"
            )
        self._gz.where = f"the extended tar header {after}"
        data = self._gz.read_exact(size)
        pad = -size % _BLOCK
        if len(data) < size or len(self._gz.read_exact(pad)) < pad:
            raise ArchiveError(f"{self.path}: the archive is cut short in the header {after}")
        return data


def _header_name(block: bytes) -> str:
    name = block[0:100].split(b"\0", 1)[0]
    if block[257:263] == b"ustar\0":  # POSIX ustar: a prefix of the path (GNU tar uses it
        prefix = block[345:500].split(b"\0", 1)[0]  # for times instead)
        if prefix:
            name = prefix + b"/" + name
    return name.decode("utf-8", "surrogateescape")


def _pax_records(data: bytes, path: str, after: str) -> dict[str, str]:
    """The records ``<length> <key>=<value>\\n`` of a pax extended header."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        space = data.find(b" ", pos)
        try:
            length = int(data[pos:space]) if space > pos else 0
        except ValueError:
            length = 0
        end = pos + length
        if length <= 0 or end > len(data) or data[end - 1 : end] != b"\n":
            raise ArchiveError(f"{path}: damaged pax header {after}")
        key, sep, value = data[space + 1 : end - 1].partition(b"=")
        if not sep:
            raise ArchiveError(f"{path}: damaged pax header {after}")
        out[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos = end
    return out
