"""Writes the markdown report and the charts from the raw results of bench.py."""

from __future__ import annotations

import math
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
NOTES = os.path.join(HERE, "notes")

WORKLOAD_TITLES = {
    "sweep": "1. sweep",
    "arrays": "2. arrays",
    "concurrent": "3. concurrent",
    "lazy": "4. lazy",
    "crash": "5. crash",
    "limit": "6. limit",
}


# -- numbers -----------------------------------------------------------------------------------


def _vals(runs, key):
    return [r[key] for r in runs if isinstance(r.get(key), (int, float)) and not _nan(r.get(key))]


def _nan(x):
    return isinstance(x, float) and math.isnan(x)


def med(runs, key):
    v = _vals(runs, key)
    return statistics.median(v) if v else float("nan")


def fmt_num(x, digits=3):
    if x is None or _nan(x):
        return "-"
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def spread(runs, key, scale=1.0, digits=3):
    """'median (min..max)' of runs[key] * scale."""
    v = [x * scale for x in _vals(runs, key)]
    if not v:
        return "-"
    m = statistics.median(v)
    if len(v) == 1:
        return fmt_num(m, digits)
    return f"{fmt_num(m, digits)} ({fmt_num(min(v), digits)}..{fmt_num(max(v), digits)})"


def mib(x):
    return x / 2**20


def peak_rss(r):
    """Peak RSS of a case's process tree: the sampled sum over the tree, or the case process's
    own exact peak (VmHWM, read by the process itself at its end), whichever is larger (the
    sampler can miss a short spike). wait4's ru_maxrss is not used: Linux carries the forked
    driver's RSS into it at exec."""
    own = r.get("peak_rss_mib", 0.0)
    return max(r.get("tree_peak_rss_mib", 0.0), 0.0 if _nan(own) else own)


def with_rss(runs):
    for r in runs:
        r["peak_rss"] = peak_rss(r)
    return runs


def limit_mbps(data):
    """The disk's limit: the fastest limit run of this invocation, each way (one fdatasync at
    the end; one per array), plain or windowed, whichever was faster. Single runs of the same
    write vary several-fold on this machine; the fastest is the tightest lower bound of what
    the disk allows."""
    runs = data["results"].get("limit", {}).get("disk", [])
    end = _vals(runs, "mbps_end") + _vals(runs, "mbps_end_windowed")
    each = _vals(runs, "mbps_each") + _vals(runs, "mbps_each_windowed")
    return (max(end) if end else float("nan")), (max(each) if each else float("nan"))


def limit_median(data):
    """Medians of the runs of the faster way (plain or windowed), one fdatasync and per array."""
    runs = data["results"].get("limit", {}).get("disk", [])

    def best(key):
        vals = [m for m in (med(runs, key), med(runs, key + "_windowed")) if not _nan(m)]
        return max(vals) if vals else float("nan")

    return best("mbps_end"), best("mbps_each")


def ratio(num_runs, den_runs, key="seconds"):
    """Ratio of medians, and the min..max of the per-repetition ratios."""
    a, b = med(num_runs, key), med(den_runs, key)
    r = a / b if b and not _nan(a) and not _nan(b) else float("nan")
    per = [
        x[key] / y[key]
        for x, y in zip(num_runs, den_runs)
        if isinstance(x.get(key), (int, float)) and y.get(key)
    ]
    return r, per


def _per_text(per, digits=3):
    if len(per) <= 1:
        return ""
    return f" (per repetition {fmt_num(min(per), digits)}..{fmt_num(max(per), digits)})"


# -- targets -----------------------------------------------------------------------------------


