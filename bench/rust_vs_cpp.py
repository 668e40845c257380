#!/usr/bin/env python3
"""The Rust crate (through the C API) against the C++ API, on one workload in the same run:
bench/api_bench.cc and bindings/rust/runstore/examples/throughput.rs, alternately (C++ first in
odd rounds, Rust first in even ones, so that a drift of the machine falls on both), ROUNDS times
each; the median of each figure and the ratio Rust / C++ (target: within 5%, docs/
performance.md "The C API and the Rust crate").

Each program runs each phase 5 times and prints its best, twice: over the wall-clock time, and
over the process's CPU time (CLOCK_PROCESS_CPUTIME_ID, all its threads), which another process
on the machine does not lengthen and which counts work the calling thread hands to the writer's
threads (where the wall clock may not see it). The target is judged on the CPU time, what the
API costs; the wall-clock ratios are printed beside.

    cmake --build build/release --target api_bench
    (cd bindings/rust/runstore && RUNSTORE_LIB_DIR=$PWD/../../../build/release \\
        CARGO_TARGET_DIR=$PWD/../../../build/rust cargo build --offline --release --examples)
    python3 bench/rust_vs_cpp.py [--rounds 5] [--dir /var/tmp]

Exits 3 when a figure misses the target (as the other benchmarks do), 0 otherwise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS = {
    "C++ API": os.path.join(ROOT, "build", "release", "bench", "api_bench"),
    "Rust (C API)": os.path.join(ROOT, "build", "rust", "release", "examples", "throughput"),
}


def run(program: str, store: str) -> dict[str, tuple[float, str]]:
    out = subprocess.run([program, store], check=True, capture_output=True, text=True).stdout
    figures = {}
    for line in out.splitlines():
        name, value, unit = line.split()
        figures[name] = (float(value), unit)
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", default=os.environ.get("RUNSTORE_BENCH_DIR", "/var/tmp"))
    args = ap.parse_args()
    for label, program in PROGRAMS.items():
        if not os.path.exists(program):
            print(f"rust_vs_cpp: {program} ({label}) is not built (docstring)", file=sys.stderr)
            return 2
    samples: dict[str, dict[str, list[float]]] = {label: {} for label in PROGRAMS}
    units = {}
    store = os.path.join(args.dir, f"rust-vs-cpp-{os.getpid()}")
    for round_ in range(args.rounds):
        order = list(PROGRAMS.items())
        for label, program in order if round_ % 2 == 0 else reversed(order):
            for name, (value, unit) in run(program, store).items():
                samples[label].setdefault(name, []).append(value)
                units[name] = unit
    cpp, rust = samples["C++ API"], samples["Rust (C API)"]
    if set(cpp) != set(rust):
        print(f"rust_vs_cpp: the programs' figures differ: {sorted(cpp)} / {sorted(rust)}")
        return 1
    head = (
        f"{'figure':<16} {'C++ API, CPU':>16} {'Rust, CPU':>14} {'Rust / C++':>11}"
        f" {'wall: C++':>14} {'Rust':>14} {'ratio':>7}"
    )
    print(f"{head}  (medians of {args.rounds}; CPU: the process's)")
    missed = False
    for name in (n for n in cpp if not n.endswith(".cpu")):
        unit = units[name]
        a, b = statistics.median(cpp[name + ".cpu"]), statistics.median(rust[name + ".cpu"])
        wa, wb = statistics.median(cpp[name]), statistics.median(rust[name])
        ok = b / a >= 0.95
        missed |= not ok
        print(
            f"{name:<16} {a:>11.3f} {unit:<4} {b:>9.3f} {unit:<4} {b / a:>9.2f}x"
            f" {wa:>9.3f} {unit:<4} {wb:>9.3f} {unit:<4} {wb / wa:>6.2f}x"
            f"  {'within 5%' if ok else 'MISSED (target: within 5%)'}"
        )
    return 3 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
