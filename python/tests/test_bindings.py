"""The C API (include/runstore/runstore.h) and the Rust crate (bindings/rust/runstore) beside
the Python package on one store: what C and Rust write, Python reads, and the reverse.

The programs are built by scripts/test.sh before the Python tests (the C ones with the C++
build, the Rust example by cargo); run alone, a test skips when its program is not built,
unless RUNSTORE_REQUIRE_BINDINGS=1 (which scripts/test.sh sets) makes that a failure."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import runstore

ROOT = Path(__file__).resolve().parents[2]
CAPI_TEST = ROOT / "build" / "release" / "capi_test"
CAPI_READ = ROOT / "build" / "release" / "capi_interop_read"
SSEQ = ROOT / "build" / "rust" / "release" / "examples" / "sseq_matrices"


def program(path: Path) -> str:
    if not path.exists():
        if os.environ.get("RUNSTORE_REQUIRE_BINDINGS") == "1":
            pytest.fail(f"{path} was not built")
        pytest.skip(f"{path} is not built (scripts/test.sh builds it)")
    return str(path)


def qi(s: int, t: int, dim: int) -> np.ndarray:
    """The matrix the Rust example writes at (s, t): value(s, t, k) of its source."""
    k = np.arange(dim * dim, dtype=np.uint64)
    v = (np.uint64((s * 1_000_003) % 2**32) ^ np.uint64((t * 7919) % 2**32) ^ k) % 2**32
    return v.astype(np.uint32).reshape(dim, dim)


def test_python_reads_what_c_wrote(tmp_path):
    subprocess.run([program(CAPI_TEST), str(tmp_path / "c")], check=True, capture_output=True)
    store = runstore.open(tmp_path / "c" / "store", mode="r")
    assert float(store.get("exp-7", "loss", 3)) == 6.0
    assert float(store.get(1, "loss", 50)) == -1.0
    with pytest.raises(KeyError):
        store.get(1, "loss", 60)  # hidden by the C writer's resume marker
    assert store.get(1, "note") == "converged after 100 steps"
    assert store.get(1, "blob") == b"\x00\xff\x01\xfe"
    weights = np.asarray(store.array(1, "weights"))
    assert weights.shape == (512, 512) and weights.dtype == np.float64
    np.testing.assert_array_equal(weights.ravel(), np.arange(512 * 512, dtype=np.float64))
    assert float(store.get(1, "d.float32")) == 3.5 and int(store.get(1, "d.uint64")) == 64
    assert float(store.get("a\0b", "loss", 0)) == 42.0  # a run id with a NUL byte inside


def test_python_reads_what_rust_wrote(tmp_path):
    path = tmp_path / "rust"
    subprocess.run([program(SSEQ), "write", str(path), "3", "4", "64"], check=True)
    store = runstore.open(path, mode="r")
    for s in range(3):
        for t in range(4):
            np.testing.assert_array_equal(np.asarray(store.array(s, "qi", t)), qi(s, t, 64))
    assert store.series()["qi"].shape == (64, 64)


def test_c_and_rust_read_what_python_wrote(tmp_path):
    path = tmp_path / "py"
    store = runstore.open(path)
    with store.writer() as w:
        for step in range(100):
            w.log("py-1", step, loss=step / 2)
        w.log("py-1", 0, img=np.arange(20, dtype=np.float32).reshape(4, 5), label="cat")
        for s in range(3):
            for t in range(4):
                w.log(s, t, qi=qi(s, t, 64))
    out = subprocess.run([program(CAPI_READ), str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    out = subprocess.run([program(SSEQ), "read", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "mapped 12 matrices" in out.stdout and "every view zero-copy: true" in out.stdout