def targets(data):
    """[(workload, target, measured text, met: True/False/None)]"""
    res = data["results"]
    out = []
    sw = res.get("sweep", {})
    if sw.get("runstore_one") and sw.get("h5py_one"):
        r, per = ratio(sw["h5py_one"], sw["runstore_one"])
        out.append(
            (
                "sweep",
                "one at a time: runstore >= 25x faster than h5py one at a time",
                f"{fmt_num(r)}x{_per_text(per)}",
                r >= 25,
            )
        )
    if sw.get("runstore_one") and sw.get("h5py_batch"):
        r, per = ratio(sw["runstore_one"], sw["h5py_batch"])
        out.append(
            (
                "sweep",
                "one at a time: runstore within 5x of h5py batched",
                f"runstore takes {fmt_num(r)}x h5py batched's time{_per_text(per)}",
                r <= 5,
            )
        )
    if sw.get("runstore_batch") and sw.get("h5py_batch"):
        r, per = ratio(sw["runstore_batch"], sw["h5py_batch"])
        out.append(
            (
                "sweep",
                "batched: runstore no slower than h5py batched",
                f"runstore takes {fmt_num(r)}x h5py batched's time{_per_text(per)}",
                r <= 1,
            )
        )
    if sw.get("runstore_batch_async") and sw.get("h5py_batch"):
        r, per = ratio(sw["runstore_batch_async"], sw["h5py_batch"])
        out.append(
            (
                "sweep",
                "batched, durable commits the caller does not wait for (commit(wait=False) "
                "per 1,000, group commit; the last waited for): runstore no slower than h5py "
                "batched",
                f"runstore takes {fmt_num(r)}x h5py batched's time{_per_text(per)}",
                r <= 1,
            )
        )
    if sw.get("runstore_batch_flush") and sw.get("h5py_batch"):
        r, per = ratio(sw["runstore_batch_flush"], sw["h5py_batch"])
        out.append(
            (
                "sweep",
                "batched, with h5py's guarantee (Writer.flush per 1,000 against "
                "File.flush per 1,000): runstore no slower than h5py batched",
                f"runstore takes {fmt_num(r)}x h5py batched's time{_per_text(per)}",
                r <= 1,
            )
        )
    ar = res.get("arrays", {})
    lim_end, lim_each = limit_mbps(data)
    if ar.get("runstore"):
        pb = data["params"]["arrays"]
        from cases_arrays import payload_bytes

        med_end, med_each = limit_median(data)
        # Each runstore case against the limit of the same durability: a commit per array against
        # an fdatasync per array (the workload); one commit at the end against one fdatasync.
        for case, what, lim, lmed in (
            (
                "runstore",
                "a commit per array: >= 90% of the disk's write speed with an fdatasync per array",
                lim_each,
                med_each,
            ),
            (
                "runstore_async",
                "a durable commit per array that the caller does not wait for "
                "(commit(wait=False), the last waited for): >= 90% of the disk's write speed with "
                "an fdatasync per array",
                lim_each,
                med_each,
            ),
            (
                "runstore_endcommit",
                "one commit at the end (reference, no target): against the "
                "disk's sequential write speed (one fdatasync at the end)",
                lim_end,
                med_end,
            ),
        ):
            if _nan(lim) or not ar.get(case):
                continue
            mbps = payload_bytes(pb) / med(ar[case], "seconds") / 1e6
            best = payload_bytes(pb) / min(_vals(ar[case], "seconds")) / 1e6
            out.append(
                (
                    "arrays",
                    f"runstore, {what}",
                    f"runstore's median {fmt_num(mbps)} MB/s = **{100 * mbps / lim:.0f}%** of the "
                    "fastest "
                    f"limit run ({fmt_num(lim)} MB/s); its best run {100 * best / lim:.0f}%; "
                    f"{100 * mbps / lmed:.0f}% of the median limit run ({fmt_num(lmed)} MB/s)",
                    mbps >= 0.9 * lim if case in ("runstore", "runstore_async") else None,
                )
            )
    if ar.get("runstore") and ar.get("pickle_bz2"):
        r, per = ratio(ar["pickle_bz2"], ar["runstore"])
        out.append(
            (
                "arrays",
                "runstore >= 20x faster than pickle + bz2",
                f"{fmt_num(r)}x{_per_text(per)}",
                r >= 20,
            )
        )
    co = res.get("concurrent", {})
    for key in sorted({k.split("@")[1] for k in co}, key=int):
        rs, sq = co.get(f"runstore@{key}"), co.get(f"sqlite_full@{key}")
        if rs and sq:
            r, per = ratio(sq, rs)
            timed_out = any(x.get("timed_out") for x in sq)
            out.append(
                (
                    "concurrent",
                    f"{key} writers: runstore faster than sqlite3 (WAL, synchronous=FULL)",
                    f"{fmt_num(r)}x{' (sqlite3 stopped at the time limit)' if timed_out else ''}"
                    f"{_per_text(per)}",
                    r > 1,
                )
            )
        if rs:
            w = max(_vals(rs, "wait_seconds") or [0.0])
            out.append(
                (
                    "concurrent",
                    f"{key} writers: runstore writers never wait",
                    f"largest total wait over repetitions {w:.3g} s (back-pressure; no locks)",
                    w == 0,
                )
            )
    lz = res.get("lazy", {})
    if lz.get("runstore") and lz.get("npy"):
        r, per = ratio(lz["runstore"], lz["npy"])
        out.append(
            (
                "lazy",
                "runstore no slower than np.load(mmap_mode='r')",
                f"runstore takes {fmt_num(r)}x np.load's time{_per_text(per)}",
                r <= 1,
            )
        )
    cr = res.get("crash", {})
    rs_crash = {k: v for k, v in cr.items() if k.split("/")[1].startswith("runstore")}
    if rs_crash:
        total = sum(len(v) for v in rs_crash.values())
        bad = [f"{k} run {e['run'] + 1}" for k, v in rs_crash.items() for e in v if not e["ok"]]
        out.append(
            (
                "crash",
                "runstore: everything committed is read back, every time",
                f"{total - len(bad)} of {total} kills"
                + (f"; lost data: {', '.join(bad)}" if bad else ""),
                not bad,
            )
        )
    return out


