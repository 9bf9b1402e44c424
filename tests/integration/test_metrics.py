"""Prometheus metrics: a known sequence of operations, then ``/metrics`` scraped over HTTP
and parsed with prometheus-client's parser; the values are checked exactly."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from reverb_py import errors, rate_limiters, selectors
from reverb_py.server import Server, Table, _logs, _metrics
from reverb_py.server._service import ReverbServicer
from reverb_py.table import Item
from tests.integration.test_daemon import kill, read_address, start


def scrape(
    port: int, path: str = "/metrics", token: str | None = None
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``/metrics``: ``(name, sorted labels) -> value``."""
    request = urllib.request.Request(f"http://localhost:{port}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def distinct_chunk_bytes(table: Table) -> int:
    chunks = {id(chunk): chunk for item in table.items() for chunk in item.chunks}
    return sum(len(chunk.data) for chunk in chunks.values())


def fifo_table(name: str = "t") -> Table:
    return Table(
        name,
        selectors.Fifo(),
        selectors.Fifo(),
        max_size=3,
        rate_limiter=rate_limiters.MinSize(1),
        max_times_sampled=2,
    )


def test_a_known_sequence_of_operations_gives_exact_values(tmp_path) -> None:
    from reverb_py.checkpointers import DefaultCheckpointer

    table = fifo_table()
    empty = Table(
        "empty",
        selectors.Uniform(),
        selectors.Fifo(),
        10,
        rate_limiters.MinSize(1),
        max_bytes=10**9,
    )
    with Server(
        [table, empty], port=0, metrics_port=0, checkpointer=DefaultCheckpointer(str(tmp_path))
    ) as server:
        assert server.metrics_port not in (None, 0, server.port)
        client = server.localhost_client()
        for step in range(5):
            client.insert(np.full(4, step, np.float32), {"t": 1.0})
        # Fifo sampler, max_times_sampled 2: the oldest item twice (then deleted), the
        # next one twice (deleted too).
        assert len(list(client.sample("t", 4))) == 4
        with pytest.raises(errors.NotFoundError):
            list(client.sample("nope", 1))
        with pytest.raises(errors.DeadlineExceededError):
            list(client.sample("empty", 1, rate_limiter_timeout_ms=50))
        path = client.checkpoint()
        with client.trajectory_writer(1) as writer:
            writer.append({"x": np.zeros(2, np.float32)})
            writer.create_item("empty", 1.0, writer.history["x"][-1:])
            writer.flush()
            # The writer's insert stream is open while it is.
            during = scrape(server.metrics_port)
        samples = scrape(server.metrics_port)

    assert value(during, "reverb_py_open_streams", method="InsertStream") == 1
    assert value(during, "reverb_py_open_streams", method="SampleStream") == 0
    t = {"table": "t"}
    assert value(samples, "reverb_py_table_size", **t) == 1
    assert value(samples, "reverb_py_table_max_size", **t) == 3
    assert value(samples, "reverb_py_table_inserts_total", **t) == 5
    assert value(samples, "reverb_py_table_samples_total", **t) == 4
    assert value(samples, "reverb_py_table_deletes_total", **t) == 4  # 2 evicted, 2 sampled
    assert value(samples, "reverb_py_table_evictions_total", **t) == 2
    assert value(samples, "reverb_py_table_waiting_inserts", **t) == 0
    assert value(samples, "reverb_py_table_chunk_bytes", **t) == distinct_chunk_bytes(table) > 0
    assert value(samples, "reverb_py_table_size", table="empty") == 1
    assert value(samples, "reverb_py_table_chunk_bytes", table="empty") == distinct_chunk_bytes(
        empty
    )
    assert value(samples, "reverb_py_table_max_chunk_bytes", table="empty") == 10**9
    assert ("reverb_py_table_max_chunk_bytes", (("table", "t"),)) not in samples
    assert value(samples, "reverb_py_chunk_bytes") >= distinct_chunk_bytes(
        table
    ) + distinct_chunk_bytes(empty)
    # Every sample's age was observed; nothing waited on table t.
    assert value(samples, "reverb_py_table_sampled_item_age_seconds_count", **t) == 4
    assert value(samples, "reverb_py_table_sampled_item_age_seconds_bucket", le="+Inf", **t) == 4
    assert value(samples, "reverb_py_table_sampled_item_age_seconds_sum", **t) > 0
    assert value(samples, "reverb_py_table_sample_wait_seconds_count", **t) == 0
    assert value(samples, "reverb_py_table_insert_wait_seconds_count", **t) == 0
    # The sample of the empty table waited for the rate limiter, then timed out.
    empty_label = {"table": "empty"}
    assert value(samples, "reverb_py_table_sample_wait_seconds_count", **empty_label) == 1
    assert value(samples, "reverb_py_table_sample_wait_seconds_sum", **empty_label) > 0
    assert value(samples, "reverb_py_table_sampled_item_age_seconds_count", **empty_label) == 0
    stream = {"method": "SampleStream"}
    assert value(samples, "reverb_py_rpc_errors_total", code="NOT_FOUND", **stream) == 1
    assert value(samples, "reverb_py_rpc_errors_total", code="DEADLINE_EXCEEDED", **stream) == 1
    assert value(samples, "reverb_py_checkpoint_duration_seconds_count") == 1
    assert value(samples, "reverb_py_checkpoint_items") == 1
    assert value(samples, "reverb_py_checkpoint_size_bytes") == _logs.directory_bytes(path) > 0


def test_counters_never_go_down_when_a_table_is_reset() -> None:
    with Server([fifo_table()], port=0, metrics_port=0) as server:
        client = server.localhost_client()
        for step in range(3):
            client.insert(np.float32(step), {"t": 1.0})
        assert len(list(client.sample("t", 2))) == 2
        before = scrape(server.metrics_port)
        client.reset("t")
        client.insert(np.float32(9), {"t": 1.0})
        after = scrape(server.metrics_port)
    t = {"table": "t"}
    assert value(before, "reverb_py_table_inserts_total", **t) == 3
    assert value(after, "reverb_py_table_inserts_total", **t) == 4
    assert value(after, "reverb_py_table_samples_total", **t) == 2
    assert value(after, "reverb_py_table_deletes_total", **t) == value(
        before, "reverb_py_table_deletes_total", **t
    )
    assert value(after, "reverb_py_table_size", **t) == 1


def test_histogram_buckets_are_cumulative_with_the_configured_bounds() -> None:
    histogram = _metrics.Histogram((0.5, 1.0, 2.0), unit=1e-3)
    for seconds in (0.1, 0.5, 0.7, 3.0):
        histogram.observe(round(seconds / 1e-3))
    assert histogram.buckets() == [("0.5", 2), ("1.0", 3), ("2.0", 3), ("+Inf", 4)]
    assert histogram.seconds() == pytest.approx(4.3)


async def test_waiting_inserts_and_samples_are_observed() -> None:
    table = Table("q", selectors.Fifo(), selectors.Fifo(), 10, rate_limiters.Queue(1))
    metrics = _metrics.ServerMetrics([table], lambda function: function())
    metrics.attach(ReverbServicer({"q": table}))
    await table.insert(Item(1, 1.0))
    blocked = asyncio.ensure_future(table.insert(Item(2, 1.0)))
    await asyncio.sleep(0)  # let the insert reach the queue
    assert table.num_pending_inserts == 1
    assert len(await table.sample(1)) == 1  # makes room: the waiting insert goes in
    await blocked
    assert len(await table.sample(1)) == 1
    sampler = asyncio.ensure_future(table.sample(1))
    await asyncio.sleep(0)
    assert table.num_pending_samples == 1
    await table.insert(Item(3, 1.0))
    assert len(await sampler) == 1
    families = {family.name: family for family in metrics.collect()}
    counts = {
        name: [s.value for s in families[name].samples if s.name.endswith("_count")]
        for name in ("reverb_py_table_insert_wait_seconds", "reverb_py_table_sample_wait_seconds")
    }
    assert counts == {
        "reverb_py_table_insert_wait_seconds": [1],
        "reverb_py_table_sample_wait_seconds": [1],
    }
    metrics.detach()
    assert table._observer is None


def test_servers_in_one_process_have_their_own_metrics() -> None:
    with (
        Server([fifo_table("a")], port=0, metrics_port=0) as first,
        Server([fifo_table("b")], port=0, metrics_port=0) as second,
    ):
        first.localhost_client().insert(np.zeros(1, np.float32), {"a": 1.0})
        a = scrape(first.metrics_port)
        b = scrape(second.metrics_port)
    assert value(a, "reverb_py_table_inserts_total", table="a") == 1
    assert not any(labels == (("table", "b"),) for _, labels in a)
    assert value(b, "reverb_py_table_inserts_total", table="b") == 0
    assert not any(labels == (("table", "a"),) for _, labels in b)


def test_calls_refused_for_their_token_are_counted() -> None:
    from reverb_py.client import Client

    with Server([fifo_table()], port=0, metrics_port=0, token="secret") as server:
        with pytest.raises(errors.UnauthenticatedError):
            Client(server.address, token="wrong").server_info()
        server.localhost_client().server_info()
        samples = scrape(server.metrics_port, token="secret")
    unauthenticated = {"method": "ServerInfo", "code": "UNAUTHENTICATED"}
    assert value(samples, "reverb_py_rpc_errors_total", **unauthenticated) == 1


def test_other_paths_are_not_found() -> None:
    with Server([fifo_table()], port=0, metrics_port=0) as server:
        with pytest.raises(urllib.error.HTTPError) as raised:
            scrape(server.metrics_port, "/nothing")
    raised.value.close()
    assert raised.value.code == 404


def test_without_metrics_port_nothing_listens_and_a_stopped_server_closes_it() -> None:
    before = {thread.name for thread in threading.enumerate()}
    with Server([fifo_table()], port=0) as server:
        assert server.metrics_port is None
        names = {thread.name for thread in threading.enumerate()} - before
        assert "reverb_py-metrics" not in names
    with Server([fifo_table()], port=0, metrics_port=0) as server:
        port = server.metrics_port
        assert port is not None
        scrape(port)
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("localhost", port)):
        pass


