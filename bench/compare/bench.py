#!/usr/bin/env python3
"""runstore against the tools its users use today, on the workloads that hurt them.

Runs each case of each workload in a process of its own, measures wall time, peak RSS of the
process tree and bytes on disk, repeats, kills writers part way to see what survives, and
writes docs/benchmarks.md with a table and a chart per workload. Use bench/compare/run.sh,
which installs what this needs into the project's .venv first; this file is also the entry
point of every case process (--child, --readback, --lazy, --writer).

Workloads (see docs/benchmarks.md for what each case does):
  sweep       N experiments x (5 float params, 3 outcomes, a float64 series), commit every 1,000
  arrays      N results of M MiB float64, each written (and committed) as it is returned
  lazy        open the arrays output, read every S-th row of K random arrays (cold page cache)
  concurrent  W writer processes x R rows (run, step, value), a durable commit every 1,000
  crash       SIGKILL a writer of each workload part way; count what reads back
  limit       write + fdatasync of the arrays workload's bytes: what the disk allows
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import common  # noqa: E402

WORKLOADS = ("sweep", "arrays", "lazy", "concurrent", "crash", "limit")
# The ways the disk's limit is measured (cases_arrays.limit).
LIMIT_MODES = ("each", "end", "each_windowed", "end_windowed")


def _modules():
    import cases_arrays
    import cases_concurrent
    import cases_sweep

    return {"sweep": cases_sweep, "arrays": cases_arrays, "concurrent": cases_concurrent}


# ==============================================================================================
# child modes
# ==============================================================================================


def child_main(args) -> int:
    params = json.loads(args.params)
    mods = _modules()
    if args.child:
        workload, tool = args.child.split(".", 1)
        if workload == "limit":
            fn = mods["arrays"].limit
        else:
            fn = mods[workload].WRITERS[tool]
        progress = common.Progress(args.progress_fd)
        res = fn(args.path, params, progress)
        res["peak_rss_mib"] = common.vm_hwm_mib()
    elif args.readback:
        workload, tool = args.readback.split(".", 1)
        try:
            res = mods[workload].READBACK[tool](args.path, params)
        except Exception as e:  # noqa: BLE001 - the output does not open (or not at all)
            res = {"opens": False, "read_back": 0, "error": f"{type(e).__name__}: {e}"[:300]}
    elif args.lazy:
        m = mods["arrays"]
        res = m.lazy(args.lazy, args.path, params, cold=not params.get("warm", False))
        res["peak_rss_mib"] = common.vm_hwm_mib()
        if args.lazy != "pickle_bz2":  # CPU-bound (bz2): warm is the same as cold; saves ~15 s
            warm = m.lazy(args.lazy, args.path, params, cold=False)
            res["warm_seconds"] = warm["seconds"]
    else:
        raise SystemExit("no child mode")
    common.write_json(args.out, res)
    return 0


# ==============================================================================================
# the driver
# ==============================================================================================


class Runner:
    """Starts case processes, measures them, and cleans up after them."""

    def __init__(self, args, root: str, log):
        self.args = args
        self.root = root
        self.log = log
        self.seq = 0

    def casedir(self, tag: str) -> str:
        self.seq += 1
        d = os.path.join(self.root, f"{self.seq:04d}-{tag.replace('/', '_').replace('@', '_')}")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        return d

    def _cmd(self, mode: str, what: str, path: str, params: dict, out: str, extra=()) -> list[str]:
        return [
            sys.executable,
            os.path.join(HERE, "bench.py"),
            mode,
            what,
            "--path",
            path,
            "--params",
            json.dumps(params),
            "--out",
            out,
            *extra,
        ]

    def run(
        self,
        mode: str,
        what: str,
        path: str,
        params: dict,
        *,
        timeout: float | None = None,
        progress_fd_pass: int | None = None,
        on_start=None,
    ) -> dict:
        """Runs one case process; returns its JSON result plus the driver's measurements:
        wall_seconds (the whole process), tree_peak_rss_mib (the sum of RSS over the process and
        its descendants, sampled every 10 ms), ru_maxrss_mib (wait4: the largest single
        process's peak, exact)."""
        import psutil

        out = path.rstrip("/") + ".result.json"
        if os.path.exists(out):
            os.remove(out)
        extra = ["--progress-fd", str(progress_fd_pass)] if progress_fd_pass is not None else []
        cmd = self._cmd(mode, what, path, params, out, extra)
        errf = open(path.rstrip("/") + ".stderr", "w+")
        t0 = time.perf_counter()
        p = subprocess.Popen(
            cmd,
            stdout=errf,
            stderr=errf,
            pass_fds=(progress_fd_pass,) if progress_fd_pass is not None else (),
        )
        peak = [0]
        stop = threading.Event()

        def poll():
            try:
                proc = psutil.Process(p.pid)
            except psutil.NoSuchProcess:
                return
            while not stop.is_set():
                total = 0
                try:
                    procs = [proc] + proc.children(recursive=True)
                except psutil.NoSuchProcess:
                    break
                for q in procs:
                    try:
                        total += q.memory_info().rss
                    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                        pass
                peak[0] = max(peak[0], total)
                stop.wait(0.01)

        th = threading.Thread(target=poll, daemon=True)
        th.start()
        if on_start:
            on_start(p)
        deadline = None if timeout is None else time.monotonic() + timeout
        status = ru = None
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                break
            if deadline is not None and time.monotonic() > deadline:
                _kill_tree(p.pid)
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.005)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        stop.set()
        th.join()
        errf.seek(0)
        stderr = errf.read()
        errf.close()
        res = {}
        if os.path.exists(out):
            with open(out) as f:
                res = json.load(f)
        res["returncode"] = p.returncode
        res["wall_seconds"] = wall
        res["tree_peak_rss_mib"] = peak[0] / 2**20
        res["ru_maxrss_mib"] = ru.ru_maxrss / 1024  # includes the forked driver's RSS: unused
        if p.returncode != 0 and p.returncode != -signal.SIGKILL:
            res["error"] = (
                stderr.strip().splitlines()[-1][:400] if stderr.strip() else f"exit {p.returncode}"
            )
            self.log(
                f"    ! {mode} {what} failed (exit {p.returncode}):\n"
                + "\n".join("      " + x for x in stderr.strip().splitlines()[-15:])
            )
        return res