def failures(data):
    """Things that make the command fail: a case that errored, runstore losing committed data."""
    out = []
    for workload, cases in data["results"].items():
        if workload == "crash":
            for k, v in cases.items():
                if k.split("/")[1].startswith("runstore"):
                    out += [
                        f"crash {k} run {e['run'] + 1}: committed {e['committed']}, read back "
                        f"{e['read_back']}"
                        for e in v
                        if not e["ok"]
                    ]
            continue
        for case, runs in cases.items():
            for r in runs:
                if r.get("error"):
                    out.append(f"{workload} {case}: {r['error']}")
                if (
                    "read_back" in r
                    and r["read_back"] != r.get("expected")
                    and case.startswith("runstore")
                ):
                    out.append(f"{workload} {case}: read back {r['read_back']} of {r['expected']}")
                if workload == "lazy" and r.get("correct") is False:
                    out.append(f"lazy {case}: wrong sum")
    return out


# -- charts ------------------------------------------------------------------------------------


def _color(name):
    if name.startswith("runstore"):
        return "#f2a0a0" if name.endswith("_endcommit") else "#d62728"
    return "#7f7f7f"


def _bar_panel(ax, names, runs_by_name, key, scale=1.0, log=False, xlabel=""):
    import numpy as np

    meds, lo, hi = [], [], []
    for n in names:
        v = [x * scale for x in _vals(runs_by_name[n], key)] or [float("nan")]
        m = statistics.median(v)
        meds.append(m)
        lo.append(m - min(v))
        hi.append(max(v) - m)
    y = np.arange(len(names))
    ax.barh(y, meds, xerr=[lo, hi], color=[_color(n) for n in names], capsize=3)
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    for yi, m in zip(y, meds):
        if not _nan(m):
            ax.text(m, yi, " " + fmt_num(m), va="center", fontsize=8)
    ax.grid(axis="x", alpha=0.3)


