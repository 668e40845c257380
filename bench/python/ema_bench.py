#!/usr/bin/env python3
"""The EMA workbench storing its experiments with runstore.ema, against EMA's own callbacks.

One EMA model (3 uncertainties: real, integer, categorical; a scalar and a 100-point array
outcome) run over --n scenarios (100,000) sampled once with a fixed seed, by EMA's sequential
loop, by its MultiprocessingEvaluator (--evaluator multiprocessing) or by its MPIEvaluator under
``mpiexec -n 1 --oversubscribe`` (--evaluator mpi, as EMA's example runs it), with --workers
processes, whose results come back to the parent, where the callback runs. Each case runs in a
subprocess of its own, so that its peak RSS (VmHWM: of the process that holds the callback) is
its own:

  do_nothing     perform_experiments with a callback that only counts: EMA's own loop, the floor
  runstore_ema   runstore.ema.callback: every experiment in the store as it finishes (flush every
                 1 s, commit every 5 s), perform_experiments returns the Store
  ema_default    EMA's DefaultCallback (everything in memory) + ema_workbench.save_results

Targets (issue: the EMA workbench): runstore_ema peak RSS at most 32 MiB above do_nothing's and
wall time at most 1.1x do_nothing's. Needs Python 3.12 with ema-workbench (.venv312):

    .venv312/bin/python bench/python/ema_bench.py             # 100,000 experiments
    .venv312/bin/python bench/python/ema_bench.py --n 2000    # a quick run
    .venv312/bin/python bench/python/ema_bench.py --rounds 5  # the floor and runstore_ema 5 times
    .venv312/bin/python bench/python/ema_bench.py --evaluator multiprocessing --workers 2
    .venv312/bin/python bench/python/ema_bench.py --evaluator mpi --workers 2

With --rounds N the floor and runstore_ema run alternately N times (which goes first alternates
too) and the wall-time figure is the median of the rounds' ratios, the peak RSS the largest of
each case: on a shared machine the load drifts more between two runs than within one round.
EMA's default callback runs once either way.

Exit status: 0 when every target is met, 3 when the run finished but missed a target, 1 on an
error (a case that failed or read back wrong).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

TARGET_MISSED = 3
CURVE = 100

CASE = r"""
import json, os, sys, time, warnings
warnings.simplefilter("ignore")
import numpy as np
import ema_workbench as ema
from ema_workbench import (CategoricalParameter, IntegerParameter, Model, RealParameter,
                           ScalarOutcome, ArrayOutcome, MultiprocessingEvaluator,
                           MPIEvaluator, SequentialEvaluator)
from ema_workbench.em_framework.callbacks import AbstractCallback
from ema_workbench.em_framework.samplers import LHSSampler

from ema_bench_model import fn  # a module of DIR: MPIEvaluator's spawned workers import it

model = Model("toy", function=fn)
model.uncertainties = [RealParameter("x", 0.0, 1.0), IntegerParameter("n", 1, 5),
                       CategoricalParameter("kind", ["a", "b", "c"])]
model.outcomes = [ScalarOutcome("y"), ArrayOutcome("curve")]
scenarios = LHSSampler().generate_samples(model.uncertainties, N, rng=42)

class DoNothing(AbstractCallback):
    def __call__(self, experiment, outcomes):
        super().__call__(experiment, outcomes)
    def get_results(self):
        return None

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024

def perform_experiments(model, scenarios, callback=None, log_progress=True):
    if EVALUATOR == "multiprocessing":
        evaluator = MultiprocessingEvaluator(model, n_processes=WORKERS)
    elif EVALUATOR == "mpi":
        evaluator = MPIEvaluator(model, n_processes=WORKERS)
    else:
        evaluator = SequentialEvaluator(model)
    with evaluator:
        return evaluator.perform_experiments(scenarios, callback=callback,
                                             log_progress=log_progress)

if CASE == "runstore_ema":
    import runstore.ema  # imported before the clock starts, as ema_workbench is
t0 = time.perf_counter()
if CASE == "do_nothing":
    perform_experiments(model, scenarios, callback=DoNothing)
    rows = N
elif CASE == "runstore_ema":
    cb = runstore.ema.callback(os.path.join(DIR, "store"))
    store = perform_experiments(model, scenarios, callback=cb)
    seconds = time.perf_counter() - t0
    rss = hwm()  # of the run, before the check below reads the statuses back
    rows = int((store.status()["state"] == "done").sum())
