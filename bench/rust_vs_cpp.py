#!/usr/bin/env python3
"""The Rust crate (through the C API) against the C++ API, on one workload in the same run:
bench/api_bench.cc and bindings/rust/runstore/examples/throughput.rs, alternately, ROUNDS
times each; the median of each figure and the ratio Rust / C++ (target: within 5%, docs/
performance.md "The C API and the Rust crate").

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
    for _ in range(args.rounds):
        for label, program in PROGRAMS.items():
            store = os.path.join(args.dir, f"rust-vs-cpp-{os.getpid()}")
            for name, (value, unit) in run(program, store).items():
                samples[label].setdefault(name, []).append(value)
                units[name] = unit
    cpp, rust = samples["C++ API"], samples["Rust (C API)"]
    head = f"{'figure':<16} {'C++ API':>12} {'Rust (C API)':>14} {'Rust / C++':>11}"
    print(f"{head}  (median of {args.rounds})")
    missed = False
    for name in cpp:
        a, b = statistics.median(cpp[name]), statistics.median(rust[name])
        ratio = b / a
        ok = ratio >= 0.95
        missed |= not ok
        print(
            f"{name:<16} {a:>8.3f} {units[name]:<4}{b:>10.3f} {units[name]:<4}{ratio:>9.2f}x"
            f"  {'within 5%' if ok else 'MISSED (target: within 5%)'}"
        )
    return 3 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
