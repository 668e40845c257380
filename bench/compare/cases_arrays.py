"""Workload 2, arrays: n results of `mib` MiB of float64 each (shape (rows, 1024)), written one by
one as a job returns them; workload 4, lazy: open that output and read a strided sample
(every `stride`-th row) of k randomly chosen arrays; workload 6, limit: the disk's own
sequential write speed for the same bytes.

Array i is a pool array with [0, 0] = i (see common.array_result), so no random numbers are
generated while the clock runs.
"""

from __future__ import annotations

import os

import numpy as np
from common import Clock, array_pool, array_result, array_shape, expected_array, lazy_sample

META = {
    "runstore": ("runstore, Writer.put + commit per array", "-", "commit: fdatasync, durable"),
    "runstore_async": (
        "runstore, Writer.put + commit(wait=False) per array, wait for the last",
        "-",
        "commit: fdatasync, durable; the caller does not wait for it (the sync "
        "runs beside the next array's write)",
    ),
    "runstore_uncached": (
        "runstore, Writer.put + commit per array, every large value leaving the page cache "
        "once durable (RUNSTORE_CACHED_LARGE_VALUES=0; reference)",
        "-",
        "commit: fdatasync, durable",
    ),
    "runstore_endcommit": (
        "runstore, Writer.put per array, one commit at the end (reference)",
        "-",
        "nothing durable until the end",
    ),
    "pickle_bz2": (
        "pickle + bz2 (level 9), one file per array",
        "-",
        "file closed: page cache, not fsynced",
    ),
    "npy": ("np.save, one .npy file per array", "-", "file closed: page cache, not fsynced"),
    "npy_fsync": ("np.save + fsync of file and directory (reference)", "-", "fsync: durable"),
    "h5py": (
        "h5py, one dataset per array in one file, flush after each",
        "-",
        "File.flush(): page cache, not fsynced",
    ),
    "zarr": (
        "zarr v3, one array per result in a group (default zstd codec)",
        "-",
        "create_array returned: page cache, not fsynced",
    ),
}

LAZY_META = {
    "runstore": (
        "runstore: Store.array, a[::stride] (reads and checks the 4 KiB chunks the "
        "rows reach; a zero-copy view of the mapped segment)"
    ),
    "runstore_uncached": (
        "runstore as above, written with every large value leaving the page cache once durable"
    ),
    "npy": ("np.load(mmap_mode='r'), a[::stride]"),
    "h5py": ("h5py: dataset[::stride] (hyperslab read)"),
    "zarr": ("zarr: array[::stride] (reads and decodes whole chunks)"),
    "pickle_bz2": ("pickle + bz2: decompress and unpickle the whole array, then a[::stride]"),
}


def _name(i: int) -> str:
    return f"result_{i:04d}"


# -- writers -----------------------------------------------------------------------------------


def runstore_w(path, p, progress, end="commit", cached=None):
    """end: "commit" (waited), "async" (commit(wait=False); progress counts the arrays whose
    commits durable_ticket says are durable; the last is waited for) or None (one commit when
    the with-block closes the writer). cached: the bytes of durable large values this process
    keeps in the page cache (RUNSTORE_CACHED_LARGE_VALUES; None: runstore's default)."""
    if cached is not None:
        os.environ["RUNSTORE_CACHED_LARGE_VALUES"] = str(cached)
    import runstore

    pool = array_pool(p["seed"], p["mib"])
    commit_s = 0.0
    clock = Clock()
    store = runstore.open(os.path.join(path, "store"))
    with store.writer() as w:
        pending = []  # async: (ticket, arrays committed with it), oldest first
        for i in range(p["n"]):
            w.put(i, "result", array_result(pool, i))
            c = Clock()
            if end == "commit":
                w.commit()
                progress(i + 1)
            elif end == "async":
                pending.append((w.commit(wait=False), i + 1))
                if i + 1 == p["n"]:
                    w.wait_for_commit(pending[-1][0])
                durable = w.durable_ticket
                while pending and pending[0][0] <= durable:
                    progress(pending.pop(0)[1])
            commit_s += c.seconds()
        stats = w.stats()
    return {
        "seconds": clock.seconds(),
        "commit_seconds": commit_s,
        "backpressure_seconds": stats["backpressure_seconds"],
    }