def _kill_tree(pid: int) -> None:
    import psutil

    try:
        parent = psutil.Process(pid)
        for c in parent.children(recursive=True):
            try:
                c.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        parent.send_signal(signal.SIGKILL)
    except psutil.NoSuchProcess:
        pass


def _sync_and_remove(path: str) -> None:
    """Syncs, deletes a case's data, and syncs again, so that neither the writeback of its data
    nor the journal commit of its deletion (with discards, on this mount) lands in the next case."""
    os.sync()
    shutil.rmtree(path, ignore_errors=True)
    os.sync()
    for suffix in (".result.json", ".stderr"):
        try:
            os.remove(path.rstrip("/") + suffix)
        except FileNotFoundError:
            pass


# -- workload parameters -----------------------------------------------------------------------


def workload_params(args) -> dict:
    return {
        "sweep": {
            "n": args.sweep_n,
            "batch": args.sweep_batch,
            "trace_len": args.trace_len,
            "seed": args.seed,
        },
        "arrays": {"n": args.arrays_n, "mib": args.arrays_mib, "seed": args.seed},
        "lazy": {
            "n": args.arrays_n,
            "mib": args.arrays_mib,
            "seed": args.seed,
            "k": args.lazy_k,
            "stride": args.lazy_stride,
            "warm": args.no_drop_caches,
        },
        "concurrent": {
            "rows": args.conc_rows,
            "batch": args.conc_batch,
            "timeout": args.conc_timeout,
        },
    }


