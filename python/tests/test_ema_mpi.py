"""runstore.ema with EMA's own MPIEvaluator under a real mpiexec (Open MPI; ema-workbench 3.x and
mpi4py: run by scripts/test.sh in .venv312).

The sweeps run as EMA's own example runs them (ema_workbench/examples/example_mpi_lake_model.py),
``mpiexec -n 1 python sweep.py``: one rank, the evaluator's parent, where EMA calls the callback;
its MPIPoolExecutor spawns the workers (MPI_Comm_spawn). EMA's log watcher publishes an MPI port
by name (MPI_Publish_name) and each worker looks it up (MPI_Lookup_name): the mpiexec that
started the parent serves those names to the processes it spawned, with no ompi-server.
``--oversubscribe`` gives the spawned workers slots beyond the cores: without it the spawn fails
(MPI_ERR_SPAWN), and EMA's ``initialize`` then waits forever for a pool that never starts.
``--mca mpi_yield_when_idle 1``: Open MPI polls in a blocking call, and the parent's log watcher
waits in one for the whole sweep. (Under ``mpiexec -n K python -m mpi4py.futures`` EMA's
evaluator deadlocks instead: its log watcher accepts on COMM_WORLD, which the workers, in that
same world, enter with Connect.)

Each mpiexec costs seconds before the first experiment (its workers import EMA), so the tests
share two: the first SIGKILLed mid-sweep; the second, one MPIEvaluator, runs what the first left
(``runstore.ema.remaining``), then every scenario with EMA's DefaultCallback and with
``runstore.ema.callback`` into a new store. EMA's DefaultCallback under that evaluator and EMA's
sequential loop are the references.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import psutil
import pytest

pytest.importorskip("ema_workbench")

from ema_workbench import perform_experiments
from test_ema import assert_same_results, make_model, scenarios_of

import runstore
import runstore.ema

HERE = Path(__file__).resolve().parent
MPIEXEC = shutil.which("mpiexec")
pytestmark = [
    pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not found (Open MPI's openmpi-bin)"),
    pytest.mark.skipif(
        importlib.util.find_spec("mpi4py") is None,
        reason="mpi4py not installed (python/requirements-ema.txt)",
    ),
]
N = 300  # scenarios_of(model, N): the default seed
KILL_AFTER = 20  # experiments seen done

HEADER = """
import pickle, sys, warnings
sys.path.insert(0, {testdir!r})
import runstore.ema
from ema_workbench import MPIEvaluator
from test_ema import make_model, scenarios_of, slow_toy, toy
# The workers import this file too (as "__worker__"): only the parent sweeps.
"""

# Killed part way: each experiment written, and flushed, as it comes.
FIRST = """
if __name__ == "__main__":
    warnings.simplefilter("ignore", FutureWarning)  # "The MPIEvaluator is experimental"
    model = make_model(slow_toy)
    cb = runstore.ema.callback({killed!r}, flush_every_s=0.0, commit_every_s=0.05)
    with MPIEvaluator(model, n_processes=2) as evaluator:
        evaluator.perform_experiments(scenarios_of(model, {n}), callback=cb)
"""

# The same model's function without the sleep: its outcomes are slow_toy's.
SECOND = """
if __name__ == "__main__":
    warnings.simplefilter("ignore", FutureWarning)
    model = make_model(toy)
    scenarios = scenarios_of(model, {n})
    left = runstore.ema.remaining({killed!r}, scenarios)
    with MPIEvaluator(model, n_processes=2) as evaluator:
        evaluator.perform_experiments(left, callback=runstore.ema.callback({killed!r}))
        print("resumed", len(left), flush=True)
        with open({reference!r}, "wb") as f:
            pickle.dump(evaluator.perform_experiments(scenarios), f)
        evaluator.perform_experiments(scenarios, callback=runstore.ema.callback({fresh!r}))
    print("swept", len(scenarios), flush=True)