else:
    results = perform_experiments(model, scenarios)
    ema.save_results(results, os.path.join(DIR, "ema.tar.gz"))
    rows = len(results[0])
if CASE != "runstore_ema":
    seconds = time.perf_counter() - t0
    rss = hwm()
print(json.dumps({"seconds": seconds, "rss_mib": rss, "rows": rows}))
"""


MODEL = """import numpy as np
CURVE = {curve}

def fn(x=0.5, n=3, kind="a"):
    return {{"y": x * n + (kind == "b"), "curve": np.linspace(0.0, x, CURVE) * n}}
"""


def run_case(case: str, n: int, d: str, evaluator: str, workers: int) -> dict:
    with open(os.path.join(d, "ema_bench_model.py"), "w") as f:
        f.write(MODEL.format(curve=CURVE))
    env = {**os.environ, "PYTHONPATH": d + os.pathsep + os.environ.get("PYTHONPATH", "")}
    code = (
        f"N = {n}\nCURVE = {CURVE}\nCASE = {case!r}\nDIR = {d!r}\n"
        f"EVALUATOR = {evaluator!r}\nWORKERS = {workers}\n" + CASE
    )
    cmd = [sys.executable, "-c", code]
    if evaluator == "mpi":  # one rank, the evaluator's parent; its pool spawns the workers
        mpi = [shutil.which("mpiexec") or "mpiexec", "-n", "1", "--oversubscribe"]
        mpi += ["--mca", "mpi_yield_when_idle", "1"]
        if os.geteuid() == 0:
            mpi.append("--allow-run-as-root")
        cmd = mpi + cmd
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-4000:])
        raise SystemExit(f"ema_bench: case {case} failed (exit status {out.returncode})")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    if r["rows"] != n:
        raise SystemExit(f"ema_bench: case {case} has {r['rows']} experiments of {n}")
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="experiments (default 100,000)")
    ap.add_argument("--rounds", type=int, default=1, help="rounds of the floor and runstore_ema")
    ap.add_argument("--dir", help="scratch directory (default: a temporary one, removed)")
    ap.add_argument(
        "--evaluator", choices=("sequential", "multiprocessing", "mpi"), default="sequential",
        help="EMA's evaluator (default: sequential, EMA's own loop)",
    )  # fmt: skip
    ap.add_argument("--workers", type=int, default=2, help="the multiprocessing evaluator's")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    base = args.dir or tempfile.mkdtemp(prefix="ema_bench.")
    os.makedirs(base, exist_ok=True)

    def case_run(case: str) -> dict:
        d = os.path.join(base, case)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        r = run_case(case, args.n, d, args.evaluator, args.workers)
        print(f"{case:<13} {r['seconds']:8.2f} s  peak RSS {r['rss_mib']:7.1f} MiB", flush=True)
        return r

    ratios, extras = [], []
    try:
        for i in range(args.rounds):
            order = ("do_nothing", "runstore_ema") if i % 2 == 0 else ("runstore_ema", "do_nothing")
            res = {case: case_run(case) for case in order}
            floor, ours = res["do_nothing"], res["runstore_ema"]
            ratios.append(ours["seconds"] / floor["seconds"])
            extras.append(ours["rss_mib"] - floor["rss_mib"])
        default = case_run("ema_default")
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    ratio, extra = statistics.median(ratios), max(extras)
    ok_rss, ok_time = extra <= 32, ratio <= 1.1
    rounds = (
        f" (median of {args.rounds} rounds: {', '.join(f'{r:.3f}' for r in ratios)})"
        if args.rounds > 1
        else ""
    )
    print(
        f"runstore_ema against EMA's own loop: +{extra:.1f} MiB peak RSS (target <= 32: "
        f"{'PASS' if ok_rss else 'MISS'}), {ratio:.3f}x wall time{rounds} (target <= 1.1: "
        f"{'PASS' if ok_time else 'MISS'}); EMA's default callback + save_results: "
        f"{default['rss_mib']:.1f} MiB, {default['seconds']:.2f} s"
    )
    return 0 if ok_rss and ok_time else TARGET_MISSED


if __name__ == "__main__":
    sys.exit(main())
