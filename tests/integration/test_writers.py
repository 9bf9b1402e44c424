"""Writers against a real server: legacy Writer, reconnects, terminal stream errors."""

from __future__ import annotations

import socket

import grpc
import numpy as np
import pytest

import reverb_py as reverb
from reverb_py._proto import reverb_service_pb2 as pb


def uniform_table(name: str = "t", max_size: int = 1000, signature=None) -> reverb.Table:
    return reverb.Table(
        name=name,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=max_size,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=signature,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        return int(sock.getsockname()[1])


def test_legacy_writer_sequences_round_trip() -> None:
    with reverb.Server([uniform_table()]) as server:
        client = server.localhost_client()
        with client.writer(max_sequence_length=3) as writer:
            for step in range(5):
                writer.append({"x": np.float32(step), "y": np.array([step, -step], np.int32)})
                if step >= 2:
                    writer.create_item("t", num_timesteps=3, priority=1.0)
        assert server.tables[0].info.current_size == 3
        starts = set()
        for sample in client.sample("t", 30, emit_timesteps=False):
            x, y = sample.data
            assert x.shape == (3,) and y.shape == (3, 2)
            np.testing.assert_array_equal(x, x[0] + np.arange(3, dtype=np.float32))
            np.testing.assert_array_equal(y[:, 0], x.astype(np.int32))
            starts.add(int(x[0]))
        assert starts == {0, 1, 2}


def test_legacy_writer_validation() -> None:
    with reverb.Server([uniform_table()]) as server:
        client = server.localhost_client()
        with pytest.raises(ValueError):
            client.writer(max_sequence_length=0)
        with pytest.raises(ValueError):
            client.writer(max_sequence_length=2, chunk_length=3)
        with pytest.raises(ValueError):
            client.writer(max_sequence_length=2, max_in_flight_items=0)
        writer = client.writer(max_sequence_length=2)
        writer.append([1.0])
        with pytest.raises(ValueError):
            writer.create_item("t", num_timesteps=2, priority=1.0)
        with pytest.raises(ValueError):
            writer.create_item("t", num_timesteps=1, priority=float("nan"))
        writer.create_item("t", num_timesteps=1, priority=1.0)
        writer.close()
        assert server.tables[0].info.current_size == 1
        with pytest.raises(ValueError, match="closed"):
            with writer:
                pass


@pytest.mark.parametrize("size", [0, 2**31, 2**63])
async def test_writer_sizes_out_of_range_are_refused_by_both_clients(size: int) -> None:
    with reverb.Server([uniform_table()]) as server:
        message = "must be a positive integer" if size < 1 else "must be <= 2147483647"
        client = server.localhost_client()
        with pytest.raises(ValueError, match=message):
            client.trajectory_writer(size)
        with pytest.raises(ValueError, match=message):
            client.writer(max_sequence_length=size)
        async_client = reverb.aio.Client(f"localhost:{server.port}")
        try:
            with pytest.raises(ValueError, match=message):
                await async_client.trajectory_writer(size)
        finally:
            await async_client.close()
        with client.trajectory_writer(2**31 - 1) as writer:  # the largest accepted
            writer.append({"x": np.float32(1.0)})
            writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})
        assert server.tables[0].info.current_size == 1


def test_trajectory_writer_reconnects_and_resends_unconfirmed_items() -> None:
    port = free_port()
    first = reverb.Server([uniform_table()], port=port)
    client = reverb.Client(f"localhost:{port}")
    writer = client.trajectory_writer(num_keep_alive_refs=2, validate_items=False)
    writer.append({"v": np.int64(1)})
    writer.create_item("t", 1.0, {"v": writer.history["v"][-1]})
    writer.flush()
    assert first.tables[0].info.current_size == 1
    first.stop()
    second = reverb.Server([uniform_table()], port=port)
    try:
        for value in range(2, 6):
            writer.append({"v": np.int64(value)})
            writer.create_item("t", 1.0, {"v": writer.history["v"][-1]})
        writer.flush(timeout_ms=30_000)
        assert second.tables[0].info.current_size == 4
        values = sorted(int(s.data[0]) for s in client.sample("t", 40, emit_timesteps=False))
        assert set(values) == {2, 3, 4, 5}
        writer.close()
    finally:
        second.stop()


