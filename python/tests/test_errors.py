"""runstore errors arrive as the documented Python exceptions, with the C++ message."""

from __future__ import annotations

import os

import numpy as np
import pytest

import runstore


def segment_files(path):
    return sorted((path / "segments").glob("*.rss"))


def test_dtype_conflict_in_one_writer(store):
    with store.writer() as w:
        w.log(1, x=1.0)
        with pytest.raises(ValueError, match="series 'x' has dtype float64, got int64"):
            w.log(2, x=3)


def test_dtype_conflict_with_the_store(store):
    with store.writer() as w:
        w.log(1, x=1.0, arr=np.zeros(3))
    with store.writer() as w:
        with pytest.raises(ValueError, match="'x'"):
            w.log(2, x="text")
        with pytest.raises(ValueError, match="'arr'.*float64 \\[3\\]"):
            w.log(2, arr=np.zeros(4))
        with pytest.raises(ValueError, match="'arr'"):
            w.define("arr", "float64", variable_shape=True)


def test_log_many_bad_shapes(store):
    with store.writer() as w:
        with pytest.raises(ValueError, match="'x' needs a first axis of 3"):
            w.log_many([1, 2, 3], x=np.zeros(2))
        with pytest.raises(ValueError, match="3 runs but 2 steps"):
            w.log_many([1, 2, 3], steps=[0, 1], x=np.zeros(3))
        with pytest.raises(ValueError, match="'s' has 2 entries for 3 runs"):
            w.log_many([1, 2, 3], s=["a", "b"])
        with pytest.raises(ValueError, match="first axis"):
            w.log_many([1, 2, 3], x=5.0)
        with pytest.raises(TypeError, match="steps"):
            w.log_many([1, 2, 3], steps=np.array([0.5, 1, 2]), x=np.zeros(3))


def test_log_many_with_a_bad_column_appends_no_column(store):
    """A column that conflicts with its series fails the whole call: the columns before it
    are not appended, and a series it would have defined is not defined."""
    ids = [runstore.experiment_id({"x": i}) for i in range(3)]
    with store.writer() as w:
        w.log_many(ids, y=np.zeros(3))
        with pytest.raises(ValueError, match="series 'y' is fixed-shape"):
            w.log_many(ids, steps=[1, 1, 1], new=np.ones(3), state=["done"] * 3, y=np.ones((3, 2)))
        w.log_many(ids, steps=[2, 2, 2], new=np.arange(3), y=np.ones(3))  # "new" takes int64
    store.refresh()
    assert len(store.scan("y")["value"]) == 6
    assert store.scan("new")["value"].dtype == np.int64
    assert list(store.scan("new")["step"]) == [2, 2, 2]
    assert "state" not in store.series()
    with pytest.raises(KeyError):
        store.get(ids[0], "y", step=1)


def test_missing_record_and_series_raise_key_error(store):
    with store.writer() as w:
        w.log(1, x=1.0)
    store.refresh()
    with pytest.raises(KeyError, match="run 2"):
        store.get(2, "x")
    with pytest.raises(KeyError, match="step 1"):
        store.get(1, "x", step=1)
    with pytest.raises(KeyError, match="series 'nope'"):
        store.get(1, "nope")
    with pytest.raises(KeyError):
        store.scan("nope")
    with pytest.raises(KeyError):
        store.series_info("nope")
    with pytest.raises(KeyError):
        store.to_pandas(["nope"])


def test_read_only_store_refuses_writers(store_path):
    runstore.open(store_path)  # create
    ro = runstore.open(store_path, mode="r")
    assert ro.read_only
    with pytest.raises(RuntimeError, match="read-only"):
        ro.writer()


def test_open_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        runstore.open(tmp_path / "missing", mode="r")
    with pytest.raises(FileNotFoundError):
        runstore.open(tmp_path / "missing", mode="r+")
    assert not (tmp_path / "missing").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is not a directory"):
        runstore.open(tmp_path / "file")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "other").write_text("x")
    with pytest.raises(ValueError, match="not a runstore store"):
        runstore.open(tmp_path / "dir")
    with pytest.raises(ValueError, match="mode"):
        runstore.open(tmp_path / "s", mode="w")


def test_newer_format_version_is_unsupported(store_path):
    runstore.open(store_path)
    (store_path / "RUNSTORE").write_text("runstore store\nformat_version 99\n")
    with pytest.raises(runstore.UnsupportedFormatError, match="99") as e:
        runstore.open(store_path)
    assert isinstance(e.value, NotImplementedError)


def test_bad_names_and_options(store):
    with store.writer() as w:
        with pytest.raises(ValueError, match="reserved"):
            w.log(1, **{"~mine": 1.0})
        with pytest.raises(ValueError, match="longer than"):
            w.log(1, **{"n" * 300: 1.0})
        with pytest.raises(ValueError, match="empty"):
            w.put(1, "", 1.0)
    with pytest.raises(ValueError, match="writer id"):
        store.writer(writer_id="bad id!")
    with pytest.raises(ValueError, match="buffer_bytes"):
        store.writer(buffer_bytes=10)
    with pytest.raises(ValueError, match="codec"):
        store.writer(codec="gzip")


