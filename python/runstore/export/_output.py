"""The output of an export, a file (Store.export_tar, Store.export_parquet) or a directory
(Store.to_zarr): it appears whole or not at all, readable as any tool's output is, and never
inside the store.

- Mode: 0666 minus the umask, as tar, gzip or pandas create files (``tempfile.mkstemp`` would
  make it 0600, which collaborators on a shared cluster cannot read).
- Linux: an ``O_TMPFILE`` file in the target's directory, which has no name while it is written,
  so an export killed at any point (SIGKILL included) leaves nothing; when complete it is linked
  into place (to a temporary name first and renamed over the target when it replaces one).
- Elsewhere, and on file systems without ``O_TMPFILE`` (NFS, most FUSE ones): a named temporary
  ``.<target>.runstore-tmp-<host>-<pid>-<random>`` in the target's directory, removed on any Python
  exception and on SIGTERM and SIGINT. A SIGKILL leaves it behind; the next export to the same
  target removes it once its process is gone (a process of this host, whose pid is not running:
  the temporaries of other hosts sharing the directory are left alone).
- Errors writing it (a full disk, a quota) raise OSError whose message and ``filename`` name the
  target.
- A target inside the store (symlinks and relative paths resolved) is refused with ValueError:
  an export must never write into what it reads.
- A directory (:class:`ExportDirectory`) is written under a named temporary of the same kind
  and renamed into place when complete; its files get the modes their writer gives them
  (0666 minus the umask), its directories 0777 minus the umask.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import io
import os
import re
import secrets
import shutil
import signal
import socket
import tempfile
import threading
from typing import IO, Any

#: errno values of an O_TMPFILE open on a file system that does not support it (EISDIR: kernels
#: older than 3.11 read the flag as O_DIRECTORY).
_NO_TMPFILE = {errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOTSUP}
#: The longest file name most file systems hold (NAME_MAX).
_NAME_MAX = 255
#: Spools of an export (tar members) are held in memory up to this size, then in a nameless file
#: of the target's directory.
SPOOL_BYTES = 1 << 20


def check_outside_store(path: str, store_path: str) -> None:
    """ValueError if ``path``, with symlinks and relative parts resolved, is the store directory
    or lies inside it."""
    target = os.path.realpath(path)
    store = os.path.realpath(store_path)
    if target == store or target.startswith(store.rstrip(os.sep) + os.sep):
        raise ValueError(
            f"{path}: refusing to write the export inside the store {store_path}"
            + ("" if target == os.path.abspath(path) else f" ({path} resolves to {target})")
            + "; write it elsewhere"
        )


def named_write_error(e: OSError, path: str) -> OSError:
    """``e`` as raised by writing the export to ``path``: same errno (so the same subclass),
    ``filename`` the target (the file written has no name, or a temporary one)."""
    if e.errno is None:
        return OSError(f"{path}: {e}")
    return OSError(e.errno, e.strerror or os.strerror(e.errno), path)


class _Raw(io.RawIOBase):
    """Writes to a file descriptor that the ExportFile owns (closing this leaves it open), with
    errors that name the target."""

    def __init__(self, fd: int, path: str) -> None:
        self._fd = fd
        self._path = path

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        try:
            return os.write(self._fd, b)
        except OSError as e:
            raise named_write_error(e, self._path) from None

    def seek(self, pos: int, whence: int = 0) -> int:
        return os.lseek(self._fd, pos, whence)

    def fileno(self) -> int:
        return self._fd


class _NamedWrites:
    """A file whose write errors name the export's target (a spool in the target's directory
    fills the same disk)."""

    def __init__(self, f: IO[bytes], path: str) -> None:
        self._f = f
        self._path = path

    def write(self, b: Any) -> int:
        try:
            return self._f.write(b)
        except OSError as e:
            raise named_write_error(e, self._path) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


@functools.cache
def _linkat_empty_path() -> Any:
    """libc's linkat, for linkat(fd, "", AT_FDCWD, name, AT_EMPTY_PATH), which os.link cannot
    express; None where there is none."""
    try:
        linkat = ctypes.CDLL(None, use_errno=True).linkat
    except (OSError, AttributeError):
        return None
    linkat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    linkat.restype = ctypes.c_int
    return linkat


_AT_FDCWD, _AT_EMPTY_PATH = -100, 0x1000


def _link_fd(fd: int, name: str) -> None:
    """Gives the nameless (O_TMPFILE) file open as ``fd`` the name ``name``. Two ways, as kernels
    and sandboxes allow: linkat with AT_EMPTY_PATH (which needs CAP_DAC_READ_SEARCH unless the
    kernel lets the file's opener do it), then a link of the /proc/self/fd entry (which some
    sandboxes refuse with EXDEV). OSError of the last if neither works."""
    linkat = _linkat_empty_path()
    if linkat is not None and linkat(fd, b"", _AT_FDCWD, os.fsencode(name), _AT_EMPTY_PATH) == 0:
        return
    if linkat is not None:
        e = ctypes.get_errno()
        if e == errno.EEXIST:
            raise FileExistsError(e, os.strerror(e), name)
    os.link(f"/proc/self/fd/{fd}", name, follow_symlinks=True)


#: Whether a nameless file can be linked into place, by the st_dev of its directory (probed once).
_LINKABLE: dict[int, bool] = {}


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()) or "host"


def _pid_is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


class _Target:
    """What the file and the directory an export writes share: the target, checked to lie
    outside the store; temporary names in the target's directory that say whose they are
    (``.<target>.runstore-tmp-<host>-<pid>-<random>``), and the removal of those that a killed
    export left; SIGTERM raising SystemExit while a named temporary exists, so that it is
    removed on the way out; the sync of the target's directory."""

    def __init__(self, path: str | os.PathLike[str], store_path: str | None) -> None:
        self.path = os.fspath(path)
        if store_path is not None:
            check_outside_store(self.path, store_path)
        self.dir = os.path.dirname(os.path.abspath(self.path))
        self._base = os.path.basename(os.path.abspath(self.path))
        self._old_sigterm: Any = None

    def _temporary_prefix(self) -> str:
        """``.<target>.runstore-tmp-<host>-``, the target's part cut so that a pid and the
        random part still fit NAME_MAX (it is only a hint for whoever finds the file)."""
        tail = f".runstore-tmp-{_host()}-"
        room = _NAME_MAX - 1 - len(tail.encode()) - 32  # "<pid>-<random>" and to spare
        return "." + self._base.encode()[: max(0, room)].decode(errors="ignore") + tail

    def _temporary_name(self) -> str:
        return f"{self._temporary_prefix()}{os.getpid()}-{secrets.token_hex(4)}"

    def _remove_stale_temporaries(self) -> None:
        """Removes the named temporaries (files, or directories with what they hold) that a
        SIGKILLed export to this target left: those of this host whose process is not
        running."""
        pattern = re.compile(re.escape(self._temporary_prefix()) + r"([0-9]+)-[0-9a-f]{8}")
        try:
            names = os.listdir(self.dir)
        except OSError:
            return  # opening the file will say what is wrong with the directory
        for name in names:
            m = pattern.fullmatch(name)
            if m and int(m.group(1)) != os.getpid() and not _pid_is_running(int(m.group(1))):
                remove_path(os.path.join(self.dir, name))

    def _catch_sigterm(self) -> None:
        """SIGTERM raises SystemExit while the named temporary exists, so that it is removed on
        the way out (SIGINT raises KeyboardInterrupt anyway). Only where Python's default
        action would kill the process, and only in the main thread, which signals run in."""
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return

        def on_sigterm(signum: int, frame: Any) -> None:
            raise SystemExit(128 + signum)

        self._old_sigterm = signal.signal(signal.SIGTERM, on_sigterm)

    def _restore_sigterm(self) -> None:
        if self._old_sigterm is not None:
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None

    def _sync_dir(self) -> None:
        """Makes the new name durable (a crash could otherwise lose it, though the data was
        synced)."""
        _fsync_path(self.dir)


