"""runstore.mlinstrument.Backend under the real ml-instrument Collector (run by scripts/test.sh in
.venv-mli, ml-instrument's own environment): a run checkpointed every 5,000 frames, SIGKILLed at
frame 19,500 and resumed from its checkpoint ends with exactly one point per frame, equal to an
uninterrupted run's."""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("ml_instrumentation")

from ml_instrumentation.Collector import Collector

import runstore
import runstore.mlinstrument

FRAMES, EVERY = 20_000, 5_000

RUN = """
import os, pickle, signal, sys
import numpy as np
from ml_instrumentation.Collector import Collector
import runstore.mlinstrument

store, ckpt, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
FRAMES, EVERY = {frames}, {every}
if os.path.exists(ckpt):
    with open(ckpt, "rb") as f:
        state = pickle.load(f)  # the collector, its backend (the same object) and the rng
    c, backend, start = state["collector"], state["backend"], state["frame"]
    rng = np.random.default_rng()
    rng.bit_generator.state = state["rng"]
    backend.resume(0, start)  # hide what the killed attempt wrote at frames >= start
else:
    backend = runstore.mlinstrument.Backend(store)
    c = Collector(backend=backend, experiment_id=0, low_watermark=200)
    rng, start = np.random.default_rng(5), 0
for frame in range(start, FRAMES):
    if frame % EVERY == 0 and frame > start:
        with open(ckpt + ".tmp", "wb") as f:  # pickling the collector writes its buffer
            pickle.dump({{"collector": c, "backend": backend, "frame": frame,
                         "rng": rng.bit_generator.state}}, f)
        os.replace(ckpt + ".tmp", ckpt)
    if frame == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    c.set_frame(frame)
    c.collect("reward", float(rng.normal()))
    c.collect("steps_in_episode", int(rng.integers(1, 100)))
c.close()
"""


def run(store, ckpt, kill_at=-1):
    code = textwrap.dedent(RUN.format(frames=FRAMES, every=EVERY))
    p = subprocess.run([sys.executable, "-c", code, str(store), str(ckpt), str(kill_at)])
    return p.returncode


def test_sigkill_at_19500_and_resume_end_with_one_point_per_frame(tmp_path):
    assert run(tmp_path / "ref", tmp_path / "ref.ckpt") == 0
    assert run(tmp_path / "s", tmp_path / "s.ckpt", kill_at=19_500) == -signal.SIGKILL
    killed = runstore.open(tmp_path / "s", mode="r").scan("reward")
    print(f"after the kill: {len(killed['step'])} reward points for frames up to 19,500")
    assert run(tmp_path / "s", tmp_path / "s.ckpt") == 0
    ref = runstore.open(tmp_path / "ref", mode="r")
    got = runstore.open(tmp_path / "s", mode="r")
    for metric in ("reward", "steps_in_episode"):
        a, b = ref.scan(metric), got.scan(metric)
        oa, ob = np.argsort(a["step"]), np.argsort(b["step"])
        assert np.array_equal(b["step"][ob], np.arange(FRAMES)), f"{metric}: one point per frame"
        np.testing.assert_array_equal(b["value"][ob], a["value"][oa], err_msg=metric)


def test_the_backend_interface(tmp_path):
    backend = runstore.mlinstrument.Backend(tmp_path / "s")
    c = Collector(backend=backend, experiment_id="run-a", low_watermark=10)
    for frame in range(50):
        c.set_frame(frame)
        c.collect("loss", 1.0 / (frame + 1))
        if frame % 10 == 0:
            c.collect("weights", np.full(3, float(frame)))
    points = c.get("loss", "run-a")  # the collector writes what it buffered first
    assert [p.frame for p in points] == list(range(50))
    assert points[3].measurement == 0.25 and points[3].id == "run-a"
    assert backend.get_tables() == {"loss", "weights"}
    w = backend.read_metric("weights")
    assert [p.frame for p in w] == [0, 10, 20, 30, 40]
    np.testing.assert_array_equal(w[1].measurement, np.full(3, 10.0))
    assert backend.read_metric("nothing") == [] and backend.read_metric("loss", "other") == []
    # Pickled (a checkpoint), then merged into another store and loaded from a dump.
    c2 = pickle.loads(pickle.dumps(c))
    assert [p.frame for p in c2.get("loss", "run-a")] == list(range(50))
    backend.merge(str(tmp_path / "other"))
    assert len(runstore.open(tmp_path / "other", mode="r").scan("loss")["step"]) == 50
    third = runstore.mlinstrument.Backend(tmp_path / "third")
    third.load(backend.dump())
    assert len(third.read_metric("loss")) == 50
    c.close()
    c2.close()
