"""The server over loopback, driven with raw gRPC calls at Reverb's method paths."""

from __future__ import annotations

import asyncio
import gc
import struct
import subprocess
import sys
import textwrap

import grpc
import numpy as np
import pytest

import reverb_py
import reverb_py.aio
from reverb_py import _impl, rate_limiters, selectors
from reverb_py._codec.chunk import decode_chunk, encode_chunk
from reverb_py._codec.fields import message_fields, read_varint
from reverb_py._proto import reverb_service_pb2 as pb
from reverb_py._proto import schema_pb2
from reverb_py.server import Server
from reverb_py.table import Table

PATH = "/deepmind.reverb.ReverbService/"


def live_chunk_count(server: Server) -> int:
    """How many chunks ``server`` holds: its index of live chunks, which a chunk leaves
    when it is freed."""
    gc.collect()
    return len(server._servicer._live_chunks)


def snappy_literal(payload: bytes) -> bytes:
    """``payload`` as raw snappy of one literal: its bytes as they are, behind a header."""
    size = len(payload) - 1
    if size < 60:
        tag = bytes([size << 2])
    else:
        width = (size.bit_length() + 7) // 8
        tag = bytes([(59 + width) << 2]) + size.to_bytes(width, "little")
    return _impl.wire.encode_varint(len(payload)) + tag + payload


def chunk(key: int, episode: int = 1, payload: bytes = b"x" * 16) -> schema_pb2.ChunkData:
    """A chunk of one step: a uint8 tensor of shape [1, len(payload)] holding
    ``payload`` (uncompressed, so the chunk's size is the payload's)."""
    message = schema_pb2.ChunkData(chunk_key=key)
    message.sequence_range.episode_id = episode
    message.sequence_range.start = 0
    message.sequence_range.end = 0
    tensor = message.data.tensors.add()
    tensor.dtype = 4
    tensor.tensor_shape.dim.add(size=1)
    tensor.tensor_shape.dim.add(size=len(payload))
    tensor.tensor_content = snappy_literal(payload)
    return message


def item(key: int, table: str, chunk_keys: list[int], priority: float = 1.0):
    message = schema_pb2.PrioritizedItem(key=key, table=table, priority=priority)
    column = message.flat_trajectory.columns.add()
    for chunk_key in chunk_keys:
        column.chunk_slices.add(chunk_key=chunk_key, offset=0, length=1, index=0)
    return message


def new_tables() -> list[Table]:
    return [
        Table("uniform", selectors.Uniform(), selectors.Fifo(), 100, rate_limiters.MinSize(1)),
        Table("prio", selectors.Prioritized(1.0), selectors.Fifo(), 100, rate_limiters.MinSize(1)),
        Table.queue("queue", 2),
    ]


@pytest.fixture
def server():
    server = Server(new_tables(), port=0)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def channel(server):
    async with grpc.aio.insecure_channel(f"localhost:{server.port}") as channel:
        yield channel


def insert_stream(channel):
    return channel.stream_stream(
        PATH + "InsertStream",
        request_serializer=pb.InsertStreamRequest.SerializeToString,
        response_deserializer=pb.InsertStreamResponse.FromString,
    )()


def sample_stream(channel):
    return channel.stream_stream(
        PATH + "SampleStream",
        request_serializer=pb.SampleStreamRequest.SerializeToString,
        response_deserializer=pb.SampleStreamResponse.FromString,
    )()


def unary(channel, name, request_cls, response_cls):
    return channel.unary_unary(
        PATH + name,
        request_serializer=request_cls.SerializeToString,
        response_deserializer=response_cls.FromString,
    )


async def insert(channel, requests):
    call = insert_stream(channel)
    keys = []
    for request in requests:
        await call.write(request)
    await call.done_writing()
    async for response in call:
        keys.extend(response.keys)
    return keys


async def take_samples(channel, table, num, timeout_ms=0):
    call = sample_stream(channel)
    request = pb.SampleStreamRequest(table=table, num_samples=num)
    if timeout_ms:
        request.rate_limiter_timeout.milliseconds = timeout_ms
    await call.write(request)
    samples, current = [], None
    async for response in call:
        for entry in response.entries:
            if entry.HasField("info"):
                current = (entry.info, list(entry.data))
            else:
                current[1].extend(entry.data)
            if entry.end_of_sequence:
                samples.append(current)
        if len(samples) >= num:
            break
    call.cancel()
    return samples


# ---------------------------------------------------------------- behaviour


def test_repr_and_validation() -> None:
    with pytest.raises(ValueError, match="At least one table must be provided"):
        Server([])
    tables = [Table.queue("a", 1), Table.queue("a", 1)]
    with pytest.raises(ValueError, match="same name: a"):
        Server(tables)
    with Server([Table.queue("q", 1)]) as server:
        text = repr(server)
        assert f"localhost:{server.port}" in text and "q" in text
        assert "implementation=" in text and server.port > 0


async def test_server_info_lists_every_table(channel, server) -> None:
    response = await unary(channel, "ServerInfo", pb.ServerInfoRequest, pb.ServerInfoResponse)(
        pb.ServerInfoRequest()
    )
    names = {info.name for info in response.table_info}
    assert names == {"uniform", "prio", "queue"}
    assert response.tables_state_id.high or response.tables_state_id.low