def test_closed_writer_raises_runtime_error(store):
    w = store.writer()
    w.log(1, x=1.0)
    w.close()
    assert w.closed
    w.close()  # harmless
    with pytest.raises(RuntimeError, match="closed"):
        w.log(2, x=1.0)
    with pytest.raises(RuntimeError, match="closed"):
        w.commit()


def test_two_live_writers_with_one_id_both_commit(store, store_path):
    # Both opened before either created its segment file: each claims its own file
    # (O_EXCL), the second taking the next free number, and neither fails.
    a = store.writer(writer_id="same")
    b = store.writer(writer_id="same")
    a.log(1, x=1.0)
    a.commit()
    b.log(2, x=2.0)
    b.commit()
    a.close()
    b.close()
    store.refresh()
    assert store.get(1, "x") == 1.0 and store.get(2, "x") == 2.0
    assert sorted(p.name for p in (store_path / "segments").iterdir()) == [
        "same-00000001.rss",
        "same-00000002.rss",
    ]


def flip_payload_byte(path, needle: bytes) -> None:
    data = bytearray(path.read_bytes())
    at = data.find(needle)
    assert at > 0, "payload not found in the segment"
    data[at + len(needle) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_corrupted_sealed_segment_raises_corruption_error(store_path):
    pattern = np.full(4096, 12345.678)
    with runstore.open(store_path).writer(writer_id="w1") as w:
        w.put(1, "pattern", pattern)
        w.log(1, x=1.0)
    (seg,) = segment_files(store_path)
    flip_payload_byte(seg, pattern.tobytes()[:4096])
    store = runstore.open(store_path, mode="r")
    assert store.get(1, "x") == 1.0  # the other block is intact
    with pytest.raises(runstore.CorruptionError) as e:
        store.get(1, "pattern")
    assert seg.name in str(e.value) and "offset" in str(e.value)
    assert not isinstance(e.value, (OSError, ValueError))
    with pytest.raises(runstore.CorruptionError, match=seg.name):
        store.verify()
    with pytest.raises(runstore.CorruptionError, match=seg.name):
        store.scan("pattern")


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_unwritable_store_raises_permission_error(store_path):
    runstore.open(store_path)
    os.chmod(store_path / "segments", 0o500)
    try:
        with pytest.raises(PermissionError) as e:
            runstore.open(store_path).writer()
        assert e.value.errno is not None
    finally:
        os.chmod(store_path / "segments", 0o700)


def test_io_error_carries_errno(store_path):
    """An OSError made from a runstore IOError has errno and strerror set."""
    runstore.open(store_path)
    os.rename(store_path / "segments", store_path / "moved")
    os.symlink("/proc/self/nonexistent", store_path / "segments")
    with pytest.raises((OSError, runstore.CorruptionError)) as e:
        runstore.open(store_path).writer()
    if isinstance(e.value, OSError):
        assert e.value.errno is not None


@pytest.mark.parametrize("char", ["é", "€", "𝔵"])
def test_an_over_long_name_of_multi_byte_characters_is_a_value_error(store, char):
    """The message quotes the name's first 40 bytes at most, cut between characters: a cut
    inside one raised UnicodeDecodeError instead of the ValueError."""
    name = char * (300 // len(char.encode()))
    quoted = char * (40 // len(char.encode()))
    with store.writer() as w:
        with pytest.raises(
            ValueError, match=f"is longer than the limit of 255: '{quoted}\\.\\.\\.'$"
        ):
            w.log(1, **{name: 1.0})
        with pytest.raises(ValueError, match="longer than the limit"):
            w.define(name, "float64")


def test_an_engine_message_quoting_bytes_that_are_not_utf8_still_raises_its_error(store_path):
    """Messages quote what the engine found on disk, which may be any bytes: the engine shows
    them escaped, and anything else that is not UTF-8 is decoded with replacement characters,
    so that the error is raised rather than a UnicodeDecodeError."""
    runstore.open(store_path)
    (store_path / "RUNSTORE").write_bytes(b"runstore store\nformat_version 1\xff\xfe\n")
    with pytest.raises(runstore.CorruptionError, match=r"unreadable format version '1\\xff\\xfe'"):
        runstore.open(store_path)


@pytest.mark.parametrize("mode", ["a", "r", "r+"])
def test_a_nul_in_the_store_path_is_refused_before_anything_is_created(tmp_path, mode):
    """The directory before the NUL used to be created, then reported as FileExistsError."""
    for path in [str(tmp_path / "a\0b"), tmp_path / "x" / "\0"]:
        with pytest.raises(ValueError, match="store path '.*a\\\\0b'|store path '.*x/\\\\0'") as e:
            runstore.open(path, mode=mode)
        assert "contains a NUL character" in str(e.value)
    assert list(tmp_path.iterdir()) == []
