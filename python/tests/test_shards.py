"""run_experiments(shard=(i, n)): n runners without a scheduler split a sweep by experiment id.

The crash test runs 4 real runner processes (two given shard=, two taking it from SLURM array
variables), kills one with SIGKILL part way, reruns that shard, and counts the real invocations
of every experiment from a log each invocation appends to (O_APPEND).
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import runstore
from runstore.experiments import _runner


def test_shards_partition_the_ids_and_do_not_depend_on_order():
    ids = [f"e{k:016x}" for k in range(1000)] + list(range(1000))
    n = 4
    parts = [{e for e in ids if _runner.shard_of(e, n) == i} for i in range(n)]
    assert sum(len(p) for p in parts) == len(ids)
    assert set().union(*parts) == set(ids)
    sizes = [len(p) for p in parts]
    print("shard sizes of 2000 ids over 4 shards:", sizes)
    assert min(sizes) > 400  # a hash, not a position: roughly even
    # Int 7 and str "7" are different ids and may land apart; each is stable.
    assert _runner.shard_of(7, n) == _runner.shard_of(7, n)
    assert [_runner.shard_of(e, n) for e in reversed(ids)] == [_runner.shard_of(e, n) for e in ids][
        ::-1
    ]


@pytest.mark.parametrize("bad", [(4, 4), (-1, 4), (0, 0), (1,), "0/4", (0.0, 2), (True, 2)])
def test_bad_shard_is_a_value_error_naming_shard(store, bad):
    store.define_experiments(runstore.grid(x=range(3)))
    with pytest.raises(ValueError, match="shard"):
        runstore.run_experiments(store, _noop, workers=0, shard=bad)


def _noop(x):
    return {"y": x}


def test_shard_from_slurm_array_variables():
    env = {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "3", "SLURM_ARRAY_TASK_COUNT": "4"}
    assert _runner.shard_from_env(env) == (2, 4)
    env |= {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_STEP": "2", "SLURM_ARRAY_TASK_MIN": "1"}
    assert _runner.shard_from_env(env) == (3, 4)
    with pytest.raises(ValueError, match="shard"):
        _runner.shard_from_env(env | {"SLURM_ARRAY_TASK_ID": "4"})  # not on the step
    with pytest.raises(ValueError, match="shard"):
        _runner.shard_from_env(env | {"SLURM_ARRAY_TASK_ID": "9"})  # beyond the count
    assert _runner.shard_from_env({"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "3"}) == (1, 3)
    # The batch script of a job of 4 tasks: one runner, the whole sweep.
    assert _runner.shard_from_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}) is None
    assert _runner.shard_from_env({}) is None
    # An array wins over the tasks of a step.
    both = {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_PROCID": "1"}
    assert _runner.shard_from_env(both | {"SLURM_STEP_NUM_TASKS": "2"}) == (0, 2)


def test_shards_in_one_process_run_disjoint_parts_then_nothing_is_left(store):
    store.define_experiments(runstore.grid(x=range(40)))
    total = 0
    for i in range(3):
        s = runstore.run_experiments(store, _noop, workers=0, progress=False, shard=(i, 3))
        again = runstore.run_experiments(store, _noop, workers=0, progress=False, shard=(i, 3))
        assert again.done == 0 and again.skipped == s.done
        total += s.done
    assert total == 40 and store.pending() == []


RUNNER = textwrap.dedent(
    """
    import os, sys, time
    import runstore

    LOG = sys.argv[2]

    def work(x):
        # One line per real invocation, appended atomically (O_APPEND, one write).
        fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, f"{x} {os.environ['SHARD']}\\n".encode())
        os.close(fd)
        time.sleep(0.05)
        return {"y": 2 * x}

    if __name__ == "__main__":
        shard = None if os.environ.get("SLURM_ARRAY_TASK_ID") else (int(os.environ["SHARD"]), 4)
        s = runstore.run_experiments(
            runstore.open(sys.argv[1]), work, workers=1, progress=False, shard=shard
        )
        print("summary", s.done, s.failed, s.skipped, flush=True)
    """
)


def _start(tmp_path: Path, store_path: str, i: int) -> subprocess.Popen:
    env = dict(os.environ, SHARD=str(i))
    for k in list(env):
        if k.startswith("SLURM_"):
            del env[k]
    if i % 2:  # shards 1 and 3 from a SLURM array --array=10-13
        env |= {
            "SLURM_ARRAY_TASK_ID": str(10 + i),
            "SLURM_ARRAY_TASK_MIN": "10",
            "SLURM_ARRAY_TASK_MAX": "13",
            "SLURM_ARRAY_TASK_COUNT": "4",
        }
    return subprocess.Popen(
        [sys.executable, str(tmp_path / "runner.py"), store_path, str(tmp_path / "calls.log")],
        env=env,
        start_new_session=True,  # the runner and its worker: one process group to kill
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _calls(tmp_path: Path) -> collections.Counter:
    lines = (tmp_path / "calls.log").read_text().splitlines()
    return collections.Counter(tuple(map(int, line.split())) for line in lines)


def test_four_runners_one_killed_and_rerun_run_every_experiment_once(tmp_path, store):
    n = 160
    store.define_experiments(runstore.grid(x=range(n)))
    (tmp_path / "runner.py").write_text(RUNNER)
    ids = store.design()
    shard_of = {int(x): _runner.shard_of(e, 4) for e, x in zip(ids["experiment"], ids["x"])}
    sizes = collections.Counter(shard_of.values())
    victim = 2
    procs = {i: _start(tmp_path, store.path, i) for i in range(4)}
    deadline = time.monotonic() + 90
    while True:  # kill the victim once it has committed a few of its experiments
        assert time.monotonic() < deadline, "the victim did not get going"
        assert procs[victim].poll() is None, procs[victim].communicate()
        store.refresh()
        st = store.status()
        mine = st[[shard_of[int(x)] == victim for x in ids["x"]]]
        done_victim = int((mine["state"] == "done").sum())
        if done_victim >= 5:
            break
        time.sleep(0.02)
    os.killpg(procs[victim].pid, signal.SIGKILL)
    procs[victim].wait()
    outs = {}
    for i, p in procs.items():
        if i != victim:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            outs[i] = out
            assert f"summary {sizes[i]} 0 0" in out, (i, out)
    store.refresh()
    st = store.status()
    victim_done = {
        int(x) for x, s in zip(ids["x"], st["state"]) if s == "done" and shard_of[int(x)] == victim
    }
    print(
        f"shard sizes {dict(sorted(sizes.items()))}; shard {victim} killed with "
        f"{len(victim_done)} of {sizes[victim]} done"
    )
    assert 5 <= len(victim_done) < sizes[victim]
    calls_before = _calls(tmp_path)

    # The rerun of the killed shard does only its own remaining work.
    p = _start(tmp_path, store.path, victim)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    left = sizes[victim] - len(victim_done)
    assert f"summary {left} 0 {len(victim_done)}" in out, out
    store.refresh()
    assert store.pending() == []
    table, outcomes = runstore.load_results(store)
    assert (table["state"] == "done").all()
    assert (outcomes["y"] == 2 * table["x"]).all()

    calls = _calls(tmp_path)
    per_x = collections.Counter()
    for (x, s), c in calls.items():
        assert s == shard_of[x], f"experiment x={x} of shard {shard_of[x]} ran in runner {s}"
        per_x[x] += c
    assert set(per_x) == set(range(n))
    twice = {x: c for x, c in per_x.items() if c > 1}
    print(f"{sum(calls.values())} invocations for {n} experiments; more than once: {twice}")
    # Only the experiment the kill interrupted (one worker: at most one) ran twice.
    assert len(twice) <= 1 and all(c == 2 and shard_of[x] == victim for x, c in twice.items())
    for x in victim_done:  # committed before the kill: not run again
        assert per_x[x] == 1
    new = calls - calls_before
    assert all(s == victim for _, s in new)  # the rerun touched its own shard only