def test_a_taken_metrics_port_is_refused_and_the_server_stopped() -> None:
    with socket.socket() as taken:
        taken.bind(("localhost", 0))
        taken.listen()
        port = taken.getsockname()[1]
        before = threading.active_count()
        with pytest.raises(ValueError, match=f"metrics server to localhost:{port}"):
            Server([fifo_table()], port=0, metrics_port=port)
        assert threading.active_count() == before


def test_bad_metrics_port_is_refused() -> None:
    with pytest.raises(ValueError, match="port"):
        Server([fifo_table()], port=0, metrics_port=70000)


def test_the_daemon_serves_metrics_on_its_metrics_port(tmp_path) -> None:
    config = tmp_path / "daemon.toml"
    config.write_text(
        'port = 0\n[[tables]]\nname = "d"\nsampler = {kind = "uniform"}\n'
        'remover = {kind = "fifo"}\nmax_size = 7\n'
        'rate_limiter = {kind = "min_size", min_size_to_sample = 1}\n'
    )
    process = start("--config", str(config), "--metrics-port", "0")
    try:
        lines: list[str] = []
        read_address(process, lines)
        assert process.stdout is not None
        line = process.stdout.readline()
        match = re.search(r"metrics on port (\d+) at /metrics", line)
        assert match, "".join(lines) + line
        samples = scrape(int(match.group(1)))
        assert value(samples, "reverb_py_table_max_size", table="d") == 7
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)
        assert process.returncode == 0
    finally:
        kill(process)


