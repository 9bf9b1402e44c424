"""The status page rendered by headless Chromium: its script fetches ``/status.json`` and
draws every table's row and chart."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

import reverb_py as reverb

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def render(url: str, tmp_path) -> str:
    """The page's DOM after its script ran (a virtual time budget of 5 s)."""
    assert CHROMIUM, "make test-browser needs chromium (CI installs it)"
    out = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.fixture
def server():
    server = reverb.Server(
        [
            reverb.Table.queue("queue", 10),
            reverb.Table(
                "replay",
                reverb.selectors.Uniform(),
                reverb.selectors.Fifo(),
                100,
                reverb.rate_limiters.MinSize(1),
            ),
        ],
        port=0,
        metrics_port=0,
    )
    try:
        yield server
    finally:
        server.stop()


def test_the_page_shows_every_table(server, tmp_path) -> None:
    client = reverb.Client(f"localhost:{server.port}")
    for step in range(7):
        client.insert(np.float32(step), {"replay": 1.0})
    client.insert(np.float32(0), {"queue": 1.0})
    dom = render(f"http://localhost:{server.metrics_port}/", tmp_path)
    sizes = dict(re.findall(r'<tr data-table="(\w+)"><td>\w+</td><td class="size">(\d+)</td>', dom))
    assert sizes == {"queue": "1", "replay": "7"}, dom[-3000:]
    assert dom.count('<svg width="360"') == 2 and '<polyline fill="none"' in dom
    assert re.search(r"2 tables, updated ", dom)


def test_the_page_says_when_the_server_is_gone(server, tmp_path) -> None:
    url = f"http://localhost:{server.metrics_port}/"
    server.stop()
    # Served by nothing: Chromium shows its own error page, not ours.
    dom = render(url, tmp_path)
    assert "reverb_py status" not in dom
