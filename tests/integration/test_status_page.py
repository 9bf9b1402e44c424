"""The status page at ``/`` of the metrics port and the ``/status.json`` it reads."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import numpy as np
import pytest

import reverb_py as reverb


@pytest.fixture
def server():
    server = reverb.Server(
        [
            reverb.Table.queue("queue", 10),
            reverb.Table(
                "replay",
                reverb.selectors.Uniform(),
                reverb.selectors.Fifo(),
                2,
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


def get(server, path: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(f"http://localhost:{server.metrics_port}{path}", timeout=30) as r:
        return r.status, r.headers["Content-Type"], r.read()


def test_status_json_follows_the_tables(server) -> None:
    client = reverb.Client(f"localhost:{server.port}")
    for step in range(3):
        client.insert(np.float32(step), {"queue": 1.0, "replay": 1.0})
    list(client.sample("queue", 1))
    status, kind, body = get(server, "/status.json")
    assert status == 200 and kind == "application/json"
    tables = json.loads(body)["tables"]
    assert set(tables) == {"queue", "replay"}
    assert tables["queue"]["size"] == 2 and tables["queue"]["max_size"] == 10
    assert tables["queue"]["inserts"] == 3 and tables["queue"]["samples"] == 1
    # replay holds 2: the third insert evicted the first.
    assert tables["replay"]["size"] == 2 and tables["replay"]["evictions"] == 1
    assert tables["replay"]["waiting_inserts"] == 0


def test_the_page_is_served_at_the_root(server) -> None:
    status, kind, body = get(server, "/")
    assert status == 200 and kind.startswith("text/html")
    assert b"<title>reverb_py status</title>" in body and b'fetch("status.json"' in body
    assert b"http" not in body.split(b"<script>")[1]  # no external resources


def test_other_paths_are_not_found(server) -> None:
    with pytest.raises(urllib.error.HTTPError) as caught:
        get(server, "/nothing")
    assert caught.value.code == 404
    caught.value.close()