def test_a_refused_item_is_a_terminal_writer_error() -> None:
    with reverb.Server([uniform_table()]) as server:
        client = server.localhost_client()
        writer = client.trajectory_writer(2, validate_items=False)
        writer.append({"v": np.int64(1)})
        writer.create_item("missing_table", 1.0, {"v": writer.history["v"][-1]})
        with pytest.raises(RuntimeError, match="Priority table missing_table was not found"):
            writer.flush(timeout_ms=30_000)
        with pytest.raises(RuntimeError):
            writer.append({"v": np.int64(2)})
        writer.close()
        assert server.tables[0].info.current_size == 0


def test_flush_timeout_while_the_table_is_full() -> None:
    with reverb.Server([reverb.Table.queue("q", 1)]) as server:
        client = server.localhost_client()
        with client.trajectory_writer(1) as writer:
            for value in range(2):
                writer.append({"v": np.int64(value)})
                writer.create_item("q", 1.0, {"v": writer.history["v"][-1]})
            with pytest.raises(reverb.DeadlineExceededError, match="Flush call did not complete"):
                writer.flush(timeout_ms=50)
            [sample] = list(client.sample("q", 1, emit_timesteps=False))
            assert int(sample.data[0]) == 0
            writer.flush(timeout_ms=30_000)
            assert server.tables[0].info.current_size == 1


def test_initialize_connection_answers_address_zero() -> None:
    with reverb.Server([uniform_table()]) as server:
        with grpc.insecure_channel(f"localhost:{server.port}") as channel:
            call = channel.stream_stream(
                "/deepmind.reverb.ReverbService/InitializeConnection",
                request_serializer=pb.InitializeConnectionRequest.SerializeToString,
                response_deserializer=pb.InitializeConnectionResponse.FromString,
            )
            responses = list(
                call(iter([pb.InitializeConnectionRequest(pid=1, table_name="t")]), timeout=30)
            )
            assert [r.address for r in responses] == [0]


def test_console_script_is_installed() -> None:
    from importlib import metadata

    scripts = {entry.name: entry.value for entry in metadata.entry_points(group="console_scripts")}
    assert scripts.get("reverb-py-server") == "reverb_py.server._daemon:main"


async def test_get_signature_timeout_ms_bounds_the_wait_for_a_server_that_is_not_there() -> None:
    # Reverb's later releases: `trajectory_writer(n, get_signature_timeout_ms=...)`.
    address = f"localhost:{free_port()}"
    client = reverb.Client(address)
    with pytest.raises(reverb.errors.DeadlineExceededError):
        client.trajectory_writer(2, get_signature_timeout_ms=100)
    async_client = reverb.aio.Client(address)
    try:
        with pytest.raises(reverb.errors.DeadlineExceededError):
            await async_client.trajectory_writer(2, get_signature_timeout_ms=100)
        # None: no signatures are fetched, so nothing waits for the server.
        writer = await async_client.trajectory_writer(2, get_signature_timeout_ms=None)
        await writer.close()
    finally:
        await async_client.close()
    client.trajectory_writer(2, get_signature_timeout_ms=None).close()


async def test_get_signature_timeout_ms_fetches_the_signatures_that_check_items() -> None:
    signature = {"v": reverb.TensorSpec((), np.int64)}
    with reverb.Server([uniform_table(signature=signature)]) as server:
        client = server.localhost_client()
        with client.trajectory_writer(2, get_signature_timeout_ms=300_000) as writer:
            writer.append({"v": np.int32(1)})
            with pytest.raises(ValueError, match="signature"):
                writer.create_item("t", 1.0, {"v": writer.history["v"][-1]})
        async_client = reverb.aio.Client(f"localhost:{server.port}")
        try:
            writer = await async_client.trajectory_writer(2, get_signature_timeout_ms=300_000)
            writer.append({"v": np.int32(1)})
            with pytest.raises(ValueError, match="signature"):
                writer.create_item("t", 1.0, {"v": writer.history["v"][-1]})
            await writer.close()
        finally:
            await async_client.close()
        assert server.tables[0].info.current_size == 0
        # Without signatures nothing is checked on the client (nor, as in Reverb, by the
        # server): the item is stored.
        with client.trajectory_writer(2, get_signature_timeout_ms=None) as writer:
            writer.append({"v": np.int32(1)})
            writer.create_item("t", 1.0, {"v": writer.history["v"][-1]})
            writer.flush(timeout_ms=30_000)
        assert server.tables[0].info.current_size == 1
