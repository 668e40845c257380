"""How Python and numpy values are converted, and what is refused."""

from __future__ import annotations

import enum

import numpy as np
import pytest


def roundtrip(store, **values):
    with store.writer() as w:
        w.log(1, **values)
    store.refresh()
    return {k: store.get(1, k) for k in values}


def test_python_scalars(store):
    got = roundtrip(store, i=3, f=0.5, b=True, s="héllo", by=b"\x00\xff", ba=bytearray(b"ab"))
    assert got["i"].dtype == np.int64 and got["i"].shape == () and got["i"] == 3
    assert got["f"].dtype == np.float64 and got["f"] == 0.5
    assert got["b"].dtype == np.bool_ and bool(got["b"]) is True
    assert got["s"] == "héllo" and isinstance(got["s"], str)
    assert got["by"] == b"\x00\xff" and isinstance(got["by"], bytes)
    assert got["ba"] == b"ab" and isinstance(got["ba"], bytes)
    info = store.series()
    assert [info[k].dtype for k in ("i", "f", "b", "s", "by", "ba")] == [
        "int64",
        "float64",
        "bool",
        "string",
        "bytes",
        "bytes",
    ]


@pytest.mark.parametrize(
    "dtype",
    [
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float32",
        "float64",
    ],
)
def test_numpy_scalars_keep_their_dtype(store, dtype):
    # A numpy scalar (float64 and int64 take a fast path by exact type); not 0 or 1, so that a
    # value lost on the way shows.
    raw = True if dtype == "bool" else 7 if "int" in dtype else -0.75
    value = np.array(raw, dtype=dtype)[()]
    assert isinstance(value, np.generic)
    got = roundtrip(store, v=value, zero_d=np.array(value))
    for k in ("v", "zero_d"):
        assert got[k].dtype == np.dtype(dtype) and got[k].shape == () and got[k] == value


def test_extremes(store):
    got = roundtrip(
        store,
        imin=-(2**63),
        imax=2**63 - 1,
        umax=np.uint64(2**64 - 1),
        np_imin=np.int64(-(2**63)),
        np_fmax=np.float64(np.finfo(np.float64).max),
        nan=float("nan"),
        inf=-np.inf,
        f32=np.float32(3.5),
    )
    assert got["imin"] == -(2**63) and got["imax"] == 2**63 - 1
    assert got["umax"] == np.uint64(2**64 - 1)
    assert got["np_imin"].dtype == np.int64 and got["np_imin"] == -(2**63)
    assert got["np_fmax"].dtype == np.float64 and got["np_fmax"] == np.finfo(np.float64).max
    assert np.isnan(got["nan"]) and got["inf"] == -np.inf and got["f32"].dtype == np.float32


def test_int_subclasses_and_float_subclasses(store):
    class Color(enum.IntEnum):
        RED = 7

    class MyFloat(float):
        pass

    got = roundtrip(store, c=Color.RED, m=MyFloat(1.25))
    assert got["c"] == 7 and got["c"].dtype == np.int64
    assert got["m"] == 1.25 and got["m"].dtype == np.float64


def test_arrays_non_contiguous_big_endian_and_lists(store):
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    strided = base[:, ::2]
    fortran = np.asfortranarray(base)
    big = np.arange(5, dtype=">i4")
    got = roundtrip(
        store,
        strided=strided,
        fortran=fortran,
        big=big,
        lst=[1.0, 2.0, 3.0],
        nested=[[1, 2], [3, 4]],
        flags=[True, False],
    )
    np.testing.assert_array_equal(got["strided"], strided)
    np.testing.assert_array_equal(got["fortran"], base)
    assert got["big"].dtype == np.dtype("int32") and got["big"].dtype.isnative
    np.testing.assert_array_equal(got["big"], np.arange(5))
    assert got["lst"].dtype == np.float64 and got["nested"].shape == (2, 2)
    assert got["flags"].dtype == np.bool_


@pytest.mark.parametrize(
    "value, dtype_text",
    [
        (np.complex128(1 + 2j), "complex128"),
        (1 + 2j, "complex128"),
        (np.zeros(3, dtype=np.complex64), "complex64"),
        (np.float16(1.0), "float16"),
        (np.zeros(2, dtype=np.float16), "float16"),
        (np.datetime64("2024-01-01"), "datetime64"),
        (np.array(["2024-01-01"], dtype="datetime64[D]"), "datetime64"),
        (np.timedelta64(5, "s"), "timedelta64"),
        (np.array([object()], dtype=object), "object"),
        (np.array(["a", "b"]), "<U1"),
        (np.longdouble(1.0), "float128"),
    ],
)
def test_unsupported_dtypes_name_series_and_dtype(store, value, dtype_text):
    with store.writer() as w:
        with pytest.raises(TypeError) as e:
            w.log(1, loss=1.0, weird=value)
        assert "'weird'" in str(e.value) and dtype_text in str(e.value)
    # Nothing of the failed call was appended, not even the valid value before it.
    store.refresh()
    assert store.names() == []


@pytest.mark.parametrize("value", [None, object(), {"a": 1}])
def test_unsupported_python_types(store, value):
    with store.writer() as w, pytest.raises(TypeError, match="'x'"):
        w.log(1, x=value)


def test_int_overflow(store):
    with store.writer() as w:
        with pytest.raises(OverflowError, match="'x'"):
            w.log(1, x=2**63)
        with pytest.raises(OverflowError):
            w.log(2**64, x=1)


def test_run_ids(store):
    with store.writer() as w:
        w.log(np.int32(5), v=1)
        w.log("five", v=2)
        w.log(-3, step=np.int64(7), v=3)
        with pytest.raises(TypeError, match="run id"):
            w.log(1.5, v=1)
        with pytest.raises(TypeError, match="run id"):
            w.log(b"bytes", v=1)
        with pytest.raises(ValueError, match="run id"):
            w.log("x" * 300, v=1)
    store.refresh()
    assert store.runs() == [-3, 5, "five"]
    assert store.get(-3, "v", 7) == 3


def test_define_dtype_spellings(store):
    with store.writer() as w:
        w.define("a", "float32")
        w.define("b", np.int16)
        w.define("c", float)
        w.define("d", str)
        w.define("e", "bytes")
        w.define("f", np.dtype("u1"), shape=(2,))
        w.define("g", "string")
        with pytest.raises(TypeError, match="complex"):
            w.define("h", np.complex64)
        with pytest.raises(TypeError):
            w.define("h", "no such dtype")
        w.log(
            1, a=np.float32(1), b=np.int16(2), c=3.0, d="x", e=b"y", f=np.zeros(2, np.uint8), g="z"
        )
        with pytest.raises(ValueError, match="'a'"):
            w.log(2, a=1.0)  # float64 into a float32 series
    store.refresh()
    assert {k: v.dtype for k, v in store.series().items()} == {
        "a": "float32",
        "b": "int16",
        "c": "float64",
        "d": "string",
        "e": "bytes",
        "f": "uint8",
        "g": "string",
    }


def test_rank_limit(store):
    deep = np.arange(2.0).reshape((2,) + (1,) * 31)  # rank 32, the limit
    with store.writer() as w:
        w.log(1, deep=deep)
        w.log(2, deep=deep * 3)
        with pytest.raises(ValueError, match="rank"):
            w.log(3, deeper=np.zeros((1,) * 33))
    store.refresh()
    np.testing.assert_array_equal(store.get(2, "deep"), deep * 3)
    assert store.scan("deep")["value"].shape == (2, 2) + (1,) * 31
