"""The status page at ``/`` of the metrics port and the ``/status.json`` it reads."""

from __future__ import annotations

import json
import threading
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


def status_once_the_sample_stream_ended(server) -> dict:
    """The status once the server has finished the client's sample stream.

    The client has its samples before the server's handler returns and records the
    stream's duration, so the page is read again until it shows the ended stream
    (10 s at most).
    """
    pause = threading.Event()
    for _ in range(1000):
        status = json.loads(get(server, "/status.json")[2])
        if status["rpc"].get("SampleStream", {}).get("duration_seconds_count"):
            return status
        pause.wait(0.01)
    raise AssertionError(f"the sample stream never ended: {status['rpc']}")


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
    assert b"<title>reverb_py status</title>" in body and b'new URL("status.json"' in body
    assert b"http" not in body.split(b"<script>")[1]  # no external resources


def test_other_paths_are_not_found(server) -> None:
    with pytest.raises(urllib.error.HTTPError) as caught:
        get(server, "/nothing")
    assert caught.value.code == 404
    caught.value.close()


def test_status_json_has_the_server_the_calls_and_the_rate_limiters(server) -> None:
    client = reverb.Client(f"localhost:{server.port}")
    client.insert(np.float32(1), {"replay": 1.0})
    list(client.sample("replay", 2))
    status = status_once_the_sample_stream_ended(server)
    assert status["server"]["build_info"] == {
        "version": reverb.__version__,
        "implementation": reverb._impl.IMPLEMENTATION,
    }
    assert status["server"]["server_auth_info"] == {"token": "none", "tls": "off"}
    assert status["server"]["process_resident_memory_bytes"] > 0
    assert status["server"]["checkpoint_failures"] == 0
    assert status["rpc"]["SampleStream"]["calls"] == 1
    assert status["rpc"]["SampleStream"]["duration_seconds_count"] == 1
    replay = status["tables"]["replay"]
    assert replay["rate_limiter_min_size_to_sample"] == 1
    assert replay["rate_limiter_cursor"] == 1 - 2
    assert replay["rate_limiter_blocked_sample"] == 0
    assert replay["rate_limiter_allows_insert"] == 1
    assert replay["sampled_item_age_seconds_count"] == 2
    assert replay["sampled_item_age_seconds_bucket"][-1] == ["+Inf", 2]


def test_infinite_values_travel_as_strings_json_can_carry() -> None:
    from prometheus_client.core import GaugeMetricFamily

    from reverb_py.server._status_page import status_json

    family = GaugeMetricFamily("reverb_py_table_x", "x", labels=("table", "side"))
    family.add_metric(["t", "insert"], float("inf"))
    family.add_metric(["t", "sample"], float("-inf"))
    other = GaugeMetricFamily("reverb_py_table_y", "y", labels=("table",))
    other.add_metric(["t"], float("nan"))

    def strict(constant: str) -> None:
        raise AssertionError(f"not JSON: {constant}")

    status = json.loads(status_json([family, other]), parse_constant=strict)
    assert status["tables"]["t"] == {"x_insert": "+Inf", "x_sample": "-Inf", "y": None}
