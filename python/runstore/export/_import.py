"""import_tar: a store rebuilt from a tarball of export_tar, dtypes and shapes intact, from an
archive it does not trust (docs/experiments.md, "Importing a tarball").

The archive is read as a stream (``_tar_stream``): metadata.json first, checked whole before
any data is read; then experiments.csv, which fixes the experiments, their ids and order;
then the outcomes, whose rows are placed by their ``experiment`` cell, in any order. Every
record goes through one writer into a store of its own, beside the target, under a temporary
name, and is committed once, at the end. Only when the archive was read to its end, with every
member metadata.json names, does anything reach the target:

- a new store: the temporary one is renamed into place (``_output.ExportDirectory``);
- an existing store: the one segment file of that one commit is linked into its ``segments/``
  directory, which then is synced. A reader sees all of the import or none of it.

Memory: the experiments' ids and scalar columns (one entry per experiment, as the exports
hold them), one chunk of rows, and one row of a CSV (at most ``ROW_CHARS`` characters or the
archive's size, whichever is more). metadata.json is read whole, and may be at most
``META_BYTES`` or four times the archive's size.
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import json
import os
import secrets
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .._memory import release_freed_memory
from ..experiments import _design
from ..experiments import _records as ex
from ._output import ExportDirectory, WorkDirectory, remove_path
from ._table import EXPORT_FORMAT
from ._tar import TAR_VERSION, element_names, text_cell, text_from_cell
from ._tar_stream import ArchiveError, Member, TarStream, open_archive

if TYPE_CHECKING:
    from .._reader import StoreReader

META_MEMBER = "metadata.json"
#: Characters a CSV row may hold, whatever the archive's size (a spreadsheet cell holds at most
#: 32,767); a larger archive may hold rows of up to its own size.
ROW_CHARS = 16 << 20
#: Bytes metadata.json may hold, whatever the archive's size; a larger archive may hold four
#: times its own size.
META_BYTES = 4 << 20
#: Text of rows gathered before they are parsed and written, whatever chunk_rows says.
CHUNK_CHARS = 1 << 20
_DTYPES = frozenset(
    ["bool", "float32", "float64", "string", "bytes"]
    + [f"{s}int{b}" for s in ("", "u") for b in (8, 16, 32, 64)]
)
_STATUS_DTYPES = {
    "state": "string",
    "error": "string",
    "host": "string",
    "started": "float64",
    "finished": "float64",
    "seconds": "float64",
    "attempt": "int64",
}


# -- entry points --------------------------------------------------------------------------------


def import_tar(
    path: str | os.PathLike[str], store: StoreReader, chunk_rows: int, max_expansion: float | None
) -> StoreReader:
    """runstore.export.import_tar: the archive's records into the open, writable ``store``,
    published as one segment once the whole archive has been read."""
    archive = os.fspath(path)
    store.refresh()
    with WorkDirectory(store.path) as work:
        _build(archive, work.tmp, store, type(store), chunk_rows, max_expansion)
        _publish_segment(work.tmp, store.path)
    store.refresh()
    return store


def import_new(
    path: str | os.PathLike[str],
    store_path: str | os.PathLike[str],
    open_store: Callable[[str], StoreReader],
    chunk_rows: int,
    max_expansion: float | None,
) -> StoreReader:
    """runstore.import_tar into a store that does not exist yet (or an empty directory): built
    under a temporary name beside ``store_path`` and renamed into place when complete."""
    archive = os.fspath(path)
    target = os.path.abspath(os.fspath(store_path))
    empty = os.path.isdir(target) and not os.path.islink(target) and not os.listdir(target)
    if empty:
        os.rmdir(target)  # an empty directory is where the new store goes
    try:
        with ExportDirectory(target, store_path=None, overwrite=False) as out:
            _build(archive, out.tmp, None, open_store, chunk_rows, max_expansion)
            out.commit()
    except BaseException:
        if empty and not os.path.lexists(target):
            os.mkdir(target)  # as it was
        raise
    return open_store(target)


def _build(
    archive: str,
    tmp: str,
    target: StoreReader | None,
    open_store: Callable[[str], StoreReader],
    chunk_rows: int,
    max_expansion: float | None,
) -> None:
    """Reads ``archive`` into a new store at ``tmp`` with one writer and one commit. Checked
    against what ``target`` (None: a new store) holds, so that the records can join it."""
    built = open_store(tmp)
    with open_archive(archive) as f:
        tar = TarStream(f, archive, max_expansion)
        # Staging off ($RUNSTORE_STAGING_DIR too): the records stay in tmp until published.
        writer = built.writer(_allow_reserved=True, staging_dir="", buffer_bytes=16 << 20)
        try:
            _Import(archive, tar, target or built, writer, chunk_rows).run()
        except BaseException:
            try:
                writer.close()  # commits into tmp, which is then removed
            except Exception:  # noqa: BLE001 - the error that stopped the import is the one to raise
                pass
            raise
        writer.close()


def _publish_segment(tmp: str, store_path: str) -> None:
    """Links the segment file of the store at ``tmp`` (one writer, one commit: one file) into
    the store at ``store_path`` and syncs its directory: the import appears whole, at once.
    Where the two are on different file systems, the file is copied to a temporary name there,
    synced and linked into place. A name that is taken is never replaced (the writer id is
    random: it cannot be)."""
    src_dir = os.path.join(tmp, "segments")
    files = [n for n in os.listdir(src_dir) if n.endswith(".rss")]
    if not files:
        return
    if len(files) != 1:
        raise RuntimeError(f"import_tar: the import was written as {len(files)} segments, not 1")
    name = files[0]
    src = os.path.join(src_dir, name)
    if os.path.getsize(src) == 0:
        return  # nothing was written
    dst_dir = os.path.join(store_path, "segments")
    dst = os.path.join(dst_dir, name)
    try:
        os.link(src, dst)
    except OSError as e:
        if e.errno != getattr(os, "EXDEV", 18) and not isinstance(e, PermissionError):
            raise
        part = f"{dst}.{secrets.token_hex(8)}.tmp"
        try:
            with open(src, "rb") as fin, open(part, "xb") as fout:
                while chunk := fin.read(1 << 20):
                    fout.write(chunk)
                fout.flush()
                os.fsync(fout.fileno())
            os.link(part, dst)
        finally:
            remove_path(part)
    fd = os.open(dst_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- reading the archive -------------------------------------------------------------------------


class _Import:
    """One import: the members of ``tar`` in order, written by ``writer``, checked against
    ``target`` (the store the records will join)."""

    def __init__(
        self, archive: str, tar: TarStream, target: StoreReader, writer: Any, chunk_rows: int
    ) -> None:
        self.archive = archive
        self.tar = tar
        self.target = target
        self.writer = writer
        self.chunk_rows = max(1, int(chunk_rows))
        self.row_chars = max(ROW_CHARS, tar.archive_bytes)
        self.meta: dict[str, Any] | None = None
        self.version = 0
        self.ids: np.ndarray | None = None  # the experiment ids, in order
        self.id_texts: list[str] = []  # their cells, as text
        self.text_pos: dict[str, int] = {}  # cell text -> experiment (-1: two experiments)
        self.by_member: dict[str, dict[str, Any]] = {}
        self.seen: set[str] = set()
        self.masks: dict[str, np.ndarray] = {}

    def error(self, member: str | None, what: str) -> ArchiveError:
        where = f"{self.archive}: " + (f"member {member!r}: " if member else "")
        return ArchiveError(where + what)

    # -- members ---------------------------------------------------------------------------

    def run(self) -> None:
        for m in self.tar.members():
            self.member(m)
        if self.meta is None:
            raise self.error(None, "holds no metadata.json: not a runstore export")
        missing = [n for n in self.expected() if n not in self.seen]
        if missing:
            raise self.error(
                None,
                f"lacks {len(missing)} member(s) that metadata.json names, first {missing[0]!r}: "
                "the archive was cut short or members were removed; nothing was imported",
            )

    def expected(self) -> list[str]:
        assert self.meta is not None
        return [self.meta["experiments_member"], *self.by_member]

    def member(self, m: Member) -> None:
        name = m.name[2:] if m.name.startswith("./") else m.name
        if m.kind == "directory":
            return  # a repacked archive may list outcomes/: nothing is extracted
        if m.kind != "file":
            raise self.error(
                name,
                f"is a {m.kind}: an export holds regular files only, and links and special "
                "files are refused",
            )
        if self.meta is None:
            if name != META_MEMBER:
                raise self.error(
                    name,
                    "comes first, where metadata.json must be (it says how to read the rest): "
                    "not a runstore export, or repacked in another order",
                )
            self.read_meta(m)
            return
        if name in self.seen:
            raise self.error(name, "is in the archive twice")
        if name == self.meta["experiments_member"]:
            self.seen.add(name)
            self.read_experiments(name)
            return
        o = self.by_member.get(name)
        if o is None:
            return  # a file metadata.json does not name: of no use here, and not read
        if self.ids is None:
            raise self.error(name, f"comes before {self.meta['experiments_member']!r}")
        self.seen.add(name)
        if name == o.get("mask_member"):
            self.read_mask(name, o, m.size)
        elif o["format"] == "npy":
            self.read_npy(name, o, m.size)
        else:
            self.read_outcome_csv(name, o)

    # -- metadata.json ---------------------------------------------------------------------

    def read_meta(self, m: Member) -> None:
        limit = max(META_BYTES, 4 * self.tar.archive_bytes)
        if m.size > limit:
            raise self.error(
                META_MEMBER,
                f"declares {m.size:,} bytes, more than the {limit:,} this archive's metadata may "
                "hold",
            )
        data = self.tar.read(m.size)
        try:
            meta = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise self.error(META_MEMBER, f"is not JSON text: {e}") from None
        self.meta = _checked_meta(meta, lambda what: self.error(META_MEMBER, what))
        self.version = self.meta["version"]
        for o in self.meta["outcomes"]:
            self.by_member[o["member"]] = o
            if "mask_member" in o:
                self.by_member[o["mask_member"]] = o
        self.check_outcomes_fit()

    def check_outcomes_fit(self) -> None:
        """Outcomes must have the dtype and shape the target's series of their name has (two
        segments that disagree on a series' type cannot be read together)."""
        assert self.meta is not None
        infos = ex.reserved_series(self.target)
        for o in self.meta["outcomes"]:
            info = infos.get(o["name"])
            if info is None:
                continue
            theirs = None if info["variable_shape"] else list(info["shape"])
            if info["dtype"] != o["dtype"] or theirs != o["shape"]:
                shape = "variable shape" if theirs is None else f"shape {theirs}"
                given = "variable shape" if o["shape"] is None else f"shape {o['shape']}"
                raise self.error(
                    META_MEMBER,
                    f"outcome {o['name']!r} is {o['dtype']} of {given}; the store "
                    f"{self.target.path} holds it as {info['dtype']} of {shape}",
                )

    # -- CSV -------------------------------------------------------------------------------

    def cell(self, text: str) -> str:
        """A text cell's text (version 2 prefixes formulas, docs/experiments.md)."""
        return text_from_cell(text) if self.version >= 2 else text

    def rows(
        self, member: str, header: list[str]
    ) -> Iterator[tuple[int, list[int], list[list[str]]]]:
        """The rows of a CSV member after its header (which must be ``header``, as written),
        in chunks: (rows before the chunk, the line each row starts on, the rows)."""
        stream = io.TextIOWrapper(
            io.BufferedReader(_MemberReader(self.tar), 1 << 16), encoding="utf-8", newline=""
        )
        lines = _Lines(stream, self.row_chars)
        limit = csv.field_size_limit()
        csv.field_size_limit(max(limit, self.row_chars))
        reader = csv.reader(lines, strict=True)
        try:
            first = next(reader, None)
            lines.chars = 0
            want = [_cell_text(h, self.version) for h in header]
            if first != want:
                got = first or []
                bad = next(
                    (k for k, (a, b) in enumerate(zip(got, want)) if a != b),
                    min(len(got), len(want)),
                )
                raise self.error(
                    member,
                    f"its header is not the one metadata.json gives: column {bad + 1} is "
                    f"{_short(got[bad] if bad < len(got) else None)}, expected "
                    f"{_short(want[bad] if bad < len(want) else None)} ({len(got)} columns, "
                    f"expected {len(want)})",
                )
            row0 = 0
            chunk: list[list[str]] = []
            starts: list[int] = []
            chars = 0
            start = reader.line_num + 1
            for row in reader:
                if len(row) != len(header):
                    raise self.error(
                        member, f"line {start}: {len(row)} cells, expected {len(header)}"
                    )
                chunk.append(row)
                starts.append(start)
                start = reader.line_num + 1
                chars += lines.chars
                lines.chars = 0
                if len(chunk) >= self.chunk_rows or chars >= CHUNK_CHARS:
                    yield row0, starts, chunk
                    row0 += len(chunk)
                    chunk, starts, chars = [], [], 0
            if chunk:
                yield row0, starts, chunk
        except csv.Error as e:
            raise self.error(member, f"line {reader.line_num}: not CSV: {e}") from None
        except UnicodeDecodeError as e:
            raise self.error(member, f"not UTF-8 text: {e}") from None
        except _RowTooLong:
            raise self.error(
                member,
                f"line {reader.line_num + 1}: a row longer than {self.row_chars:,} characters",
            ) from None
        finally:
            csv.field_size_limit(limit)

    # -- experiments.csv -------------------------------------------------------------------

    def read_experiments(self, member: str) -> None:
        assert self.meta is not None
        meta = self.meta
        cols = meta["columns"]
        n = meta["experiments"]
        id_meta = cols[0]
        string_rows = set(id_meta.get("string_id_rows", ()))
        absent = {c["name"]: _absent_rows(c, n) for c in cols[1:]}
        ids: list[Any] = []
        parts: dict[str, list[ex.Column]] = {c["name"]: [] for c in cols[1:]}
        row0 = 0
        for row0, starts, rows in self.rows(member, [c["name"] for c in cols]):
            if row0 + len(rows) > n:
                raise self.error(member, f"holds more than the {n:,} rows metadata.json gives")
            cells = np.array(rows, dtype=object).reshape(len(rows), len(cols))
            for k, text in enumerate(cells[:, 0].tolist()):
                text = self.cell(text) if id_meta["dtype"] != "int64" else text
                is_str = row0 + k in string_rows
                ids.append(self.parse_id(member, starts[k], text, id_meta["dtype"], is_str))
                self.id_texts.append(text)
            positions = np.arange(row0, row0 + len(rows))
            for j, c in enumerate(cols[1:], start=1):
                col = self.parse(
                    member, starts, cells[:, j], c["dtype"], (), c, absent[c["name"]], positions
                )
                parts[c["name"]].append(col)
            row0 += len(rows)
        row0 = len(ids)
        if row0 != n:
            raise self.error(
                member,
                f"holds {row0:,} rows; metadata.json gives {n:,} experiments: cut short, or edited",
            )
        self.ids = _id_array(ids, id_meta["dtype"])
        if len(set(ids)) != len(ids):  # 3 and "3" differ in a set
            first: dict[Any, int] = {}
            for k, e in enumerate(ids):
                j = first.setdefault((type(e), e), k)
                if j != k:
                    raise self.error(
                        member, f"experiment id {_short(e)} is in rows {j + 1} and {k + 1}"
                    )
        del ids
        # One column at a time, each chunk's part dropped as it is joined.
        full = {name: _concat(parts.pop(name)) for name in list(parts)}
        self.write_design_and_status(member, cols, full)
        del full
        release_freed_memory()

    def parse_id(self, member: str, line: int, text: str, kind: str, is_str: bool) -> Any:
        if kind == "string" or (kind == "mixed" and is_str):
            if not text or len(text.encode("utf-8", "surrogatepass")) > 255:
                raise self.error(
                    member, f"line {line}: experiment id {_short(text)} must be 1 to 255 bytes"
                )
            return text
        try:
            v = int(text)
        except ValueError:
            raise self.error(
                member, f"line {line}: experiment id {_short(text)} is not an integer"
            ) from None
        if not -(2**63) <= v < 2**63:
            raise self.error(member, f"line {line}: experiment id {text} does not fit 64 bits")
        return v

    def write_design_and_status(
        self, member: str, cols: list[dict[str, Any]], full: dict[str, ex.Column]
    ) -> None:
        assert self.meta is not None and self.ids is not None
        ids = self.ids
        w = self.writer
        if self.meta["has_design"]:
            params = []
            for c in cols[1:]:
                if c["role"] != "parameter":
                    continue
                col = full[c["name"]]
                values = col.values
                if values.dtype.kind == "f":
                    values = values.copy()
                    values[~col.present] = 0
                params.append(_design._Param(c["name"], values, col.present))
            try:
                _design.define_columns(self.target, list(ids.tolist()), params, len(ids), writer=w)
            except (ValueError, TypeError, OverflowError) as e:
                raise self.error(member, str(e)) from None
        status = {c["field"]: full[c["name"]] for c in cols[1:] if c["role"] == "status"}
        if "state" not in status:
            return
        state = status["state"]
        bad = [v for v in set(state.values[state.present].tolist()) if v not in ex.STATES]
        if bad:
            raise self.error(member, f"state {_short(bad[0])} is not one of {', '.join(ex.STATES)}")
        attempt = status.get("attempt")
        started = (state.values != "pending") | (attempt is not None and (attempt.values > 0))
        for field, c in status.items():
            keep = c.present & started
            if field == "error":
                keep &= np.not_equal(c.values, None)
            if not keep.any():
                continue
            runs = ids[keep]
            vals = c.values[keep]
            w.log_many(
                runs.tolist() if runs.dtype == object else runs,
                **{ex.STATUS_COLUMNS[field]: vals.tolist() if vals.dtype == object else vals},
            )

    # -- outcomes ----------------------------------------------------------------------------

    def read_outcome_csv(self, member: str, o: dict[str, Any]) -> None:
        assert self.ids is not None
        n = len(self.ids)
        name = o["name"]
        shape = None if o["shape"] is None else tuple(o["shape"])
        if o["variable_shape"]:
            header = [ex.ID_COLUMN, name + ".shape", name]
            self.writer.define(name, o["dtype"], variable_shape=True)
        else:
            header = [ex.ID_COLUMN] + element_names(name, shape or ())
        absent = _absent_rows(o, n)
        seen = np.zeros(n, dtype=bool)
        for row0, starts, rows in self.rows(member, header):
            cells = np.array(rows, dtype=object).reshape(len(rows), len(header))
            pos = self.positions(member, row0, starts, cells[:, 0])
            dup = seen[pos] | _repeats(pos)
            if dup.any():
                k = int(np.flatnonzero(dup)[0])
                raise self.error(
                    member,
                    f"line {starts[k]}: experiment {_short(self.id_texts[pos[k]])} has a "
                    "second row",
                )
            seen[pos] = True
            run_ids = self.ids[pos]
            if o["variable_shape"]:
                self.put_variable(member, starts, o, run_ids, cells)
                continue
            col = self.parse(member, starts, cells[:, 1:], o["dtype"], shape or (), o, absent, pos)
            _log_column(self.writer, run_ids, name, col)

    def positions(
        self, member: str, row0: int, starts: list[int], id_cells: np.ndarray
    ) -> np.ndarray:
        """The experiment of each row, by its id cell: the experiment of the same row of
        experiments.csv where the rows are still in its order, else the one whose id has that
        text (a sheet sorted or filtered)."""
        texts = [self.cell(t) for t in id_cells.tolist()]
        if texts == self.id_texts[row0 : row0 + len(texts)]:
            return np.arange(row0, row0 + len(texts))
        if not self.text_pos:  # made at the first row out of order (most archives have none)
            # The row of each id's text; -1 where an int and a str id share one (3 and "3").
            for k, text in enumerate(self.id_texts):
                self.text_pos[text] = -1 if text in self.text_pos else k
        pos = np.empty(len(texts), dtype=np.intp)
        for k, t in enumerate(texts):
            p = self.text_pos.get(t)
            if p is None:
                raise self.error(
                    member,
                    f"line {starts[k]}: {_short(t)} is not an experiment of experiments.csv",
                )
            if p < 0:
                raise self.error(
                    member,
                    f"line {starts[k]}: {_short(t)} names two experiments (an int id and a str "
                    "id with the same text); keep this member's rows in the order of "
                    "experiments.csv",
                )
            pos[k] = p
        return pos

    def put_variable(
        self,
        member: str,
        starts: list[int],
        o: dict[str, Any],
        run_ids: np.ndarray,
        cells: np.ndarray,
    ) -> None:
        dt = np.dtype(o["dtype"])
        for k, (eid, sh, tx) in enumerate(
            zip(run_ids.tolist(), cells[:, 1].tolist(), cells[:, 2].tolist())
        ):
            if sh == "":
                continue
            try:
                shape = json.loads(sh)
                if not isinstance(shape, list) or not all(
                    isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
                ):
                    raise ValueError(f"the shape {_short(sh)} is not a list of sizes")
                v = np.array(json.loads(tx), dtype=dt)
                if v.size != int(np.prod(shape, dtype=np.int64)):
                    raise ValueError(f"{v.size} values for the shape {shape}")
                v = v.reshape(shape)
            except (ValueError, TypeError, OverflowError) as e:
                raise self.error(member, f"line {starts[k]}: {e}") from None
            self.writer.put(eid, o["name"], v)

    def read_mask(self, member: str, o: dict[str, Any], size: int) -> None:
        assert self.ids is not None
        n = len(self.ids)
        if size > n + 4096:
            raise self.error(member, f"declares {size:,} bytes for a mask of {n:,} experiments")
        data = self.tar.read(size)
        try:
            mask = np.load(io.BytesIO(data), allow_pickle=False)
        except Exception as e:  # noqa: BLE001 - numpy's header parser raises many kinds
            raise self.error(member, f"not a .npy file: {type(e).__name__}: {e}") from None
        if mask.dtype != np.bool_ or mask.shape != (n,):
            raise self.error(
                member, f"holds {mask.dtype} of shape {mask.shape}, not bool of shape ({n},)"
            )
        self.masks[o["name"]] = ~mask

    def read_npy(self, member: str, o: dict[str, Any], size: int) -> None:
        assert self.ids is not None
        n = len(self.ids)
        if o["name"] not in self.masks:
            raise self.error(member, f"comes before its mask {o['mask_member']!r}")
        present = self.masks.pop(o["name"])
        head = _MemberReader(self.tar)
        try:
            version = np.lib.format.read_magic(head)
            shape, fortran, dtype = (
                np.lib.format.read_array_header_1_0(head)
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0(head)
            )
        except ArchiveError:
            raise
        except Exception as e:  # noqa: BLE001 - numpy's header parser raises many kinds
            raise self.error(member, f"not a .npy file: {type(e).__name__}: {e}") from None
        want = (n, *o["shape"])
        if fortran or dtype != np.dtype(o["dtype"]):
            order = ", Fortran order" if fortran else ""
            raise self.error(
                member, f"holds {dtype.str}{order}; metadata.json gives {o['dtype']} in C order"
            )
        if tuple(shape) != want:
            raise self.error(member, f"holds shape {tuple(shape)}; expected {want}")
        row_shape = tuple(shape[1:])
        row_bytes = dtype.itemsize * int(np.prod(row_shape, dtype=np.int64))
        if size - head.consumed != n * row_bytes:
            raise self.error(
                member,
                f"declares {size:,} bytes; its header and {n:,} rows of {row_bytes:,} bytes are "
                f"{head.consumed + n * row_bytes:,}",
            )
        rows = max(1, min(self.chunk_rows, CHUNK_CHARS // max(1, row_bytes)))
        for start in range(0, n, rows):
            k = min(rows, n - start)
            data = self.tar.read(k * row_bytes)
            vals = np.frombuffer(data, dtype=dtype).reshape((k,) + row_shape)
            col = ex.Column(vals, present[start : start + k], o["dtype"])
            _log_column(self.writer, self.ids[start : start + k], o["name"], col)

    # -- cells -----------------------------------------------------------------------------

    def parse(
        self,
        member: str,
        starts: list[int],
        cells: np.ndarray,
        dtype: str,
        shape: tuple[int, ...],
        meta: dict[str, Any],
        absent_rows: np.ndarray | None,
        positions: np.ndarray,
    ) -> ex.Column:
        """Typed values of CSV cells of shape (rows, prod(shape)) (or (rows,)) of the
        experiments at ``positions``; ``absent_rows``: the experiments whose value metadata.json
        says is absent (an empty cell is ambiguous for strings)."""
        try:
            return _parse_cells(cells, dtype, shape, meta, absent_rows, positions, self.cell)
        except (ValueError, TypeError, OverflowError, binascii.Error):
            pass
        # Say which cell: parsed one by one.
        flat = cells.reshape(len(cells), -1)
        for k in range(len(flat)):
            for j in range(flat.shape[1]):
                one = flat[k : k + 1, j : j + 1]
                try:
                    _parse_cells(one, dtype, (), {}, None, positions[k : k + 1], self.cell)
                except (ValueError, TypeError, OverflowError, binascii.Error) as e:
                    raise self.error(
                        member,
                        f"line {starts[k]}: {_short(flat[k, j])} is not a value of {dtype} ({e})",
                    ) from None
        raise self.error(member, f"lines from {starts[0]}: cells that are not {dtype}")


# -- helpers -------------------------------------------------------------------------------------


class _RowTooLong(Exception):
    pass


class _MemberReader(io.RawIOBase):
    """The current member's data as a file (for TextIOWrapper and numpy's header reader)."""

    def __init__(self, tar: TarStream) -> None:
        self.tar = tar
        self.consumed = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self.tar.read(len(b))
        b[: len(data)] = data
        self.consumed += len(data)
        return len(data)

    def read(self, n: int = -1) -> bytes:
        data = self.tar.read(n if n >= 0 else 1 << 62)
        self.consumed += len(data)
        return data


class _Lines:
    """The lines of a text stream for csv.reader, each at most ``limit`` characters (a row
    longer than that is refused before it is held); ``chars`` counts what was handed out."""

    def __init__(self, stream: io.TextIOBase, limit: int) -> None:
        self.stream = stream
        self.limit = limit
        self.chars = 0  # of the row being read (the reader's owner sets it to 0 after each row)

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        line = self.stream.readline(self.limit + 1)
        if not line:
            raise StopIteration
        if self.chars + len(line) > self.limit:
            raise _RowTooLong()
        self.chars += len(line)
        return line


def _cell_text(name: str, version: int) -> str:
    return text_cell(name) if version >= 2 else name


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:60] + "..." + text[-12:]


def _repeats(pos: np.ndarray) -> np.ndarray:
    """Where a position repeats an earlier one of the same chunk."""
    out = np.zeros(len(pos), dtype=bool)
    if len(pos) > 1:
        order = np.argsort(pos, kind="stable")
        s = pos[order]
        out[order[1:]] = s[1:] == s[:-1]
    return out


def _absent_rows(meta: dict[str, Any], n: int) -> np.ndarray | None:
    """The experiments metadata.json lists as absent (``missing_rows``), as a mask of n."""
    rows = meta.get("missing_rows")
    if rows is None:
        return None
    mask = np.zeros(n, dtype=bool)
    r = np.asarray(rows, dtype=np.int64)
    mask[r[(r >= 0) & (r < n)]] = True
    return mask


def _id_array(ids: list[Any], kind: str) -> np.ndarray:
    if kind == "int64":
        return np.array(ids, dtype=np.int64)
    out = np.empty(len(ids), dtype=object)
    out[:] = ids
    return out


def _parse_cells(
    cells: np.ndarray,
    dtype: str,
    shape: tuple[int, ...],
    meta: dict[str, Any],
    absent_rows: np.ndarray | None,
    positions: np.ndarray,
    text: Callable[[str], str],
) -> ex.Column:
    """Typed values from CSV cells of shape (rows, prod(shape)) (or (rows,) for scalars)."""
    n = cells.shape[0]
    if dtype in ("string", "bytes"):
        cells = cells.reshape(n)
        present = np.ones(n, dtype=bool)
        if meta.get("missing"):
            if absent_rows is not None:
                present = ~absent_rows[positions]
            else:
                present = np.fromiter((c != "" for c in cells.tolist()), bool, n)
        values = np.empty(n, dtype=object)
        if dtype == "string":
            # One str object per distinct text of the chunk (states, hosts repeat).
            seen: dict[str, str] = {}
            values[:] = [
                seen.setdefault(text(c), text(c)) if p else None
                for c, p in zip(cells.tolist(), present.tolist())
            ]
        else:
            values[:] = [
                base64.b64decode(text(c), validate=True) if p else None
                for c, p in zip(cells.tolist(), present.tolist())
            ]
        return ex.Column(values, present, dtype)
    flat = cells.reshape(n, -1)  # str objects: parsed one by one, never copied as fixed width
    absent = np.equal(flat, "") if flat.size else np.zeros(flat.shape, dtype=bool)
    present = ~absent.any(axis=1)
    if flat.shape[1] == 0 and absent_rows is not None:
        # An outcome of arrays with no elements: no cells, only the list of absent rows.
        present = ~absent_rows[positions]
    np_dtype = np.dtype(dtype)
    if np_dtype.kind == "b":
        values = np.equal(flat, "true")
        if not (values | np.equal(flat, "false") | absent).all():
            raise ValueError("bool cells are true or false")
    else:
        filled = flat.copy()
        filled[absent] = "0"
        if np_dtype.kind == "f":
            # float32: parsed as float64 first, then rounded (exact for the shortest text).
            values = filled.astype(np.float64).astype(np_dtype)
        else:
            # int() of each text: exact for any int64 and uint64, OverflowError past the range.
            values = filled.astype(np_dtype)
    values = values.reshape((n,) + shape)
    if np_dtype.kind == "f":
        values[~present] = np.nan
    return ex.Column(values, present, dtype)


def _concat(parts: list[ex.Column]) -> ex.Column:
    if not parts:
        return ex.Column(np.empty(0), np.zeros(0, dtype=bool), "float64")
    values = np.concatenate([p.values for p in parts])
    return ex.Column(values, np.concatenate([p.present for p in parts]), parts[0].dtype)


def _log_column(writer: Any, ids: np.ndarray, name: str, col: ex.Column) -> None:
    if not col.present.any():
        return
    runs = ids[col.present]
    vals = col.values[col.present]
    runs = runs.tolist() if runs.dtype == object else runs
    if vals.dtype == object:
        writer.log_many(runs, **{name: vals.tolist()})
    else:
        writer.log_many(runs, **{name: vals})


# -- metadata.json, checked ----------------------------------------------------------------------


def _checked_meta(meta: Any, error: Callable[[str], ArchiveError]) -> dict[str, Any]:
    """metadata.json with every key this import reads checked (types, ranges, names), so that
    nothing later meets a value of the wrong type; ``error`` makes the error to raise."""

    def need(cond: bool, what: str) -> None:
        if not cond:
            raise error(what)

    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    def rows_list(d: dict[str, Any], key: str, where: str) -> None:
        if key in d:
            v = d[key]
            need(
                isinstance(v, list) and all(is_int(r) and 0 <= r for r in v),
                f"{where}: {key!r} must be a list of row numbers",
            )

    need(isinstance(meta, dict), f"is a JSON {type(meta).__name__}, not an object")
    need(
        meta.get("format") == EXPORT_FORMAT,
        f"format is {_short(meta.get('format'))}: not a runstore export ({EXPORT_FORMAT!r})",
    )
    version = meta.get("version")
    need(
        is_int(version) and 1 <= version <= TAR_VERSION,
        f"version {_short(version)}: this runstore reads versions 1 to {TAR_VERSION}",
    )
    for key in ("experiments", "experiments_member", "columns", "outcomes"):
        need(key in meta, f"has no key {key!r}")
    n = meta["experiments"]
    need(is_int(n) and n >= 0, f"'experiments' is {_short(n)}, not a count")
    need(
        isinstance(meta["experiments_member"], str) and meta["experiments_member"] != META_MEMBER,
        "'experiments_member' must name a member",
    )
    has_design = meta.get("has_design", True)
    need(isinstance(has_design, bool), "'has_design' must be true or false")
    cols = meta["columns"]
    need(isinstance(cols, list) and cols, "'columns' must be a non-empty list")
    names: set[str] = set()
    fields: set[str] = set()
    for k, c in enumerate(cols):
        where = f"column {k + 1}"
        need(isinstance(c, dict), f"{where} is not an object")
        name, role, dtype = c.get("name"), c.get("role"), c.get("dtype")
        need(isinstance(name, str), f"{where}: 'name' must be a string")
        if k == 0:
            need(role == "id", "the first column must be the id (role 'id')")
            need(dtype in ("int64", "string", "mixed"), f"{where}: id dtype {_short(dtype)}")
            rows_list(c, "string_id_rows", where)
            continue
        where = f"column {k + 1} ({name!r})"
        need(role in ("parameter", "status"), f"{where}: role {_short(role)}")
        need(dtype in _DTYPES, f"{where}: dtype {_short(dtype)} is not a runstore dtype")
        need(name not in names, f"{where}: a second column of that name")
        names.add(name)
        if "missing" in c:
            need(is_int(c["missing"]) and c["missing"] >= 0, f"{where}: 'missing' is not a count")
        rows_list(c, "missing_rows", where)
        if role == "parameter":
            try:
                _design.check_param_name(name)
            except ValueError as e:
                raise error(f"{where}: {e}") from None
        else:
            field = c.get("field")
            need(field in _STATUS_DTYPES, f"{where}: status field {_short(field)}")
            need(field not in fields, f"{where}: a second column of status {field!r}")
            need(
                dtype == _STATUS_DTYPES[field],
                f"{where}: status {field!r} is {_STATUS_DTYPES[field]}, not {dtype}",
            )
            fields.add(field)
    outcomes = meta["outcomes"]
    need(isinstance(outcomes, list), "'outcomes' must be a list")
    members = {meta["experiments_member"], META_MEMBER}
    onames: set[str] = set()
    for k, o in enumerate(outcomes):
        where = f"outcome {k + 1}"
        need(isinstance(o, dict), f"{where} is not an object")
        name = o.get("name")
        need(isinstance(name, str) and name != "", f"{where}: 'name' must be a non-empty string")
        where = f"outcome {name!r}"
        need(
            not name.startswith("~"),
            f"{where}: names starting with '~' are runstore's own (resume markers, design, "
            "status): an outcome is never imported as one",
        )
        need(name not in onames, f"{where}: a second outcome of that name")
        onames.add(name)
        dtype, shape, variable = o.get("dtype"), o.get("shape"), o.get("variable_shape")
        need(dtype in _DTYPES, f"{where}: dtype {_short(dtype)} is not a runstore dtype")
        need(isinstance(variable, bool), f"{where}: 'variable_shape' must be true or false")
        if variable:
            need(shape is None, f"{where}: a variable-shape outcome has shape null")
        else:
            need(
                isinstance(shape, list) and all(is_int(d) and 0 <= d < 2**31 for d in shape),
                f"{where}: 'shape' must be a list of sizes",
            )
            need(len(shape) <= 32, f"{where}: more than 32 dimensions")
        fmt = o.get("format")
        need(fmt in ("csv", "npy"), f"{where}: format {_short(fmt)}")
        if fmt == "csv":
            need(
                variable or len(shape) <= 2,
                f"{where}: a CSV holds outcomes of at most two dimensions",
            )
            need(
                variable or int(np.prod(shape, dtype=np.int64)) <= 1 << 20,
                f"{where}: too many columns",
            )
        else:
            need(not variable and dtype not in ("string", "bytes"), f"{where}: not for .npy")
            need(isinstance(o.get("mask_member"), str), f"{where}: 'mask_member' must be a name")
        for key in ("member", "mask_member") if fmt == "npy" else ("member",):
            m = o.get(key)
            need(isinstance(m, str) and m not in members, f"{where}: {key!r} must be a new name")
            members.add(m)
        if "missing" in o:
            need(is_int(o["missing"]) and o["missing"] >= 0, f"{where}: 'missing' is not a count")
        rows_list(o, "missing_rows", where)
    return {**meta, "has_design": has_design}
