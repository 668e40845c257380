"""A parameter sweep of a stochastic epidemic model, streamed into a runstore store.

Every worker process simulates its share of the experiments and logs each outcome the
moment it is known: three scalars and a 100-day time series per experiment. Nothing is
collected in memory, nothing is sent back to the parent, and a crash loses at most the
experiments since a worker's last commit. The parent then reads the store back.

    python examples/sweep_demo.py [--experiments 10000] [--workers N] [--store PATH]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import tempfile
import time

import numpy as np

import runstore

DAYS = 100


def design(n_experiments: int) -> list[dict]:
    """A grid of infection and recovery rates, replicated over random seeds."""
    betas = np.linspace(0.10, 0.60, 20)
    gammas = np.linspace(0.05, 0.25, 10)
    reps = max(1, n_experiments // (len(betas) * len(gammas)))
    rows = []
    for beta in betas:
        for gamma in gammas:
            for seed in range(reps):
                rows.append({"beta": float(beta), "gamma": float(gamma), "seed": seed})
    return rows[:n_experiments]


def simulate(beta: float, gamma: float, seed: int, population: int = 10_000) -> dict:
    """A stochastic SIR epidemic (binomial chain), one day per step."""
    rng = np.random.default_rng(seed * 7919 + int(beta * 1e4) * 31 + int(gamma * 1e4))
    s, i, r = population - 10, 10, 0
    infected = np.empty(DAYS)
    for day in range(DAYS):
        new_inf = rng.binomial(s, 1.0 - np.exp(-beta * i / population)) if i else 0
        new_rec = rng.binomial(i, 1.0 - np.exp(-gamma)) if i else 0
        s, i, r = s - new_inf, i + new_inf - new_rec, r + new_rec
        infected[day] = i / population
    return {
        "peak_infected": float(infected.max()),
        "peak_day": int(infected.argmax()),
        "final_size": (r + i) / population,
        "infected": infected,
    }


def worker(store_path: str, rows: list[tuple[int, dict]], commit_every: int) -> int:
    """Runs a share of the experiments; each process owns its own writer."""
    store = runstore.open(store_path)
    with store.writer(commit_every_s=5.0) as w:
        for k, (exp_id, params) in enumerate(rows, 1):
            outcome = simulate(**params)
            w.log(exp_id, **params, **outcome)
            if k % commit_every == 0:
                w.commit()  # durable: a crash from here on loses none of these
    return len(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiments", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--store", default=None, help="store directory (default: a fresh temporary one)")
    ap.add_argument("--commit-every", type=int, default=500)
    args = ap.parse_args()

    path = args.store or os.path.join(tempfile.mkdtemp(prefix="runstore-demo-"), "sweep")
    rows = list(enumerate(design(args.experiments)))
    shares = [rows[k :: args.workers] for k in range(args.workers)]
    print(f"runstore demo: {len(rows):,} SIR epidemics on {args.workers} processes -> {path}")

    t0 = time.perf_counter()
    ctx = mp.get_context("spawn")
    with ctx.Pool(args.workers) as pool:
        done = sum(pool.starmap(worker, [(path, share, args.commit_every) for share in shares]))
    wall = time.perf_counter() - t0

    store = runstore.open(path, mode="r")
    df = store.to_pandas(["beta", "gamma", "seed", "peak_infected", "peak_day", "final_size"])
    curves = store.scan("infected")
    on_disk = sum(e.stat().st_size for e in os.scandir(os.path.join(path, "segments")))

    print(f"\nsimulated and stored {done:,} experiments in {wall:.1f} s "
          f"({done / wall:,.0f} experiments/s), {on_disk / 2**20:.1f} MiB on disk")
    print(f"read back: {len(df):,} rows x {len(df.columns)} columns, "
          f"{len(curves['run']):,} time series of {DAYS} days\n")
    df["R0"] = (df["beta"] / df["gamma"]).round(0)
    summary = df.groupby("R0").agg(experiments=("run", "size"), final_size=("final_size", "mean"),
                                   peak_infected=("peak_infected", "mean"), peak_day=("peak_day", "median"))
    print("mean outcome by basic reproduction number R0 = beta / gamma:")
    print(summary.head(12).to_string(float_format=lambda v: f"{v:.3f}"))
    worst = df.loc[df["peak_infected"].idxmax()]
    curve = store.get(int(worst["run"]), "infected")
    print(f"\nworst epidemic: experiment {int(worst['run'])} (beta={worst['beta']:.2f}, gamma={worst['gamma']:.2f}): "
          f"{worst['peak_infected']:.0%} infected at once on day {int(worst['peak_day'])}; "
          f"its curve comes back zero-copy: {curve.shape} {curve.dtype}, read-only={not curve.flags.writeable}")
    print(f"\nthe store is at {path}")
    print(f"  look at it:  runstore ls {path}    runstore cat {path} final_size --limit 5")
    if args.store is None:
        print(f"  remove it:   rm -r {os.path.dirname(path)}")


if __name__ == "__main__":
    main()
