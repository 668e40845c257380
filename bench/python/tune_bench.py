#!/usr/bin/env python3
"""A Ray Tune sweep recorded by runstore against Tune's own result files.

The sweep: T trials of a function trainable that reports I training iterations each (a loss,
an accuracy and a learning rate, as a training loop's curve would), on a local Ray
(``ray.init``, --cpus CPUs, each trial a quarter of one so that the driver, which processes
every result, is what sets the pace in both cases). Two cases, each in a process of its own:

  tune      Tune's default loggers (``JsonLoggerCallback``, ``CSVLoggerCallback`` and, when
            tensorboardX is installed, ``TBXLoggerCallback``): each trial's ``result.json``,
            ``progress.csv``, ``params.json`` and event file under the run's storage path; its
            curves loaded with ``ExperimentAnalysis(path).trial_dataframes``, concatenated
  runstore  ``runstore.ray.TuneCallback(store)`` instead of them (Tune's experiment state
            files remain); the curves loaded with ``store.to_pandas(...)`` (a row a trial and
            iteration)

Both pass their callbacks explicitly (``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1``), each hook
timed, so that beside the sweep's wall time (most of it Tune's controller, which varies from
run to run by more than the recording costs) the table gives the time the driver spent
recording results. For each: the sweep's wall time, that recording time, the disk it leaves
(the storage path; for runstore also the store), and the time and peak RSS to load every
trial's curves into one pandas DataFrame in a fresh process, which must hold T x I rows.

    .venv/bin/python bench/python/tune_bench.py --trials 1000 --iterations 100
    .venv/bin/python bench/python/tune_bench.py --trials 8 --iterations 10

Exit status: 0 when runstore loads the curves faster than Tune's files, 3 when it does not, 1
on error or when a case's frame lacks any of the T x I rows or the values reported.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

MIB = 2**20
METRICS = ["loss", "acc", "lr"]


def trainable(config: dict) -> None:
    from ray import tune

    lr, iterations = config["lr"], config["iterations"]
    for i in range(1, iterations + 1):
        tune.report({"loss": 1.0 / (1.0 + lr * i), "acc": 1.0 - 1.0 / (1.0 + lr * i), "lr": lr})


def expected_loss(lr: float, i: int) -> float:
    return 1.0 / (1.0 + lr * i)


def disk_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def timed(callback: object, clock: list[float]) -> object:
    """``callback`` with each of its hooks adding its time to ``clock[0]``."""
    from ray import tune

    for name in dir(tune.Callback):
        if name.startswith("on_") or name == "setup":
            hook = getattr(callback, name)

            def wrapped(*args, _hook=hook, **kwargs):
                start = time.perf_counter()
                try:
                    return _hook(*args, **kwargs)
                finally:
                    clock[0] += time.perf_counter() - start

            setattr(callback, name, wrapped)
    return callback


def run_sweep(case: str, trials: int, iterations: int, cpus: int, base: str) -> dict:
    import ray
    from ray import tune
    from ray.tune import logger

    import runstore
    import runstore.ray as rsr

    ray_dir = tempfile.mkdtemp(prefix="rt")  # short: Ray's socket paths must fit 107 bytes
    ray.init(num_cpus=cpus, include_dashboard=False, _temp_dir=ray_dir)
    clock = [0.0]
    if case == "runstore":
        store = runstore.open(os.path.join(base, "store"))
        callbacks = [rsr.TuneCallback(store, metrics=METRICS)]
    else:
        callbacks = [logger.JsonLoggerCallback(), logger.CSVLoggerCallback()]
        try:
            import tensorboardX  # noqa: F401 - Tune adds its logger when it is there

            callbacks.append(logger.TBXLoggerCallback())
        except ImportError:
            pass
    callbacks = [timed(c, clock) for c in callbacks]
    start = time.perf_counter()
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 0.25}),
        param_space={"lr": tune.uniform(1e-3, 1.0), "iterations": iterations},
        tune_config=tune.TuneConfig(num_samples=trials, reuse_actors=True),
        run_config=tune.RunConfig(
            name="sweep", storage_path=os.path.join(base, "tune"), callbacks=callbacks, verbose=0
        ),
    )
    results = tuner.fit()
    seconds = time.perf_counter() - start
    errors, finished = len(results.errors), len(results)
    ray.shutdown()
    shutil.rmtree(ray_dir, ignore_errors=True)
    out = dict(case=case, sweep_s=seconds, record_s=clock[0], errors=errors, trials=finished)
    out["tune_disk"] = disk_bytes(os.path.join(base, "tune"))
    if case == "runstore":
        out["store_disk"] = disk_bytes(os.path.join(base, "store"))
    return out


def load(case: str, base: str) -> dict:
    """Every trial's curves as one DataFrame, in this (fresh) process."""
    import pandas as pd

    start = time.perf_counter()
    if case == "tune":
        from ray.tune import ExperimentAnalysis

        frames = ExperimentAnalysis(os.path.join(base, "tune", "sweep")).trial_dataframes
        frame = pd.concat(
            [f[["training_iteration", *METRICS]].assign(trial=t) for t, f in frames.items()]
        )
        steps, loss, lr = frame["training_iteration"], frame["loss"], frame["lr"]
    else:
        import runstore

        frame = runstore.open(os.path.join(base, "store"), "r").to_pandas(METRICS)
        steps = frame.index.get_level_values("step") if "step" not in frame else frame["step"]
        loss, lr = frame["loss"], frame["lr"]
    seconds = time.perf_counter() - start
    import numpy as np

    right = bool(np.allclose(loss.to_numpy(), expected_loss(lr.to_numpy(), np.asarray(steps))))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return dict(load_s=seconds, rows=len(frame), right=right, load_peak=peak)


