"""A long per-step run that checkpoints, is preempted, and resumes without duplicate records.

Continual learning, simulations measured per step: the run logs a record per step and saves a
checkpoint every 1,000 steps. When it is killed (preempted by the batch system, kill -9), the
restarted run continues from its last checkpoint, at step S. The dead attempt may have
committed records past S; ``w.resume(run, S)`` hides them, so that the store ends with exactly
one record per step, whatever happened in between.

    python examples/checkpoint_resume.py                      # the whole story, checked
    python examples/checkpoint_resume.py --store S --checkpoint C [--preempt-at STEP]

The first form runs an attempt that is killed at step 7,300 (its checkpoint is at 7,000 and it
committed up to 7,299), then resumes it, and checks that every step 0..9,999 has one record,
equal to an uninterrupted run's. The second form runs one attempt (resuming if the checkpoint
exists), as a job script would.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile

import numpy as np

import runstore

RUN = "sgd-1"  # the run id: an experiment id of a sweep works the same way
STEPS = 10_000
CHECKPOINT_EVERY = 1_000
COMMIT_EVERY = 100  # records become durable (and visible) every 100 steps


def update(w: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """One step of noisy gradient descent on a quadratic: the state and the loss."""
    grad = w - 1.0 + rng.normal(0.0, 0.1, size=w.shape)
    w = w - 0.001 * grad
    return w, float(np.mean((w - 1.0) ** 2))


def load_checkpoint(path: str) -> tuple[int, np.ndarray, np.random.Generator]:
    """(step to start at, state, random generator): step 0 and a fresh state if none."""
    rng = np.random.default_rng(42)
    if not os.path.exists(path):
        return 0, np.zeros(8), rng
    with open(path) as f:
        c = json.load(f)
    rng.bit_generator.state = c["rng"]
    return c["step"], np.array(c["w"]), rng


def save_checkpoint(path: str, step: int, w: np.ndarray, rng: np.random.Generator) -> None:
    """Atomically: written under a temporary name, then renamed over the old one."""
    with open(path + ".tmp", "w") as f:
        json.dump({"step": step, "w": w.tolist(), "rng": rng.bit_generator.state}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def train(store_path: str, checkpoint: str, preempt_at: int | None = None) -> int:
    """One attempt of the run; returns the step it started at."""
    store = runstore.open(store_path)
    start, w, rng = load_checkpoint(checkpoint)
    with store.writer() as writer:
        if start > 0:
            # The checkpoint is the state before step `start`: hide what an earlier attempt
            # logged at steps >= start (it is logged again below, and maybe differently).
            writer.resume(RUN, start)
        for step in range(start, STEPS):
            if step == preempt_at:
                os.kill(os.getpid(), signal.SIGKILL)  # preemption: no warning, no cleanup
            if step % CHECKPOINT_EVERY == 0 and step > start:
                writer.commit()  # every record before `step` is durable ...
                save_checkpoint(checkpoint, step, w, rng)  # ... before the checkpoint says so
            w, loss = update(w, rng)
            writer.log(RUN, step=step, loss=loss, w_norm=float(np.linalg.norm(w)))
            if step % COMMIT_EVERY == COMMIT_EVERY - 1:
                writer.commit()
    return start


def demo() -> None:
    work = tempfile.mkdtemp(prefix="runstore-resume-")
    store_path, ckpt = os.path.join(work, "run"), os.path.join(work, "checkpoint.json")
    print(
        f"attempt 1: {STEPS:,} steps, a checkpoint every {CHECKPOINT_EVERY:,}, killed at step 7,300"
    )
    p = subprocess.run(
        [
            sys.executable,
            __file__,
            "--store",
            store_path,
            "--checkpoint",
            ckpt,
            "--preempt-at",
            "7300",
        ]
    )
    print(f"  exit status {p.returncode} (SIGKILL)")
    store = runstore.open(store_path, "r")
    steps = store.scan("loss")["step"]
    with open(ckpt) as f:
        at = json.load(f)["step"]
    print(
        f"  in the store: {len(steps):,} records, steps 0..{steps.max():,}; "
        f"the checkpoint is at step {at:,}"
    )

    start = train(store_path, ckpt)
    print(
        f"attempt 2: resumed from step {start:,} with writer.resume({RUN!r}, {start}), "
        f"ran to {STEPS:,}"
    )

    store.refresh()
    d = store.scan("loss")
    order = np.argsort(d["step"])
    steps, losses = d["step"][order], d["value"][order]
    w, rng = np.zeros(8), np.random.default_rng(42)  # the same run, uninterrupted
    expected = []
    for _ in range(STEPS):
        w, loss = update(w, rng)
        expected.append(loss)
    one_each = np.array_equal(steps, np.arange(STEPS))
    same = np.array_equal(losses, np.array(expected))
    print(
        f"  in the store: {len(steps):,} records; one per step 0..{STEPS - 1:,}: {one_each}; "
        f"equal to an uninterrupted run: {same}"
    )
    print(f"the store is at {store_path} (runstore cat {store_path} loss --limit 5)")
    if not (one_each and same):
        sys.exit(1)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--store", help="store directory (default: run the whole demo in a temporary one)"
    )
    ap.add_argument("--checkpoint", help="checkpoint file (with --store)")
    ap.add_argument("--preempt-at", type=int, default=None, help="kill this attempt at this step")
    args = ap.parse_args()
    if args.store is None:
        demo()
    else:
        if args.checkpoint is None:
            ap.error("--store needs --checkpoint")
        train(args.store, args.checkpoint, args.preempt_at)


if __name__ == "__main__":
    main()
