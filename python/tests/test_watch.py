"""``runstore watch``: the live view of a running sweep, read off a real terminal (tmux) while the
sweep runs beside it, and its drawing and line output on their own."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

import runstore
from runstore.commands import watch as _watch
from runstore.experiments import _status

HERE = Path(__file__).parent


def slow(x):
    """An experiment of the sweep the terminal test watches: a fraction of a second each."""
    time.sleep(0.15)
    if x == 7:
        raise ValueError("x=7 is refused")
    return {"y": float(x * x)}


def test_bar_draws_eighths_and_keeps_its_width():
    assert _watch.bar(0, 10) == " " * 10
    assert _watch.bar(1, 10) == "█" * 10
    assert _watch.bar(0.5, 10) == "█" * 5 + " " * 5
    assert _watch.bar(0.55, 10) == "█" * 5 + "▌" + " " * 4
    assert all(len(_watch.bar(f / 97, 13)) == 13 for f in range(98))
    assert _watch.bar(2.0, 4) == "█" * 4 and _watch.bar(-1, 4) == " " * 4


def test_the_screen_and_the_lines_of_a_finished_sweep(store):
    store.define_experiments(runstore.grid(x=range(12)))
    runstore.run_experiments(store, slow, workers=1, progress=False)
    store.refresh()
    frame = store.status()
    s = _status.summary(store, frame=frame)
    rows = _watch.Groups(3).rows(frame)
    assert [r[0] for r in rows] == ["shard 0", "shard 1", "shard 2"]
    assert sum(r[4] for r in rows) == 12 and sum(r[1] for r in rows) == 11
    assert sum(r[2] for r in rows) == 1
    screen = _watch.render(s, rows, 80, 24)
    assert "12/12 100.0%  all finished" in screen and "shard 2" in screen
    assert "x=7 is refused" in screen
    assert all(len(line) <= 80 for line in screen.splitlines())
    # Per host without --shards; a short screen keeps to its height.
    by_host = _watch.Groups(None).rows(frame)
    assert len(by_host) == 1 and by_host[0][4] == 12
    short = _watch.render(s, rows, 80, 5).splitlines()
    assert len(short) <= 5 and short[0].startswith("runstore watch ") and "12/12" in short[1]
    # Not a terminal: one line, and it returns at once, the sweep being done.
    out = io.StringIO()
    last = _watch.watch(store, interval_s=0.01, out=out, tty=False)
    assert last["complete"] and out.getvalue().count("\n") == 1
    assert "done 11 running 0 pending 0 failed 1" in out.getvalue()


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_watch_in_a_terminal_beside_a_running_sweep(tmp_path):
    path = tmp_path / "sweep"
    store = runstore.open(path)
    store.define_experiments(runstore.grid(x=range(40)))
    sweep_py = tmp_path / "sweep.py"
    sweep_py.write_text(
        textwrap.dedent(
            f"""
            import sys, time
            sys.path.insert(0, {str(HERE)!r})
            import runstore
            from test_watch import slow
            if __name__ == "__main__":  # workers are spawned: they import this file
                t0 = time.time()
                runstore.run_experiments(runstore.open({str(path)!r}), slow, workers=2,
                                         progress=False)
                print(f"sweep took {{time.time() - t0:.1f}} s")
            """
        )
    )
    socket = f"runstore-test-{uuid.uuid4().hex[:8]}"
    tmux = ["tmux", "-L", socket, "-f", os.devnull]
    watch_cmd = (
        f"{sys.executable} -c 'import _runstore_cli, sys; sys.exit(_runstore_cli.main())' "
        f"watch {path} --interval 0.3 --shards 4; echo EXIT=$?; sleep 120"
    )
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "w", "-x", "100", "-y", "30", watch_cmd], check=True
    )
    screens = []
    try:
        sweep = subprocess.Popen(
            [sys.executable, str(sweep_py)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.time() + 120
        while time.time() < deadline:
            screen = subprocess.run(
                [*tmux, "capture-pane", "-p", "-t", "w"], capture_output=True, text=True, check=True
            ).stdout
            screens.append(screen)
            if "EXIT=" in screen or sweep.poll() not in (None, 0):
                break
            time.sleep(0.2)
        out, err = sweep.communicate(timeout=60)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    assert sweep.returncode == 0 and "sweep took" in out, err
    final = screens[-1]
    assert "EXIT=0" in final, final
    assert "40/40 100.0%  all finished" in final, final
    assert all(f"shard {i}" in final for i in range(4)), final
    assert "x=7 is refused" in final and "failed 1" in final, final
    # Seen while the sweep ran: part done, a bar part full, some still pending.
    during = [
        s for s in screens if "all finished" not in s and "/40" in s and "pending 0 " not in s
    ]
    assert during, "no screen caught the sweep part way:\n" + "\n----\n".join(screens[-3:])
    assert any("█" in s and "ETA" in s for s in during), during[-1]
    print(
        f"[ figures  ] {len(screens)} screens read, {len(during)} part way; last:\n{final}",
        file=sys.stderr,
    )


def test_groups_from_the_aligned_read_count_what_the_status_frame_says(store):
    """watch reads the status as arrays (no Python object per experiment); its groups per host
    and per shard are what a count over ``Store.status()`` gives, and the shards of the
    experiments are computed again only when the experiments change."""
    import numpy as np

    from runstore._printable import printable
    from runstore.experiments import _records as ex
    from runstore.experiments._runner import shard_of

    rng = np.random.default_rng(5)
    ids = store.define_experiments(runstore.grid(x=range(200)))["experiment"].tolist()
    with store.writer(_allow_reserved=True) as w:
        for e in ids:
            kind = rng.choice(["none", "running", "done", "failed"])
            if kind != "none":
                host = str(rng.choice(["b-host", "a-host", "\x1b[31mred"]))
                w.log(e, **{ex.STATE: str(kind), ex.HOST: host, ex.STARTED: 1.0})
    store.refresh()
    frame = store.status()
    arrays = _status.StatusArrays.read(store)
    by_host = _watch.Groups(None).rows(arrays)
    assert by_host == _watch.Groups(None).rows(frame)
    want = []
    for host in sorted(h for h in set(frame["host"]) if isinstance(h, str)):
        mine = frame[frame["host"] == host]
        counts = [int((mine["state"] == s).sum()) for s in ("done", "failed", "running")]
        want.append((printable(host), *counts, len(mine)))
    assert by_host == want
    groups = _watch.Groups(4)
    by_shard = groups.rows(arrays)
    shard = np.array([shard_of(e, 4) for e in ids])
    state = frame["state"].to_numpy()
    assert by_shard == [
        (
            f"shard {g}",
            int(((shard == g) & (state == "done")).sum()),
            int(((shard == g) & (state == "failed")).sum()),
            int(((shard == g) & (state == "running")).sum()),
            int((shard == g).sum()),
        )
        for g in range(4)
    ]
    kept = groups._shard
    assert groups.rows(_status.StatusArrays.read(store)) == by_shard and groups._shard is kept