"""


def _start(d: Path, name: str, main: str, **fields) -> subprocess.Popen:
    """Starts ``mpiexec -n 1 python d/name.py`` in a session of its own, its output in
    d/name.log."""
    script = d / f"{name}.py"
    script.write_text(textwrap.dedent(HEADER + main).format(testdir=str(HERE), n=N, **fields))
    # Yielding where Open MPI polls leaves the cores to the workers (whose start, importing EMA,
    # takes seconds) while the parent's log watcher waits.
    cmd = [MPIEXEC, "-n", "1", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    with open(d / f"{name}.log", "w") as log:
        return subprocess.Popen(
            [*cmd, sys.executable, str(script)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _kill_all(proc: subprocess.Popen) -> None:
    """SIGKILLs mpiexec and every process under it (the parent rank and the spawned workers)
    at once: mpiexec puts each rank in a process group of its own, which SIGKILL of its own
    group would leave to notice that it is gone."""
    root = psutil.Process(proc.pid)
    procs = [root, *root.children(recursive=True)]
    os.killpg(proc.pid, signal.SIGKILL)
    for p in procs[1:]:
        try:
            p.send_signal(signal.SIGKILL)  # psutil checks that it is still the same process
        except psutil.NoSuchProcess:
            pass
    proc.wait()
    _, alive = psutil.wait_procs(procs, timeout=30)
    assert not alive, f"still running after SIGKILL: {alive}"


def _done(path: str) -> int:
    if not os.path.exists(os.path.join(path, "ATTRS")):
        return 0
    try:
        return int((runstore.open(path, mode="r").status()["state"] == "done").sum())
    except (ValueError, KeyError):  # the first experiments not yet there
        return 0


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    d = tmp_path_factory.mktemp("ema_mpi")
    paths = {k: str(d / k) for k in ("killed", "fresh")}
    reference = str(d / "ema.pickle")
    first = _start(d, "first", FIRST, **paths)
    done = 0
    deadline = time.monotonic() + 180  # a guard against a hang, not a measure
    try:
        while time.monotonic() < deadline and first.poll() is None and done < KILL_AFTER:
            time.sleep(0.1)
            done = _done(paths["killed"])
        assert first.poll() is None, (
            f"the first sweep ended (status {first.returncode}) before it could be killed:\n"
            + (d / "first.log").read_text()[-3000:]
        )
    finally:
        if first.poll() is None:
            _kill_all(first)
    left = len(runstore.ema.remaining(paths["killed"], scenarios_of(make_model(), N)))

    second = _start(d, "second", SECOND, reference=reference, **paths)
    try:
        second.wait(timeout=300)
    finally:
        if second.poll() is None:
            _kill_all(second)
    out = (d / "second.log").read_text()
    assert second.returncode == 0 and "swept" in out, f"mpiexec: {second.returncode}\n{out[-3000:]}"
    with open(reference, "rb") as f:
        ema_mpi = pickle.load(f)
    return SimpleNamespace(done=done, left=left, out=out, ema_mpi=ema_mpi, **paths)


def test_mpi_evaluator_stores_what_emas_default_callback_gives(sweeps):
    """Every scenario under one MPIEvaluator, with EMA's DefaultCallback, then with
    runstore.ema.callback: the tables runstore.ema.load_results gives equal EMA's, and EMA's
    sequential loop's."""
    model = make_model()
    sequential = perform_experiments(model, scenarios_of(model, N))
    # Scenario names come from a counter of the process that samples them (EMA's Sample).
    assert_same_results(
        (sequential[0].drop(columns="scenario"), sequential[1]),
        (sweeps.ema_mpi[0].drop(columns="scenario"), sweeps.ema_mpi[1]),
    )
    store = runstore.open(sweeps.fresh, mode="r")
    assert_same_results(sweeps.ema_mpi, runstore.ema.load_results(store))
    assert store.attrs["ema"]["models"] == ["toy"]


def test_kill_9_of_mpiexec_then_resume_runs_only_what_is_missing(sweeps):
    """mpiexec, the evaluator's parent and its workers SIGKILLed mid-sweep; a new mpiexec runs
    runstore.ema.remaining; then the store holds every experiment exactly once, with EMA's
    values."""
    kept = N - sweeps.left
    print(f"MPIEvaluator: killed after at least {sweeps.done} experiments seen done; {kept} kept")
    assert kept >= sweeps.done and 0 < sweeps.left < N
    assert f"resumed {sweeps.left}\n" in sweeps.out
    store = runstore.open(sweeps.killed, mode="r")
    for name in ("y", "curve", "count", "~status/state"):
        runs = store.scan(name)["run"]
        assert len(runs) == N and len(set(runs.tolist())) == N, f"{name}: each experiment once"
    model = make_model()
    scen = scenarios_of(model, N)
    assert runstore.ema.remaining(store, scen) == []
    experiments, outcomes = runstore.ema.load_results(store)
    ref_e, ref_o = perform_experiments(model, scen)
    # The resumed experiments' rows come after the first sweep's: compared in the order of x.
    order, ref_order = np.argsort(experiments["x"].to_numpy()), np.argsort(ref_e["x"].to_numpy())
    cols = ["x", "n", "kind", "model"]
    pd.testing.assert_frame_equal(
        experiments[cols].iloc[order].reset_index(drop=True),
        ref_e[cols].iloc[ref_order].reset_index(drop=True),
    )
    for name in ("y", "curve", "count"):
        np.testing.assert_array_equal(outcomes[name][order], ref_o[name][ref_order], err_msg=name)