def expected_count(workload: str, p: dict) -> int:
    if workload == "sweep":
        return p["n"]
    if workload == "arrays":
        return p["n"]
    if workload == "concurrent":
        return p["writers"] * p["rows"]
    raise KeyError(workload)


# -- timed runs --------------------------------------------------------------------------------


def timed_runs(args, runner: Runner, results: dict, log) -> None:
    mods = _modules()
    wp = workload_params(args)
    want = set(args.workloads)
    tools_filter = set(args.tools.split(",")) if args.tools else None

    def keep(tool):
        return tools_filter is None or tool in tools_filter or tool.startswith("runstore")

    def record(workload, case, res):
        results.setdefault(workload, {}).setdefault(case, []).append(res)
        common.write_json(
            os.path.join(os.path.dirname(runner.root), "partial-results.json"), results
        )

    def describe(res):
        keys = (
            "seconds",
            "tree_peak_rss_mib",
            "peak_rss_mib",
            "disk_bytes",
            "wait_seconds",
            "warm_seconds",
            "after_write_seconds",
            "disk_read_bytes",
            "mbps_each",
            "mbps_end",
            "mbps_each_windowed",
            "mbps_end_windowed",
            "read_back",
            "error",
        )
        parts = []
        for k in keys:
            if k in res:
                v = res[k]
                parts.append(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}")
        return " ".join(parts)

    def write_case(workload, tool, params, rep, verify, timeout=None, after_write=None):
        """after_write: the lazy workload's parameters, to read the output as soon as the writer
        has exited, from what the page cache kept of its writes (before the read-back check,
        which would read it all)."""
        d = runner.casedir(f"{workload}-{tool}")
        res = runner.run(
            "--child", f"{workload}.{tool}", d, params, timeout=timeout or args.case_timeout
        )
        os.sync()
        if after_write is not None and res.get("returncode") == 0:
            lz = runner.run(
                "--lazy", tool, d, dict(after_write, warm=True), timeout=args.case_timeout
            )
            res["after_write"] = {k: lz.get(k) for k in ("seconds", "disk_read_bytes", "total")}
        res["disk_bytes"], res["apparent_bytes"] = common.du_bytes(d)
        if verify and res.get("returncode") == 0:
            rb = runner.run(
                "--readback", f"{workload}.{tool}", d, params, timeout=args.case_timeout
            )
            res["read_back"] = rb.get("read_back", 0)
            res["expected"] = expected_count(workload, params)
            if rb.get("error"):
                res["readback_error"] = rb["error"]
            if res["read_back"] != res["expected"]:
                log(f"    ! {workload} {tool}: read back {res['read_back']} of {res['expected']}")
        return d, res

    for rep in range(args.repeat):
        verify = rep == 0 and not args.no_verify
        log(f"== repetition {rep + 1}/{args.repeat} (load average {os.getloadavg()[0]:.2f})")

        # limit (runs first and last in each repetition, around the arrays workload)
        def limit_run(tag, rep=rep):
            res = {"when": tag}
            modes = LIMIT_MODES if rep % 2 == 0 else LIMIT_MODES[::-1]
            for mode in modes:  # one process per way, like any case
                d = runner.casedir(f"limit-{mode}")
                r = runner.run(
                    "--child",
                    "limit.disk",
                    d,
                    dict(wp["arrays"], mode=mode),
                    timeout=args.case_timeout,
                )
                res[f"mbps_{mode}"] = r.get(f"mbps_{mode}", float("nan"))
                res[f"seconds_{mode}"] = r.get("seconds", float("nan"))
                res["peak_rss_mib"] = r.get("peak_rss_mib")
                if r.get("error"):
                    res["error"] = r["error"]
                _sync_and_remove(d)
            log(f"  limit ({tag}): {describe(res)}")
            record("limit", "disk", res)

        if "sweep" in want:
            # runstore_one, runstore_batch(_flush) and h5py_batch (the close targets) back to
            # back, in alternating order; then the rest, rotated
            close = [
                t
                for t in (
                    "h5py_batch",
                    "runstore_batch",
                    "runstore_batch_async",
                    "runstore_batch_flush",
                    "runstore_one",
                    "h5py_batch_fsync",
                )
                if keep(t)
            ]
            rest = [t for t in mods["sweep"].WRITERS if keep(t) and t not in close]
            close = close if rep % 2 == 0 else close[::-1]
            rest = rest[rep % len(rest) :] + rest[: rep % len(rest)]
            tools = close + rest
            for tool in tools:
                d, res = write_case("sweep", tool, wp["sweep"], rep, verify)
                log(f"  sweep/{tool}: {describe(res)}")
                record("sweep", tool, res)
                _sync_and_remove(d)

        if "limit" in want and not ("arrays" in want or "lazy" in want):
            limit_run("alone")
        if "arrays" in want or "lazy" in want:
            tools = [t for t in mods["arrays"].WRITERS if keep(t)]
            if "arrays" not in want:  # only what the lazy readers need
                tools = [t for t in tools if t in mods["arrays"].LAZY_META]
            # runstore_async runs right after runstore, both between the same two limit runs
            paired = "runstore_async" if "runstore" in tools and "runstore_async" in tools else None
            tools = [t for t in tools if t != paired]
            tools = tools[rep % len(tools) :] + tools[: rep % len(tools)]
            outputs = []  # (tool, directory) kept for the lazy readers
            after_write = {}  # tool -> its lazy read right after its writer exited
            for tool in tools:
                if tool == "runstore":  # the disk's limit right before and after runstore's cases
                    limit_run("before runstore")
                for case in [tool] + ([paired] if tool == "runstore" and paired else []):
                    lazy_case = "lazy" in want and case in mods["arrays"].LAZY_META
                    d, res = write_case(
                        "arrays",
                        case,
                        wp["arrays"],
                        rep,
                        verify,
                        after_write=wp["lazy"] if lazy_case else None,
                    )
                    after_write[case] = res.pop("after_write", None)
                    log(f"  arrays/{case}: {describe(res)}")
                    if "arrays" in want:
                        record("arrays", case, res)
                    if (
                        "lazy" in want
                        and case in mods["arrays"].LAZY_META
                        and res.get("returncode") == 0
                    ):
                        os.sync()
                        outputs.append((case, d))
                    else:
                        _sync_and_remove(d)
                if tool == "runstore":
                    limit_run("after runstore")
            # The lazy readers run back to back once every output is written, in the writers'
            # rotating order, so that none of them reads while the disk still absorbs a write
            # that happened just before it (the arrays cases and the limit runs write GiBs).
            for tool, d in outputs:
                lz = runner.run("--lazy", tool, d, wp["lazy"], timeout=args.case_timeout)
                exp = _lazy_expected(wp["lazy"])
                lz["correct"] = abs(lz.get("total", float("nan")) - exp) <= 1e-9 * max(
                    1.0, abs(exp)
                )
                aw = after_write.get(tool)
                if aw is not None:
                    lz["after_write_seconds"] = aw["seconds"]
                    lz["after_write_disk_read_bytes"] = aw["disk_read_bytes"]
                    lz["correct"] = lz["correct"] and abs(
                        aw.get("total", float("nan")) - exp
                    ) <= 1e-9 * max(1.0, abs(exp))
                if not lz["correct"]:
                    log(f"    ! lazy/{tool}: sum {lz.get('total')} != expected {exp}")
                log(f"  lazy/{tool}: {describe(lz)} cold={lz.get('cold')}")
                record("lazy", tool, lz)
            for _, d in outputs:
                _sync_and_remove(d)

        if "concurrent" in want:
            tools = [t for t in mods["concurrent"].WRITERS if keep(t)]
            for nw in args.conc_writers:
                order = tools[rep % len(tools) :] + tools[: rep % len(tools)]
                for tool in order:
                    p = dict(wp["concurrent"], writers=nw)
                    d, res = write_case(
                        "concurrent", tool, p, rep, verify, timeout=args.conc_timeout + 600
                    )
                    res["writers"] = nw
                    log(f"  concurrent/{tool}@{nw}: {describe(res)}")
                    record("concurrent", f"{tool}@{nw}", res)
                    _sync_and_remove(d)