def child(args: argparse.Namespace) -> int:
    if args.case_load:
        print(json.dumps(load(args.case, args.dir)))
    else:
        print(json.dumps(run_sweep(args.case, args.trials, args.iterations, args.cpus, args.dir)))
    return 0


def in_process(args: argparse.Namespace, case: str, base: str, loading: bool) -> dict:
    cmd = [sys.executable, __file__, "--case", case, "--dir", base, "--trials", str(args.trials)]
    cmd += ["--iterations", str(args.iterations), "--cpus", str(args.cpus)]
    env = dict(os.environ, TUNE_DISABLE_AUTO_CALLBACK_LOGGERS="1", RAY_AIR_NEW_OUTPUT="0")
    out = subprocess.run(
        cmd + (["--case-load"] if loading else []), env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(f"{case} {'load' if loading else 'sweep'} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--dir", default=os.environ.get("RUNSTORE_BENCH_DIR"), help="scratch dir")
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--case", choices=["tune", "runstore"], help=argparse.SUPPRESS)
    ap.add_argument("--case-load", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:
        return child(args)
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
    root = tempfile.mkdtemp(prefix="runstore-tune-", dir=args.dir)
    rows = []
    try:
        for case in ("tune", "runstore"):
            base = os.path.join(root, case)
            os.makedirs(base)
            r = in_process(args, case, base, False)
            r |= in_process(args, case, base, True)
            rows.append(r)
            print(
                f"{case:9s} sweep {r['sweep_s']:7.1f} s  recording {r['record_s']:6.2f} s  "
                f"errors {r['errors']}  disk "
                f"{(r['tune_disk'] + r.get('store_disk', 0)) / MIB:8.1f} MiB  load "
                f"{r['load_s']:6.2f} s  {r['rows']:,} rows  peak {r['load_peak'] / MIB:5.0f} MiB"
                f"  values {'right' if r['right'] else 'WRONG'}",
                flush=True,
            )
            shutil.rmtree(base, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    tune_r, rs = rows
    disk_t = tune_r["tune_disk"]
    disk_r = rs["tune_disk"] + rs["store_disk"]
    print(
        f"\n{args.trials:,} trials x {args.iterations} iterations, {args.cpus} CPUs\n"
        "| | Tune's files | runstore | ratio |\n|---|---|---|---|\n"
        f"| sweep wall time | {tune_r['sweep_s']:.1f} s | {rs['sweep_s']:.1f} s | "
        f"{rs['sweep_s'] / tune_r['sweep_s']:.2f}x |\n"
        f"| of which the driver recorded results | {tune_r['record_s']:.2f} s | "
        f"{rs['record_s']:.2f} s | {rs['record_s'] / max(tune_r['record_s'], 1e-9):.2f}x |\n"
        f"| disk | {disk_t / MIB:.1f} MiB | {disk_r / MIB:.1f} MiB (store "
        f"{rs['store_disk'] / MIB:.1f}, Tune's state {rs['tune_disk'] / MIB:.1f}) | "
        f"{disk_r / disk_t:.2f}x |\n"
        f"| load every curve into a DataFrame | {tune_r['load_s']:.2f} s, peak "
        f"{tune_r['load_peak'] / MIB:.0f} MiB | {rs['load_s']:.2f} s, peak "
        f"{rs['load_peak'] / MIB:.0f} MiB | {rs['load_s'] / tune_r['load_s']:.3f}x |"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(trials=args.trials, iterations=args.iterations, rows=rows), f, indent=1)
    want = args.trials * args.iterations
    for r in rows:
        if r["rows"] != want or not r["right"] or r["errors"] or r["trials"] != args.trials:
            print(f"{r['case']}: {r['rows']} rows of {want}, values right {r['right']}, "
                  f"{r['errors']} errors, {r['trials']} trials")  # fmt: skip
            return 1
    return 0 if rs["load_s"] < tune_r["load_s"] else 3


if __name__ == "__main__":
    sys.exit(main())
