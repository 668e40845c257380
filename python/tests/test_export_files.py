"""The file an export writes (Store.export_tar, Store.export_parquet): its mode, whole or absent
however the export ends (SIGKILL included), never inside the store, errors that name it."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import runstore

try:
    import pyarrow  # noqa: F401

    HAVE_ARROW = True
except ImportError:
    HAVE_ARROW = False

FORMATS = [
    "tar",
    pytest.param("parquet", marks=pytest.mark.skipif(not HAVE_ARROW, reason="needs pyarrow")),
]


def export(store: runstore.Store, fmt: str, path, **kw):
    if fmt == "tar":
        return store.export_tar(path, **kw)
    return store.export_parquet(path, **kw)


def fill(store: runstore.Store, runs: int = 50, width: int = 10, seed: int = 0) -> runstore.Store:
    rng = np.random.default_rng(seed)
    with store.writer() as w:
        w.log_many(np.arange(runs), loss=rng.random(runs), curve=rng.random((runs, width)))
    return store.refresh()


@pytest.fixture
def filled(store):
    return fill(store)


@pytest.fixture
def out_dir(tmp_path) -> Path:
    d = tmp_path / "out"
    d.mkdir()
    return d


# -- mode -------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077], ids=oct)
def test_exports_get_the_mode_the_umask_gives(filled, out_dir, fmt, umask):
    """0666 minus the umask, as tar or pandas would create it (mkstemp made every export 0600,
    which collaborators on a cluster cannot read)."""
    old = os.umask(umask)
    try:
        export(filled, fmt, out_dir / "new")
        export(filled, fmt, out_dir / "new")  # replacing a file gives it the same mode
    finally:
        os.umask(old)
    assert oct(os.stat(out_dir / "new").st_mode & 0o777) == oct(0o666 & ~umask)


# -- whole or absent --------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_existing_file_is_replaced_unless_overwrite_is_false(filled, out_dir, fmt):
    target = out_dir / "results"
    target.write_bytes(b"old")
    with pytest.raises(FileExistsError) as e:
        export(filled, fmt, target, overwrite=False)
    assert e.value.filename == str(target) and target.read_bytes() == b"old"
    export(filled, fmt, target)
    assert target.read_bytes() != b"old"
    assert sorted(os.listdir(out_dir)) == ["results"]


def no_tmpfile(real_open):
    """os.open as on a file system without O_TMPFILE (NFS)."""

    def open_(path, flags, *args, **kwargs):
        if flags & os.O_TMPFILE == os.O_TMPFILE:
            raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP), path)
        return real_open(path, flags, *args, **kwargs)

    return open_


@pytest.mark.parametrize("named", [False, True], ids=["nameless", "named temporary"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_an_export_that_raises_leaves_nothing(filled, out_dir, fmt, named, monkeypatch):
    if named:
        monkeypatch.setattr(os, "open", no_tmpfile(os.open))

    def fail(*args, **kwargs):
        raise RuntimeError("stopped halfway")

    if fmt == "tar":
        monkeypatch.setattr(runstore.export._tar.ParallelGzip, "close", fail)
    else:
        import pyarrow.parquet as pq

        monkeypatch.setattr(pq.ParquetWriter, "write_table", fail)
    with pytest.raises(RuntimeError, match="stopped halfway"):
        export(filled, fmt, out_dir / "results")
    assert os.listdir(out_dir) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_where_a_nameless_file_cannot_be_linked_a_named_temporary_is_used(
    filled, out_dir, fmt, monkeypatch
):
    """Some kernels and sandboxes allow O_TMPFILE but not linking it (EXDEV, EPERM): that is
    found out before the export is written, with an empty file."""
    from runstore.export import _output

    def refuse(fd, name):
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), name)

    monkeypatch.setattr(_output, "_link_fd", refuse)
    monkeypatch.setattr(_output, "_LINKABLE", {})
    created = []
    real_open = os.open

    def spy(path, flags, *args, **kwargs):
        if flags & os.O_CREAT:
            created.append(os.path.basename(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    export(filled, fmt, out_dir / "results")
    assert os.listdir(out_dir) == ["results"]
    assert [n.startswith(".results.runstore-tmp-") for n in created] == [True], created


# A child that exports a store and stops in the middle of writing (after the first MiB of the
# tarball, or the first Parquet row group), says so and waits to be killed.
CHILD = textwrap.dedent("""
    import errno, os, signal, sys, time
    import runstore
    import runstore.export._tar

    # SIGINT as on a terminal, even when the tests were started with it ignored (inherited).
    signal.signal(signal.SIGINT, signal.default_int_handler)

    store_path, fmt, target, named = sys.argv[1:5]
    if named == "1":  # as on a file system without O_TMPFILE (NFS)
        real_open = os.open

        def no_tmpfile(path, flags, *args, **kwargs):
            if flags & os.O_TMPFILE == os.O_TMPFILE:
                raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP), path)
            return real_open(path, flags, *args, **kwargs)

        os.open = no_tmpfile
    written = 0

    stopped = False

    def stop_here():
        global stopped
        if not stopped:  # once: what the signal makes the export do next may write too
            stopped = True
            print("writing", flush=True)
            time.sleep(60)

    if fmt == "tar":
        write = runstore.export._tar.ParallelGzip.write

        def slow_write(self, data):
            global written
            written += len(data)
            n = write(self, data)
            if written > (1 << 20):
                stop_here()
            return n

        runstore.export._tar.ParallelGzip.write = slow_write
    else:
        import pyarrow.parquet as pq

        write_table = pq.ParquetWriter.write_table

        def slow_write_table(self, *args, **kwargs):
            write_table(self, *args, **kwargs)
            stop_here()

        pq.ParquetWriter.write_table = slow_write_table
    store = runstore.open(store_path, mode="r")
    if fmt == "tar":
        store.export_tar(target, compresslevel=0)
    else:
        store.export_parquet(target, compression="none")
