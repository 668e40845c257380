"""Memory a process gives back while it reads a large store: the pages of the store's mapped
segment files (page cache, but counted in the resident set) and what the C heap holds free."""

from __future__ import annotations

import ctypes
import functools
from typing import Any


def release_mapped_pages(store) -> None:
    """Drops the pages of the store's mapped segment files from this process's resident set
    (Snapshot::ReleasePages in the core). The mappings are read-only views of files, so nothing
    is lost: a later access reads the page again from the page cache."""
    store._core.release_pages()


@functools.cache
def _malloc_trim() -> Any:
    """glibc's malloc_trim; None where the C library has none."""
    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


def release_freed_memory() -> None:
    """Gives the memory the C heap holds free back to the system (glibc's malloc_trim). A
    scan of a series with str run ids makes a Python str per record, freed when the column is
    dropped, but the heap keeps that memory (tens of MiB for 200,000 records), counted in the
    resident set until later allocations reuse it: trimmed before a large allocation, the
    process's peak is what it holds."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
