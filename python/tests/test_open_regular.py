"""Files of a store that the package opens itself go through ``runstore._checks.open_regular``:
never following a link, never waiting on a FIFO, refusing anything but a regular file with an
error that names the file and what it is. And a store on a read-only file system, or without
write permission, reads in Python as everywhere else.

Every case runs under an alarm, so that a hang fails the test instead of the suite."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pandas as pd
import pytest

import runstore
from runstore._checks import open_regular


@pytest.fixture(autouse=True)
def alarm():
    """A hang is SIGALRM: the test fails, the suite goes on."""

    def hung(signum, frame):
        raise TimeoutError("hung")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def test_a_regular_file_is_read(tmp_path):
    (tmp_path / "ATTRS").write_bytes(b'{"x": 1}')
    with open_regular(tmp_path / "ATTRS") as f:
        assert f.read() == b'{"x": 1}'


def test_a_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "ATTRS")


def make_fifo(path):
    os.mkfifo(path)


def make_socket(path):
    s = socket.socket(socket.AF_UNIX)
    s.bind(os.fspath(path))
    s.close()


def make_directory(path):
    os.mkdir(path)


def make_link_out(path):
    outside = path.parent / "outside"
    outside.write_bytes(b"{}")
    os.symlink(outside, path)


def make_link_to_device(path):
    os.symlink("/dev/zero", path)


@pytest.mark.parametrize(
    "make, kind",
    [
        (make_fifo, "a FIFO"),
        (make_socket, "a socket"),
        (make_directory, "a directory"),
        (make_link_out, "a symbolic link"),
        (make_link_to_device, "a symbolic link"),
    ],
)
def test_anything_but_a_regular_file_is_refused_naming_it(tmp_path, make, kind):
    path = tmp_path / "ATTRS"
    make(path)
    with pytest.raises(OSError) as e:
        open_regular(path)
    assert f"is {kind}, not a regular file" in str(e.value)
    assert "ATTRS" in str(e.value)


def make_sweep(path) -> None:
    store = runstore.open(path)
    store.define_experiments(pd.DataFrame({"experiment": np.arange(6), "lr": np.arange(6) * 0.5}))
    store.attrs["unit"] = "s"
    with store.writer(writer_id="w") as w:
        for run in range(6):
            w.log(run, 0, loss=run * 0.25)


def read_all(path) -> str:
    """Every reading operation on the store at ``path``, then a write that must be refused:
    what the refusal said."""
    store = runstore.open(path, mode="r")
    frame = store.to_pandas()
    experiments, _ = runstore.load_results(store)
    assert len(frame) == 6 and len(experiments) == 6, (len(frame), len(experiments))
    assert store.attrs["unit"] == "s"
    assert store.verify(progress=False) > 0
    try:
        w = runstore.open(path).writer(writer_id="x")
        w.log(100, 0, loss=1.0)
        w.commit()
        w.close()
    except OSError as e:
        return f"write refused: {e}"
    raise AssertionError("a writer wrote into a store it may not write")


def in_child(fn, *, nobody: bool = False) -> str:
    """``fn()`` in a forked child (as the unprivileged user ``nobody`` if asked: root writes
    through permissions), under an alarm; its result, or the error it raised, as text."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        try:
            signal.alarm(60)
            if nobody:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            text = fn()
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            text, code = f"{type(e).__name__}: {e}", 1
        os.write(w, text.encode())
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), f"the child died of signal {os.WTERMSIG(status)}: {out}"
    assert os.WEXITSTATUS(status) == 0, out
    return out


@pytest.mark.skipif(os.geteuid() != 0, reason="becoming nobody needs root")
def test_a_reader_without_write_permission_reads_everything():
    # A directory of its own that nobody may enter: pytest's are root's alone.
    top = tempfile.mkdtemp(prefix="runstore-nobody-")
    try:
        os.chmod(top, 0o755)
        path = os.path.join(top, "store")
        make_sweep(path)
        for root, _dirs, files in os.walk(top):
            os.chmod(root, 0o755)
            for name in files:
                os.chmod(os.path.join(root, name), 0o644)
        out = in_child(lambda: read_all(path), nobody=True)
        assert "write refused" in out and "Permission denied" in out, out
    finally:
        shutil.rmtree(top)


def test_a_store_on_a_read_only_file_system_reads_everything(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", mnt])
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: the read-only file system case needs root")
    try:
        make_sweep(mnt / "store")
        subprocess.run(["mount", "-o", "remount,ro", mnt], check=True)
        out = in_child(lambda: read_all(mnt / "store"))
        assert "Read-only file system" in out, out
    finally:
        subprocess.run(["umount", "-l", mnt])


def test_a_fifo_named_like_a_segment_is_named_never_waited_on(tmp_path):
    path = tmp_path / "store"
    make_sweep(path)
    os.mkfifo(path / "segments" / "z-00000001.rss")
    with pytest.raises(OSError) as e:
        runstore.open(path, mode="r")
    assert "is a FIFO, not a regular file" in str(e.value)
    store = runstore.open(path, mode="r", on_damaged="skip")
    assert [d.file for d in store.damaged_segments] == ["segments/z-00000001.rss"]
    assert len(store.to_pandas()) == 6


def test_running_out_of_descriptors_is_resource_exhausted(tmp_path):
    path = tmp_path / "store"
    make_sweep(path)
    code = textwrap.dedent(
        """
        import errno, os, resource, sys, runstore
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        held = []
        try:
            while True:
                held.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            pass
        try:
            runstore.open(sys.argv[1], mode="r", on_damaged="skip")
        except runstore.ResourceExhaustedError as e:
            assert isinstance(e, OSError) and e.errno == errno.EMFILE, e
            assert "out of file descriptors" in str(e), e
            print("ok")
        """
    )
    r = subprocess.run(
        [sys.executable, "-c", code, os.fspath(path)], capture_output=True, text=True, timeout=120
    )
    assert r.stdout.strip() == "ok", r.stderr


def test_the_python_commands_exit_with_the_resource_code(capsys):
    from runstore.commands import _common as _commands

    e = runstore.ResourceExhaustedError(24, "segments/w-00000001.rss: Too many open files")
    assert isinstance(e, OSError) and e.errno == 24
    assert _commands.fail_for("export tar", e, "") == _commands.EXIT_RESOURCE == 6
    assert "ResourceExhausted" in capsys.readouterr().err
