"""A blocking writer's insert stream driven by the writer's own threads
(``PolledInsertTransport``): which writers get it, waits with and without a timeout,
replaced streams, refusals, and closing."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest

import reverb_py as reverb
from reverb_py import errors
from reverb_py._client import polled_insert
from reverb_py._client.insert_transport import InsertTransport
from reverb_py.server import Server


def queue_table(size: int = 1000) -> reverb.Table:
    return reverb.Table.queue("q", size)


@pytest.fixture(autouse=True)
def polled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(polled_insert, "ENABLED", True)


@pytest.fixture
def server() -> Iterator[Server]:
    with Server([queue_table()], port=0) as server:
        yield server


def write(writer: reverb.TrajectoryWriter, value: float, table: str = "q") -> None:
    writer.append({"x": np.float32(value)})
    writer.create_item(table, 1.0, {"x": writer.history["x"][-1:]})


def values(server: Server) -> list[float]:
    return sorted(float(item.priority) for item in server.tables[0].items())


def transport(writer: reverb.TrajectoryWriter) -> object:
    return writer._writer._transport  # type: ignore[attr-defined]


def wait_until(condition, what: str) -> None:
    """Waits for a condition of the server (on its own thread), 10 s at most."""
    pause = threading.Event()
    for _ in range(1000):
        if condition():
            return
        pause.wait(0.01)
    raise AssertionError(f"never: {what}")


def test_a_one_server_client_drives_its_writers_streams(server: Server) -> None:
    client = reverb.Client(f"localhost:{server.port}")
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        assert isinstance(transport(writer), polled_insert.PolledInsertTransport)
        for value in range(200):
            write(writer, float(value))
            writer.flush(block_until_num_items=4)
        writer.flush()
        assert len(server.tables[0].items()) == 200
        # No thread of the transport's own was needed for waits without a timeout.
        assert transport(writer)._helper is None
    assert client.server_info()["q"].current_size == 200


def test_legacy_and_structured_writers_drive_their_streams(server: Server) -> None:
    client = reverb.Client(f"localhost:{server.port}")
    with client.writer(max_sequence_length=2) as legacy:
        assert isinstance(legacy._writer._transport, polled_insert.PolledInsertTransport)
        legacy.append({"x": np.float32(1)})
        legacy.create_item("q", 1, 1.0)
    config = reverb.structured_writer.create_config(
        reverb.structured_writer.create_reference_step({"x": None})["x"][-1], "q"
    )
    with client.structured_writer([config]) as structured:
        structured.append({"x": np.float32(2)})
        structured.flush()
    assert client.server_info()["q"].current_size == 2


def test_a_target_of_several_servers_keeps_the_asyncio_transport() -> None:
    with Server([queue_table()], port=0) as first, Server([queue_table()], port=0) as second:
        client = reverb.Client(f"ipv4:127.0.0.1:{first.port},127.0.0.1:{second.port}")
        with client.trajectory_writer(num_keep_alive_refs=1) as writer:
            assert isinstance(transport(writer), InsertTransport)
            write(writer, 1.0)


def test_switched_off_the_writer_uses_the_asyncio_transport(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(polled_insert, "ENABLED", False)
    client = reverb.Client(f"localhost:{server.port}")
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        assert isinstance(transport(writer), InsertTransport)
        write(writer, 1.0)
    assert client.server_info()["q"].current_size == 1


def test_a_wait_with_a_timeout_hands_the_stream_to_the_transports_thread() -> None:
    # Inserts beyond the first two wait for samples: their confirmations wait too.
    limiter = reverb.rate_limiters.SampleToInsertRatio(1.0, 1, 1.0)
    table = reverb.Table("q", reverb.selectors.Fifo(), reverb.selectors.Fifo(), 100, limiter)
    with Server([table], port=0) as server:
        client = reverb.Client(f"localhost:{server.port}")
        writer = client.trajectory_writer(num_keep_alive_refs=1)
        try:
            for value in range(4):
                write(writer, float(value))
            with pytest.raises(errors.DeadlineExceededError):
                writer.flush(timeout_ms=200)
            helper = transport(writer)._helper
            assert helper is not None and helper.is_alive()
            # Samples let the waiting inserts in; a wait with no timeout now waits on
            # the confirmations the transport's thread takes.
            done = threading.Event()

            def sample_more() -> None:
                while not done.is_set():
                    try:
                        list(client.sample("q", num_samples=1, rate_limiter_timeout_ms=200))
                    except errors.DeadlineExceededError:
                        pass  # Nothing to sample yet.

            sampler = threading.Thread(target=sample_more)
            sampler.start()
            try:
                writer.flush()
            finally:
                done.set()
                sampler.join()
        finally:
            writer.close()
        helper.join(timeout=10)
        assert not helper.is_alive()  # Closing the writer ends the transport's thread.


class _Restarts:
    """A writer whose one item went to a server that has since stopped; ``restart()``
    starts a new server on the same port."""

    def __init__(self) -> None:
        self.server = Server([queue_table()], port=0)
        self.port = self.server.port
        self.writer = reverb.Client(f"localhost:{self.port}").trajectory_writer(1)
        write(self.writer, 1.0)
        self.writer.flush()
        self.server.stop()

    def restart(self) -> Server:
        self.server = Server([queue_table()], port=self.port)
        return self.server

    def close(self) -> None:
        self.writer.close()
        self.server.stop()


@pytest.fixture
def restarts() -> Iterator[_Restarts]:
    state = _Restarts()
    try:
        yield state
    finally:
        state.close()


def test_a_stream_broken_by_a_restart_is_replaced_and_nothing_is_lost(
    restarts: _Restarts,
) -> None:
    server = restarts.restart()
    for value in (2.0, 3.0):
        write(restarts.writer, value)
    restarts.writer.flush()  # Reconnects, sends both again to the new server.
    assert values(server) == [1.0, 1.0]
    assert len(server.tables[0].items()) == 2


def test_writes_while_no_server_runs_return_and_wait_in_the_writer(
    restarts: _Restarts,
) -> None:
    writer = restarts.writer
    # Every write returns although no stream can open; the items wait in the writer.
    for value in range(2, 40):
        write(writer, float(value))
    with pytest.raises(errors.DeadlineExceededError):
        writer.flush(timeout_ms=100)
    server = restarts.restart()
    writer.flush(timeout_ms=60_000)
    assert len(server.tables[0].items()) == 38


def test_an_item_the_server_refuses_fails_the_writer_with_its_status(server: Server) -> None:
    client = reverb.Client(f"localhost:{server.port}")
    writer = client.trajectory_writer(num_keep_alive_refs=1, validate_items=False)
    try:
        write(writer, 1.0, table="nope")
        with pytest.raises(errors.NotFoundError):
            writer.flush()
        with pytest.raises(errors.NotFoundError):  # Terminal: every later call says so.
            write(writer, 2.0)
    finally:
        writer.close()
    assert server.tables[0].items() == []


def test_closing_from_another_thread_ends_a_blocked_flush() -> None:
    # Inserts wait for samples that never come: the flush blocks in the writer's thread.
    limiter = reverb.rate_limiters.SampleToInsertRatio(1.0, 1, 1.0)
    table = reverb.Table("q", reverb.selectors.Fifo(), reverb.selectors.Fifo(), 100, limiter)
    with Server([table], port=0) as server:
        client = reverb.Client(f"localhost:{server.port}")
        writer = client.trajectory_writer(num_keep_alive_refs=1)
        for value in range(4):
            write(writer, float(value))
        outcome: list[BaseException | None] = []

        def flush() -> None:
            try:
                writer.flush()
                outcome.append(None)
            except BaseException as error:  # noqa: BLE001 - checked below.
                outcome.append(error)

        flusher = threading.Thread(target=flush)
        flusher.start()
        wait_until(lambda: server.tables[0].num_pending_inserts > 0, "an insert waits")
        writer.close()
        flusher.join(timeout=30)
        assert not flusher.is_alive()
        [error] = outcome
        assert isinstance(error, errors.UsageError)  # The writer was closed.
