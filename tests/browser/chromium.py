"""Headless Chromium driven over the DevTools protocol on a pipe (no extra packages).

``--remote-debugging-pipe`` makes Chromium read commands on its fd 3 and answer on its
fd 4, one JSON message each, ended by a NUL byte. :class:`Chromium` opens one page and
lets a test read its DOM while it runs in real time (the page's timers and fetches as a
user's browser runs them) and take a screenshot.
"""

from __future__ import annotations

import base64
import fcntl
import itertools
import json
import os
import shutil
import subprocess
import time
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Headless, and nothing that reaches out of this machine.
HEADLESS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def _above_nine(fd: int) -> int:
    """``fd`` moved to a descriptor number of 10 or more."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class Chromium:
    """One headless Chromium with one page of ``width`` x ``height`` CSS pixels."""

    def __init__(self, profile: str, width: int = 1280, height: int = 900) -> None:
        assert CHROMIUM, "make test-browser needs chromium (CI installs it)"
        ours_read, chrome_write = os.pipe()
        chrome_read, ours_write = os.pipe()
        # Chromium's ends above 9, so that moving them to 3 and 4 clobbers neither.
        chrome_read, chrome_write = (_above_nine(fd) for fd in (chrome_read, chrome_write))
        arguments = [
            CHROMIUM,
            *HEADLESS,
            "--hide-scrollbars",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            "about:blank",
        ]
        # Chromium reads the pipe on fd 3 and writes on fd 4: bash moves them there.
        self._process = subprocess.Popen(
            [
                "bash",
                "-c",
                f'exec "$@" 3<&{chrome_read} 4>&{chrome_write} {chrome_read}<&- {chrome_write}>&-',
                "chromium",
                *arguments,
            ],
            pass_fds=(chrome_read, chrome_write),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(chrome_read)
        os.close(chrome_write)
        self._reader = os.fdopen(ours_read, "rb", buffering=0)
        self._writer = os.fdopen(ours_write, "wb", buffering=0)
        self._buffer = b""
        self._ids = itertools.count(1)
        self._session: str | None = None
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.send("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def send(self, method: str, **params: Any) -> Any:
        """Sends a command (to the page once attached) and returns its result."""
        ident = next(self._ids)
        message: dict[str, Any] = {"id": ident, "method": method, "params": params}
        if self._session is not None:
            message["sessionId"] = self._session
        self._writer.write(json.dumps(message).encode() + b"\0")
        while True:
            answer = self._read()
            if answer.get("id") == ident:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]

    def _read(self) -> Any:
        while b"\0" not in self._buffer:
            data = self._reader.read(65536)
            if not data:
                raise RuntimeError("chromium closed its pipe")
            self._buffer += data
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def open(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60.0) -> Any:
        """Evaluates ``expression`` until it is truthy (then its value), for at most
        ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"the page never had {expression}")
            time.sleep(0.1)

    def screenshot(self, path: str) -> None:
        """A PNG of the whole page (as tall as its content)."""
        height = self.evaluate("document.documentElement.scrollHeight")
        width = self.evaluate("document.documentElement.scrollWidth")
        data = self.send(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
        )["data"]
        with open(path, "wb") as file:
            file.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            self._session = None
            self.send("Browser.close")
        except (RuntimeError, OSError):
            pass
        finally:
            self._writer.close()
            self._reader.close()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