def pickle_bz2_w(path, p, progress):
    import bz2
    import pickle

    pool = array_pool(p["seed"], p["mib"])
    clock = Clock()
    for i in range(p["n"]):
        data = bz2.compress(
            pickle.dumps(array_result(pool, i), protocol=pickle.HIGHEST_PROTOCOL), 9
        )
        with open(os.path.join(path, _name(i) + ".pkl.bz2"), "wb") as f:
            f.write(data)
        progress(i + 1)
    return {"seconds": clock.seconds()}


def npy_w(path, p, progress):
    pool = array_pool(p["seed"], p["mib"])
    clock = Clock()
    for i in range(p["n"]):
        np.save(os.path.join(path, _name(i) + ".npy"), array_result(pool, i))
        progress(i + 1)
    return {"seconds": clock.seconds()}


def npy_fsync_w(path, p, progress):
    pool = array_pool(p["seed"], p["mib"])
    clock = Clock()
    dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    for i in range(p["n"]):
        with open(os.path.join(path, _name(i) + ".npy"), "wb") as f:
            np.save(f, array_result(pool, i))
            f.flush()
            os.fsync(f.fileno())
        os.fsync(dfd)
        progress(i + 1)
    os.close(dfd)
    return {"seconds": clock.seconds()}


def h5py_w(path, p, progress):
    import h5py

    pool = array_pool(p["seed"], p["mib"])
    clock = Clock()
    with h5py.File(os.path.join(path, "arrays.h5"), "w") as f:
        for i in range(p["n"]):
            f.create_dataset(_name(i), data=array_result(pool, i))
            f.flush()
            progress(i + 1)
    return {"seconds": clock.seconds()}


def zarr_w(path, p, progress):
    import zarr

    pool = array_pool(p["seed"], p["mib"])
    clock = Clock()
    root = zarr.open_group(os.path.join(path, "arrays.zarr"), mode="w")
    for i in range(p["n"]):
        root.create_array(_name(i), data=array_result(pool, i))
        progress(i + 1)
    return {"seconds": clock.seconds()}


WRITERS = {
    "runstore": runstore_w,
    "runstore_async": lambda path, p, progress: runstore_w(path, p, progress, end="async"),
    "runstore_uncached": lambda path, p, progress: runstore_w(path, p, progress, cached=0),
    "runstore_endcommit": lambda path, p, progress: runstore_w(path, p, progress, end=None),
    "pickle_bz2": pickle_bz2_w,
    "npy": npy_w,
    "npy_fsync": npy_fsync_w,
    "h5py": h5py_w,
    "zarr": zarr_w,
}

# -- readers: one array at a time, by index (None when it cannot be read) --------------------


def _opener(tool, path):
    """Returns (get(i) -> array or raises, close()). Opening errors propagate."""
    if tool.startswith("runstore"):
        import runstore

        store = runstore.open(os.path.join(path, "store"), "r")
        # Store.array: like h5py's and zarr's arrays, indexing reads (and checks) what the
        # index reaches.
        return (lambda i: store.array(i, "result")), (lambda: None)
    if tool in ("npy", "npy_fsync"):
        return (lambda i: np.load(os.path.join(path, _name(i) + ".npy"), mmap_mode="r")), (
            lambda: None
        )
    if tool == "pickle_bz2":
        import bz2
        import pickle

        def get(i):
            with open(os.path.join(path, _name(i) + ".pkl.bz2"), "rb") as f:
                return pickle.loads(bz2.decompress(f.read()))

        return get, (lambda: None)
    if tool == "h5py":
        import h5py

        f = h5py.File(os.path.join(path, "arrays.h5"), "r")
        return (lambda i: f[_name(i)]), f.close
    if tool == "zarr":
        import zarr

        root = zarr.open_group(os.path.join(path, "arrays.zarr"), mode="r")
        return (lambda i: root[_name(i)]), (lambda: None)
    raise KeyError(tool)