@pytest.mark.parametrize(
    ("text", "expected"), [("metrics_port = 70000\n", 2), ("metrics_port = 9\n", 0)]
)
def test_the_daemon_checks_its_metrics_port(tmp_path, text, expected) -> None:
    config = tmp_path / "daemon.toml"
    config.write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "reverb_py.server", "--config", str(config), "--check-config"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert result.returncode == expected, result.stderr
    if expected:
        assert "config.metrics_port" in result.stderr


def wait_for(condition: Any, what: str, timeout: float = 30.0) -> Any:
    """Polls ``condition()`` until it returns something true (then that), at most
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        threading.Event().wait(0.02)


def test_process_platform_and_build_series_are_on_the_servers_registry() -> None:
    import reverb_py
    from reverb_py import _impl

    before = time.time()
    with Server([fifo_table()], port=0, metrics_port=0) as server:
        samples = scrape(server.metrics_port)
    assert value(samples, "process_resident_memory_bytes") > 0
    assert value(samples, "process_cpu_seconds_total") > 0
    assert value(samples, "process_start_time_seconds") <= time.time()
    assert any(name == "python_info" for name, _ in samples)
    build = {"version": reverb_py.__version__, "implementation": _impl.IMPLEMENTATION}
    assert value(samples, "reverb_py_build_info", **build) == 1
    assert before - 1 <= value(samples, "reverb_py_server_start_time_seconds") <= time.time()
    assert value(samples, "reverb_py_server_auth_info", token="none", tls="off") == 1


def test_calls_are_counted_and_timed_by_method_and_failures_by_status() -> None:
    with Server([fifo_table()], port=0, metrics_port=0) as server:
        client = server.localhost_client()
        first = scrape(server.metrics_port)
        for _ in range(3):
            client.server_info()
        client.mutate_priorities("t", updates={1: 2.0})
        with pytest.raises(errors.NotFoundError):
            client.reset("missing")
        client.reset("t")
        samples = scrape(server.metrics_port)

    def calls(scraped: dict[Any, float], method: str) -> float:
        return value(scraped, "reverb_py_rpc_calls_total", method=method)

    assert calls(samples, "ServerInfo") - calls(first, "ServerInfo") == 3
    # The client sends priorities on its mutation stream (or the unary call).
    assert calls(samples, "MutatePriorities") + calls(samples, "MutatePrioritiesStream") == 1
    assert calls(samples, "Reset") == 2
    # Every method's series exists from the start.
    assert calls(first, "Checkpoint") == 0 and calls(first, "MutatePrioritiesStream") == 0
    assert value(samples, "reverb_py_rpc_errors_total", method="Reset", code="NOT_FOUND") == 1
    assert not any(
        name == "reverb_py_rpc_errors_total" and dict(labels)["method"] != "Reset"
        for name, labels in samples
    )
    # Each finished call is timed; buckets are cumulative.
    for method, count in (("Reset", 2), ("ServerInfo", calls(samples, "ServerInfo"))):
        timed = {"method": method}
        assert value(samples, "reverb_py_rpc_duration_seconds_count", **timed) == count
        assert value(samples, "reverb_py_rpc_duration_seconds_bucket", le="+Inf", **timed) == count
        assert 0 < value(samples, "reverb_py_rpc_duration_seconds_sum", **timed) < 30
    buckets = sorted(
        (float(dict(labels)["le"]), count)
        for (name, labels), count in samples.items()
        if name == "reverb_py_rpc_duration_seconds_bucket" and ("method", "Reset") in labels
    )
    assert [count for _, count in buckets] == sorted(count for _, count in buckets)


def test_a_table_blocked_on_min_size_shows_the_blocked_side_and_the_waiting_calls() -> None:
    table = Table("m", selectors.Fifo(), selectors.Fifo(), 10, rate_limiters.MinSize(3))
    with Server([table], port=0, metrics_port=0) as server:
        client = server.localhost_client()
        client.insert(np.float32(0), {"m": 1.0})
        idle = scrape(server.metrics_port)
        results: list[int] = []

        def sample() -> None:
            results.append(len(list(client.sample("m", 1, rate_limiter_timeout_ms=60_000))))

        samplers = [threading.Thread(target=sample) for _ in range(2)]
        for sampler in samplers:
            sampler.start()
        try:
            m = {"table": "m"}

            def both_waiting() -> Any:
                scraped = scrape(server.metrics_port)
                waiting = value(scraped, "reverb_py_table_waiting_sample_requests", **m)
                return scraped if waiting == 2 else None

            blocked = wait_for(both_waiting, "two waiting sample requests")
        finally:
            for step in (1, 2):
                client.insert(np.float32(step), {"m": 1.0})
            for sampler in samplers:
                sampler.join(timeout=60)
        after = scrape(server.metrics_port)
    assert results == [1, 1]
    sample, insert = {"table": "m", "side": "sample"}, {"table": "m", "side": "insert"}
    # Before the sample requests: nobody waits, but the limiter would hold a sample.
    assert value(idle, "reverb_py_table_rate_limiter_blocked", **sample) == 0
    assert value(idle, "reverb_py_table_rate_limiter_allows", **sample) == 0
    assert value(idle, "reverb_py_table_rate_limiter_allows", **insert) == 1
    # Blocked: the sample side waits, with two calls, for some time; inserts flow.
    assert value(blocked, "reverb_py_table_rate_limiter_blocked", **sample) == 1
    assert value(blocked, "reverb_py_table_rate_limiter_blocked", **insert) == 0
    assert value(blocked, "reverb_py_table_waiting_inserts", **m) == 0
    assert value(blocked, "reverb_py_table_rate_limiter_blocked_for_seconds", **sample) > 0
    assert value(blocked, "reverb_py_table_rate_limiter_blocked_for_seconds", **insert) == 0
    assert value(blocked, "reverb_py_table_rate_limiter_min_size_to_sample", **m) == 3
    assert value(blocked, "reverb_py_table_rate_limiter_cursor", **m) == 1  # 1 insert x 1.0
    assert value(blocked, "reverb_py_table_rate_limiter_samples_per_insert", **m) == 1
    assert value(blocked, "reverb_py_table_rate_limiter_min_diff", **m) < -1e300
    assert value(blocked, "reverb_py_table_rate_limiter_max_diff", **m) > 1e300
    # Released: nobody waits; the time waited is kept.
    assert value(after, "reverb_py_table_rate_limiter_blocked", **sample) == 0
    assert value(after, "reverb_py_table_waiting_sample_requests", **m) == 0
    assert value(after, "reverb_py_table_rate_limiter_blocked_for_seconds", **sample) == 0
    assert value(after, "reverb_py_table_rate_limiter_blocked_seconds_total", **sample) >= (
        value(blocked, "reverb_py_table_rate_limiter_blocked_for_seconds", **sample)
    )
    assert value(after, "reverb_py_table_rate_limiter_cursor", **m) == 1  # 3 inserts - 2
    assert value(after, "reverb_py_table_sample_wait_seconds_count", **m) == 2


class FailingOnceCheckpointer:
    """A checkpointer whose first save fails (a full disk), then saves as its inner one."""

    def __init__(self, path: str) -> None:
        from reverb_py.checkpointers import DefaultCheckpointer

        self.inner = DefaultCheckpointer(path)
        self.failed = False

    def save(self, snapshots: Any, *args: Any) -> str:
        if not self.failed:
            self.failed = True
            raise OSError(28, "No space left on device")
        return str(self.inner.save(snapshots, *args))

    def load_latest(self, *args: Any) -> Any:
        return self.inner.load_latest(*args)


def test_checkpoint_failures_and_the_last_success_are_exported(tmp_path) -> None:
    checkpointer = FailingOnceCheckpointer(str(tmp_path))
    with Server([fifo_table()], port=0, metrics_port=0, checkpointer=checkpointer) as server:
        client = server.localhost_client()
        client.insert(np.zeros(3, np.float32), {"t": 1.0})
        with pytest.raises(errors.ReverbError, match="No space left"):
            client.checkpoint()
        failed = scrape(server.metrics_port)
        before = time.time()
        client.checkpoint()
        written = scrape(server.metrics_port)
    assert value(failed, "reverb_py_checkpoint_failures_total") == 1
    assert not any(name.startswith("reverb_py_checkpoint_last_") for name, _ in failed)
    assert value(failed, "reverb_py_rpc_errors_total", method="Checkpoint", code="INTERNAL") == 1
    assert value(written, "reverb_py_checkpoint_failures_total") == 1
    assert before <= value(written, "reverb_py_checkpoint_last_success_timestamp_seconds")
    assert value(written, "reverb_py_checkpoint_last_success_timestamp_seconds") <= time.time()
    assert 0 < value(written, "reverb_py_checkpoint_last_duration_seconds") < 60
    assert value(written, "reverb_py_checkpoint_items") == 1


def get_status(port: int, path: str, headers: dict[str, str]) -> tuple[int, Any, bytes]:
    request = urllib.request.Request(f"http://localhost:{port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers, error.read()


@pytest.mark.parametrize("path", ["/metrics", "/", "/status.json", "/nothing"])
def test_with_a_token_the_metrics_port_refuses_requests_without_it(path: str) -> None:
    import base64

    with Server([fifo_table()], port=0, metrics_port=0, token="s3cret") as server:
        port = server.metrics_port
        basic = base64.b64encode(b"prometheus:s3cret").decode()
        wrong_basic = base64.b64encode(b"s3cret:wrong").decode()
        answers = {
            name: get_status(port, path, headers)
            for name, headers in {
                "none": {},
                "wrong": {"Authorization": "Bearer s3cre"},
                "other scheme": {"Authorization": "Token s3cret"},
                "wrong basic": {"Authorization": f"Basic {wrong_basic}"},
                "bad basic": {"Authorization": "Basic %%%"},
                "bearer": {"Authorization": "Bearer s3cret"},
                "basic": {"Authorization": f"Basic {basic}"},
            }.items()
        }
    expected = 404 if path == "/nothing" else 200
    for name in ("none", "wrong", "other scheme", "wrong basic", "bad basic"):
        status, headers, body = answers[name]
        assert status == 401, name
        assert 'Bearer realm="reverb_py"' in headers.get_all("WWW-Authenticate")
        assert b"s3cret" not in body and b"reverb_py_" not in body
    for name in ("bearer", "basic"):
        assert answers[name][0] == expected, name
    if path == "/metrics":
        text = answers["bearer"][2].decode()
        families = {family.name for family in text_string_to_metric_families(text)}
        assert "reverb_py_table_size" in families
        assert b'reverb_py_server_auth_info{tls="off",token="required"} 1.0' in answers["bearer"][2]
