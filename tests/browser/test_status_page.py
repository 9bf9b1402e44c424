"""The status page rendered by headless Chromium: its script fetches ``/status.json`` and
draws every table's card (rate limiter, facts, charts with scales), the server's facts
and the calls; a stalled table says which side waits and why."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

import reverb_py as reverb
from tests.browser.chromium import CHROMIUM, HEADLESS, Chromium
from tests.browser.stalled import WARMUP_ITEMS, stalled_server


def render(url: str, tmp_path) -> str:
    """The page's DOM after its script ran (a virtual time budget of 5 s)."""
    assert CHROMIUM, "make test-browser needs chromium (CI installs it)"
    out = subprocess.run(
        [
            CHROMIUM,
            *HEADLESS,
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


def field(dom: str, table: str, name: str) -> str:
    card = dom.split(f'<div class="card" data-table="{table}">')[1].split('<div class="card"')[0]
    match = re.search(rf'data-field="{name}">([^<]*)<', card)
    assert match, card
    return match.group(1)


def test_the_page_shows_every_table_with_scaled_charts(server, tmp_path) -> None:
    client = reverb.Client(f"localhost:{server.port}")
    for step in range(7):
        client.insert(np.float32(step), {"replay": 1.0})
    client.insert(np.float32(0), {"queue": 1.0})
    dom = render(f"http://localhost:{server.metrics_port}/", tmp_path)
    assert field(dom, "queue", "size") == "1 / 10"
    assert field(dom, "replay", "size") == "7 / 100"
    assert field(dom, "replay", "min_size_to_sample") == "1"
    # Two charts per table, each with a y scale (0 .. the top) and a time axis.
    assert dom.count('<svg width="360"') == 4 and '<polyline fill="none"' in dom
    assert dom.count(">-5 min</text>") == 4 and dom.count(">now</text>") == 4
    assert ">100</text>" in dom and ">10</text>" in dom  # the size charts' tops
    assert re.search(r"2 tables, updated ", dom)
    assert f"reverb_py {reverb.__version__}" in dom
    # Both tables flow: nobody waits.
    assert dom.count('<span class="badge ok">flowing</span>') == 2
    assert "ServerInfo" in dom.split('id="rpc"')[1]


def test_the_page_says_when_the_server_is_gone(server, tmp_path) -> None:
    url = f"http://localhost:{server.metrics_port}/"
    server.stop()
    # Served by nothing: Chromium shows its own error page, not ours.
    dom = render(url, tmp_path)
    assert "reverb_py status" not in dom


def test_stalled_tables_say_which_side_waits_and_why(tmp_path) -> None:
    with (
        stalled_server(actor_seconds=2) as server,
        Chromium(str(tmp_path / "profile")) as browser,
    ):
        browser.open(f"http://localhost:{server.metrics_port}/")
        # The actor of replay stops after 2 s; then its learner waits too.
        browser.wait_for("document.querySelectorAll('.badge.blocked').length === 3")
        cards = browser.evaluate(
            "Object.fromEntries([...document.querySelectorAll('.card')].map("
            "c => [c.dataset.table, c.innerText]))"
        )
        facts = browser.evaluate("document.getElementById('server').innerText")
    warmup = cards["warmup"]
    assert re.search(r"samples blocked \d", warmup), warmup
    assert re.search(
        rf"2 sample requests waiting for [\d.]+ (ms|s): the table holds {WARMUP_ITEMS} items, "
        r"fewer than min_size_to_sample 1000: sampling needs 750 more inserts",
        warmup,
    ), warmup
    events = cards["events"]
    assert re.search(r"inserts blocked \d", events), events
    assert re.search(
        r"1 insert waiting for [\d.]+ (ms|s): an insert would take the cursor from 50 above "
        r"max_diff 50: inserting needs samples",
        events,
    ), events
    replay = cards["replay"]
    assert re.search(r"samples blocked \d", replay), replay
    assert "below min_diff 40: sampling needs inserts" in replay, replay
    assert re.search(r"sampled item age\s+mean [\d.]+ (µs|ms|s)", replay), replay
    assert "token none" in facts and "TLS off" in facts, facts


def test_with_a_token_the_page_takes_it_as_the_password(tmp_path) -> None:
    with (
        reverb.Server([reverb.Table.queue("q", 10)], port=0, metrics_port=0, token="s3cret") as s,
        Chromium(str(tmp_path / "profile")) as browser,
    ):
        browser.open(f"http://reader:s3cret@localhost:{s.metrics_port}/")
        browser.wait_for("document.querySelectorAll('.card').length === 1")
        facts = browser.evaluate("document.getElementById('server').innerText")
        error = browser.evaluate("document.getElementById('error').textContent")
    assert "token required" in facts and not error
