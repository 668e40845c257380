"""A parameter sweep of a stochastic epidemic model, run and stored with runstore.

The whole workflow in four calls:

    store.define_experiments(runstore.grid(...))   # the design table, stored
    runstore.run_experiments(store, simulate)      # every pending experiment, on all cores
    runstore.load_results(store)                   # a DataFrame + one numpy array per outcome
    store.export_tar("results.tar.gz")             # CSVs for a spreadsheet (optional)

Every worker process streams each experiment's outcomes (three scalars and a 100-day time
series) into the store the moment it finishes, together with its status. Nothing is collected in
the parent. Kill it (Ctrl-C, or kill -9 of everything) and run the same command again with
--store: only the experiments that are not done run.

    python examples/sweep_demo.py [--experiments 10000] [--workers N] [--store PATH] [--tar OUT]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

import numpy as np

import runstore

DAYS = 100


def design(n_experiments: int) -> list[dict]:
    """A grid of infection and recovery rates, replicated over random seeds."""
    betas = np.round(np.linspace(0.10, 0.60, 20), 4)
    gammas = np.round(np.linspace(0.05, 0.25, 10), 4)
    reps = max(1, -(-n_experiments // (len(betas) * len(gammas))))
    return runstore.grid(beta=betas, gamma=gammas, seed=range(reps))[:n_experiments]


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


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--experiments", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    ap.add_argument(
        "--store", default=None, help="store directory (default: a fresh temporary one)"
    )
    ap.add_argument(
        "--commit-every",
        type=int,
        default=10,
        help="experiments per commit (1: each one durable as it finishes; a crash redoes "
        "at most N-1 finished ones per worker)",
    )
    ap.add_argument("--tar", default=None, help="also export the results to this .tar.gz")
    args = ap.parse_args()

    path = args.store or os.path.join(tempfile.mkdtemp(prefix="runstore-demo-"), "sweep")
    try:
        demo(args, path)
    except KeyboardInterrupt:
        # Ctrl-C: run_experiments has set the experiments it interrupted back to pending,
        # kept what finished and said so in a line; the demo adds the command that resumes it,
        # instead of a traceback.
        print(f"resume it: {resume_command(args, path)}", file=sys.stderr)
        sys.exit(130)


def resume_command(args: argparse.Namespace, path: str) -> str:
    """The command that runs what is not done of this sweep, as it can be typed."""
    same = f" --experiments {args.experiments}" if args.experiments != 10_000 else ""
    return f"{sys.executable} {os.path.abspath(__file__)} --store {path}{same}"


def demo(args: argparse.Namespace, path: str) -> None:
    """Defines the sweep in the store at path, runs what is not done, and reads it back."""
    store = runstore.open(path)
    store.define_experiments(design(args.experiments))  # a no-op for rows already defined
    todo = len(store.pending())
    print(f"runstore demo: {len(store.design()):,} SIR epidemics ({todo:,} to run) -> {path}")

    summary = runstore.run_experiments(
        store, simulate, workers=args.workers, commit_every=args.commit_every
    )
    rate = summary.done / summary.seconds if summary.seconds else 0.0
    on_disk = sum(e.stat().st_size for e in os.scandir(os.path.join(path, "segments")))
    print(
        f"\nran {summary} on {summary.workers} processes ({rate:,.0f} experiments/s), "
        f"{on_disk / 2**20:.1f} MiB on disk"
    )

    experiments, outcomes = runstore.load_results(store)
    print(
        f"read back: {len(experiments):,} experiments x {len(experiments.columns)} columns "
        f"(parameters and status), outcomes "
        f"{', '.join(f'{k} {v.shape}' for k, v in outcomes.items())}\n"
    )
    df = experiments[["beta", "gamma", "seed", "state"]].copy()
    for name in ("peak_infected", "peak_day", "final_size"):
        df[name] = outcomes[name]
    df["R0"] = (df["beta"] / df["gamma"]).round(0)
    table = df.groupby("R0").agg(
        experiments=("seed", "size"),
        final_size=("final_size", "mean"),
        peak_infected=("peak_infected", "mean"),
        peak_day=("peak_day", "median"),
    )
    print("mean outcome by basic reproduction number R0 = beta / gamma:")
    print(table.head(12).to_string(float_format=lambda v: f"{v:.3f}"))
    worst = int(np.nanargmax(outcomes["peak_infected"]))
    row = experiments.iloc[worst]
    curve = store.get(row["experiment"], "infected")
    print(
        f"\nworst epidemic: experiment {row['experiment']} "
        f"(beta={row['beta']:.2f}, gamma={row['gamma']:.2f}): "
        f"{outcomes['peak_infected'][worst]:.0%} infected at once "
        f"on day {outcomes['peak_day'][worst]}; "
        f"its curve comes back zero-copy: {curve.shape} {curve.dtype}, "
        f"read-only={not curve.flags.writeable}"
    )
    failed = experiments[experiments["state"] == "failed"]
    if len(failed):
        print(f"\n{len(failed)} experiments failed; the first error:\n{failed['error'].iloc[0]}")

    if args.tar:
        r = store.export_tar(args.tar)
        print(
            f"\nexported {r['experiments']:,} experiments to {r['path']} "
            f"({r['bytes'] / 2**20:.1f} MiB)"
        )
    # The commands as they can be typed: the `runstore` of this environment by its full path
    # when it is not the one on PATH (a virtual environment that is not activated).
    rs = shutil.which("runstore", path=os.path.dirname(sys.executable)) or "runstore"
    if shutil.which("runstore") == rs:
        rs = "runstore"
    print(f"\nthe store is at {path}")
    print(f"  look at it:  {rs} ls {path}")
    print(f"               {rs} cat {path} final_size --limit 5")
    print(f"  resume it:   {resume_command(args, path)}")
    print("               (runs only what is not done)")
    print(f"  export it:   {rs} export tar {path} results.tar.gz")
    if args.store is None:
        print(f"  remove it:   rm -r {os.path.dirname(path)}")


if __name__ == "__main__":
    main()