def readback(tool):
    def fn(path, p):
        pool = array_pool(p["seed"], p["mib"])
        shape = array_shape(p["mib"])
        get, close = _opener(tool, path)
        good, wrong, errors = 0, 0, []
        for i in range(p["n"]):
            try:
                a = np.asarray(get(i)[...])
                if a.shape == shape and np.array_equal(a, expected_array(pool, i)):
                    good += 1
                else:
                    wrong += 1
                    errors.append(f"{i}: wrong content")
            except Exception as e:  # noqa: BLE001 - a missing or damaged result
                errors.append(f"{i}: {type(e).__name__}")
        close()
        return {"opens": True, "read_back": good, "wrong": wrong, "errors": errors[:3]}

    return fn


READBACK = {tool: readback(tool) for tool in WRITERS}


def lazy(tool, path, p, cold: bool) -> dict:
    """Open the output of `tool` and sum a strided sample (every stride-th row) of k arrays."""
    from common import drop_caches

    sample = lazy_sample(p["n"], p["k"], p["seed"])
    stride = p["stride"]
    # Import the tool's modules first: the clock and the cold cache are for the data only.
    if tool.startswith("runstore"):
        import runstore  # noqa: F401
    elif tool == "h5py":
        import h5py  # noqa: F401
    elif tool == "zarr":
        import zarr
        import zarr.storage  # noqa: F401
    elif tool == "pickle_bz2":
        import bz2  # noqa: F401
        import pickle  # noqa: F401
    dropped = drop_caches() if cold else False
    io0 = _read_bytes()
    clock = Clock()
    get, close = _opener(tool, path)
    total = 0.0
    for i in sample:
        a = get(i)
        total += float(np.asarray(a[::stride]).sum())
    close()
    seconds = clock.seconds()
    return {
        "seconds": seconds,
        "total": total,
        "cold": dropped,
        "disk_read_bytes": _read_bytes() - io0,
    }


def _read_bytes() -> int:
    """Bytes this process caused to be read from the block device (page-cache misses, including
    those of page faults on mapped files): /proc/self/io read_bytes."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def lazy_expected(p) -> float:
    pool = array_pool(p["seed"], p["mib"])
    total = 0.0
    for i in lazy_sample(p["n"], p["k"], p["seed"]):
        total += float(expected_array(pool, i)[:: p["stride"]].sum())
    return total


# -- the disk's limit --------------------------------------------------------------------------


def _sync_file_range():
    """libc's sync_file_range(fd, offset, nbytes, flags), or None where there is none."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


SYNC_FILE_RANGE_WRITE = 2
WINDOW = 1 << 20


def limit(path, p, progress):
    """Writes the arrays workload's bytes (n chunks of `mib` MiB) sequentially to a new file,
    with an fdatasync after every chunk (p["mode"] == "each": the durability the workload asks
    for) or one fdatasync at the end ("end": the disk's streaming rate). Modes "each_windowed"
    and "end_windowed" write the same bytes 1 MiB at a time and start the writeback of each
    MiB at once (sync_file_range), so that the disk writes while the next MiB is copied: on
    this VM the faster way to the same durable bytes, and what runstore's writer does. One pass
    per process, started like any case, so that it meets the same page cache and the same
    memory as a case (on this VM, memory freed for a few seconds is handed back to the host,
    and touching it again is slow: a second pass in the same process would be faster than any
    case)."""
    pool = array_pool(p["seed"], p["mib"])
    nbytes = p["n"] * array_shape(p["mib"])[0] * 1024 * 8
    mode = p.get("mode", "each")
    file = os.path.join(path, f"limit_{mode}.bin")
    clock = Clock()
    sfr = _sync_file_range() if mode.endswith("_windowed") else None
    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    offset = 0
    for i in range(p["n"]):
        data = memoryview(pool[i % len(pool)]).cast("B")
        if sfr is None:
            os.write(fd, data)
        else:
            for at in range(0, len(data), WINDOW):
                n = os.write(fd, data[at : at + WINDOW])
                sfr(fd, offset, n, SYNC_FILE_RANGE_WRITE)
                offset += n
        if mode.startswith("each"):
            os.fdatasync(fd)
    os.fdatasync(fd)
    os.close(fd)
    dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(dfd)
    os.close(dfd)
    seconds = clock.seconds()
    return {"bytes": nbytes, "seconds": seconds, f"mbps_{mode}": nbytes / seconds / 1e6}


def payload_bytes(p) -> int:
    return p["n"] * array_shape(p["mib"])[0] * 1024 * 8