def remove_path(path: str) -> None:
    """Removes a file, or a directory with everything in it; nothing if it is gone already
    (another export removed it first)."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _fsync_path(path: str) -> None:
    """fsync of a file or a directory; nothing where the file system does not sync
    directories."""
    try:
        # O_NONBLOCK: whatever is there, opening it never waits (a FIFO would, for a writer).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems do not sync directories; the files themselves are synced
    finally:
        os.close(fd)


class ExportFile(_Target):
    """The file an export writes: ``file`` (binary, buffered) until :meth:`commit` puts it in
    place; :meth:`abort` (or leaving a ``with`` block without a commit) leaves nothing behind.

    ``overwrite``: replace an existing target (as pandas and numpy do); if False, FileExistsError
    when the target exists, checked first and again, atomically, when the file is linked into
    place. ``store_path``: the store exported, inside which the target must not be.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, store_path: str, overwrite: bool = True
    ) -> None:
        super().__init__(path, store_path)
        self.overwrite = overwrite
        if not overwrite and os.path.lexists(self.path):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), self.path)
        self._tmp: str | None = None  # the named temporary, where O_TMPFILE is not used
        self._done = False
        self._spools: list[IO[bytes]] = []  # closed by abort, whatever holds on to them
        self._remove_stale_temporaries()
        self._fd = self._open()
        try:
            self.file: IO[bytes] = io.BufferedWriter(_Raw(self._fd, self.path), buffer_size=1 << 20)
        except BaseException:
            self.abort()
            raise

    # -- opening ---------------------------------------------------------------------------------

    def _open(self) -> int:
        flags = os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)
        tmpfile = getattr(os, "O_TMPFILE", None)
        if tmpfile is not None:
            try:
                fd = os.open(self.dir, tmpfile | flags, 0o666)
            except OSError as e:
                if e.errno not in _NO_TMPFILE:
                    raise named_write_error(e, self.path) from None
            else:
                if self._can_link(fd):
                    return fd
                os.close(fd)
        self._tmp = os.path.join(self.dir, self._temporary_name())
        try:
            fd = os.open(self._tmp, flags | os.O_CREAT | os.O_EXCL, 0o666)
        except OSError as e:
            self._tmp = None
            raise named_write_error(e, self.path) from None
        self._catch_sigterm()
        return fd

    def _can_link(self, fd: int) -> bool:
        """Whether commit will be able to link a nameless file of this directory into place:
        probed once per file system with an empty one, linked to a temporary name and removed
        at once (a SIGKILL between the two leaves an empty temporary, which the next export
        removes)."""
        dev = os.fstat(fd).st_dev
        if dev not in _LINKABLE:
            probe = os.open(self.dir, os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o666)
            name = os.path.join(self.dir, self._temporary_name())
            try:
                _link_fd(probe, name)
                os.unlink(name)
                _LINKABLE[dev] = True
            except OSError:
                _LINKABLE[dev] = False
            finally:
                os.close(probe)
        return _LINKABLE[dev]

    # -- writing ---------------------------------------------------------------------------------

    def spool(self) -> IO[bytes]:
        """A temporary file for a part of the export that must be complete before it is copied in
        (a tar member, whose size comes first): in memory up to SPOOL_BYTES, then in a nameless
        file of the target's directory. Its write errors name the target too."""
        f = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES, dir=self.dir)
        self._spools.append(f)
        return _NamedWrites(f, self.path)  # type: ignore[return-value]

    def commit(self) -> None:
        """Flushes and syncs the file, then puts it at the target (replacing what is there if
        ``overwrite``). After a failure nothing is left but what was there before."""
        try:
            if not self.file.closed:
                self.file.close()  # flushes; the descriptor stays open
            try:
                os.fsync(self._fd)
            except OSError as e:
                raise named_write_error(e, self.path) from None
            if self._tmp is None:
                self._link_tmpfile()
            else:
                self._place(self._tmp)
            self._done = True
        finally:
            if not self._done:
                self.abort()
        self._spools.clear()
        self._close_fd()
        self._restore_sigterm()
        self._sync_dir()

    def _link_tmpfile(self) -> None:
        if not self.overwrite:
            try:
                _link_fd(self._fd, self.path)  # EEXIST if the target appeared meanwhile
            except OSError as e:
                raise named_write_error(e, self.path) from None
            return
        # Linked to a temporary name, then renamed over the target: rename replaces it
        # atomically, link would not.
        tmp = os.path.join(self.dir, self._temporary_name())
        try:
            _link_fd(self._fd, tmp)
        except OSError as e:
            raise named_write_error(e, self.path) from None
        self._tmp = tmp
        self._place(tmp)

    def _place(self, tmp: str) -> None:
        """Moves the named temporary ``tmp`` to the target."""
        try:
            if self.overwrite:
                os.replace(tmp, self.path)
            else:
                os.link(tmp, self.path)  # EEXIST if the target appeared meanwhile
                os.unlink(tmp)
        except OSError as e:
            raise named_write_error(e, self.path) from None
        self._tmp = None

    def abort(self) -> None:
        """Discards the file: a nameless one goes with its descriptor, a named one is removed."""
        try:
            self.file.close()
        except (OSError, AttributeError):
            pass  # the write error being reported, or no file object yet
        for f in self._spools:
            f.close()
        self._spools.clear()
        self._close_fd()
        if self._tmp is not None:
            try:
                os.unlink(self._tmp)
            except FileNotFoundError:
                pass
            self._tmp = None
        self._restore_sigterm()

    def _close_fd(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> ExportFile:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if not self._done:
            self.abort()
        return False


#: What the top of a directory holds when it is a Zarr store (format 3; format 2).
ZARR_MARKERS = frozenset({"zarr.json", ".zgroup", ".zarray"})
#: renameat2 flags (linux/fs.h).
_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2


@functools.cache
def _renameat2() -> Any:
    """libc's renameat2 (glibc 2.28 and later), which os.rename cannot express; None where
    there is none."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def _rename(src: str, dst: str, flags: int) -> bool:
    """renameat2(src, dst, flags): True if done, False where the kernel, the C library or the
    file system cannot do it (the caller falls back to os.rename); OSError otherwise."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    e = ctypes.get_errno()
    if e in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(e, os.strerror(e), dst)


class ExportDirectory(_Target):
    """The directory an export writes (a Zarr store): ``tmp``, a named temporary directory in
    the target's directory, until :meth:`commit` renames it into place; :meth:`abort` (or
    leaving a ``with`` block without a commit) removes it. A SIGKILL leaves it behind; the next
    export to the same target removes it once its process is gone, as for :class:`ExportFile`.

    ``overwrite``: replace an existing target, which must be a file, an empty directory or a
    Zarr store (a directory with ``zarr.json``, ``.zgroup`` or ``.zarray`` at its top): any
    other directory is refused with ValueError, and so is a target that holds the store, since
    replacing it would delete what is exported. Without ``overwrite`` an existing target is
    FileExistsError, checked first and again, atomically where the kernel can, when the
    directory is renamed into place.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, store_path: str | None, overwrite: bool = False
    ) -> None:
        super().__init__(path, store_path)
        self.overwrite = overwrite
        self._store_path = store_path
        if os.path.lexists(self.path):
            self._check_replaceable()
        self._remove_stale_temporaries()
        self.tmp = os.path.join(self.dir, self._temporary_name())
        try:
            os.mkdir(self.tmp, 0o777)
        except OSError as e:
            raise named_write_error(e, self.path) from None
        self._done = False
        self._catch_sigterm()

    def _check_replaceable(self) -> None:
        if not self.overwrite:
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), self.path)
        target = os.path.realpath(self.path)
        store = os.path.realpath(self._store_path or "")
        if self._store_path is not None and (
            store == target or store.startswith(target.rstrip(os.sep) + os.sep)
        ):
            raise ValueError(
                f"{self.path}: refusing to replace it: it holds the store {self._store_path}, "
                "which the export reads"
            )
        if os.path.isdir(self.path) and not os.path.islink(self.path):
            names = set(os.listdir(self.path))
            if names and not names & ZARR_MARKERS:
                raise ValueError(
                    f"{self.path}: refusing to replace a directory that is not a Zarr store (it "
                    "holds no zarr.json, .zgroup or .zarray); remove it or write elsewhere"
                )

    def commit(self) -> None:
        """Syncs every file and directory written, then renames the directory to the target
        (replacing what is there if ``overwrite``). After a failure nothing is left but what
        was there before."""
        try:
            self._sync_tree()
            if os.path.lexists(self.path):
                self._check_replaceable()
                self._replace()
            elif not _rename(self.tmp, self.path, _RENAME_NOREPLACE):
                os.rename(self.tmp, self.path)
            self._done = True
        except OSError as e:
            raise named_write_error(e, self.path) from None
        finally:
            if not self._done:
                self.abort()
        self._restore_sigterm()
        self._sync_dir()

    def _replace(self) -> None:
        """Puts the new directory at the target and removes the old one: swapped in one
        rename where the kernel can (RENAME_EXCHANGE), else the old one moved aside first."""
        if _rename(self.tmp, self.path, _RENAME_EXCHANGE):
            remove_path(self.tmp)  # now the old target
            return
        aside = os.path.join(self.dir, self._temporary_name())
        os.rename(self.path, aside)
        try:
            os.rename(self.tmp, self.path)
        except OSError:
            os.rename(aside, self.path)
            raise
        remove_path(aside)

    def _sync_tree(self) -> None:
        for root, _, files in os.walk(self.tmp, topdown=False):
            for name in files:
                fd = os.open(os.path.join(root, name), os.O_RDONLY | os.O_NONBLOCK)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            _fsync_path(root)

    def abort(self) -> None:
        """Removes the temporary directory and everything in it."""
        if not self._done:
            remove_path(self.tmp)
        self._restore_sigterm()

    def __enter__(self) -> ExportDirectory:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if not self._done:
            self.abort()
        return False


class WorkDirectory(_Target):
    """A directory for work beside ``path`` (an import into the existing store ``path``
    builds its records there), under a named temporary of the same kind as
    :class:`ExportDirectory`'s: removed by :meth:`remove` (and on leaving a ``with`` block, on
    SIGTERM and SIGINT); a SIGKILL leaves it, and the next one beside the same ``path``
    removes it once its process is gone. Whatever is taken from it into ``path`` is its
    owner's to publish."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, None)
        self._remove_stale_temporaries()
        self.tmp = os.path.join(self.dir, self._temporary_name())
        os.mkdir(self.tmp, 0o777)
        self._catch_sigterm()

    def remove(self) -> None:
        remove_path(self.tmp)
        self._restore_sigterm()

    def __enter__(self) -> WorkDirectory:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        self.remove()
        return False
