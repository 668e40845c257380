"""SIGTERM and SIGINT at random moments (docs/experiments.md, "Signals").

A batch system preempts a job with SIGTERM, then SIGKILL after a grace period; Ctrl-C is SIGINT.
A writer's with-block, run_experiments (on worker processes and in the calling process), the Dask
workers of run_experiments(client=) and runstore.ema's callback must commit what is complete,
mark what was interrupted, end with the conventional status (SystemExit(128 + signum), or the
signal's default action), and leave a rerun to do every experiment exactly once.

Real processes, real signals, at moments drawn from the session's seed (RUNSTORE_TEST_SEED, in
the header). RUNSTORE_SIGNAL_ROUNDS sets the rounds of each randomized test (3 by default);
scripts/signal_campaign.sh runs many more.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import SEED

import runstore

ROUNDS = int(os.environ.get("RUNSTORE_SIGNAL_ROUNDS", "3"))
HERE = Path(__file__).parent


def _script(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def _start(*args: str) -> subprocess.Popen:
    # Its own session and process group, as a job of a terminal or a batch system.
    return subprocess.Popen(
        [sys.executable, *args],
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_line(proc: subprocess.Popen, line: str) -> None:
    for got in proc.stdout:
        if got.strip() == line:
            return
    raise AssertionError(f"the script ended before it printed {line!r}: {proc.communicate()}")


# -- a writer's with-block ---------------------------------------------------------------------

ONE_BLOCK = """
import signal, sys
import runstore
signal.signal(signal.SIGINT, signal.default_int_handler)  # as on a terminal
store = runstore.open(sys.argv[1])
with store.writer() as w:
    step = 0
    while True:
        w.log(0, step=step, x=float(step))
        if step == 100:
            print("logging", flush=True)
        step += 1
"""


def test_a_signal_in_a_writers_with_block_commits_what_was_logged(tmp_path, rng):
    """Nothing is committed inside the block: without the handler, SIGTERM lost every record."""
    script = _script(tmp_path, "one_block.py", ONE_BLOCK)
    tried = []
    for k in range(ROUNDS):
        sig = [signal.SIGTERM, signal.SIGINT][k % 2]
        path = tmp_path / f"s{k}"
        proc = _start(str(script), str(path))
        _wait_for_line(proc, "logging")
        time.sleep(float(rng.uniform(0, 0.05)))
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        expected = 128 + signal.SIGTERM if sig == signal.SIGTERM else -signal.SIGINT
        assert proc.returncode == expected, (proc.returncode, err)
        steps = np.sort(runstore.open(path, mode="r").scan("x")["step"])
        assert len(steps) > 100 and (steps == np.arange(len(steps))).all(), steps[:5]
        tried.append(f"{signal.Signals(sig).name}: {len(steps)} steps committed")
    print(f"{ROUNDS} rounds of a signal in a with-block (seed {SEED}):", "; ".join(tried))


MANY_BLOCKS = """
import signal, sys
import runstore
signal.signal(signal.SIGINT, signal.default_int_handler)
store = runstore.open(sys.argv[1])
block = 0
while True:
    with store.writer() as w:
        for step in range(20):
            w.log(block, step=step, x=float(step))
    if block == 0:
        print("go", flush=True)
    block += 1
"""


def test_signals_at_random_moments_between_and_inside_with_blocks(tmp_path, rng):
    """Each block commits its records on exit: whatever the moment (inside a block, in its exit,
    between blocks), the store holds every block before the last whole and a prefix of the
    last, and the status is 143 (SIGTERM raised in a block), -SIGTERM (its default action
    between blocks) or -SIGINT (KeyboardInterrupt, re-raised at exit)."""
    script = _script(tmp_path, "many_blocks.py", MANY_BLOCKS)
    statuses: dict[int, int] = {}
    for k in range(ROUNDS):
        sig = [signal.SIGTERM, signal.SIGINT][int(rng.integers(2))]
        path = tmp_path / f"s{k}"
        proc = _start(str(script), str(path))
        _wait_for_line(proc, "go")
        time.sleep(float(rng.uniform(0, 0.2)))
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        allowed = (
            {128 + signal.SIGTERM, -signal.SIGTERM} if sig == signal.SIGTERM else {-signal.SIGINT}
        )
        assert proc.returncode in allowed, (signal.Signals(sig).name, proc.returncode, err)
        statuses[proc.returncode] = statuses.get(proc.returncode, 0) + 1
        d = runstore.open(path, mode="r").scan("x")
        blocks = int(d["run"].max()) + 1
        for b in range(blocks):
            steps = np.sort(d["step"][d["run"] == b])
            want = 20 if b < blocks - 1 else len(steps)
            assert (steps == np.arange(want)).all(), (b, blocks, steps)
    print(f"{ROUNDS} rounds of signals around with-blocks (seed {SEED}); exit statuses {statuses}")


OWN_HANDLER = """
import signal, sys, time
import runstore
def mine(signum, frame):
    sys.exit(7)