async def test_insert_confirms_every_item_and_sample_returns_the_chunk_bytes(channel, server):
    request = pb.InsertStreamRequest(
        chunks=[chunk(7, payload=b"abc")],
        items=[item(1, "uniform", [7]), item(2, "prio", [7])],
        keep_chunk_keys=[7],
    )
    request2 = pb.InsertStreamRequest(items=[item(3, "uniform", [7])])
    assert sorted(await insert(channel, [request, request2])) == [1, 2, 3]
    assert server.tables[0].info.current_size == 2
    samples = await take_samples(channel, "prio", 3)
    assert len(samples) == 3
    info, data = samples[0]
    assert info.item.key == 2 and info.item.table == "prio" and info.probability == 1.0
    assert info.table_size == 1 and info.item.times_sampled == 1
    assert [d.chunk_key for d in data] == [7]
    assert data[0].data.tensors[0].tensor_content == snappy_literal(b"abc")
    np.testing.assert_array_equal(decode_chunk(data[0])[0], np.frombuffer(b"abc", np.uint8)[None])
    assert info.item.flat_trajectory.columns[0].chunk_slices[0].chunk_key == 7


async def test_large_chunks_are_split_across_responses(channel, server) -> None:
    big = b"y" * (1536 * 1024)
    request = pb.InsertStreamRequest(
        chunks=[chunk(1, payload=big), chunk(2, payload=big)],
        items=[item(5, "uniform", [1, 2])],
    )
    assert await insert(channel, [request]) == [5]
    call = sample_stream(channel)
    await call.write(pb.SampleStreamRequest(table="uniform", num_samples=1))
    entries = []
    async for response in call:
        entries.extend(response.entries)
        if entries[-1].end_of_sequence:
            break
    call.cancel()
    assert len(entries) == 2 and entries[0].HasField("info")
    assert not entries[0].end_of_sequence and entries[1].end_of_sequence
    assert [d.chunk_key for e in entries for d in e.data] == [1, 2]


async def test_mutate_and_reset(channel, server) -> None:
    await insert(
        channel,
        [
            pb.InsertStreamRequest(
                chunks=[chunk(1)], items=[item(k, "prio", [1]) for k in (1, 2, 3)]
            )
        ],
    )
    mutate = unary(
        channel, "MutatePriorities", pb.MutatePrioritiesRequest, pb.MutatePrioritiesResponse
    )
    await mutate(
        pb.MutatePrioritiesRequest(
            table="prio", updates=[schema_pb2.KeyWithPriority(key=1, priority=5.0)], delete_keys=[2]
        )
    )
    prio = server.tables[1]
    assert len(prio) == 2 and prio.get(1).priority == 5.0
    reset = unary(channel, "Reset", pb.ResetRequest, pb.ResetResponse)
    await reset(pb.ResetRequest(table="prio"))
    assert len(prio) == 0


async def test_live_chunks_return_to_zero(channel, server) -> None:
    before = live_chunk_count(server)
    await insert(
        channel,
        [
            pb.InsertStreamRequest(
                chunks=[chunk(k) for k in range(10)],
                items=[item(100 + k, "uniform", [k, k + 1]) for k in range(9)],
            )
        ],
    )
    assert live_chunk_count(server) - before == 10
    await take_samples(channel, "uniform", 5)
    await unary(channel, "Reset", pb.ResetRequest, pb.ResetResponse)(
        pb.ResetRequest(table="uniform")
    )
    assert live_chunk_count(server) == before


# ---------------------------------------------------------------- bad input


async def expect_status(awaitable, code, text=""):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await awaitable
    assert caught.value.code() == code, caught.value.details()
    assert text in caught.value.details()


async def test_unknown_table(channel) -> None:
    await expect_status(
        unary(channel, "Reset", pb.ResetRequest, pb.ResetResponse)(pb.ResetRequest(table="x")),
        grpc.StatusCode.NOT_FOUND,
        "Priority table x was not found",
    )
    await expect_status(take_samples(channel, "x", 1), grpc.StatusCode.NOT_FOUND, "x")
    await expect_status(
        insert(channel, [pb.InsertStreamRequest(chunks=[chunk(1)], items=[item(1, "x", [1])])]),
        grpc.StatusCode.NOT_FOUND,
        "Priority table x was not found",
    )


async def test_item_referencing_a_chunk_the_stream_does_not_hold(channel, server) -> None:
    await expect_status(
        insert(channel, [pb.InsertStreamRequest(items=[item(1, "uniform", [99])])]),
        grpc.StatusCode.INTERNAL,
        "Could not find sequence chunk 99.",
    )
    assert len(server.tables[0]) == 0


