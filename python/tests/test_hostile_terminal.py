"""The hostile strings (``_hostile.py``) through what prints a store's strings on a terminal:
``runstore status`` and ``watch`` (Python), ``ls``, ``cat``, ``info``, ``get`` and ``verify``
(the compiled tool) and the messages of both. The rule (cli/README.md, "Strings from a
store"): in text output a string's control characters (C0, DEL, C1), bidirectional marks and
overrides and line separators are shown escaped, never raw; JSON output is exact JSON with
those characters escaped; CSV is exact, except on a terminal.

Checked on the bytes a pseudo-terminal receives (every byte, untranslated), and in a real
terminal (tmux): the hostile error messages appear escaped, the window title and the clipboard
are untouched, nothing is cleared, overwritten or coloured.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import time
import uuid

import _runstore_cli
import pytest
from _hostile import HOSTILE, STORABLE
from _terminal import CLI, run_in_terminal
from hypothesis import given
from hypothesis import strategies as st

import runstore
from runstore import _progress
from runstore._printable import printable
from runstore.commands import watch as _watch
from runstore.experiments import _records as ex
from runstore.experiments import _status
from runstore.export._tar import text_from_cell

#: The characters no text output may hold raw, stated here apart from the code that escapes
#: them: C0 controls, DEL, C1 controls, bidirectional marks, embeddings, overrides and
#: isolates, line and paragraph separators.
UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff]"
)
#: The compiled tool itself (no Python start-up for each of the many runs), drawing no
#: progress line (its own escapes, on stderr).
TOOL = [str(_runstore_cli.tool_path()), "--no-progress"]
#: The escapes watch draws itself: the cursor home and a cleared screen, once a refresh.
WATCH_CLEAR = "\x1b[H\x1b[2J"


def raw_controls(out: bytes, own: tuple[str, ...] = ()) -> list[str]:
    """The unsafe characters in ``out`` (which must be UTF-8) but line feeds and the
    sequences ``own`` that the program writes itself."""
    text = out.decode("utf-8")
    for seq in own:
        text = text.replace(seq, "")
    return sorted({repr(c) for c in UNSAFE.findall(text) if c != "\n"})


def json_text(s: str) -> str:
    """A string as the tool writes it in JSON (and in text, quoted): exact JSON, the unsafe
    characters as \\u escapes (\\b \\t \\n \\f \\r for those JSON has short forms of)."""
    return UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(s, ensure_ascii=False))


def lines_of(out: bytes) -> list[bytes]:
    return out.split(b"\n")[:-1] if out.endswith(b"\n") else out.split(b"\n")


def fails(key: str) -> None:
    """An experiment that raises with the hostile string ``key`` as its message."""
    raise RuntimeError(STORABLE[key])


def valid_id(s: str) -> bool:
    return 0 < len(s.encode()) <= 255


def valid_name(s: str) -> bool:
    return 0 < len(s.encode()) <= 255 and "\0" not in s and not s.startswith("~")


def write_status(store, rows) -> None:
    """Status records as the runner writes them: (id, state, started, finished, host, error)."""
    with store.writer(_allow_reserved=True) as w:
        for eid, state, started, finished, host, error in rows:
            rec = {ex.STATE: state, ex.ATTEMPT: 1, ex.STARTED: started, ex.HOST: host}
            if finished is not None:
                rec[ex.FINISHED] = finished
                rec[ex.SECONDS] = finished - started
            if error is not None:
                rec[ex.ERROR] = error
            w.log(eid, **rec)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> dict:
    """``sweep``: its path holds an OSC 0 (window title) sequence; an experiment per hostile
    string, the string its id where it can be one, each failing with the string as its
    message; a numeric series named by each string that can name one, and a string series
    ``text`` holding every string, in runs named by them. ``hashed``: the same failures with
    default (hashed) ids. ``hosts``: experiments done on hosts named by the strings."""
    root = tmp_path_factory.mktemp("hostile-terminal")
    sweep = runstore.open(root / HOSTILE["term-osc0-title"])
    ids = {k: (s if valid_id(s) else f"id-{k}") for k, s in STORABLE.items()}
    sweep.define_experiments([{"experiment": ids[k], "key": k} for k in STORABLE])
    r = runstore.run_experiments(sweep, fails, workers=0, progress=False)
    assert r.failed == len(STORABLE)
    runs = {k: (s if valid_id(s) else f"run-{k}") for k, s in STORABLE.items()}
    with sweep.writer() as w:
        for k, s in STORABLE.items():
            if valid_name(s):
                w.log(1, **{s: 1.0})
            w.log(runs[k], text=s)

    hashed = runstore.open(root / "hashed")
    hashed.define_experiments([{"key": k} for k in STORABLE])
    runstore.run_experiments(hashed, fails, workers=0, progress=False)

    hosts = runstore.open(root / "hosts")
    hosts.define_experiments([{"key": k} for k in HOSTILE])
    now = time.time()
    design = hosts.design()
    write_status(
        hosts,
        [
            (eid, "done", now - 10 - i, now - 5, HOSTILE[k] if k in STORABLE else "", None)
            for i, (eid, k) in enumerate(zip(design["experiment"], design["key"], strict=True))
        ],
    )
    return {
        "sweep": sweep.refresh(),
        "hashed": hashed.refresh(),
        "hosts": hosts.refresh(),
        "ids": ids,
        "runs": runs,
    }


# -- the rule, in Python ---------------------------------------------------------------------------


def test_printable_escapes_exactly_the_unsafe_characters():
    escaped = 0
    points = sorted({*range(0x3000), *range(0xD800, 0xE000), *range(0x3000, 0x110000, 61)})
    for cp in points:
        c = chr(cp)
        shown = printable(f"a{c}b")
        assert not UNSAFE.search(shown), hex(cp)
        if UNSAFE.match(c):
            escaped += 1
            want = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}.get(c) or (
                f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}"
            )
            assert shown == f"a{want}b", hex(cp)
        else:
            assert shown == f"a{c}b", hex(cp)
    # C0, DEL and C1, 12 bidi controls, 2 separators, 2,048 surrogates.
    assert escaped == 65 + 12 + 2 + 2048
    print(f"{escaped} of {len(points)} code points escaped")


@given(
    ids=st.lists(st.text(min_size=1) | st.integers(), min_size=1, max_size=6),
    errors=st.lists(st.text(), min_size=1, max_size=6),
    hosts=st.lists(st.text(), min_size=1, max_size=6),
)
def test_status_and_watch_text_hold_no_control_character_of_a_store(ids, errors, hosts):
    """Any ids, errors and hosts (property-based): the text of status and the screen of watch
    show each escaped, and hold no unsafe character but their own line feeds."""
    n = len(ids)
    failed = [
        {"experiment": ids[i], "attempt": 1, "host": hosts[i % len(hosts)], "error": e}
        for i, e in enumerate(errors[:n])
    ]
    s = {
        "store": "/tmp/" + errors[0],
        "experiments": n,
        "counts": {"done": 0, "running": 0, "pending": 0, "failed": n},
        "complete": True,
        "window_s": 300.0,
        "finished_in_window": n,
        "rate": 0.0,
        "eta_s": 0.0,
        "slowest": [{"experiment": i, "seconds": 1.0, "host": h} for i, h in zip(ids, hosts)],
        "running": [],
        "failed": failed,
    }
    text = _status.format_summary(s)
    groups = [(printable(h), 1, 0, 0, 1) for h in hosts]
    screen = _watch.render(s, groups, 10_000, 1_000)
    for out in (text, screen):
        assert not [c for c in UNSAFE.findall(out) if c != "\n"], out
    for e in failed:
        assert printable(e["error"]) in text and printable(e["experiment"]) in text
    for e in failed[:3]:
        assert f"{printable(e['experiment'])}: {printable(e['error'])}" in screen


def test_watch_groups_by_host_show_every_host_escaped(hostile):
    frame = hostile["hosts"].status()
    rows = _watch.Groups(None).rows(frame)
    hosts = {HOSTILE[k] if k in STORABLE else "" for k in HOSTILE}
    assert sorted(r[0] for r in rows) == sorted(printable(h) for h in hosts)
    assert all(r[1] == r[4] for r in rows)  # each host's experiments, all done
    print(f"{len(rows)} hosts")


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_progress_line_shows_every_string_escaped():
    """What a progress line draws goes through printable (whatever a caller puts in it)."""
    for key, s in HOSTILE.items():
        out = _Tty()
        line = _progress.Line("runstore export tar", stream=out)
        line.show(f"reading {s}", force=True)
        line.close()
        drawn = out.getvalue()
        assert printable(s) in drawn, key
        own = drawn.replace("\r", "")  # the line's own returns, to redraw in place
        assert not UNSAFE.search(own), key
    print(f"{len(HOSTILE)} progress lines")


# -- the compiled tool on a terminal ---------------------------------------------------------------


def test_ls_shows_every_name_and_run_escaped_and_its_json_exact(hostile):
    sweep = hostile["sweep"]
    names = sorted(sweep.names(), key=lambda n: n.encode())
    rc, out = run_in_terminal("ls", str(sweep.path), cli=TOOL)
    assert rc == 0 and raw_controls(out) == [], raw_controls(out)
    rows = lines_of(out)
    assert rows[0].startswith(b"NAME ") and len(rows) == 1 + len(names)
    for name, row in zip(names, rows[1:], strict=True):
        assert row.startswith(printable(name).encode() + b"  "), (name, row)
    rc, out = run_in_terminal("ls", str(sweep.path), "--runs", cli=TOOL)
    assert rc == 0 and raw_controls(out) == []
    runs = sweep.runs()
    assert sorted(lines_of(out)) == sorted(printable(r).encode() for r in runs)
    for args, want in ((["--json"], names), (["--runs", "--json"], runs)):
        rc, out = run_in_terminal("ls", str(sweep.path), *args, cli=TOOL)
        assert rc == 0 and raw_controls(out) == [], args
        got = json.loads(out)
        assert [g["name"] if isinstance(g, dict) else g for g in got] == want, args
    print(f"{len(names)} series names and {len(runs)} runs listed")


def test_cat_shows_every_run_and_value_escaped_as_text_and_exact_as_json(hostile):
    sweep = hostile["sweep"]
    pairs = sorted((hostile["runs"][k], s) for k, s in STORABLE.items())
    rc, out = run_in_terminal("cat", str(sweep.path), "text", cli=TOOL)
    assert rc == 0 and raw_controls(out) == [], raw_controls(out)
    rows = lines_of(out)
    width = max(len(b"run"), *(len(printable(r).encode()) for r, _ in pairs))
    assert rows[0] == b"run".rjust(width) + b"  step  value"
    want = [
        printable(r).encode().rjust(width) + b"     0  " + json_text(s).encode() for r, s in pairs
    ]
    assert sorted(rows[1:]) == sorted(want)
    rc, out = run_in_terminal("cat", str(sweep.path), "text", "--format", "jsonl", cli=TOOL)
    assert rc == 0 and raw_controls(out) == []
    got = [json.loads(line) for line in lines_of(out)]
    assert sorted((g["run"], g["value"]) for g in got) == pairs
    # CSV: exact into a file or a pipe (a text cell a spreadsheet would run as a formula has
    # one leading quote more, cli/README.md); shown as text shows strings on a terminal.
    p = subprocess.run([*TOOL, "cat", str(sweep.path), "text", "-f", "csv"], capture_output=True)
    assert p.returncode == 0
    got = list(csv.reader(io.StringIO(p.stdout.decode(), newline="")))
    assert got[0] == ["run", "step", "value"]
    assert sorted((text_from_cell(r), text_from_cell(v)) for r, _, v in got[1:]) == pairs
    rc, out = run_in_terminal("cat", str(sweep.path), "text", "-f", "csv", cli=TOOL)
    assert rc == 0 and raw_controls(out) == [], raw_controls(out)
    print(f"{len(pairs)} records of hostile runs and values in text, jsonl and csv")


def test_info_and_verify_show_the_store_path_escaped(hostile):
    path = str(hostile["sweep"].path)
    assert "\x1b" in path
    for args in (["info"], ["verify"], ["info", "--json"], ["verify", "--json"]):
        rc, out = run_in_terminal(*args, path, cli=TOOL)
        assert rc == 0 and raw_controls(out) == [], (args, raw_controls(out))
        if "--json" in args:
            assert json.loads(out)["store"] == path
    rc, out = run_in_terminal("info", path, cli=TOOL)
    assert re.search(rb"^store: +" + re.escape(printable(path).encode()) + rb"\n", out, re.M)


def test_errors_naming_a_hostile_string_show_it_escaped(hostile):
    path = str(hostile["sweep"].path)
    tried = 0
    for key, s in STORABLE.items():
        if "\0" in s:
            continue  # a command line cannot hold NUL
        for args in (
            ["cat", path, "missing" + s],
            ["cat", path, "text", "--run-str", "missing" + s],
            ["get", path, "missing" + s, "text", "--run-str", "-o", os.devnull, "-f"],
        ):
            rc, out = run_in_terminal(*args, cli=TOOL)
            assert rc == 3 and raw_controls(out) == [], (key, args[0], out)
            assert printable("missing" + s).encode() in out, (key, args[0], out)
            tried += 1
    # A value's bytes are not text: `get -o -` refuses to write them to a terminal.
    rc, out = run_in_terminal("get", path, hostile["runs"]["term-csi-clear"], "text", "-o", "-")
    assert rc == 1 and b"standard output is a terminal" in out and b"NUMPY" not in out, out
    p = subprocess.run(
        [*TOOL, "get", path, hostile["runs"]["term-csi-clear"], "text", "-o", "-"],
        capture_output=True,
    )
    assert p.returncode == 0 and p.stdout.startswith(b"\x93NUMPY"), p.stderr
    assert p.stdout.endswith(HOSTILE["term-csi-clear"].encode())
    # The Python commands' messages too.
    rc, out = run_in_terminal("status", path + HOSTILE["term-osc52-clipboard"])
    assert rc == 3 and raw_controls(out) == [], out
    assert printable(path + HOSTILE["term-osc52-clipboard"]).encode() in out
    print(f"{tried + 1} error messages naming a hostile string")


# -- status and watch on a terminal ----------------------------------------------------------------


def test_status_shows_every_id_error_and_host_escaped(hostile):
    tried = 0
    for name in ("sweep", "hashed", "hosts"):
        store = hostile[name]
        rc, out = run_in_terminal("status", str(store.path), "--top", "1000")
        assert rc == 0 and raw_controls(out) == [], (name, raw_controls(out))
        status = store.status()
        for eid, state, host, error in zip(
            status["experiment"], status["state"], status["host"], status["error"], strict=True
        ):
            assert printable(eid).encode() in out, eid
            if state == "failed":
                assert b"  " + printable(_status._first_line(error)).encode() + b"\n" in out
            if host:
                assert b"  on " + printable(host).encode() in out, host
            tried += 1
        rc, out = run_in_terminal("status", str(store.path), "--top", "1000", "--json")
        assert rc == 0 and raw_controls(out) == []
        got = json.loads(out)
        assert got["store"] == str(store.path)
        want = _status.summary(store, top=1000)
        assert [e["error"] for e in got["failed"]] == [e["error"] for e in want["failed"]]
        assert [e["experiment"] for e in got["failed"]] == [e["experiment"] for e in want["failed"]]
    print(f"{tried} experiments' ids, errors and hosts in status")


def test_watch_shows_hosts_and_failures_escaped(hostile):
    for name in ("sweep", "hosts"):
        store = hostile[name]
        rc, out = run_in_terminal("watch", str(store.path), size=(500, 300))
        assert rc == 0, out
        assert out.decode().startswith(WATCH_CLEAR) and out.count(WATCH_CLEAR.encode()) == 1
        assert raw_controls(out, own=(WATCH_CLEAR,)) == [], (name, raw_controls(out))
        s = _status.summary(store)
        for e in s["failed"][:3]:
            line = f"  {printable(e['experiment'])}: {printable(e['error'])}"
            assert line[:300].encode() in out, line
    # A bar for each host, after its name (its first 99 characters and "…" when longer).
    hosts = {printable(HOSTILE[k] if k in STORABLE else "") for k in HOSTILE}
    rows = [line for line in out.decode().split("\n") if re.search(r"█ \d+/\d+$", line)]
    assert len(rows) == len(hosts)
    cut = {h if len(h) <= 100 else h[:99] + "…" for h in hosts}
    assert sorted(r[:100].rstrip() for r in rows) == sorted(h.rstrip() for h in cut)
    print(f"watch of 2 stores, {len(hosts)} hosts")


# -- in a real terminal ----------------------------------------------------------------------------


class Tmux:
    """A tmux server of its own (a socket of its own, no configuration), one session."""

    def __init__(self) -> None:
        self.cmd = ["tmux", "-L", f"runstore-test-{uuid.uuid4().hex[:8]}", "-f", os.devnull]

    def __call__(self, *args: str) -> str:
        return subprocess.run([*self.cmd, *args], capture_output=True, text=True, check=True).stdout

    def kill(self) -> None:
        subprocess.run([*self.cmd, "kill-server"], capture_output=True)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_status_and_watch_in_a_real_terminal_change_nothing_but_their_text(hostile, tmp_path):
    """In tmux, with the clipboard open to programs (set-clipboard on): after status and
    watch over the hostile failures the window title is what it was, no paste buffer was
    made (OSC 52), nothing was coloured, and every line printed is on the screen, in order
    (nothing cleared, overwritten by CR or backspace, or moved)."""
    cli = " ".join(f"'{a}'" for a in CLI)
    done = tmp_path / "done"
    status_out = tmp_path / "status.txt"
    sweep = hostile["sweep"]
    # The store's path holds escapes: the script reads it from a file, never a command line.
    (tmp_path / "path").write_bytes(os.fsencode(sweep.path))
    script = tmp_path / "run.sh"
    script.write_text(
        f"p=$(cat {tmp_path / 'path'})\n"
        f"printf 'BEFORE\\n'\n"
        f'{cli} status "$p" --top 1000 --window 1e9\n'
        f'{cli} status "$p" --top 1000 --window 1e9 > {status_out}\n'
        f"printf 'BETWEEN\\n'\n"
        f'{cli} watch "$p" --window 1e9\n'
        f"printf 'AFTER\\n'\n"
        f"touch {done}\n"
        "sleep 600\n"
    )
    tmux = Tmux()
    try:
        tmux("new-session", "-d", "-s", "t", "-x", "400", "-y", "60", "bash", "--norc")
        tmux("set-option", "-g", "set-clipboard", "on")
        tmux("set-option", "-g", "history-limit", "100000")
        tmux("set-option", "-g", "allow-rename", "on")
        title = tmux("display", "-p", "-t", "t", "#{pane_title}")
        tmux("send-keys", "-t", "t", f"bash {script}", "Enter")
        deadline = time.monotonic() + 120
        while not done.exists():
            assert time.monotonic() < deadline, tmux("capture-pane", "-p", "-t", "t")
            time.sleep(0.1)
        time.sleep(0.3)  # tmux has read everything written before the file appeared
        after = tmux("display", "-p", "-t", "t", "#{pane_title}|#{window_name}")
        buffers = tmux("list-buffers")
        screen = tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "t")
        styled = tmux("capture-pane", "-p", "-e", "-J", "-S", "-", "-t", "t")
    finally:
        tmux.kill()
    assert after.split("|")[0] == title.strip() and "pwned" not in after, after
    assert buffers == "", buffers
    assert "\x1b[" not in styled.replace("\x1b[0m", "").replace("\x1b[39m", ""), "coloured"
    lines = [line.rstrip() for line in screen.split("\n")]
    printed = [line.rstrip() for line in status_out.read_text().split("\n")[:-1]]
    start = lines.index("BEFORE")
    assert lines[start + 1 : start + 1 + len(printed)] == printed
    assert lines[start + 1 + len(printed)] == "BETWEEN"
    assert "AFTER" in lines
    # watch: its own screen, every failure it shows escaped.
    watched = "\n".join(lines[lines.index("BETWEEN") + 1 : lines.index("AFTER")])
    for e in _status.summary(sweep)["failed"][:3]:
        assert f"  {printable(e['experiment'])}: {printable(e['error'])}"[:390] in watched
    assert f"runstore watch {printable(sweep.path)}" in watched
    print(f"{len(printed)} lines of status and a screen of watch in tmux")


def test_an_error_message_that_is_not_unicode_text_is_stored_escaped(tmp_path):
    """A lone surrogate in an experiment's exception stopped the whole sweep (the writer refuses
    text that is not Unicode); the error is now kept with it escaped."""
    store = runstore.open(tmp_path / "s")
    store.define_experiments([{"x": 1}])

    def fail(x):
        raise RuntimeError(HOSTILE["lone-surrogate"])

    r = runstore.run_experiments(store, fail, workers=0, progress=False)
    assert r.failed == 1
    assert "\\ud800" in store.status()["error"][0]