signal.signal(signal.SIGTERM, mine)
with runstore.open(sys.argv[1]).writer() as w:
    w.log(0, x=1.0)
    print("in", flush=True)
    while True:  # not signal.pause(): a signal that comes just before it would be missed
        time.sleep(0.05)
"""


def test_a_programs_own_sigterm_handler_is_left_alone(tmp_path):
    proc = _start(str(_script(tmp_path, "own.py", OWN_HANDLER)), str(tmp_path / "s"))
    _wait_for_line(proc, "in")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    print("SIGTERM to a with-block whose program handles SIGTERM itself: exit", proc.returncode)
    assert proc.returncode == 7
    assert runstore.open(tmp_path / "s", mode="r").get(0, "x") == 1.0


# -- run_experiments -----------------------------------------------------------------------------

SWEEP = """
import os, signal, sys, time
import numpy as np
import runstore

signal.signal(signal.SIGINT, signal.default_int_handler)
CALLS = sys.argv[2]

def work(x, seed):
    path = os.path.join(CALLS, f"{x}-{seed}")
    with open(path, "a") as f:
        f.write("start\\n")
    time.sleep(0.002 * (x % 7))
    with open(path, "a") as f:
        f.write("end\\n")
    return {"y": x * 1000 + seed, "v": np.full(3, x, dtype=np.int32)}

if __name__ == "__main__":
    store = runstore.open(sys.argv[1])
    print("running", flush=True)
    s = runstore.run_experiments(store, work, workers=int(sys.argv[3]), progress=False)
    print("summary", s.done, s.failed, s.skipped, flush=True)
