"""examples/rl_run.py killed with SIGKILL at random moments and restarted: one record per step
and metric at the end, equal to an uninterrupted run's (the seed of the kill times is printed)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import runstore

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rl_run.py"
STEPS, EVERY = 60_000, 5000
METRICS = ("reward", "loss", "entropy", "lr")


def args(store, ckpt):
    return [
        sys.executable,
        str(EXAMPLE),
        "--store",
        str(store),
        "--checkpoint",
        str(ckpt),
        "--steps",
        str(STEPS),
        "--checkpoint-every",
        str(EVERY),
        "--commit-every",
        "50",
    ]


def curves(path):
    store = runstore.open(path, mode="r")
    df = store.to_pandas(list(METRICS), time=True)
    assert df["time"].notna().all(), "every step has its wall time"
    return df


def test_sigkill_and_restart_end_with_one_record_per_step(tmp_path):
    seed = random.SystemRandom().randrange(2**32)
    print(f"kill seed {seed}")
    rnd = random.Random(seed)
    subprocess.run(args(tmp_path / "ref", tmp_path / "ref.ckpt"), check=True)
    reference = curves(tmp_path / "ref")
    assert len(reference) == STEPS

    kills, path = 0, tmp_path / "s"
    for attempt in range(20):
        p = subprocess.Popen(args(path, tmp_path / "s.ckpt"), stdout=subprocess.DEVNULL)
        if attempt < 3:
            # Killed once the store shows it got past a random step (it commits every 50).
            target = rnd.randrange(1000, STEPS - 5000)
            while p.poll() is None:
                time.sleep(0.005)
                try:
                    done = len(runstore.open(path, mode="r").scan("loss", keys=False)["value"])
                except (KeyError, OSError, ValueError):
                    done = 0
                if done >= target:
                    p.send_signal(signal.SIGKILL)
                    kills += 1
                    print(f"attempt {attempt}: SIGKILL with {done} loss records visible")
                    break
        if p.wait() == 0:
            break
    assert kills >= 1, "no attempt was killed before it finished: make STEPS larger"
    got = curves(tmp_path / "s")
    print(f"{kills} SIGKILLs; checkpoint at the end: {os.path.exists(tmp_path / 's.ckpt')}")
    assert len(got) == STEPS and np.array_equal(got["step"], np.arange(STEPS))
    for m in METRICS:
        np.testing.assert_array_equal(got[m].to_numpy(), reference[m].to_numpy(), err_msg=m)