async def test_bad_priority_refuses_that_item_and_the_table_keeps_serving(channel, server):
    await expect_status(
        insert(
            channel,
            [
                pb.InsertStreamRequest(
                    chunks=[chunk(1)], items=[item(1, "prio", [1], priority=-1.0)]
                )
            ],
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "negative",
    )
    await expect_status(
        insert(
            channel,
            [
                pb.InsertStreamRequest(
                    chunks=[chunk(1)], items=[item(2, "prio", [1], priority=float("nan"))]
                )
            ],
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "NaN",
    )
    assert await insert(
        channel,
        [pb.InsertStreamRequest(chunks=[chunk(1)], items=[item(3, "prio", [1], priority=2.0)])],
    ) == [3]
    assert [s[0].item.key for s in await take_samples(channel, "prio", 2)] == [3, 3]


async def test_num_samples_must_be_positive(channel) -> None:
    await expect_status(
        take_samples(channel, "uniform", 0), grpc.StatusCode.INVALID_ARGUMENT, "num_samples"
    )


async def test_empty_insert_request(channel) -> None:
    await expect_status(
        insert(channel, [pb.InsertStreamRequest()]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "chunks or items",
    )


async def test_malformed_and_truncated_messages(channel, server) -> None:
    raw = channel.stream_stream(PATH + "InsertStream")
    for garbage in (
        b"\x0a\xff\xff\xff\xff\x0f",
        b"\x12\x05ab",
        b"\xff\xff\xff",
        pb.InsertStreamRequest(chunks=[chunk(1)]).SerializeToString()[:-3],
    ):
        call = raw()
        await call.write(garbage)
        await call.done_writing()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in call:
                pass
        assert caught.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.INTERNAL)
    for garbage in (b"\xff\xff", b"\x0a\x10abc"):
        with pytest.raises(grpc.aio.AioRpcError):
            await channel.unary_unary(PATH + "Reset")(garbage)
    # Still serving.
    assert await insert(
        channel, [pb.InsertStreamRequest(chunks=[chunk(1)], items=[item(1, "uniform", [1])])]
    ) == [1]


async def test_items_of_several_tables_in_one_request(channel, server) -> None:
    request = pb.InsertStreamRequest(
        chunks=[chunk(1), chunk(2, episode=5)],
        items=[
            item(10, "uniform", [1]),
            item(11, "prio", [2], priority=3.0),
            item(12, "uniform", [1, 2]),
            item(13, "prio", [1], priority=0.5),
        ],
        keep_chunk_keys=[2],
    )
    assert sorted(await insert(channel, [request])) == [10, 11, 12, 13]
    uniform, prio = server.tables[0], server.tables[1]
    assert len(uniform) == 2 and len(prio) == 2
    samples = await take_samples(channel, "prio", 50)
    assert {s[0].item.key for s in samples} == {11, 13}
    assert {s[0].item.priority for s in samples} == {3.0, 0.5}
    info = {s[0].item.key: s[0].item for s in await take_samples(channel, "uniform", 50)}
    assert [c.chunk_key for c in info[12].flat_trajectory.columns[0].chunk_slices] == [1, 2]


async def test_first_column_without_slices_is_an_empty_trajectory(channel, server) -> None:
    bad = schema_pb2.PrioritizedItem(key=5, table="uniform", priority=1.0)
    bad.flat_trajectory.columns.add(squeeze=True)  # first column: no slices
    bad.flat_trajectory.columns.add().chunk_slices.add(chunk_key=1, length=1)
    for request in (
        pb.InsertStreamRequest(chunks=[chunk(1)], items=[bad]),
        pb.InsertStreamRequest(chunks=[chunk(1)], items=[item(4, "uniform", [1]), bad]),
    ):
        await expect_status(
            insert(channel, [request]),
            grpc.StatusCode.INVALID_ARGUMENT,
            "Item 5 has an empty trajectory",
        )
    no_columns = schema_pb2.PrioritizedItem(key=6, table="uniform", priority=1.0)
    await expect_status(
        insert(channel, [pb.InsertStreamRequest(chunks=[chunk(1)], items=[no_columns])]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "Item 6 has an empty trajectory",
    )


async def test_items_in_an_unusual_encoding_are_accepted(channel, server) -> None:
    # Fields of an item in reverse order and an unknown field: protobuf reads it the same,
    # so must the server.
    usual = item(21, "uniform", [1], priority=2.5).SerializeToString()
    fields = []
    pos = 0
    for number, wire_type, value in message_fields(usual):
        end = pos
        tag, end = read_varint(usual, end)
        if wire_type == 2:
            size, end = read_varint(usual, end)
            end += size
        elif wire_type == 0:
            _, end = read_varint(usual, end)
        else:
            end += 8 if wire_type == 1 else 4
        fields.append(usual[pos:end])
        pos = end
    unusual = b"".join(reversed(fields)) + b"\xf8\x07\x01"  # + field 127 = 1
    assert schema_pb2.PrioritizedItem.FromString(unusual).key == 21
    request = pb.InsertStreamRequest(chunks=[chunk(1)]).SerializeToString()
    request += _impl.wire.length_delimited(b"\x12", unusual)
    request += pb.InsertStreamRequest(items=[item(22, "uniform", [1])]).SerializeToString()
    raw = channel.stream_stream(PATH + "InsertStream")()
    await raw.write(request)
    await raw.done_writing()
    keys = []
    async for response in raw:
        keys.extend(pb.InsertStreamResponse.FromString(response).keys)
    assert sorted(keys) == [21, 22]
    samples = {s[0].item.key: s[0].item for s in await take_samples(channel, "uniform", 50)}
    assert samples[21].priority == 2.5


async def test_sample_timeout_is_deadline_exceeded(channel) -> None:
    await expect_status(
        take_samples(channel, "queue", 1, timeout_ms=20),
        grpc.StatusCode.DEADLINE_EXCEEDED,
        "Timeout exceeded",
    )


async def test_queue_back_pressure_blocks_and_releases(channel, server) -> None:
    # Queue of 2: the third insert waits until a sample makes room.
    call = insert_stream(channel)
    await call.write(
        pb.InsertStreamRequest(
            chunks=[chunk(1)], items=[item(k, "queue", [1]) for k in (1, 2, 3)], keep_chunk_keys=[1]
        )
    )
    first = await call.read()
    assert sorted(first.keys) == [1, 2]
    queue = server.tables[2]
    assert queue.num_pending_inserts == 1
    samples = await take_samples(channel, "queue", 1)
    assert samples[0][0].item.key == 1
    second = await call.read()
    assert list(second.keys) == [3]
    await call.done_writing()
    assert await call.read() == grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK


def test_server_stop_while_samplers_wait_gives_a_clean_error() -> None:
    server = Server([Table.queue("q", 1)], port=0)

    async def wait_for_sample():
        async with grpc.aio.insecure_channel(f"localhost:{server.port}") as channel:
            return await take_samples(channel, "q", 1)

    async def scenario():
        task = asyncio.ensure_future(wait_for_sample())
        table = server.tables[0]
        for _ in range(2000):
            if table.num_pending_samples:
                break
            await asyncio.sleep(0.005)
        assert table.num_pending_samples == 1
        await asyncio.get_running_loop().run_in_executor(None, server.stop)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await task
        assert caught.value.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE)

    asyncio.run(scenario())


def test_client_killed_mid_stream_releases_its_chunks(tmp_path) -> None:
    server = Server([Table.queue("q", 1)], port=0)
    try:
        # A child process opens an insert stream, sends chunks (no items yet) and dies.
        script = textwrap.dedent(f"""
            import os, grpc
            from reverb_py._proto import reverb_service_pb2 as pb, schema_pb2
            channel = grpc.insecure_channel("localhost:{server.port}")
            call = channel.stream_stream("{PATH}InsertStream",
                request_serializer=pb.InsertStreamRequest.SerializeToString,
                response_deserializer=pb.InsertStreamResponse.FromString)
            def requests():
                yield pb.InsertStreamRequest(chunks=[schema_pb2.ChunkData(chunk_key=k)
                                                     for k in range(50)])
                print("sent", flush=True)
                os._exit(9)
            for _ in call(iter(requests())):
                pass
        """)
        gc.collect()
        before = live_chunk_count(server)
        child = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            timeout=60,
            cwd=str(__import__("pathlib").Path(__file__).parents[2]),
        )
        assert child.returncode == 9, child.stderr
        # The server notices the broken stream and drops the stream's chunks.
        deadline_turns = 400
        for _ in range(deadline_turns):
            gc.collect()
            if live_chunk_count(server) == before:
                break
            server._loop_thread.run(asyncio.sleep(0.01))
        assert live_chunk_count(server) == before
    finally:
        server.stop()


def test_sample_info_encoding_matches_protobuf() -> None:
    from reverb_py.server._replies import sample_info
    from reverb_py.table import Item, SampledItem

    length_delimited = _impl.wire.length_delimited

    trajectory = item(1, "t", [5, 6]).flat_trajectory
    for priority, times, probability, size, limited, inserted in [
        (0.0, 0, 0.0, 0, False, 0),
        (2.5, 3, 0.25, 17, True, 1_700_000_000_123_456_789),
        (-1e300, 2**31 - 1, 1.0, 2**40, False, 999),
    ]:
        record = SampledItem(
            Item(2**64 - 1, priority, trajectory.SerializeToString(), inserted_at=inserted),
            probability,
            size,
            priority,
            times,
            limited,
        )
        parsed = schema_pb2.SampleInfo.FromString(
            sample_info(length_delimited(b"\x12", "tåble".encode()), record)
        )
        assert parsed.item.key == 2**64 - 1 and parsed.item.table == "tåble"
        assert parsed.item.priority == priority and parsed.item.times_sampled == times
        assert parsed.item.inserted_at.ToNanoseconds() == inserted
        assert parsed.item.flat_trajectory == trajectory
        assert (parsed.probability, parsed.table_size, parsed.rate_limited) == (
            probability,
            size,
            limited,
        )


@pytest.mark.parametrize("keep", [[1, 99], [1, 1]], ids=["never-sent", "duplicate"])
async def test_keep_chunk_keys_must_name_held_chunks_once(channel, keep) -> None:
    await expect_status(
        insert(
            channel,
            [
                pb.InsertStreamRequest(
                    chunks=[chunk(1)], items=[item(1, "uniform", [1])], keep_chunk_keys=keep
                )
            ],
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
        "Kept fewer chunks",
    )


def raw_mutate(channel):
    """MutatePriorities with the request given as bytes."""
    return channel.unary_unary(
        PATH + "MutatePriorities",
        request_serializer=None,
        response_deserializer=pb.MutatePrioritiesResponse.FromString,
    )


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a\x04prio\x12\x05\x08",  # an update running past the end
        b"\x0a\x01\xff",  # a table name that is not UTF-8
        b"\x0a\x04prio\x26",  # wire type 6
        b"\x0a\x04prio" + b"\x0b" * 101 + b"\x0c" * 101,  # nested too deeply
    ],
)
async def test_malformed_mutate_request_is_invalid_argument(channel, server, data) -> None:
    await insert(
        channel,
        [pb.InsertStreamRequest(chunks=[chunk(1)], items=[item(k, "prio", [1]) for k in (1, 2)])],
    )
    await expect_status(
        raw_mutate(channel)(data),
        grpc.StatusCode.INVALID_ARGUMENT,
        "Malformed MutatePrioritiesRequest",
    )
    prio = server.tables[1]
    assert len(prio) == 2 and prio.get(1).priority == 1.0


