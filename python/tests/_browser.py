"""Headless Chromium, driven over the DevTools protocol, for the tests of the report's page
(``test_report.py``, ``test_hostile_report.py``): a page opened at an exact viewport, read once
its script has drawn every plot, its uncaught exceptions collected."""

from __future__ import annotations

import base64
import io
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("RUNSTORE_TEST_ARTIFACTS", REPO / "build" / "test-artifacts"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (scripts/install-deps.sh installs it)"
)


class Browser:
    """Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe):
    each page at an exact viewport (--window-size cannot make one narrower than 500 pixels, so a
    phone's is emulated), read once its script has drawn every plot."""

    def __init__(self, profile: Path) -> None:
        cmd_r, self._cmd_w = os.pipe()
        self._resp_r, resp_w = os.pipe()

        def on_3_and_4() -> None:  # Chromium reads commands from descriptor 3, answers on 4
            a, b = os.dup(cmd_r), os.dup(resp_w)  # neither is 3 or 4 unless it is its own
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            preexec_fn=on_3_and_4,
            pass_fds=(3, 4),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        os.close(cmd_r)
        os.close(resp_w)
        self._buf = b""
        self._id = 0
        #: Events Chromium sent (a dict each: method, params, sessionId), oldest first.
        self.events: list[dict] = []

    def send(self, method: str, session: str | None = None, **params):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session is not None:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        while True:
            m = self._read()
            if m.get("id") == self._id:  # not an event, nor an earlier answer
                assert "error" not in m, f"{method}: {m['error']}"
                return m["result"]
            if "method" in m:
                self.events.append(m)

    def _read(self, timeout: float = 60.0) -> dict:
        end = time.monotonic() + timeout
        while (k := self._buf.find(b"\0")) < 0:
            ready, _, _ = select.select([self._resp_r], [], [], max(0.0, end - time.monotonic()))
            assert ready, f"chromium did not answer in {timeout} s"
            chunk = os.read(self._resp_r, 1 << 20)
            assert chunk, f"chromium exited: {self.proc.stderr.read().decode()[-2000:]}"
            self._buf += chunk
        msg, self._buf = self._buf[:k], self._buf[k + 1 :]
        return json.loads(msg)

    def open(self, page: Path, width: int, height: int, mobile: bool = False) -> Tab:
        assert page.is_file(), f"{page} is not a file"
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.send(
            "Emulation.setDeviceMetricsOverride",
            session,
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=mobile,
        )
        self.send("Runtime.enable", session)  # uncaught exceptions are events from here on
        self.send("Page.navigate", session, url=page.as_uri())
        tab = Tab(self, session)
        end = time.monotonic() + 60
        while tab.eval("document.body && document.body.dataset.rendered") is None:
            thrown = tab.exceptions()
            assert not thrown, f"the page's script failed: {thrown}"
            assert time.monotonic() < end, "the page's script did not finish drawing in 60 s"
            time.sleep(0.05)
        return tab

    def close(self) -> None:
        try:
            self.send("Browser.close")
        finally:
            self.proc.wait(timeout=30)
            os.close(self._cmd_w)
            os.close(self._resp_r)
            self.proc.stderr.close()


class Tab:
    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def eval(self, expression: str):
        r = self.browser.send(
            "Runtime.evaluate", self.session, expression=expression, returnByValue=True
        )
        assert "exceptionDetails" not in r, r["exceptionDetails"]
        return r["result"].get("value")

    def exceptions(self) -> list[str]:
        """The uncaught exceptions of the page's scripts so far, as Chromium describes them."""
        out = []
        for e in self.browser.events:
            if e.get("sessionId") == self.session and e["method"] == "Runtime.exceptionThrown":
                d = e["params"]["exceptionDetails"]
                out.append(d.get("exception", {}).get("description") or d.get("text", ""))
        return out

    def screenshot(self, name: str) -> np.ndarray:
        """The viewport as an (h, w, 3) uint8 array; the PNG is kept in ARTIFACTS."""
        image = pytest.importorskip("PIL.Image")
        png = base64.b64decode(
            self.browser.send("Page.captureScreenshot", self.session, format="png")["data"]
        )
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / f"{name}.png").write_bytes(png)
        with image.open(io.BytesIO(png)) as im:
            return np.asarray(im.convert("RGB"))
