"""ServerLimits: what one client can make the server hold, and what it gets past a limit."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from reverb_py._proto import reverb_service_pb2 as pb
from reverb_py.errors import ConfigError
from reverb_py.server import Server, ServerLimits
from reverb_py.server._daemon import limits_from_config
from tests.integration.test_server import (
    chunk,
    insert,
    insert_stream,
    item,
    new_tables,
    sample_stream,
    take_samples,
)

KIB = 1024


@pytest.fixture
def limited_server(request):
    server = Server(new_tables(), port=0, limits=request.param)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def channel(limited_server):
    async with grpc.aio.insecure_channel(f"localhost:{limited_server.port}") as channel:
        yield channel


async def well_behaved(channel, key: int) -> None:
    """A second client still inserts and samples."""
    assert await insert(
        channel, [pb.InsertStreamRequest(chunks=[chunk(key)], items=[item(key, "uniform", [key])])]
    ) == [key]
    samples = await take_samples(channel, "uniform", 1)
    assert len(samples) == 1


@pytest.mark.parametrize("limited_server", [ServerLimits(max_streams=2)], indirect=True)
async def test_streams_past_max_streams_are_refused_until_one_ends(channel, limited_server):
    # Two sample streams wait on an empty table (MinSize(1)): both are open.
    waiting = [sample_stream(channel) for _ in range(2)]
    for call in waiting:
        await call.write(pb.SampleStreamRequest(table="queue", num_samples=1))
    await limited_server_has_streams(limited_server, 2)
    # The stream is refused before it reads anything.
    refused = insert_stream(channel)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in refused:
            pass
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max_streams=2" in (caught.value.details() or "")
    # Unary calls are not streams: server_info still answers.
    info = await channel.unary_unary(
        "/deepmind.reverb.ReverbService/ServerInfo",
        request_serializer=pb.ServerInfoRequest.SerializeToString,
        response_deserializer=pb.ServerInfoResponse.FromString,
    )(pb.ServerInfoRequest())
    assert len(info.table_info) == 3
    for call in waiting:
        call.cancel()
    await limited_server_has_streams(limited_server, 0)
    await well_behaved(channel, 7)
    await limited_server_has_streams(limited_server, 0)


async def limited_server_has_streams(server: Server, n: int) -> None:
    """Waits (on the server's own loop) until ``n`` streams are open."""

    async def until() -> None:
        while server._servicer.open_streams != n:
            await asyncio.sleep(0.005)

    await asyncio.wait_for(asyncio.wrap_future(server._loop_thread.submit(until())), 30)


@pytest.mark.parametrize(
    "limited_server", [ServerLimits(max_stream_chunk_bytes=64 * KIB)], indirect=True
)
async def test_chunks_kept_past_the_stream_limit_end_the_stream(channel, limited_server):
    payload = b"x" * (15 * KIB)
    call = insert_stream(channel)
    # Kept chunks no item uses: the fifth passes 64 KiB.
    for key in range(1, 6):
        await call.write(pb.InsertStreamRequest(chunks=[chunk(key, payload=payload)]))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in call:
            pass
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    details = caught.value.details() or ""
    assert "Chunk 5" in details and "max_stream_chunk_bytes=65536" in details, details
    await limited_server_has_streams(limited_server, 0)
    assert limited_server._servicer.held_chunk_bytes == 0
    await well_behaved(channel, 9)


@pytest.mark.parametrize(
    "limited_server", [ServerLimits(max_stream_chunk_bytes=64 * KIB)], indirect=True
)
async def test_chunks_used_by_items_and_not_kept_do_not_count(channel, limited_server):
    payload = b"x" * (16 * KIB)
    requests = [
        pb.InsertStreamRequest(
            chunks=[chunk(key, payload=payload)], items=[item(key, "uniform", [key])]
        )
        for key in range(1, 21)
    ]
    # 20 x 16 KiB through one stream: each request's chunk is released after its item.
    assert await insert(channel, requests) == list(range(1, 21))
    assert limited_server._servicer.held_chunk_bytes == 0


@pytest.mark.parametrize(
    "limited_server", [ServerLimits(max_held_chunk_bytes=64 * KIB)], indirect=True
)
async def test_chunks_kept_by_all_streams_are_bounded_together(channel, limited_server):
    payload = b"x" * (24 * KIB)
    first = insert_stream(channel)
    await first.write(pb.InsertStreamRequest(chunks=[chunk(1, payload=payload)]))
    await first.write(pb.InsertStreamRequest(chunks=[chunk(2, payload=payload)]))
    await held_bytes_reach(limited_server, 48 * KIB)
    second = insert_stream(channel)
    await second.write(pb.InsertStreamRequest(chunks=[chunk(3, payload=payload)]))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in second:
            pass
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max_held_chunk_bytes" in (caught.value.details() or "")
    # The first stream is unharmed: it still inserts an item over its kept chunks.
    await first.write(
        pb.InsertStreamRequest(items=[item(1, "uniform", [1]), item(2, "uniform", [2])])
    )
    await first.done_writing()
    keys = [key async for response in first for key in response.keys]
    assert keys == [1, 2]
    await limited_server_has_streams(limited_server, 0)
    assert limited_server._servicer.held_chunk_bytes == 0


async def held_bytes_reach(server: Server, n: int) -> None:
    async def until() -> None:
        while server._servicer.held_chunk_bytes < n:
            await asyncio.sleep(0.005)

    await asyncio.wait_for(asyncio.wrap_future(server._loop_thread.submit(until())), 30)


@pytest.mark.parametrize(
    "limited_server", [ServerLimits(max_message_bytes=256 * KIB)], indirect=True
)
async def test_a_request_over_max_message_bytes_is_refused(channel, limited_server):
    call = insert_stream(channel)
    await call.write(pb.InsertStreamRequest(chunks=[chunk(1, payload=b"x" * (300 * KIB))]))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in call:
            pass
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    await well_behaved(channel, 3)


def test_default_limits_bound_the_request_size() -> None:
    limits = ServerLimits()
    assert limits.max_message_bytes == 256 * 1024 * KIB
    assert ("grpc.max_receive_message_length", 256 * 1024 * KIB) in limits.grpc_options()
    assert ServerLimits(max_message_bytes=None).grpc_options() == [
        ("grpc.max_receive_message_length", -1)
    ]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_streams": 0},
        {"max_streams": -3},
        {"max_stream_chunk_bytes": 1.5},
        {"max_held_chunk_bytes": True},
        {"max_message_bytes": 2**31},
    ],
)
def test_bad_limits_are_refused(kwargs) -> None:
    with pytest.raises(ValueError, match="ServerLimits"):
        ServerLimits(**kwargs)


def test_server_refuses_limits_of_the_wrong_type() -> None:
    with pytest.raises(TypeError, match="ServerLimits"):
        Server(new_tables(), port=0, limits={"max_streams": 3})  # type: ignore[arg-type]


def test_daemon_limits_from_config() -> None:
    limits = limits_from_config({"limits": {"max_streams": 5, "max_held_chunk_bytes": 0}})
    assert limits == ServerLimits(max_streams=5, max_held_chunk_bytes=None)
    assert limits_from_config({}) == ServerLimits()
    with pytest.raises(
        ConfigError, match="config.limits.max_stream: unknown field; did you mean 'max_streams'"
    ):
        limits_from_config({"limits": {"max_stream": 5}})
    with pytest.raises(ConfigError, match="config.limits.max_streams: must be an integer"):
        limits_from_config({"limits": {"max_streams": "5"}})
    with pytest.raises(ConfigError, match="config.limits"):
        limits_from_config({"limits": {"max_streams": -7}})