async def test_mutate_request_in_any_encoding(channel, server) -> None:
    await insert(
        channel,
        [
            pb.InsertStreamRequest(
                chunks=[chunk(1)], items=[item(k, "prio", [1]) for k in (1, 2, 3, 4)]
            )
        ],
    )
    # Unpacked delete_keys, fields out of order, an unknown field, the table given twice.
    data = (
        b"\x18\x02"
        + b"\x0a\x01x"
        + b"\x12\x0b\x11"
        + struct.pack("<d", 6.0)
        + b"\x08\x01"
        + b"\x28\x07"
        + b"\x1a\x01\x03"
        + b"\x0a\x04prio"
    )
    assert await raw_mutate(channel)(data) == pb.MutatePrioritiesResponse()
    prio = server.tables[1]
    assert sorted(item.key for item in prio.items()) == [1, 4]
    assert prio.get(1).priority == 6.0


async def test_mutate_refused_priority_applies_nothing(channel, server) -> None:
    await insert(
        channel,
        [
            pb.InsertStreamRequest(
                chunks=[chunk(1)], items=[item(k, "prio", [1]) for k in (1, 2, 3)]
            )
        ],
    )
    mutate = unary(
        channel, "MutatePriorities", pb.MutatePrioritiesRequest, pb.MutatePrioritiesResponse
    )
    await expect_status(
        mutate(
            pb.MutatePrioritiesRequest(
                table="prio",
                delete_keys=[3],
                updates=[
                    schema_pb2.KeyWithPriority(key=1, priority=2.0),
                    schema_pb2.KeyWithPriority(key=99, priority=float("nan")),
                    schema_pb2.KeyWithPriority(key=2, priority=-1.0),
                ],
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "key=2",
    )
    prio = server.tables[1]
    assert len(prio) == 3 and prio.get(1).priority == 1.0
    await expect_status(
        mutate(pb.MutatePrioritiesRequest(table="nope", delete_keys=[1])),
        grpc.StatusCode.NOT_FOUND,
        "Priority table nope was not found",
    )


# ---------------------------------------------------------------- items checked against chunks

GOOD_ROWS = np.arange(8, dtype=np.int32).reshape(4, 2)  # 4 steps of 2 values


def good_chunk(key: int = 42, start: int = 0, end: int = 3, columns=None) -> bytes:
    """A decodable chunk: one int32 tensor of 4 steps (unless ``columns`` says otherwise)."""
    return encode_chunk(key, 7, start, end, [GOOD_ROWS] if columns is None else columns)


def sliced_item(key: int, slices, squeeze: bool = False, table: str = "uniform"):
    """An item of one column made of ``(chunk_key, offset, length, index)`` slices."""
    message = schema_pb2.PrioritizedItem(key=key, table=table, priority=1.0)
    column = message.flat_trajectory.columns.add(squeeze=squeeze)
    for chunk_key, offset, length, index in slices:
        column.chunk_slices.add(chunk_key=chunk_key, offset=offset, length=length, index=index)
    return message


def raw_request(chunks: list[bytes], items) -> bytes:
    request = b"".join(_impl.wire.length_delimited(b"\x0a", data) for data in chunks)
    return request + pb.InsertStreamRequest(items=items).SerializeToString()


async def raw_insert(channel, requests: list[bytes]) -> list[int]:
    call = channel.stream_stream(PATH + "InsertStream")()
    for request in requests:
        await call.write(request)
    await call.done_writing()
    keys: list[int] = []
    async for response in call:
        keys.extend(pb.InsertStreamResponse.FromString(response).keys)
    return keys


def inverted_chunk(key: int) -> bytes:
    message = schema_pb2.ChunkData.FromString(good_chunk(key))
    message.sequence_range.start = 5
    message.sequence_range.end = 2
    return message.SerializeToString()


def chunk_without_tensors(key: int) -> bytes:
    message = schema_pb2.ChunkData(chunk_key=key)
    message.sequence_range.episode_id = 7
    message.sequence_range.end = 3
    return message.SerializeToString()


def corrupt_chunk(key: int, change, columns=None, delta_encoded: bool = False) -> bytes:
    """A good chunk (of ``columns``) whose ``ChunkData`` message ``change`` alters."""
    message = schema_pb2.ChunkData.FromString(
        encode_chunk(
            key, 7, 0, 3, [GOOD_ROWS] if columns is None else columns, delta_encoded=delta_encoded
        )
    )
    change(message)
    return message.SerializeToString()


def set_dim(tensor: int, dim: int, size: int):
    def change(message) -> None:
        message.data.tensors[tensor].tensor_shape.dim[dim].size = size

    return change


def set_dtype(dtype: int):
    def change(message) -> None:
        message.data.tensors[0].dtype = dtype

    return change


STRINGS = np.array([b"a", b"bc", b"", b"d"], dtype=object)
DELTA_ROWS = np.arange(24, dtype=np.int64).reshape(4, 3, 2) * 3


BAD_INSERTS = {
    # name: (chunks of the bad request, its item, text the error names)
    "slice past the chunk": (
        [good_chunk(43)],
        sliced_item(8, [(43, 0, 1, 0), (43, 3, 2, 0)]),
        "Item 8: column 0 slice 1 (chunk 43): offset 3 + length 2 > the chunk's 4 steps",
    ),
    "negative offset": (
        [good_chunk(43)],
        sliced_item(8, [(43, -1, 1, 0)]),
        "Item 8: column 0 slice 0 (chunk 43): offset -1 is negative",
    ),
    "offset past the chunk": (
        [good_chunk(43)],
        sliced_item(8, [(43, 4, 1, 0)]),
        "Item 8: column 0 slice 0 (chunk 43): offset 4 + length 1 > the chunk's 4 steps",
    ),
    "negative length": (
        [good_chunk(43)],
        sliced_item(8, [(43, 2, -1, 0)]),
        "Item 8: column 0 slice 0 (chunk 43): length -1 is negative",
    ),
    "tensor index the chunk lacks": (
        [good_chunk(43)],
        sliced_item(8, [(43, 0, 1, 1)]),
        "Item 8: column 0 slice 0 (chunk 43): tensor index 1, but the chunk holds 1 tensors",
    ),
    "squeezed column of length 2": (
        [good_chunk(43)],
        sliced_item(8, [(43, 0, 2, 0)], squeeze=True),
        "Item 8: column 0 is squeezed but its slices hold 2 steps",
    ),
    "chunk without tensors": (
        [chunk_without_tensors(43)],
        sliced_item(8, [(43, 0, 1, 0)]),
        "Item 8: column 0 slice 0 (chunk 43): it holds no tensors",
    ),
    "inverted sequence range": (
        [inverted_chunk(43)],
        sliced_item(8, [(43, 0, 1, 0)]),
        "Item 8: column 0 slice 0 (chunk 43): its sequence_range is inverted (end 2 < start 5)",
    ),
    # Chunks whose tensors no client could decode.
    "tensor data that does not fit its shape": (
        [corrupt_chunk(43, set_dim(0, 1, 52))],
        sliced_item(8, [(43, 0, 1, 0)]),
        "Item 8: column 0 slice 0 (chunk 43): tensor 0 (int32, shape [4, 52]) holds 32 bytes "
        "of data, its shape needs 832",
    ),
    "a tensor not sliced that does not fit its shape": (
        [corrupt_chunk(43, set_dim(1, 0, 5), columns=[GOOD_ROWS, GOOD_ROWS[:, 0]])],
        sliced_item(8, [(43, 0, 1, 0)]),
        "(chunk 43): tensor 1 (int32, shape [5]) holds 16 bytes of data, its shape needs 20",
    ),
    "tensor without data": (
        [corrupt_chunk(43, lambda message: message.data.tensors[0].ClearField("tensor_content"))],
        sliced_item(8, [(43, 0, 1, 0)]),
        "(chunk 43): tensor 0 (int32, shape [4, 2]) holds no data, its shape needs 32 bytes",
    ),
    "tensor of an unknown dtype": (
        [corrupt_chunk(43, set_dtype(20))],
        sliced_item(8, [(43, 0, 1, 0)]),
        "(chunk 43): tensor 0 has a dtype the codec does not know (DataType 20)",
    ),
    "tensor of another item size": (
        [corrupt_chunk(43, set_dtype(9))],
        sliced_item(8, [(43, 0, 1, 0)]),
        "(chunk 43): tensor 0 (int64, shape [4, 2]) holds 32 bytes of data, its shape needs 64",
    ),
    "tensor of an undefined shape": (
        [corrupt_chunk(43, set_dim(0, 1, -1))],
        sliced_item(8, [(43, 0, 1, 0)]),
        "(chunk 43): tensor 0 (int32, shape [4, -1]) has a shape that is not fully defined",
    ),
    "delta-encoded tensor that does not fit its shape": (
        [corrupt_chunk(43, set_dim(0, 2, 3), columns=[DELTA_ROWS], delta_encoded=True)],
        sliced_item(8, [(43, 0, 1, 0)]),
        "(chunk 43): tensor 0 (int64, shape [4, 3, 3]) holds 192 bytes of data, its shape "
        "needs 288",
    ),
    "string tensor with too few values": (
        [corrupt_chunk(43, set_dim(0, 0, 9), columns=[STRINGS])],
        sliced_item(8, [(43, 0, 1, 0)]),
        "(chunk 43): tensor 0 (string, shape [9]) holds 8 bytes of data, too few for the "
        "lengths of its 9 elements",
    ),
    "chunk resent with different bytes": (
        [good_chunk(42, columns=[GOOD_ROWS + 100])],
        sliced_item(8, [(42, 0, 1, 0)]),
        "Chunk 42 was sent again with different bytes",
    ),
}


@pytest.mark.parametrize("case", list(BAD_INSERTS), ids=list(BAD_INSERTS))
async def test_items_inconsistent_with_their_chunks_are_refused(channel, server, case) -> None:
    # A good item first: rows 1 and 2 of chunk 42, sent on a stream of its own.
    assert await raw_insert(
        channel, [raw_request([good_chunk()], [sliced_item(1, [(42, 1, 2, 0)])])]
    ) == [1]
    chunks, bad, text = BAD_INSERTS[case]
    # The bad item comes after a good one of the same request, on a new stream.
    good_too = sliced_item(9, [(44, 0, 1, 0)])
    await expect_status(
        raw_insert(channel, [raw_request([good_chunk(44), *chunks], [good_too, bad])]),
        grpc.StatusCode.INVALID_ARGUMENT,
        text,
    )
    # Nothing of the refused request went in (not even its good item).
    assert [item.key for item in server.tables[0].items()] == [1]
    # A good item still goes in afterwards.
    assert await raw_insert(
        channel, [raw_request([good_chunk(45)], [sliced_item(10, [(45, 3, 1, 0)])])]
    ) == [10]
    assert [item.key for item in server.tables[0].items()] == [1, 10]
    # A well-behaved client still decodes what it samples.
    expected = {1: GOOD_ROWS[1:3], 10: GOOD_ROWS[3:]}
    async with reverb_py.aio.Client(f"localhost:{server.port}") as client:
        async for sample in client.sample("uniform", 6, emit_timesteps=False):
            np.testing.assert_array_equal(sample.data[0], expected[sample.info.key])


async def test_items_in_another_layout_go_in_as_protobuf_reads_them(channel, server) -> None:
    # Item 7: rows 1 and 2 of chunk 42, as writers send it. Item 8: the same slice with the
    # fields of every message in reverse order, an explicit zero and an unknown field.
    # Item 9: as item 8, but its slice runs past the chunk.
    ld = _impl.wire.length_delimited

    def reordered(key: int, length: int, chunk_key: int = 42) -> bytes:
        piece = b"\x20\x00" + bytes([0x18, length, 0x10, 0x01, 0x08, chunk_key])
        trajectory = ld(b"\x0a", ld(b"\x0a", piece))
        return b"".join(
            [
                b"\x78\x05",  # field 15, unknown
                ld(b"\x42", trajectory),
                b"\x29" + struct.pack("<d", 1.0),
                ld(b"\x12", b"uniform"),
                bytes([0x08, key]),
            ]
        )

    usual = sliced_item(7, [(42, 1, 2, 0)])
    request = ld(b"\x0a", good_chunk()) + b"".join(
        ld(b"\x12", item) for item in [usual.SerializeToString(), reordered(8, 2)]
    )
    assert await raw_insert(channel, [request]) == [7, 8]
    items = {item.key: item for item in server.tables[0].items()}
    # Both hold the trajectory as protobuf writes it, and the same chunk.
    assert items[7].trajectory == items[8].trajectory == usual.flat_trajectory.SerializeToString()
    assert items[7].chunks == items[8].chunks
    # A slice past its chunk is refused in that layout too, with the usual message.
    await expect_status(
        raw_insert(channel, [ld(b"\x0a", good_chunk(43)) + ld(b"\x12", reordered(9, 4, 43))]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "Item 9: column 0 slice 0 (chunk 43): offset 1 + length 4 > the chunk's 4 steps",
    )
    async with reverb_py.aio.Client(f"localhost:{server.port}") as client:
        async for sample in client.sample("uniform", 4, emit_timesteps=False):
            np.testing.assert_array_equal(sample.data[0], GOOD_ROWS[1:3])


async def test_chunks_of_every_kind_of_tensor_are_accepted(channel, server) -> None:
    # Delta-encoded integers, strings, a scalar per step, an empty tensor, all of sizes
    # that fit their shapes.
    columns = [DELTA_ROWS, STRINGS, np.float32([1, 2, 3, 4]), np.zeros((4, 0), np.complex128)]
    delta = encode_chunk(50, 7, 0, 3, columns, delta_encoded=True)
    plain = encode_chunk(51, 7, 0, 3, columns)
    items = [
        sliced_item(key, [(chunk_key, 1, 2, index)])
        for key, (chunk_key, index) in enumerate(
            [(50, 0), (50, 1), (50, 2), (50, 3), (51, 0), (51, 1)], start=1
        )
    ]
    assert sorted(await raw_insert(channel, [raw_request([delta, plain], items)])) == [
        1,
        2,
        3,
        4,
        5,
        6,
    ]
    expected = {1: 0, 2: 1, 3: 2, 4: 3, 5: 0, 6: 1}
    seen = set()
    async with reverb_py.aio.Client(f"localhost:{server.port}") as client:
        async for sample in client.sample("uniform", 200, emit_timesteps=False):
            seen.add(sample.info.key)
            want = columns[expected[sample.info.key]][1:3]
            np.testing.assert_array_equal(sample.data[0], want)
    assert seen == set(expected)


async def test_a_chunk_resent_with_the_same_bytes_is_accepted(channel, server) -> None:
    first = sliced_item(1, [(42, 1, 2, 0)])
    assert await raw_insert(channel, [raw_request([good_chunk()], [first])]) == [1]
    # Another stream (a reconnect) sends the chunk again, exactly as before.
    again = sliced_item(2, [(42, 3, 1, 0)], squeeze=True)
    assert await raw_insert(channel, [raw_request([good_chunk()], [again])]) == [2]
    # And on the same stream too.
    repeat = [raw_request([good_chunk()], [sliced_item(k, [(42, 0, 4, 0)])]) for k in (3, 4)]
    assert sorted(await raw_insert(channel, repeat)) == [3, 4]
    table = server.tables[0]
    assert len(table) == 4
    # Their items share the one chunk the server keeps.
    assert len({id(chunk) for item in table.items() for chunk in item.chunks}) == 1
    expected = {1: GOOD_ROWS[1:3], 2: GOOD_ROWS[3], 3: GOOD_ROWS, 4: GOOD_ROWS}
    async with reverb_py.aio.Client(f"localhost:{server.port}") as client:
        async for sample in client.sample("uniform", 20, emit_timesteps=False):
            np.testing.assert_array_equal(sample.data[0], expected[sample.info.key])


async def test_nan_priority_is_refused_for_a_uniform_table(channel, server) -> None:
    assert await insert(
        channel,
        [
            pb.InsertStreamRequest(
                chunks=[chunk(1)], items=[item(k, "uniform", [1]) for k in (1, 3)]
            )
        ],
    ) == [1, 3]
    await expect_status(
        insert(
            channel,
            [
                pb.InsertStreamRequest(
                    chunks=[chunk(1)], items=[item(2, "uniform", [1], priority=float("nan"))]
                )
            ],
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "Priority must not be NaN (key=2, priority=nan)",
    )
    mutate = unary(
        channel, "MutatePriorities", pb.MutatePrioritiesRequest, pb.MutatePrioritiesResponse
    )
    await expect_status(
        mutate(
            pb.MutatePrioritiesRequest(
                table="uniform",
                delete_keys=[3],
                updates=[schema_pb2.KeyWithPriority(key=1, priority=float("nan"))],
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "key=1, priority=nan",
    )
    uniform = server.tables[0]
    assert [k.key for k in uniform.items()] == [1, 3] and uniform.get(1).priority == 1.0


@pytest.mark.parametrize(
    "method, streaming",
    [
        ("ServerInfo", False),
        ("Reset", False),
        ("Checkpoint", False),
        ("SampleStream", True),
        ("InitializeConnection", True),
    ],
)
@pytest.mark.parametrize("garbage", [b"\xff\xff", b"\x0a\x10abc", b"\x08"])
async def test_undecodable_requests_are_invalid_argument_naming_the_message(
    channel, server, method, streaming, garbage
) -> None:
    if streaming:
        call = channel.stream_stream(PATH + method)()
        await call.write(garbage)
        await call.done_writing()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in call:
                pass
    else:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await channel.unary_unary(PATH + method)(garbage)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    details = caught.value.details() or ""
    assert details.startswith("Malformed ") and "Request" in details, details
    assert "reverb_py" not in details  # the internal proto package stays inside
    # The server still serves a well-behaved client.
    assert await insert(
        channel, [pb.InsertStreamRequest(chunks=[chunk(7)], items=[item(7, "uniform", [7])])]
    ) == [7]


async def test_a_large_sample_request_is_taken_in_capped_batches(channel, server, monkeypatch):
    from reverb_py.server import _service

    table = next(t for t in server.tables if t.name == "uniform")
    asked: list[int] = []
    original = type(table).sample

    async def spy(self, num_samples=1, **kwargs):
        asked.append(num_samples)
        return await original(self, num_samples, **kwargs)

    monkeypatch.setattr(type(table), "sample", spy)
    await insert(
        channel, [pb.InsertStreamRequest(chunks=[chunk(1)], items=[item(1, "uniform", [1])])]
    )
    wanted = 3 * _service.MAX_SAMPLE_BATCH + 5
    samples = await take_samples(channel, "uniform", wanted)
    assert len(samples) == wanted
    assert max(asked) == _service.MAX_SAMPLE_BATCH
    assert sum(asked) >= wanted


def test_a_sample_stream_batch_of_large_items_is_bounded_by_bytes() -> None:
    from reverb_py.server import _service

    mib = 1024 * 1024
    assert _service.next_sample_batch(16, 16, 16 * 100) == 32
    assert _service.next_sample_batch(1024, 4, 4 * 100) == _service.MAX_SAMPLE_BATCH
    # 1 MiB items: the batch shrinks to the byte bound however large it was.
    bound = _service.MAX_SAMPLE_BATCH_BYTES // mib
    assert _service.next_sample_batch(1024, 3, 3 * mib) == bound
    assert _service.next_sample_batch(16, 16, 16 * mib) == min(32, bound)
    # Items larger than the bound still go out, one per batch.
    assert _service.next_sample_batch(8, 1, 2 * _service.MAX_SAMPLE_BATCH_BYTES) == 1
    assert _service.next_sample_batch(8, 0, 0) == 8


def test_sample_responses_are_built_one_at_a_time() -> None:
    from reverb_py.server._replies import sample_responses
    from reverb_py.table import Item, SampledItem

    touched: list[int] = []

    class Watched:
        """A chunk (what the replies read of one) that records when its bytes are read."""

        __slots__ = ("key",)

        def __init__(self, key: int, episode_id: int, data: bytes) -> None:
            self.key = key

        @property
        def data(self) -> bytes:
            touched.append(self.key)
            return b"x" * (1024 * 1024)

    records = []
    for key in range(1, 9):
        item = Item(key, 1.0, chunks=(Watched(key, 1, b""),))
        records.append(SampledItem(item, 1.0, 1, 1.0, 1, False))
    responses = sample_responses("t", records)
    first = next(responses)
    # About 2 MiB per response: the first holds the first two samples' chunks, and the
    # later samples' chunks have not been read yet.
    assert len(first) > 2 * 1024 * 1024 and max(touched) <= 3
    assert len(list(responses)) == 3
    assert max(touched) == 8


@pytest.mark.parametrize(
    "second, code",
    [
        ("unknown table", grpc.StatusCode.NOT_FOUND),
        ("released chunk", grpc.StatusCode.INTERNAL),
        ("empty request", grpc.StatusCode.INVALID_ARGUMENT),
    ],
)
async def test_an_error_after_a_confirmed_insert_reaches_every_stream(
    channel, server, second, code
) -> None:
    async def one(k: int) -> grpc.StatusCode:
        call = insert_stream(channel)
        key = 1000 + k
        keep = [] if second == "released chunk" else [key]
        await call.write(
            pb.InsertStreamRequest(
                chunks=[chunk(key)], items=[item(key, "uniform", [key])], keep_chunk_keys=keep
            )
        )
        if second == "unknown table":
            bad = pb.InsertStreamRequest(items=[item(5000 + k, "nope", [key])])
        elif second == "released chunk":
            bad = pb.InsertStreamRequest(items=[item(5000 + k, "uniform", [key])])
        else:
            bad = pb.InsertStreamRequest()
        await call.write(bad)
        # The stream stays open (no done_writing), as a writer's does.
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in call:
                pass
        return caught.value.code()

    before = live_chunk_count(server)
    codes = await asyncio.wait_for(asyncio.gather(*(one(k) for k in range(20))), timeout=30)
    assert codes == [code] * 20
    table = next(t for t in server.tables if t.name == "uniform")
    assert table.info.current_size == 20  # every first, good item went in
    await unary(channel, "Reset", pb.ResetRequest, pb.ResetResponse)(
        pb.ResetRequest(table="uniform")
    )
    # Every stream ended and released what it held.
    assert live_chunk_count(server) == before