""")


@pytest.fixture(scope="module")
def large_store(tmp_path_factory) -> runstore.Store:
    """40 MB of float64 outcomes: tens of MB of CSV text."""
    return fill(
        runstore.open(tmp_path_factory.mktemp("large") / "store"), runs=1000, width=5000, seed=1
    )


def start_export(store: runstore.Store, fmt: str, target: Path, named: bool) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, store.path, fmt, str(target), "1" if named else "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if line != "writing\n":
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the exporting child did not start writing: {line!r} {err}")
    return proc


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_sigkilled_export_leaves_nothing(large_store, out_dir, fmt):
    """The file is written without a name (O_TMPFILE) and linked into place when complete."""
    proc = start_export(large_store, fmt, out_dir / "results", named=False)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert os.listdir(out_dir) == []


def temporaries(d: Path) -> list[str]:
    return sorted(n for n in os.listdir(d) if ".runstore-tmp-" in n)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_sigkilled_named_temporary_is_removed_by_the_next_export(
    large_store, filled, out_dir, fmt
):
    """Without O_TMPFILE a SIGKILL leaves the named temporary; the next export to the same
    target removes it, as its process is dead, and leaves those of live processes and of
    other hosts alone."""
    target = out_dir / "results"
    proc = start_export(large_store, fmt, target, named=True)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    host = socket.gethostname()
    (left,) = temporaries(out_dir)
    assert left.startswith(f".results.runstore-tmp-{host}-{proc.pid}-"), left
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = f".results.runstore-tmp-{host}-{sleeper.pid}-0123abcd"
        other_host = f".results.runstore-tmp-{host}x-{proc.pid}-0123abcd"
        other_target = f".other.runstore-tmp-{host}-{proc.pid}-0123abcd"
        for n in (live, other_host, other_target):
            (out_dir / n).write_bytes(b"")
        export(filled, fmt, target)
        assert temporaries(out_dir) == sorted([live, other_host, other_target])
    finally:
        sleeper.kill()
        sleeper.wait()
    assert target.stat().st_size > 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_named_temporary_is_removed_on_sigterm_and_sigint(large_store, out_dir, fmt, sig):
    proc = start_export(large_store, fmt, out_dir / "results", named=True)
    assert len(temporaries(out_dir)) == 1
    proc.send_signal(sig)
    rc = proc.wait(timeout=30)
    # SystemExit(143) for SIGTERM; an uncaught KeyboardInterrupt ends Python with SIGINT.
    assert rc == (128 + signal.SIGTERM if sig == signal.SIGTERM else -signal.SIGINT), (
        proc.stderr.read()
    )
    assert os.listdir(out_dir) == []


# -- never inside the store -------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_export_inside_the_store_is_refused(filled, tmp_path, fmt, monkeypatch):
    store_dir = Path(filled.path)
    before = sorted(p.name for p in store_dir.rglob("*"))
    (tmp_path / "link").symlink_to(store_dir)
    (tmp_path / "dangling").symlink_to(store_dir / "evil")
    monkeypatch.chdir(store_dir / "segments")
    for target in [
        store_dir,
        store_dir / "x",
        "../x",
        "x",
        tmp_path / "link" / "x",
        tmp_path / "dangling",
        store_dir / "RUNSTORE",
    ]:
        with pytest.raises(ValueError, match="refusing to write the export inside the store") as e:
            export(filled, fmt, target)
        assert str(target) in str(e.value) and filled.path in str(e.value)
    assert sorted(p.name for p in store_dir.rglob("*")) == before
    assert (store_dir / "RUNSTORE").read_text().startswith("runstore store\n")


# -- errors name the file ---------------------------------------------------------------------


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs (mounting needs root)."""
    if os.geteuid() != 0:
        print("skipping: mounting a small tmpfs to fill needs root")
        pytest.skip("mounting a small tmpfs to fill needs root")
    d = tmp_path / "full"
    d.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(d)], capture_output=True, text=True
    )
    if r.returncode != 0:
        print(f"skipping: cannot mount a tmpfs: {r.stderr.strip()}")
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    try:
        yield d
    finally:
        if subprocess.run(["umount", str(d)]).returncode != 0:  # busy: left mounted, not lost
            subprocess.run(["umount", "--lazy", str(d)], check=True)


def open_files_under(d: Path) -> list[str]:
    fds = "/proc/self/fd"
    names = []
    for fd in os.listdir(fds):
        try:
            names.append(os.readlink(f"{fds}/{fd}"))
        except OSError:
            pass
    return [n for n in names if n.startswith(str(d))]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_full_disk_raises_os_error_naming_the_export(store, full_disk, fmt):
    fill(store, runs=300, width=500)  # about 2.5 MB of CSV, 1.2 MB of Parquet
    target = full_disk / "results"
    kw = {"compresslevel": 0} if fmt == "tar" else {"compression": "none"}
    with pytest.raises(OSError) as e:
        export(store, fmt, target, **kw)
    assert e.value.errno == 28 and e.value.filename == str(target), repr(e.value)
    assert str(target) in str(e.value)
    assert os.listdir(full_disk) == [] and open_files_under(full_disk) == []


def test_python_m_runstore_names_a_full_disk(store, full_disk):
    fill(store, runs=300, width=500)
    target = full_disk / "results.tar.gz"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "runstore",
            "export",
            "tar",
            store.path,
            str(target),
            "--compresslevel",
            "0",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 4, r.stderr
    assert r.stderr.startswith(
        f"runstore: export tar: IOError: {target}: No space left on device"
    ), r.stderr