def charts(data, img_dir, rel):
    """Writes one PNG per workload; returns {workload: relative path}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(img_dir, exist_ok=True)
    res = data["results"]
    out = {}

    def save(fig, name):
        path = os.path.join(img_dir, f"{name}.png")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        out[name] = f"{rel}/{name}.png"

    for workload in ("sweep", "arrays"):
        cases = res.get(workload)
        if not cases:
            continue
        names = list(cases)
        for runs in cases.values():
            with_rss(runs)
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 0.45 * len(names) + 1.6))
        if workload == "arrays":
            from cases_arrays import payload_bytes

            pb = payload_bytes(data["params"]["arrays"])
            for runs in cases.values():
                for r in runs:
                    r["mbps"] = pb / r["seconds"] / 1e6 if r.get("seconds") else float("nan")
            _bar_panel(
                a1, names, cases, "mbps", xlabel="MB/s written (higher is better); median, min-max"
            )
            lim_end, lim_each = limit_mbps(data)
            if not _nan(lim_end):
                a1.axvline(
                    lim_end, color="k", ls="--", lw=1, label=f"disk, one fdatasync: {lim_end:.0f}"
                )
            if not _nan(lim_each):
                a1.axvline(
                    lim_each,
                    color="k",
                    ls=":",
                    lw=1,
                    label=f"disk, fdatasync per array: {lim_each:.0f}",
                )
            a1.legend(fontsize=8, loc="lower right")
        else:
            _bar_panel(
                a1,
                names,
                cases,
                "seconds",
                log=True,
                xlabel="wall time, s (log; lower is better); median, min-max",
            )
        _bar_panel(a2, names, cases, "peak_rss", xlabel="peak RSS of the process tree, MiB")
        a2.set_yticks([])
        fig.suptitle(f"{workload}: runstore (red) and the tools used today")
        save(fig, workload)

    if res.get("lazy"):
        cases = res["lazy"]
        names = list(cases)
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 0.5 * len(names) + 1.6))
        cold = any(r.get("cold") for runs in cases.values() for r in runs)
        _bar_panel(
            a1,
            names,
            cases,
            "seconds",
            log=True,
            xlabel=f"open + read the sample, s ({'cold' if cold else 'warm'} page cache; log)",
        )
        _bar_panel(
            a2,
            names,
            cases,
            "warm_seconds",
            log=True,
            xlabel="the same again, warm page cache, s (log)",
        )
        a2.set_yticks([])
        fig.suptitle("lazy: read every 16th row of 16 random arrays of 64")
        save(fig, "lazy")

    if res.get("concurrent"):
        import numpy as np

        cases = res["concurrent"]
        tools = list(dict.fromkeys(k.split("@")[0] for k in cases))
        ws = sorted({int(k.split("@")[1]) for k in cases})
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4))
        width = 0.8 / len(tools)
        for ti, tool in enumerate(tools):
            xs = np.arange(len(ws)) + ti * width
            secs = [med(cases.get(f"{tool}@{w}", []), "seconds") for w in ws]
            waits = [med(cases.get(f"{tool}@{w}", []), "wait_seconds") for w in ws]
            color = (
                _color(tool)
                if tool.startswith("runstore")
                else ("#1f77b4" if tool == "sqlite_full" else "#aec7e8")
            )
            a1.bar(xs, secs, width, label=tool, color=color)
            a2.bar(xs, waits, width, label=tool, color=color)
            for x, s in zip(xs, secs):
                a1.text(x, s, fmt_num(s), ha="center", va="bottom", fontsize=8)
            for x, s in zip(xs, waits):
                a2.text(x, s, fmt_num(s), ha="center", va="bottom", fontsize=8)
        for ax in (a1, a2):
            ax.set_xticks(
                np.arange(len(ws)) + width * (len(tools) - 1) / 2, [f"{w} writers" for w in ws]
            )
            ax.grid(axis="y", alpha=0.3)
        a1.set_ylabel("wall time, s (median)")
        a2.set_ylabel("total time writers waited, s (median)")
        a1.legend(fontsize=8)
        fig.suptitle(
            "concurrent: writer processes into one store, a durable commit every 1,000 rows"
        )
        save(fig, "concurrent")

    if res.get("crash"):
        import numpy as np

        cases = res["crash"]
        names = list(cases)
        k = [sum(e["committed"] for e in cases[n]) for n in names]
        r = [
            sum(min(e["read_back"], e["committed"]) if e["committed"] else 0 for e in cases[n])
            for n in names
        ]
        frac = [100.0 * rr / kk if kk else float("nan") for rr, kk in zip(r, k)]
        fig, ax = plt.subplots(figsize=(10, 0.4 * len(names) + 1.5))
        y = np.arange(len(names))
        ax.barh(
            y, [0 if _nan(f) else f for f in frac], color=[_color(n.split("/")[1]) for n in names]
        )
        for yi, f, n in zip(y, frac, names):
            opens = sum(e["opens"] for e in cases[n])
            produced = sum(e.get("produced") or 0 for e in cases[n])
            txt = "nothing committed/flushed" if _nan(f) else f"{f:.0f}%"
            if produced:
                txt = f"{produced:,} results computed before the kills, 0 written"
            wrong = sum(e.get("wrong") or 0 for e in cases[n])
            if wrong:
                txt += f"; {wrong} more read without error but wrong"
            ax.text(
                max(0 if _nan(f) else f, 1),
                yi,
                f" {txt}; opens {opens}/{len(cases[n])}",
                va="center",
                fontsize=8,
            )
        ax.set_yticks(y, names)
        ax.invert_yaxis()
        ax.set_xlim(0, 140)
        ax.set_xlabel(
            "% of the results committed (flushed) before SIGKILL that read back, all kills"
        )
        fig.suptitle(
            "crash: SIGKILL part way, then open and read in a fresh process\n"
            "(a process kill spares the page cache: flushed but unsynced data survive it, "
            "a power cut would not)",
            fontsize=10,
        )
        save(fig, "crash")

    lim = res.get("limit", {}).get("disk")
    if lim:
        fig, ax = plt.subplots(figsize=(7, 3))
        xs = range(len(lim))
        ax.plot(
            xs,
            [r.get("mbps_end", float("nan")) for r in lim],
            "o-",
            label="write all, one fdatasync",
        )
        ax.plot(
            xs,
            [r.get("mbps_each", float("nan")) for r in lim],
            "s-",
            label="fdatasync after each array",
        )
        ax.plot(
            xs,
            [r.get("mbps_end_windowed", float("nan")) for r in lim],
            "o--",
            label="windowed, one fdatasync",
        )
        ax.plot(
            xs,
            [r.get("mbps_each_windowed", float("nan")) for r in lim],
            "s--",
            label="windowed, fdatasync after each array",
        )
        ax.set_xticks(list(xs), [f"{i // 2 + 1}{'a' if i % 2 == 0 else 'b'}" for i in xs])
        ax.set_xlabel("repetition (a: right before runstore's arrays case, b: right after)")
        ax.set_ylabel("MB/s")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.suptitle("limit: sequential write + fdatasync of the arrays workload's bytes")
        save(fig, "limit")
    return out


# -- markdown ----------------------------------------------------------------------------------


def _notes(workload):
    path = os.path.join(NOTES, f"{workload}.md")
    if os.path.exists(path):
        with open(path) as f:
            return f.read().strip() + "\n"
    return ""


def _table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write(data, report_path):
    import sys

    sys.path.insert(0, HERE)
    import cases_arrays
    import cases_concurrent
    import cases_sweep

    report_dir = os.path.dirname(os.path.abspath(report_path))
    img_dir = os.path.join(report_dir, "img")
    imgs = charts(data, img_dir, "img")
    res, m, params = data["results"], data["machine"], data["params"]
    reps = data["args"]["repeat"]
    lim_end, lim_each = limit_mbps(data)
    L = []
    L.append("# runstore against the tools used today\n")
    L.append(
        "<!-- Generated by bench/compare (report.py) from the raw results beside this file; "
        "explanations come from bench/compare/notes/*.md. Do not edit by hand: rerun. -->\n"
    )
    L.append(
        "Each workload below runs on runstore and on what its users use today, each case in a "
        "process of its own, on the same machine in the same run. Times are the **median of "
        f"{reps} repetition{'s' if reps != 1 else ''}** with (min..max), because the machine is "
        "shared and noisy. Ratios are a peer's median over runstore's median (above 1: runstore "
        "is faster, leaner or smaller).\n"
    )
    L.append("## How this was run\n")
    L.append("```sh\n" + m.get("command", "bash bench/compare/run.sh") + "\n```\n")
    mins = m.get("runtime_seconds", 0) / 60
    L.append(
        _table(
            ["", ""],
            [
                ["date", m.get("date", "?")],
                [
                    "machine",
                    f"{m.get('cpu', '?')}, {m.get('cpus')} CPUs, {m.get('mem_gib')} GiB RAM, "
                    f"{m.get('os', '')}, "
                    f"Linux {m.get('kernel')}",
                ],
                [
                    "data directory",
                    f"`{m.get('bench_dir')}` on {m.get('fs')} ({m.get('free_gib')} GiB free); "
                    "each case's data is synced and deleted after it",
                ],
                [
                    "load average",
                    f"{m['load_start'][0]:.1f} at the start, "
                    f"{m.get('load_end', [float('nan')])[0]:.1f} "
                    "at the end (other jobs share this machine)",
                ],
                ["runtime", f"{mins:.1f} min"],
                ["runstore", f"{m['versions'].get('runstore')} (git {m.get('git', '?')})"],
                [
                    "peers",
                    ", ".join(
                        f"{k} {v}"
                        for k, v in m["versions"].items()
                        if k not in ("runstore", "psutil", "matplotlib")
                    ),
                ],
            ],
        )
    )
    L.append("\nWhat is measured:\n")
    L.append(
        "- **wall time**: inside the case process, from opening the output to the last commit, "
        "flush or close having returned (imports and data generation excluded; data come from a "
        "pool generated before the clock starts).\n"
        "- **peak RSS**: of the case's process tree: the driver samples the sum of RSS over the "
        "process and all its descendants every 10 ms (psutil), and takes the larger of that and "
        "the case process's own exact peak (`VmHWM`, which it reads at its end). For "
        "single-process cases that is the process's `VmHWM`; for `concurrent` it is the **sum** "
        "over the coordinator and all writer processes at the sampled moment of highest total "
        "(the largest single writer's `VmHWM` is in its own column).\n"
        "- **on disk**: allocated bytes (`du`, `st_blocks`) of the case's output after it "
        "finished and `sync`.\n"
        "- **durability**: runstore's `commit()` returns after `fdatasync`. Each peer's "
        "commit/flush is listed with what it guarantees; where a peer's flush is not durable, a "
        "durable variant is shown for reference.\n"
        "- every output of the first repetition is read back in a fresh process and checked value "
        "by value (column `read back`).\n"
    )
    if not _nan(lim_end):
        me, mh = limit_median(data)
        L.append(
            "\nThe disk's own limit in this run (workload 6), the fastest of its runs: "
            f"**{fmt_num(lim_end)} "
            "MB/s** writing the arrays workload's bytes with one fdatasync at the end, "
            f"**{fmt_num(lim_each)} "
            f"MB/s** with an fdatasync after each array (medians of the runs: {fmt_num(me)} and "
            f"{fmt_num(mh)} MB/s: single runs vary several-fold on this machine). `% of disk` "
            "columns "
            "use the first (MB = 10^6 bytes).\n"
        )

    # targets
    tg = targets(data)
    if tg:
        L.append("\n## Targets\n")
        L.append(
            _table(
                ["workload", "target", "measured (ratio of medians; per-repetition range)", "met"],
                [
                    [w, t, meas, "yes" if ok else "**MISSED**" if ok is False else "-"]
                    for w, t, meas, ok in tg
                ],
            )
        )
        missed = [t for t in tg if t[3] is False]
        if missed:
            L.append("\nWhere a target is missed, the workload's section says why.\n")

    # -- sweep --
    if res.get("sweep"):
        p = params["sweep"]
        L.append(f"\n## {WORKLOAD_TITLES['sweep']}\n")
        L.append(
            f"{p['n']:,} experiments, each 5 float parameters, 3 scalar outcomes and a "
            f"{p['trace_len']}-point float64 time series; a commit (or flush) every {p['batch']:,} "
            "experiments. *one*: the experiment's values are handed over one experiment per call; "
            "*batch*: 1,000 experiments per call. Ratios compare with runstore in the same mode.\n"
        )
        if "sweep" in imgs:
            L.append(f"\n![sweep]({imgs['sweep']})\n")
        cases = res["sweep"]
        pb = cases_sweep.payload_bytes(p)
        ref = {"one": cases.get("runstore_one"), "batch": cases.get("runstore_batch")}
        rows = []
        for name, runs in cases.items():
            with_rss(runs)
            label, mode, durable = cases_sweep.META[name]
            mbps = pb / med(runs, "seconds") / 1e6
            rows.append(
                [
                    f"`{name}`",
                    label,
                    mode,
                    durable,
                    spread(runs, "seconds"),
                    fmt_num(med(runs, "seconds") / p["n"] * 1e6),
                    spread(runs, "peak_rss"),
                    fmt_num(mib(med(runs, "disk_bytes"))),
                    _ratios(runs, ref.get(mode)),
                    f"{fmt_num(mbps)} ({100 * mbps / lim_end:.1f}%)"
                    if not _nan(lim_end)
                    else fmt_num(mbps),
                    _rb(runs),
                ]
            )
        L.append(
            "\n"
            + _table(
                [
                    "case",
                    "what",
                    "mode",
                    "a commit/flush means",
                    "wall s",
                    "us/exp",
                    "peak RSS MiB",
                    "on disk MiB",
                    "x runstore: time / RSS / disk",
                    "MB/s of values (% of disk)",
                    "read back",
                ],
                rows,
            )
        )
        L.append(_notes("sweep"))

    # -- arrays --
    if res.get("arrays"):
        p = params["arrays"]
        L.append(f"\n## {WORKLOAD_TITLES['arrays']}\n")
        L.append(
            f"{p['n']} results of {p['mib']:g} MiB of float64 each (shape "
            f"{cases_arrays.array_shape(p['mib'])}, normal random numbers), each written as the "
            "job "
            "returns it (runstore: `put` then `commit`).\n"
        )
        if "arrays" in imgs:
            L.append(f"\n![arrays]({imgs['arrays']})\n")
        cases = res["arrays"]
        pb = cases_arrays.payload_bytes(p)
        r0 = cases.get("runstore") or []
        rows = []
        for name, runs in cases.items():
            with_rss(runs)
            label, _, durable = cases_arrays.META[name]
            mbps = pb / med(runs, "seconds") / 1e6
            rows.append(
                [
                    f"`{name}`",
                    label,
                    durable,
                    spread(runs, "seconds"),
                    fmt_num(mbps),
                    f"{100 * mbps / lim_end:.0f}% / {100 * mbps / lim_each:.0f}%"
                    if not _nan(lim_end)
                    else "-",
                    spread(runs, "peak_rss"),
                    fmt_num(mib(med(runs, "disk_bytes"))),
                    _ratios(runs, r0),
                    _rb(runs),
                ]
            )
        L.append(
            "\n"
            + _table(
                [
                    "case",
                    "what",
                    "a result is written when",
                    "wall s",
                    "MB/s",
                    "% of disk: one fdatasync / fdatasync per array",
                    "peak RSS MiB",
                    "on disk MiB",
                    "x runstore: time / RSS / disk",
                    "read back",
                ],
                rows,
            )
        )
        L.append(_notes("arrays"))

    # -- concurrent --
    if res.get("concurrent"):
        p = params["concurrent"]
        L.append(f"\n## {WORKLOAD_TITLES['concurrent']}\n")
        L.append(
            f"Writer processes each append {p['rows']:,} rows (run, step, value) to one store, a "
            f"durable commit every {p['batch']:,} rows. runstore: every process opens its own "
            "`Writer` (log per row); writers share no file and take no lock; *waited* is their "
            "back-pressure time (`Writer.stats()['backpressure_seconds']`). sqlite3: one database "
            "in WAL mode, each writer runs `BEGIN IMMEDIATE; executemany(INSERT); COMMIT` per "
            "batch "
            "(connection timeout 600 s, so a busy database is waited for, never an error); "
            "*waited* is the total time spent in `BEGIN IMMEDIATE`, i.e. blocked on the write lock "
            "(uncontended it takes microseconds). Time: from releasing all writers at once (each "
            "has "
            "already started and opened the store) to the end of the last one's final "
            "commit/close. "
            "Peak RSS: the sum over all processes (see above).\n"
        )
        if "concurrent" in imgs:
            L.append(f"\n![concurrent]({imgs['concurrent']})\n")
        cases = res["concurrent"]
        rows = []
        for name, runs in cases.items():
            with_rss(runs)
            tool, nw = name.split("@")
            r0 = cases.get(f"runstore@{nw}") or []
            label, _, durable = cases_concurrent.META[tool]
            total_rows = int(nw) * p["rows"]
            to = " (stopped at the time limit)" if any(r.get("timed_out") for r in runs) else ""
            rows.append(
                [
                    nw,
                    f"`{tool}`",
                    durable,
                    spread(runs, "seconds") + to,
                    fmt_num(total_rows / med(runs, "seconds")),
                    spread(runs, "wait_seconds"),
                    fmt_num(med(runs, "max_writer_wait_seconds")),
                    fmt_num(med(runs, "commit_seconds")),
                    spread(runs, "peak_rss"),
                    fmt_num(med(runs, "writer_peak_rss_mib_max")),
                    fmt_num(mib(med(runs, "disk_bytes"))),
                    _ratios(runs, r0),
                    _rb(runs),
                ]
            )
        L.append(
            "\n"
            + _table(
                [
                    "writers",
                    "case",
                    "a commit means",
                    "wall s",
                    "rows/s",
                    "waited s (sum over writers)",
                    "waited s (most one writer)",
                    "in commit s (sum)",
                    "peak RSS MiB (sum)",
                    "largest writer MiB",
                    "on disk MiB",
                    "x runstore: time / RSS / disk",
                    "read back",
                ],
                rows,
            )
        )
        L.append(_notes("concurrent"))

    # -- lazy --
    if res.get("lazy"):
        p = params["lazy"]
        L.append(f"\n## {WORKLOAD_TITLES['lazy']}\n")
        cold = any(r.get("cold") for runs in res["lazy"].values() for r in runs)
        L.append(
            f"After workload 2: open the output and read every {p['stride']}th row of {p['k']} "
            f"randomly chosen arrays of the {p['n']} (1/{p['stride']} of their bytes), summing the "
            "sample, as a computation that loads what it needs on demand. *read from disk*: the "
            "process's `read_bytes` in `/proc/self/io` over the timed part (page-cache misses, "
            "page faults on mapped files included). "
            + (
                "The page cache is dropped (`sync; echo 3 > /proc/sys/vm/drop_caches`) right "
                "before "
                "the clock starts, so these are cold reads from the disk; *warm* repeats the same "
                "reads in the same process."
                if cold
                else "**The page cache could not be dropped (not root?): "
                "these are warm-cache figures.**"
            )
            + (
                " *After writing*: the same reads in a process started as soon as the writer "
                "exited, before anything else read the output, from what the page cache kept of "
                "the writes."
                if any("after_write_seconds" in r for runs in res["lazy"].values() for r in runs)
                else ""
            )
            + "\n"
        )
        if "lazy" in imgs:
            L.append(f"\n![lazy]({imgs['lazy']})\n")
        cases = res["lazy"]
        r0 = cases.get("runstore") or []
        # The read right after writing (from what the page cache kept), in runs that made it.
        after = any("after_write_seconds" in r for runs in cases.values() for r in runs)
        rows = []
        for name, runs in cases.items():
            with_rss(runs)
            row = [
                f"`{name}`",
                cases_arrays.LAZY_META[name],
                spread(runs, "seconds", 1e3),
                spread(runs, "warm_seconds", 1e3),
            ]
            if after:
                row += [
                    spread(runs, "after_write_seconds", 1e3),
                    fmt_num(mib(med(runs, "after_write_disk_read_bytes"))),
                ]
            rows.append(
                row
                + [
                    fmt_num(mib(med(runs, "disk_read_bytes"))) if cold else "-",
                    spread(runs, "peak_rss"),
                    _ratios(runs, r0, disk=False),
                    "yes" if all(r.get("correct") for r in runs) else "**NO**",
                ]
            )
        L.append(
            "\n"
            + _table(
                ["case", "what", "cold ms", "warm ms"]
                + (["after writing ms", "read from disk MiB (after writing)"] if after else [])
                + [
                    "read from disk MiB (cold)",
                    "peak RSS MiB",
                    "x runstore: time / RSS",
                    "sum correct",
                ],
                rows,
            )
        )
        L.append(_notes("lazy"))

    # -- crash --
    if res.get("crash"):
        L.append(f"\n## {WORKLOAD_TITLES['crash']}\n")
        a = data["args"]
        L.append(
            "A writer of each workload is SIGKILLed part way: after it has reported K commits (or "
            "flushes) on a pipe, plus a random part of the next batch, so most kills land in the "
            "middle of writing. Then a fresh process opens the output and counts the results that "
            "read back complete and equal to what was written. *committed* is what the writer had "
            "reported as committed (flushed, for tools without commits) before it died; a tool "
            "keeps its promise when read back >= committed. Sizes: sweep "
            f"{min(params['sweep']['n'], a['crash_sweep_n']):,} experiments; arrays as in workload "
            "2; "
            f"concurrent {a['crash_writers']} writers x "
            f"{min(params['concurrent']['rows'], a['crash_rows']):,} "
            "rows, of which writer 0 is killed and the others finish (committed / read back count "
            f"all writers). {a['crash_runs']} kills per case.\n"
        )
        if "crash" in imgs:
            L.append(f"\n![crash]({imgs['crash']})\n")
        rows = []
        for name, entries in res["crash"].items():
            workload, tool = name.split("/")
            meta = {
                "sweep": cases_sweep.META,
                "arrays": cases_arrays.META,
                "concurrent": cases_concurrent.META,
            }[workload][tool]
            opens = sum(e["opens"] for e in entries)
            ok = all(e["ok"] for e in entries)
            errs = sorted(
                {e["error"] for e in entries if e.get("error") and (not e["ok"] or not e["opens"])}
            )
            produced = [e.get("produced") for e in entries if e.get("produced")]
            if produced:
                errs.append(
                    f"results computed before the kill: {', '.join(f'{x:,}' for x in produced)}, "
                    "all lost"
                )
            rows.append(
                [
                    workload,
                    f"`{tool}`",
                    meta[2],
                    f"{opens}/{len(entries)}",
                    ", ".join(str(e["committed"]) for e in entries),
                    ", ".join(str(e["read_back"]) for e in entries),
                    ", ".join(str(e.get("wrong", 0)) for e in entries),
                    "yes" if ok else "**no**",
                    "; ".join(errs)[:200],
                ]
            )
        L.append(
            "\n"
            + _table(
                [
                    "workload",
                    "case",
                    "committed/flushed means",
                    "opens",
                    "committed before kill",
                    "read back",
                    "wrong (read without error, wrong values)",
                    "all committed read back",
                    "errors",
                ],
                rows,
            )
        )
        L.append(_notes("crash"))

    # -- limit --
    lim = res.get("limit", {}).get("disk")
    if lim:
        pa = params["arrays"]
        L.append(f"\n## {WORKLOAD_TITLES['limit']}\n")
        L.append(
            f"The same bytes as workload 2 ({pa['n']} x {pa['mib']:g} MiB) written sequentially "
            "with "
            "`os.write` to one new file: once with one `fdatasync` at the end (the disk's "
            "streaming "
            "rate) and once with an `fdatasync` after every array (the durability workload 2 asks "
            "for); and both again *windowed*: written 1 MiB at a time, the writeback of each MiB "
            "started at once with `sync_file_range`, so that the disk writes while the next MiB is "
            "copied (runstore's writer does this; on this VM it is the faster way). Each is a "
            "process "
            "of its own like any case, right before and right after "
            "runstore's arrays case in every repetition. The "
            "data directory is synced before and after every deletion, so that no case pays for "
            "the previous one's writeback or deletion.\n"
        )
        if "limit" in imgs:
            L.append(f"\n![limit]({imgs['limit']})\n")
        L.append(
            "\n"
            + _table(
                ["", "MB/s median (min..max)", "runs (MB/s, in order: before, after runstore)"],
                [
                    [
                        "one fdatasync at the end",
                        spread(lim, "mbps_end"),
                        ", ".join(fmt_num(r.get("mbps_end")) for r in lim),
                    ],
                    [
                        "fdatasync after each array",
                        spread(lim, "mbps_each"),
                        ", ".join(fmt_num(r.get("mbps_each")) for r in lim),
                    ],
                    [
                        "windowed, one fdatasync at the end",
                        spread(lim, "mbps_end_windowed"),
                        ", ".join(fmt_num(r.get("mbps_end_windowed")) for r in lim),
                    ],
                    [
                        "windowed, fdatasync after each array",
                        spread(lim, "mbps_each_windowed"),
                        ", ".join(fmt_num(r.get("mbps_each_windowed")) for r in lim),
                    ],
                ],
            )
        )
        L.append(
            "\nThe fastest run of each way, plain or windowed, is the limit used above: every run "
            "is a lower bound of what "
            "the disk allows, and the slow ones are other tenants' I/O.\n"
        )
        L.append(_notes("limit"))
    integrations = _notes("integrations")
    if integrations:
        # Benchmarks of their own (bench/python/), whose figures are recorded by hand.
        L.append("\n## Integrations, measured by their own benchmarks\n")
        L.append(integrations)
    L.append("\n## Reproducing\n")
    L.append(
        "`bash bench/compare/run.sh` runs everything with the defaults above (`--help` for the "
        "sizes; `--quick` for a smoke run of a couple of minutes that writes its report under "
        "`--dir` instead of here; `--workloads sweep,crash` and `--tools h5py_one,sqlite_full` to "
        "select). The raw figures of this page are in `img/"
        + os.path.basename(os.path.splitext(report_path)[0])
        + ".json`; "
        "`bash bench/compare/run.sh --from-json docs/img/benchmarks.json` rewrites this page and "
        "the "
        "charts from them (after editing the explanations in `bench/compare/notes/`).\n"
    )
    L.append(_notes("method"))
    with open(report_path, "w") as f:
        f.write("\n".join(x.rstrip("\n") + "\n" for x in L).replace("\n\n\n", "\n\n"))


def _ratios(runs, ref, disk=True):
    if not ref:
        return "-"
    t = med(runs, "seconds") / med(ref, "seconds")
    r = med(runs, "peak_rss") / med(ref, "peak_rss")
    if not disk:
        return f"{fmt_num(t)} / {fmt_num(r)}"
    d = med(ref, "disk_bytes")
    dr = med(runs, "disk_bytes") / d if d else float("nan")
    return f"{fmt_num(t)} / {fmt_num(r)} / {fmt_num(dr)}"


def _rb(runs):
    checked = [r for r in runs if "read_back" in r]
    if not checked:
        return "-"
    r = checked[0]
    if r["read_back"] == r.get("expected"):
        return "all"
    return f"**{r['read_back']:,} of {r.get('expected', 0):,}**"
