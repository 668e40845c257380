#!/usr/bin/env python3
"""The HTML report of a sweep: how long ``runstore report`` takes, how large the page is, and how
long headless Chromium takes to draw it.

The sweep: 200,000 experiments (--n) with default (hashed) ids, 4 parameters (lr log-uniform,
batch one of 4 values, optimizer one of 3 strings, dropout uniform), 3 scalar outcomes and a
100-point float64 curve each, run with runstore.run_experiments; about 0.4% of the experiments
raise (sgd with a large lr), so the page has failures with tracebacks. Then:

  build   runstore.report.write in a process of its own: wall time, peak RSS (VmHWM), bytes
  render  chromium --headless --dump-dom --virtual-time-budget of the page: wall time of the
          whole run (start-up included; the start-up alone, on an empty page, is printed
          beside it), and the page's own count of plots drawn and failed, which must be all
          and none

Targets: the page under 20 MiB, drawn in under 10 s. A machine without chromium misses the
render target (it is not measured).

    .venv/bin/python bench/python/report_bench.py            # 200,000 experiments
    .venv/bin/python bench/python/report_bench.py --n 2000   # a quick run

Exit status: 0 when every target is met, 3 when the run finished but missed a target, 1 on an
error (the build failed, or the page drew fewer plots than it has).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

# The measurements and the report of targets shared by the benchmarks (bench/compare).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "compare"))
from common import finish_targets, vm_hwm_mib

TARGET_MIB = 20.0
TARGET_RENDER_S = 10.0
CURVE_LEN = 100


def train(lr: float, batch: int, optimizer: str, dropout: float) -> dict:
    """One experiment's outcomes (deterministic); sgd with lr > 0.09 diverges."""
    if optimizer == "sgd" and lr > 0.09:
        raise FloatingPointError(f"loss diverged at step 37 with lr={lr:.4g}")
    rng = np.random.default_rng([int(lr * 2**52), batch, int(dropout * 2**52)])
    rate = lr * (300 if optimizer == "adam" else 150) / (1 + batch / 128)
    curve = np.exp(-rate * np.arange(CURVE_LEN)) + rng.normal(0.0, 0.02, CURVE_LEN) + 0.1 * dropout
    return {
        "loss": float(curve[-10:].mean()),
        "accuracy": float(np.clip(1.0 - curve[-1] + rng.normal(0, 0.01), 0, 1)),
        "epoch_seconds": float(batch / 64 * (1 + rng.random())),
        "curve": curve,
    }


def build_sweep(path: str, n: int, seed: int, workers: int | None) -> dict:
    import pandas as pd

    import runstore

    rng = np.random.default_rng(seed)
    design = pd.DataFrame(
        {
            "lr": 10 ** rng.uniform(-5, -1, n),
            "batch": rng.choice([32, 64, 128, 256], n),
            "optimizer": rng.choice(["adam", "sgd", "rmsprop"], n).astype(object),
            "dropout": rng.random(n),
        }
    )
    store = runstore.open(path)
    t0 = time.perf_counter()
    store.define_experiments(design)
    t_define = time.perf_counter() - t0
    s = runstore.run_experiments(store, train, workers=workers, commit_every=1000, progress=False)
    on_disk = sum(e.stat().st_size for e in os.scandir(os.path.join(path, "segments")))
    return {
        "define_s": t_define,
        "run_s": s.seconds,
        "done": s.done,
        "failed": s.failed,
        "workers": s.workers,
        "store_mib": on_disk / 2**20,
    }


def run_build(store: str, out: str) -> dict:
    """The build, in this process (the child of --case build)."""

    import runstore.report

    t0 = time.perf_counter()
    r = runstore.report.write(store, out, progress=False)
    return {
        "seconds": time.perf_counter() - t0,
        "peak_rss_mib": vm_hwm_mib(),
        "mib": r["bytes"] / 2**20,
        "plots": r["plots"],
    }


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def dump_dom(browser: str, url: str, budget_ms: int) -> tuple[float, str]:
    """(wall seconds, the DOM after the page's script ran) of one headless run."""
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1280,900",
        f"--virtual-time-budget={budget_ms}",
        "--dump-dom",
        url,
    ]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{browser} exited with {p.returncode}: {p.stderr.strip()[-500:]}")
    return seconds, p.stdout