"""


def _starts(calls: Path) -> dict[str, int]:
    return {p.name: p.read_text().count("start") for p in calls.iterdir()}


def _done_ids(store: runstore.Store, settled: bool = True) -> set:
    """The experiments done; ``settled``: the sweep has ended, and none may be "running"."""
    store.refresh()
    st = store.status()
    if settled:
        assert set(st["state"]) <= {"done", "pending"}, st["state"].value_counts()
    return set(st["experiment"][st["state"] == "done"])


@pytest.mark.parametrize("workers", [2, 0])
def test_a_sweep_signalled_at_random_moments_then_rerun_does_each_experiment_once(
    tmp_path, store, rng, workers
):
    """Rounds of: start the sweep, signal it (SIGTERM to the whole job as SLURM does, SIGTERM to
    the parent alone, or Ctrl-C's SIGINT to the process group) at a random moment, check that
    nothing is left "running" and that what was done stays done (never started again); then a
    last run finishes the sweep, each experiment exactly once."""
    n = 120
    script = _script(tmp_path, "sweep.py", SWEEP)
    calls = tmp_path / "calls"
    calls.mkdir()
    store.define_experiments(runstore.grid(x=range(40), seed=range(3)))
    names = {
        e: f"{x}-{s}" for e, x, s in store.design()[["experiment", "x", "seed"]].itertuples(False)
    }
    done_at: dict = {}  # experiment -> its start count when first seen done
    kinds = ["SIGTERM to the job", "SIGTERM to the parent", "SIGINT to the job"]
    tried = []
    for _ in range(ROUNDS):
        kind = kinds[int(rng.integers(3))]
        proc = _start(str(script), store.path, str(calls), str(workers))
        _wait_for_line(proc, "running")
        target = len(done_at) + int(rng.integers(0, n // 4))
        while proc.poll() is None and len(_done_ids(store, settled=False)) < target:
            time.sleep(0.01)
        time.sleep(float(rng.uniform(0, 0.05)))
        if kind == "SIGTERM to the parent":
            proc.send_signal(signal.SIGTERM)
        elif proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT if "SIGINT" in kind else signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        allowed = {0, -signal.SIGINT} if "SIGINT" in kind else {0, 143, -signal.SIGTERM}
        assert proc.returncode in allowed, (kind, proc.returncode, err)
        if proc.returncode == 143:  # the sweep's own exit says what it did
            assert "Run again to continue" in err, err
        done = _done_ids(store)  # and nothing "running"
        starts = _starts(calls)
        for e, count in done_at.items():
            assert starts[names[e]] == count, f"{names[e]} was done, yet started again"
        for e in done - done_at.keys():
            done_at[e] = starts[names[e]]
        tried.append(f"{kind}: exit {proc.returncode}, {len(done)} done")
    proc = _start(str(script), store.path, str(calls), str(workers))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    tried.append(out.strip())
    print(f"workers={workers}, {ROUNDS} rounds (seed {SEED}):", "; ".join(tried))
    experiments, outcomes = runstore.load_results(store)
    assert len(experiments) == n and (experiments["state"] == "done").all()
    np.testing.assert_array_equal(outcomes["y"], experiments["x"] * 1000 + experiments["seed"])
    for name in ("y", "v", "~status/state"):
        runs = store.scan(name)["run"]
        assert len(runs) == n and len(set(runs.tolist())) == n
    starts = _starts(calls)
    for e, count in done_at.items():
        assert starts[names[e]] == count
    # Only experiments interrupted mid-call ran more than once: at most one per worker process
    # (or the one of the calling process) per round.
    extra = sum(c - 1 for c in starts.values())
    assert len(starts) == n and extra <= ROUNDS * max(workers, 1), starts


BLOCKING = """
import os, signal, sys, time
import runstore

signal.signal(signal.SIGINT, signal.default_int_handler)
FLAGS = sys.argv[2]
if __name__ == "__mp_main__":  # a spawned worker importing this script: it says so, then waits
    open(os.path.join(FLAGS, f"importing-{os.getpid()}"), "w").close()
    while not os.path.exists(os.path.join(FLAGS, "go")):
        time.sleep(0.01)

def work(x):
    if x == 5:
        open(os.path.join(FLAGS, "blocking"), "w").close()
        time.sleep(600)  # until a signal ends it
    return {"y": 10 * x}

if __name__ == "__main__":
    store = runstore.open(sys.argv[1])
    s = runstore.run_experiments(
        store, work, workers=int(sys.argv[3]), commit_every=1000, progress=False
    )
    print("summary", s.done, s.failed, s.skipped, s.not_run, flush=True)
"""


def _wait_for(path: Path, proc: subprocess.Popen) -> None:
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_a_sweep_in_the_calling_process_commits_what_finished(tmp_path, store, sig):
    """workers=0, one chunk of 20 (commit_every=1000): nothing is committed before the chunk
    ends, so the experiments that finished before the signal are committed by its handling
    alone (SIGTERM used to kill the process at once, losing them), and the one it interrupted
    is pending."""
    flags = tmp_path / "flags"
    flags.mkdir()
    (flags / "go").touch()
    script = _script(tmp_path, "blocking.py", BLOCKING)
    store.define_experiments(runstore.grid(x=range(20)))
    proc = _start(str(script), store.path, str(flags), "0")
    _wait_for(flags / "blocking", proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    expected = 128 + signal.SIGTERM if sig == signal.SIGTERM else -signal.SIGINT
    assert proc.returncode == expected, (proc.returncode, err)
    assert "interrupted; 5 done and 0 failed in this call, 15 not run" in err, err
    store.refresh()
    st = store.status().set_index(store.design()["x"])
    print(f"{signal.Signals(sig).name} to a sweep running in its process, at experiment 5:")
    print(st["state"].value_counts().to_dict())
    assert (st["state"][:5] == "done").all() and (st["state"][5:] == "pending").all()


def test_workers_killed_by_sigterm_while_they_start_are_replaced(tmp_path, store):
    """SIGTERM to the worker processes (not their parent) while they import fn's module, before
    they could handle it: they are replaced, not taken for workers that cannot start (which
    failed the sweep with RuntimeError), and the sweep completes."""
    flags = tmp_path / "flags"
    flags.mkdir()
    script = _script(tmp_path, "blocking.py", BLOCKING.replace("x == 5", "x == -1"))
    store.define_experiments(runstore.grid(x=range(20)))
    proc = _start(str(script), store.path, str(flags), "2")
    while len(list(flags.glob("importing-*"))) < 2:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    killed = [int(p.name.split("-")[1]) for p in flags.glob("importing-*")]
    for pid in killed:
        os.kill(pid, signal.SIGTERM)
    (flags / "go").touch()  # the replacements import at once
    out, err = proc.communicate(timeout=120)
    print(f"SIGTERM to {len(killed)} workers while they started: exit {proc.returncode}, {out}")
    assert proc.returncode == 0, err
    assert "summary 20 0 0 0" in out
    store.refresh()
    assert (store.status()["state"] == "done").all()


# -- Dask workers --------------------------------------------------------------------------------


def dask_work(x, flag_dir):
    """Experiment 2 of the first attempt waits to be killed; the others are quick."""
    if x == 2 and not os.path.exists(os.path.join(flag_dir, "retried")):
        open(os.path.join(flag_dir, "retried"), "w").close()
        with open(os.path.join(flag_dir, "waiting"), "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)  # until SIGTERM ends the process
    return {"y": 10 * x, "pid": os.getpid()}


def _segments_of(store_path: str, writer_pid: int, into: Path) -> runstore.Store:
    """A store holding only the segments whose writer ran in process ``writer_pid`` (default
    writer ids are host-pid-random): what that process committed."""
    (into / "segments").mkdir(parents=True)
    shutil.copy(os.path.join(store_path, "RUNSTORE"), into / "RUNSTORE")
    for f in Path(store_path, "segments").glob("*.rss"):
        if f"-{writer_pid}-" in f.name:
            shutil.copy(f, into / "segments" / f.name)
    return runstore.open(into, mode="r")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_a_dask_worker_commits_its_chunk_so_far_and_marks_the_rest(
    tmp_path, store, sig
):
    distributed = pytest.importorskip("distributed")
    flags = tmp_path / "flags"
    flags.mkdir()
    # 16 experiments on one worker: chunks of 4 (commit_every), the first x = 0..3.
    store.define_experiments(runstore.grid(x=range(16), flag_dir=[str(flags)]))
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), old]))
    # SIGINT as on a terminal: a test run started in the background of a non-interactive shell
    # (nohup, &) ignores it, and the worker processes would inherit that and never see it.
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with (
            distributed.LocalCluster(
                n_workers=1, processes=True, threads_per_worker=1, dashboard_address=":0"
            ) as cluster,
            distributed.Client(cluster) as client,
        ):
            result: dict = {}
            t = threading.Thread(
                target=lambda: result.update(
                    s=runstore.run_experiments(
                        store, dask_work, client=client, commit_every=4, progress=False
                    )
                )
            )
            t.start()
            waiting = flags / "waiting"
            while not waiting.exists() or not waiting.read_text():
                time.sleep(0.01)
            pid = int(waiting.read_text())
            os.kill(pid, sig)  # experiments 0 and 1 of the chunk are done, not committed
            t.join()
    finally:
        signal.signal(signal.SIGINT, old_int)
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old
    print(f"{signal.Signals(sig).name} to a Dask worker mid-chunk, then Dask ran it again:", result)
    assert result["s"].done == 16
    # What the signalled worker committed before it ended: the experiments it had finished, and
    # the one it was running set back to pending.
    killed = _segments_of(store.path, pid, tmp_path / "killed").scan("~status/state")
    by_x = dict(zip(store.design()["experiment"], store.design()["x"]))
    states = {by_x[e]: v for e, v in zip(killed["run"].tolist(), killed["value"].tolist())}
    assert states == {0: "done", 1: "done", 2: "pending"}, states
    # And the sweep: every experiment done once.
    store.refresh()
    experiments, outcomes = runstore.load_results(store)
    assert (experiments["state"] == "done").all()
    np.testing.assert_array_equal(outcomes["y"], experiments["x"] * 10)
    assert len(store.scan("y")["run"]) == 16