_LAZY_EXPECTED = {}


def _lazy_expected(p):
    key = json.dumps(p, sort_keys=True)
    if key not in _LAZY_EXPECTED:
        _LAZY_EXPECTED[key] = _modules()["arrays"].lazy_expected(p)
    return _LAZY_EXPECTED[key]


# -- crash runs --------------------------------------------------------------------------------


def crash_runs(args, runner: Runner, results: dict, log) -> None:
    mods = _modules()
    wp = workload_params(args)
    rng = random.Random(args.seed)
    tools_filter = set(args.tools.split(",")) if args.tools else None

    def keep(tool):
        return tools_filter is None or tool in tools_filter or tool.startswith("runstore")

    plans = []
    sp = dict(wp["sweep"], n=min(args.sweep_n, args.crash_sweep_n))
    for tool in mods["sweep"].WRITERS:
        if keep(tool) and tool != "h5py_batch_fsync" and not tool.endswith("_endcommit"):
            plans.append(("sweep", tool, sp, -(-sp["n"] // sp["batch"])))
    ap = wp["arrays"]
    for tool in mods["arrays"].WRITERS:
        if keep(tool) and not tool.endswith("_endcommit"):
            plans.append(("arrays", tool, ap, ap["n"]))
    cp = dict(
        wp["concurrent"], writers=args.crash_writers, rows=min(args.conc_rows, args.crash_rows)
    )
    for tool in mods["concurrent"].WRITERS:
        if keep(tool):
            plans.append(("concurrent", tool, cp, -(-cp["rows"] // cp["batch"])))

    for run_i in range(args.crash_runs):
        for workload, tool, p, reports in plans:
            if workload == "arrays":  # pickle + bz2 takes 1-2 s per array: kill early
                lo, hi = 2, max(2, reports // 6)
            else:
                lo, hi = max(1, reports // 8), max(1, reports // 2)
            k_target = rng.randint(lo, hi)
            d = runner.casedir(f"crash-{workload}-{tool}")
            if workload == "concurrent":
                cp2 = dict(
                    p, kill_writer_after=k_target * p["batch"], kill_seed=rng.randrange(1 << 30)
                )
                res = runner.run(
                    "--child", f"crash_concurrent.{tool}", d, cp2, timeout=args.case_timeout
                )
                committed = res.get("committed_rows", [])
                rb = runner.run("--readback", f"concurrent.{tool}", d, p, timeout=args.case_timeout)
                per = rb.get("per_writer", [])
                entry = {
                    "opens": rb.get("opens", False),
                    "committed": sum(committed),
                    "read_back": rb.get("read_back", 0),
                    "wrong": int(rb.get("wrong", 0)),
                    "killed_committed": committed[0] if committed else None,
                    "killed_read_back": per[0] if per else None,
                    "others_ok": bool(per)
                    and all(per[i] >= committed[i] for i in range(1, len(per))),
                    "error": rb.get("error") or res.get("error"),
                }
                entry["ok"] = (
                    entry["opens"]
                    and bool(per)
                    and all(per[i] >= committed[i] for i in range(len(per)))
                )
            else:
                entry = _crash_one(runner, workload, tool, d, p, k_target, rng)
                tries = 1
                while not entry["killed"] and tries < 4:  # finished before the kill: kill sooner
                    tries += 1
                    k_target = max(1, k_target // 2)
                    _sync_and_remove(d)
                    d = runner.casedir(f"crash-{workload}-{tool}")
                    entry = _crash_one(runner, workload, tool, d, p, k_target, rng, delay=tries < 3)
            entry["k_target"] = k_target
            entry["run"] = run_i
            log(
                f"  crash {workload}/{tool} #{run_i + 1}: opens={entry['opens']} "
                f"committed={entry['committed']} read_back={entry['read_back']} ok={entry['ok']}"
                + (f" error={entry['error']}" if entry.get("error") else "")
            )
            results.setdefault("crash", {}).setdefault(f"{workload}/{tool}", []).append(entry)
            _sync_and_remove(d)


def _crash_one(runner, workload, tool, d, p, k_target, rng, delay=True) -> dict:
    """Starts a writer, SIGKILLs it after k_target reports (+ a random part of a batch), then
    reads the output back in a fresh process."""
    r_fd, w_fd = os.pipe()
    state = {
        "committed": 0,
        "produced": None,
        "events": 0,
        "killed": False,
        "last": time.monotonic(),
        "gap": 0.05,
    }

    def watch(proc):
        os.close(w_fd)
        buf = b""
        while True:
            chunk = os.read(r_fd, 4096)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                now = time.monotonic()
                state["gap"] = now - state["last"]
                state["last"] = now
                if line.startswith(b"P"):
                    state["produced"] = int(line[1:])
                else:
                    state["committed"] = int(line)
                state["events"] += 1
                if not state["killed"] and state["events"] >= k_target:
                    # land the kill somewhere inside the next batch
                    if delay:
                        time.sleep(rng.uniform(0, min(state["gap"], 2.0)))
                    try:
                        os.kill(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    state["killed"] = True
        os.close(r_fd)

    holder = {}

    def on_start(proc):
        t = threading.Thread(target=watch, args=(proc,), daemon=True)
        t.start()
        holder["t"] = t

    res = runner.run(
        "--child",
        f"{workload}.{tool}",
        d,
        p,
        progress_fd_pass=w_fd,
        on_start=on_start,
        timeout=runner.args.case_timeout,
    )
    holder["t"].join(10)
    rb = runner.run("--readback", f"{workload}.{tool}", d, p, timeout=runner.args.case_timeout)
    entry = {
        "opens": bool(rb.get("opens")),
        "committed": state["committed"],
        "read_back": int(rb.get("read_back", 0)),
        "wrong": int(rb.get("wrong", 0)),
        "killed": res.get("returncode") == -signal.SIGKILL,
        "produced": state["produced"],
        "error": rb.get("error") or (", ".join(rb["errors"]) if rb.get("errors") else None),
    }
    if not entry["killed"]:
        entry["error"] = "finished before the kill" + (
            f"; {entry['error']}" if entry["error"] else ""
        )
    # A tool keeps its promise when it reads back everything it had committed (flushed); an
    # output that does not open keeps it only when nothing had been committed.
    entry["ok"] = entry["read_back"] >= entry["committed"] and (
        entry["opens"] or entry["committed"] == 0
    )
    return entry


# -- machine description -----------------------------------------------------------------------


def machine_info(root: str) -> dict:
    info = {
        "date": _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["mem_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    info["bench_dir"] = root
    info["fs"] = common.fs_type(root)
    st = os.statvfs(root)
    info["free_gib"] = round(st.f_bavail * st.f_frsize / 2**30, 1)
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    info["os"] = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    versions = {}
    for mod in ("numpy", "h5py", "zarr", "numcodecs", "pandas", "matplotlib", "psutil", "runstore"):
        try:
            m = __import__(mod)
            versions[mod] = getattr(m, "__version__", "?")
        except Exception:  # noqa: BLE001
            versions[mod] = "missing"
    try:
        import h5py

        versions["HDF5"] = h5py.version.hdf5_version
    except Exception:  # noqa: BLE001
        pass
    import sqlite3

    versions["sqlite"] = sqlite3.sqlite_version
    info["versions"] = versions
    try:
        rev = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        info["git"] = rev + (" (with uncommitted changes)" if dirty else "")
    except Exception:  # noqa: BLE001
        info["git"] = "?"
    return info


# ==============================================================================================


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--workloads",
        default=",".join(WORKLOADS),
        help="comma-separated subset of " + ",".join(WORKLOADS) + " (default: all)",
    )
    ap.add_argument(
        "--tools",
        default=None,
        help="only these peers (comma-separated tool names, e.g. h5py_one,sqlite_full); "
        "runstore cases always run",
    )
    ap.add_argument(
        "--repeat", type=int, default=3, help="runs of each case; medians are reported (3)"
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="small sizes and one repetition: a smoke run of every case (~2 minutes)",
    )
    ap.add_argument(
        "--dir",
        default="/var/tmp/runstore-bench",
        help="where the data goes; must be a real disk, not tmpfs (/var/tmp/runstore-bench)",
    )
    ap.add_argument(
        "--report",
        default=None,
        help="markdown report to write (default docs/benchmarks.md; with --quick, "
        "<dir>/quick/benchmarks.md)",
    )
    ap.add_argument(
        "--json",
        default=None,
        help="raw results (default: img/<report name>.json beside the report)",
    )
    ap.add_argument(
        "--from-json", default=None, help="do not run: rewrite the report from this file"
    )
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument(
        "--no-verify",
        action="store_true",
        help="skip reading back every output of the first repetition",
    )
    ap.add_argument(
        "--no-drop-caches",
        action="store_true",
        help="lazy: do not drop the page cache before reading (warm-cache figures)",
    )
    ap.add_argument("--case-timeout", type=float, default=1200.0, help="seconds per case process")
    g = ap.add_argument_group("workload sizes")
    g.add_argument("--sweep-n", type=int, default=200_000)
    g.add_argument("--sweep-batch", type=int, default=1000)
    g.add_argument("--trace-len", type=int, default=100)
    g.add_argument("--arrays-n", type=int, default=64)
    g.add_argument("--arrays-mib", type=float, default=8.0)
    g.add_argument("--lazy-k", type=int, default=16)
    g.add_argument("--lazy-stride", type=int, default=16)
    g.add_argument("--conc-writers", default="8,32")
    g.add_argument("--conc-rows", type=int, default=50_000)
    g.add_argument("--conc-batch", type=int, default=1000)
    g.add_argument(
        "--conc-timeout",
        type=float,
        default=600.0,
        help="a concurrent case still running after this many seconds is stopped and "
        "reported as such",
    )
    g.add_argument("--crash-runs", type=int, default=3, help="kills per tool and workload (3)")
    g.add_argument(
        "--crash-sweep-n", type=int, default=20_000, help="experiments of a crash run's sweep"
    )
    g.add_argument("--crash-writers", type=int, default=8)
    g.add_argument("--crash-rows", type=int, default=20_000)
    # child modes
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--readback", help=argparse.SUPPRESS)
    ap.add_argument("--lazy", help=argparse.SUPPRESS)
    ap.add_argument("--writer", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--params", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--progress-fd", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--index", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--rows", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        defaults = {
            "sweep_n": 10_000,
            "arrays_n": 16,
            "arrays_mib": 2.0,
            "lazy_k": 4,
            "conc_writers": "2,4",
            "conc_rows": 5_000,
            "crash_runs": 1,
            "crash_sweep_n": 5_000,
            "crash_writers": 2,
            "crash_rows": 5_000,
            "conc_timeout": 120.0,
        }
        for k, v in defaults.items():
            if getattr(args, k) == ap.get_default(k):
                setattr(args, k, v)
        if args.repeat == ap.get_default("repeat"):
            args.repeat = 1
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    for w in args.workloads:
        if w not in WORKLOADS:
            ap.error(f"unknown workload {w!r}; choose from {', '.join(WORKLOADS)}")
    args.conc_writers = [int(x) for x in str(args.conc_writers).split(",") if x]
    if args.report is None:
        args.report = (
            os.path.join(args.dir, "quick", "benchmarks.md")
            if args.quick
            else os.path.join(ROOT, "docs", "benchmarks.md")
        )
    if args.json is None:  # beside the charts: <report dir>/img/<report name>.json
        base = os.path.splitext(os.path.basename(args.report))[0]
        args.json = os.path.join(
            os.path.dirname(os.path.abspath(args.report)), "img", base + ".json"
        )
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.writer:
        import cases_concurrent

        cases_concurrent.writer_main(args.writer, args.path, args.index, args.rows, args.batch)
        return 0
    if args.child and args.child.startswith("crash_concurrent."):
        import cases_concurrent

        p = json.loads(args.params)
        res = cases_concurrent.coordinate(
            args.child.split(".", 1)[1],
            args.path,
            p,
            lambda c: None,
            kill_writer_after=p["kill_writer_after"],
            seed=p["kill_seed"],
        )
        res["peak_rss_mib"] = common.vm_hwm_mib()
        common.write_json(args.out, res)
        return 0
    if args.child or args.readback or args.lazy:
        return child_main(args)

    import report

    if args.from_json:
        with open(args.from_json) as f:
            data = json.load(f)
        report.write(data, args.report)
        print(f"wrote {args.report}")
        return 0

    root = os.path.abspath(args.dir)
    os.makedirs(root, exist_ok=True)
    kind = common.fs_type(root)
    if kind in ("tmpfs", "ramfs"):
        print(
            f"bench: {root} is on {kind}: fsync costs nothing there; use --dir on a real disk",
            file=sys.stderr,
        )
        return 2
    work = os.path.join(root, "work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    logf = open(os.path.join(root, "bench.log"), "w")

    t_start = time.monotonic()

    def log(msg):
        el = time.monotonic() - t_start
        msg = f"[{int(el // 60):02d}:{int(el % 60):02d}] {msg}"
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    cmdline = "bash bench/compare/run.sh" + "".join(
        " " + a for a in (argv if argv is not None else sys.argv[1:])
    )
    info = machine_info(root)
    info["load_start"] = list(os.getloadavg())
    log(f"bench: {cmdline}")
    log(
        f"  machine: {info.get('cpu')} x{info['cpus']}, {info.get('mem_gib')} GiB, "
        f"{info['kernel']}, "
        f"{root} on {info['fs']} ({info['free_gib']} GiB free)"
    )
    log(f"  versions: {info['versions']}")
    runner = Runner(args, work, log)
    results: dict = {}
    t0 = time.monotonic()
    status = 0
    try:
        timed_runs(args, runner, results, log)
        if "crash" in args.workloads:
            log("== crash: SIGKILL a writer part way, then read back in a fresh process")
            crash_runs(args, runner, results, log)
    except KeyboardInterrupt:
        log("interrupted: writing what was measured")
        status = 130
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info["load_end"] = list(os.getloadavg())
    info["runtime_seconds"] = time.monotonic() - t0
    info["command"] = cmdline
    args_dump = {
        k: v
        for k, v in vars(args).items()
        if k
        not in (
            "child",
            "readback",
            "lazy",
            "writer",
            "path",
            "params",
            "out",
            "progress_fd",
            "index",
            "rows",
            "batch",
            "from_json",
        )
    }
    data = {"machine": info, "args": args_dump, "params": workload_params(args), "results": results}
    os.makedirs(os.path.dirname(os.path.abspath(args.report)), exist_ok=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    common.write_json(args.json, data)
    report.write(data, args.report)
    log(f"bench: {info['runtime_seconds'] / 60:.1f} min; wrote {args.report} and {args.json}")
    failures = report.failures(data)
    for f_ in failures:
        log(f"  FAILED: {f_}")
    return status or (1 if failures else 0)


if __name__ == "__main__":
    sys.exit(main())