def run_render(page: str, budget_ms: int) -> dict:
    browser = chromium()
    if browser is None:
        return {"skipped": "no chromium on PATH (scripts/install-deps.sh installs it)"}
    empty = os.path.join(os.path.dirname(page), "empty.html")
    with open(empty, "w") as f:
        f.write("<!DOCTYPE html><title>empty</title>")
    startup, _ = dump_dom(browser, "file://" + empty, budget_ms)
    seconds, dom = dump_dom(browser, "file://" + os.path.abspath(page), budget_ms)
    body = re.search(r"<body([^>]*)>", dom)
    attrs = dict(re.findall(r'data-(\w+)="(\d+)"', body.group(1) if body else ""))
    return {
        "seconds": seconds,
        "startup_seconds": startup,
        "plots": int(attrs.get("plots", -1)),
        "rendered": int(attrs.get("rendered", -1)),
        "failed": int(attrs.get("failed", -1)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=200_000, help="experiments (default 200,000)")
    ap.add_argument("--seed", type=int, default=20261203, help="seed of the generated sweep")
    ap.add_argument(
        "--workers", type=int, default=None, help="processes running the sweep (default: all cores)"
    )
    ap.add_argument(
        "--dir", default=None, help="where the store and the page go (default: a temporary one)"
    )
    ap.add_argument(
        "--budget-ms",
        type=int,
        default=60_000,
        help="chromium's --virtual-time-budget (default 60000)",
    )
    ap.add_argument("--json", default=None, help="also write the results to this file")
    ap.add_argument("--case", default=None, help=argparse.SUPPRESS)  # child mode: build
    args = ap.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="report_bench_")
    store_path = os.path.join(work, "sweep.rs")
    page = os.path.join(work, "report.html")
    if args.case == "build":
        print(json.dumps(run_build(store_path, page)))
        return 0

    import runstore

    print(
        f"report_bench: n={args.n} seed={args.seed} python={platform.python_version()} "
        f"numpy={np.__version__} runstore={runstore.__version__} cpus={os.cpu_count()} "
        f"load average={os.getloadavg()[0]:.2f}"
    )
    os.makedirs(work, exist_ok=True)
    results: dict = {}
    try:
        shutil.rmtree(store_path, ignore_errors=True)
        if os.path.exists(page):
            os.remove(page)
        sweep = build_sweep(store_path, args.n, args.seed, args.workers)
        print(
            f"  sweep: define_experiments {sweep['define_s']:.1f} s, run_experiments "
            f"{sweep['run_s']:.1f} s on {sweep['workers']} processes ({sweep['done']:,} done, "
            f"{sweep['failed']:,} failed), store {sweep['store_mib']:.1f} MiB",
            flush=True,
        )
        cmd = [sys.executable, os.path.abspath(__file__), "--case", "build", "--dir", work]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            print(f"  build failed:\n{p.stderr}")
            return 1
        results["build"] = json.loads(p.stdout.strip().splitlines()[-1])
        b = results["build"]
        print(
            f"  build: {b['seconds']:.2f} s, peak RSS {b['peak_rss_mib']:.0f} MiB, "
            f"{b['mib']:.2f} MiB, {b['plots']} plots",
            flush=True,
        )
        results["render"] = r = run_render(page, args.budget_ms)
        if "skipped" in r:
            print(f"  render: not measured: {r['skipped']}")
        else:
            print(
                f"  render: {r['seconds']:.2f} s (chromium start-up alone "
                f"{r['startup_seconds']:.2f} s), {r['rendered']}/{r['plots']} plots drawn, "
                f"{r['failed']} failed",
                flush=True,
            )
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)

    b, r = results["build"], results["render"]
    targets = [("page size", f"{b['mib']:.2f} MiB", f"< {TARGET_MIB:g} MiB", b["mib"] < TARGET_MIB)]
    if "skipped" in r:
        targets.append(("render (chromium)", "not measured", f"< {TARGET_RENDER_S:g} s", False))
    else:
        targets.append(
            (
                "render (chromium)",
                f"{r['seconds']:.2f} s",
                f"< {TARGET_RENDER_S:g} s",
                r["seconds"] < TARGET_RENDER_S,
            )
        )
    targets.append(
        ("(info) build", f"{b['seconds']:.2f} s, {b['peak_rss_mib']:.0f} MiB", "-", None)
    )
    status = finish_targets(
        targets, results, args.json, (24, 28, 10), n=args.n, seed=args.seed, sweep=sweep
    )
    if "skipped" not in r and (r["rendered"] != r["plots"] or r["failed"] != 0):
        print(f"error: the page drew {r['rendered']} of its {r['plots']} plots")
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
