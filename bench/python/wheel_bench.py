#!/usr/bin/env python3
"""runstore's wheel against h5py's and pyarrow's: size, install time, import time.

The three are what a user installs from binary wheels to keep results on disk from Python; each
bundles its C/C++ libraries (runstore: zstd, lz4, xxhash, libcrypto, its C++ runtime linked in;
h5py: HDF5; pyarrow: Arrow). For each wheel, in one run on this machine:

  size          the .whl file, and what it unpacks to in site-packages
  install       `pip install --no-deps --no-index` of the wheel file alone into a virtual
                environment that already has numpy and pandas (the dependencies are the same
                for all three, so they are left out): wall time, median of --repeat installs
  import        `python -c "import X"` in that environment, minus `python -c "import numpy"`
                (which all three import): wall time, median of --repeat runs, page cache warm

runstore's wheel is the one given (--wheel, made by scripts/build-wheel.sh); h5py's and pyarrow's
are fetched from the package index for this Python (pip's cache serves a rerun).

    .venv/bin/python bench/python/wheel_bench.py --wheel dist/runstore-*-cp311-*.whl

Exit status 0, or 1 on an error. No target: the figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

PEERS = {"h5py": "h5py", "pyarrow": "pyarrow"}


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    run(cmd)
    return time.perf_counter() - t0


def installed_size(py: str, dist: str) -> int:
    """The bytes of the files pip installed for dist (its RECORD, with their sizes)."""
    code = (
        "import importlib.metadata as m, sys; print(sum(f.size or 0 for f in m.files(sys.argv[1])))"
    )
    return int(run([py, "-c", code, dist]).stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", required=True, help="runstore's wheel (scripts/build-wheel.sh)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=None, help="scratch folder (default: a temporary one)")
    args = ap.parse_args()

    scratch = Path(args.dir or tempfile.mkdtemp(prefix="wheel-bench-"))
    scratch.mkdir(parents=True, exist_ok=True)
    wheels = scratch / "wheels"
    wheels.mkdir(exist_ok=True)
    ours = wheels / Path(args.wheel).name
    shutil.copy(args.wheel, ours)
    # The peers' wheels for this Python, from the index (or pip's cache).
    run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
         "-d", str(wheels), *PEERS.values()])  # fmt: skip
    files = {"runstore": ours}
    for module in PEERS:
        (found,) = wheels.glob(f"{module}-*.whl")
        files[module] = found

    env = scratch / "venv"
    venv.create(env, with_pip=True, clear=True)
    py = str(env / "bin" / "python")
    run([py, "-m", "pip", "install", "-q", "numpy", "pandas"])
    base = [timed([py, "-c", "import numpy"]) for _ in range(args.repeat)]
    rows = []
    for module, whl in files.items():
        installs, imports = [], []
        for i in range(args.repeat):
            if i:
                run([py, "-m", "pip", "uninstall", "-q", "-y", module])
            installs.append(
                timed([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(whl)])
            )
            imports.append(timed([py, "-c", f"import {module}"]))
        version = run([py, "-c", f"import {module}; print({module}.__version__)"]).stdout.strip()
        rows.append(
            (
                f"{module} {version}",
                whl.stat().st_size / 2**20,
                installed_size(py, module) / 2**20,
                statistics.median(installs),
                statistics.median(imports) - statistics.median(base),
            )
        )
        run([py, "-m", "pip", "uninstall", "-q", "-y", module])

    print(f"Python {sys.version.split()[0]}, median of {args.repeat}; import time beyond numpy's "
          f"({statistics.median(base) * 1e3:.0f} ms for `import numpy` itself)")  # fmt: skip
    print("| wheel | .whl | installed | pip install | import |")
    print("|---|---|---|---|---|")
    for name, whl_mib, site_mib, install, imp in rows:
        print(
            f"| {name} | {whl_mib:.1f} MiB | {site_mib:.1f} MiB | {install:.2f} s | "
            f"{imp * 1e3:.0f} ms |"
        )
    if args.dir is None:
        shutil.rmtree(scratch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
