"""A reinforcement-learning run that logs every step, is preempted, and resumes exactly.

The run trains a softmax policy with REINFORCE on a 5-armed bandit whose arms drift, and logs
four metrics at every step with ``w.log(run, step=s, reward=..., loss=..., entropy=...,
lr=...)`` (plus the wall time of each step: ``record_time=True``, for curves against time as in
TensorBoard). Every ``--checkpoint-every`` steps it commits and then saves a checkpoint (policy,
environment, random generator); the batch system may SIGKILL it at any moment. Started again,
it loads the checkpoint, calls ``w.resume(run, step)`` (hiding what the dead attempt logged past
the checkpoint), and goes on: the store ends with one record per step and metric, equal to an
uninterrupted run's.

    python examples/rl_run.py --store results/rl --checkpoint results/rl.ckpt     # one attempt
    runstore report results/rl -o rl.html                                        # its curves

Run it again after a kill with the same arguments: it resumes. ``--steps`` (20,000),
``--checkpoint-every`` (2,000) and ``--commit-every`` (100) set the loop; ``--run`` the run id.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

import runstore

ARMS = 5


def fresh_state(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "step": 0,
        "theta": np.zeros(ARMS),
        "means": rng.normal(0.0, 1.0, ARMS),
        "rng": rng.bit_generator.state,
    }


def load(path: str, seed: int) -> dict:
    if not os.path.exists(path):
        return fresh_state(seed)
    with open(path) as f:
        c = json.load(f)
    c["theta"], c["means"] = np.array(c["theta"]), np.array(c["means"])
    return c


def save(path: str, state: dict) -> None:
    """Atomically: a temporary, fsynced, renamed over the old checkpoint."""
    c = dict(state, theta=state["theta"].tolist(), means=state["means"].tolist())
    with open(path + ".tmp", "w") as f:
        json.dump(c, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def step(theta: np.ndarray, means: np.ndarray, rng: np.random.Generator, lr: float):
    """One REINFORCE step on the drifting bandit: the new parameters and the step's metrics."""
    p = np.exp(theta - theta.max())
    p /= p.sum()
    arm = int(rng.choice(ARMS, p=p))
    reward = float(means[arm] + rng.normal(0.0, 0.5))
    baseline = float(p @ means)
    grad = -p
    grad[arm] += 1.0
    theta = theta + lr * (reward - baseline) * grad
    means = means + rng.normal(0.0, 0.01, ARMS)  # the arms drift
    loss = -(reward - baseline) * float(np.log(p[arm]))
    entropy = float(-(p * np.log(p)).sum())
    return theta, means, {"reward": reward, "loss": loss, "entropy": entropy, "lr": lr}


def train(
    store_path: str,
    checkpoint: str,
    run: str = "bandit-reinforce",
    steps: int = 20_000,
    checkpoint_every: int = 2_000,
    commit_every: int = 100,
    seed: int = 7,
) -> int:
    """One attempt; returns the step it started at."""
    state = load(checkpoint, seed)
    start = int(state["step"])
    theta, means = state["theta"], state["means"]
    rng = np.random.default_rng()
    rng.bit_generator.state = state["rng"]
    store = runstore.open(store_path)
    with store.writer(record_time=True) as w:
        if start > 0:
            w.resume(run, start)  # what the dead attempt logged at steps >= start is hidden
        for s in range(start, steps):
            if s % checkpoint_every == 0 and s > start:
                w.commit()  # every record before s is durable before the checkpoint says so
                save(
                    checkpoint,
                    {"step": s, "theta": theta, "means": means, "rng": rng.bit_generator.state},
                )
            lr = 0.05 * 0.5 ** (s // 10_000)
            theta, means, metrics = step(theta, means, rng, lr)
            w.log(run, step=s, **metrics)
            if s % commit_every == commit_every - 1:
                w.commit(wait=False)  # group commit: the loop does not wait for the disk
    return start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--run", default="bandit-reinforce")
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--checkpoint-every", type=int, default=2_000)
    ap.add_argument("--commit-every", type=int, default=100)
    args = ap.parse_args()
    start = train(
        args.store,
        args.checkpoint,
        args.run,
        args.steps,
        args.checkpoint_every,
        args.commit_every,
    )
    print(f"{args.run}: steps {start}..{args.steps - 1} logged to {args.store}")


if __name__ == "__main__":
    main()
