"""The insert streams an asyncio client's writers share (``reverb_py._client.shared_insert``):
items of several writers on one stream, the chunks each still needs kept, confirmations
to the right writer, reconnects, and a writer the server refuses leaving the others
unharmed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

import reverb_py as reverb
from reverb_py import errors
from reverb_py._client import shared_insert


def tables() -> list[reverb.Table]:
    # A queue: each item is sampled once, in insertion order.
    return [reverb.Table.queue("t", 100_000)]


@pytest.fixture
def server() -> Iterator[reverb.Server]:
    with reverb.Server(tables(), port=0) as server:
        yield server


@pytest.fixture
def share_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Writers share a stream from the second on (the client's first ones would each
    start a stream of their own)."""
    monkeypatch.setattr(shared_insert, "STREAMS_BEFORE_SHARING", 1)


def member(writer: object) -> shared_insert.SharedInsertMember:
    transport = writer._async_transport  # type: ignore[attr-defined]
    assert isinstance(transport, shared_insert.SharedInsertMember)
    return transport


async def all_values(client: reverb.aio.Client, count: int) -> list[tuple[int, ...]]:
    """Every item of the queue "t" (of ``count`` items), as tuples of its values."""
    values = []
    async for sample in client.sample("t", count, emit_timesteps=False):
        values.append(tuple(int(v) for v in np.asarray(sample.data[0]).reshape(-1)))
    return values


async def test_writers_of_one_client_share_a_stream_and_each_item_arrives_whole(
    server: reverb.Server, share_at_once: None
) -> None:
    """Length-3 items over chunks of each writer's earlier steps: every request names the
    chunks of every writer of the stream that later items still need."""
    async with reverb.aio.Client(f"localhost:{server.port}") as client:
        writers = [await client.trajectory_writer(3) for _ in range(3)]
        groups = {member(writer).group for writer in writers}
        assert len(groups) == 1

        async def actor(index: int, writer: object) -> None:
            for step in range(40):
                writer.append({"v": np.int64(index * 1000 + step)})  # type: ignore[attr-defined]
                if step >= 2:
                    writer.create_item("t", 1.0, {"v": writer.history["v"][-3:]})  # type: ignore[attr-defined]
                if step % 5 == 0:
                    await asyncio.sleep(0)  # let the others write in between
                await writer.flush(block_until_num_items=4)  # type: ignore[attr-defined]
            await writer.flush()  # type: ignore[attr-defined]

        await asyncio.gather(*(actor(i, w) for i, w in enumerate(writers)))
        assert server.tables[0].info.current_size == 3 * 38
        expected = {
            (i * 1000 + step - 2, i * 1000 + step - 1, i * 1000 + step)
            for i in range(3)
            for step in range(2, 40)
        }
        assert sorted(await all_values(client, 3 * 38)) == sorted(expected)
        (group,) = groups
        assert 0 < group.requests
        # Nothing was refused: the writers never had to go on alone.
        assert not group.broken_up and not any(member(w).alone for w in writers)
        for writer in writers:
            await writer.close()  # type: ignore[attr-defined]


async def test_writers_spread_over_a_few_streams_then_share_them(
    server: reverb.Server,
) -> None:
    """The first writers each start a stream; later ones join the stream with the fewest
    writers, until every stream holds WRITERS_PER_STREAM; a closed writer frees its place."""
    streams = shared_insert.STREAMS_BEFORE_SHARING
    per_stream = shared_insert.WRITERS_PER_STREAM
    async with reverb.aio.Client(f"localhost:{server.port}") as client:
        writers = [await client.trajectory_writer(1) for _ in range(streams * per_stream)]
        groups = [member(writer).group for writer in writers]
        assert len(set(groups[:streams])) == streams
        assert set(groups) == set(groups[:streams])
        for count in range(streams, len(groups) + 1):  # balanced after every writer
            sizes = [groups[:count].count(group) for group in groups[:streams]]
            assert max(sizes) - min(sizes) <= 1
        await writers[0].close()
        again = await client.trajectory_writer(1)  # the place writers[0] left
        assert member(again).group is groups[0]
        extra = await client.trajectory_writer(1)  # every stream full: a new one
        assert member(extra).group not in groups
        for writer in [*writers, extra, again]:
            await writer.close()


def test_writers_of_a_target_of_several_servers_have_streams_of_their_own() -> None:
    async def run() -> None:
        client = reverb.aio.Client("ipv4:127.0.0.1:1,127.0.0.1:2")
        assert client._insert_transport_maker() is None
        await client.close()

    asyncio.run(run())


async def test_a_writer_the_server_refuses_does_not_harm_the_others(
    server: reverb.Server, share_at_once: None
) -> None:
    async with reverb.aio.Client(f"localhost:{server.port}") as client:
        good = await client.trajectory_writer(2)
        bad = await client.trajectory_writer(2, validate_items=False)
        assert member(good).group is member(bad).group
        for step in range(5):
            good.append({"v": np.int64(step)})
            good.create_item("t", 1.0, {"v": good.history["v"][-1]})
        bad.append({"v": np.int64(-1)})
        bad.create_item("missing_table", 1.0, {"v": bad.history["v"][-1]})
        with pytest.raises(errors.NotFoundError, match="missing_table was not found"):
            await bad.flush(timeout_ms=30_000)
        await good.flush(timeout_ms=30_000)
        # The stream was given up: each writer went on alone, the good one unharmed.
        assert member(good).alone and member(bad).alone
        assert member(good).group.broken_up
        for step in range(5, 10):
            good.append({"v": np.int64(step)})
            good.create_item("t", 1.0, {"v": good.history["v"][-1]})
        await good.flush(timeout_ms=30_000)
        assert server.tables[0].info.current_size == 10
        assert sorted(await all_values(client, 10)) == [(step,) for step in range(10)]
        with pytest.raises(errors.NotFoundError):
            bad.append({"v": np.int64(-2)})
        await good.close()
        await bad.close()
        # New writers start a new shared stream.
        late = await client.trajectory_writer(1)
        assert not member(late).alone and member(late).group is not member(good).group
        await late.close()


async def test_a_closed_writer_leaves_the_stream_and_the_others_go_on(
    server: reverb.Server, share_at_once: None
) -> None:
    async with reverb.aio.Client(f"localhost:{server.port}") as client:
        first = await client.trajectory_writer(2)
        second = await client.trajectory_writer(2)
        group = member(first).group
        for step in range(3):
            first.append({"v": np.int64(step)})
            first.create_item("t", 1.0, {"v": first.history["v"][-1]})
        await first.flush()
        await first.close()
        assert member(first).closed and member(first) not in group._sent_keep
        for step in range(3, 6):
            second.append({"v": np.int64(step)})
            second.create_item("t", 1.0, {"v": second.history["v"][-1]})
        await second.flush(timeout_ms=30_000)
        assert server.tables[0].info.current_size == 6
        await second.close()
        task = group._waker.task
        assert task is None or task.done() or task.cancelling()


async def test_a_flush_that_times_out_on_a_shared_stream(server: reverb.Server) -> None:
    with reverb.Server([reverb.Table.queue("q", 1)], port=0) as full:
        async with reverb.aio.Client(f"localhost:{full.port}") as client:
            writer = await client.trajectory_writer(1)
            for value in range(2):
                writer.append({"v": np.int64(value)})
                writer.create_item("q", 1.0, {"v": writer.history["v"][-1]})
            with pytest.raises(reverb.DeadlineExceededError):
                await writer.flush(timeout_ms=50)
            await writer.close()
            with pytest.raises(errors.UsageError):
                await writer.flush()


async def test_writers_sharing_a_stream_resend_after_a_restart(share_at_once: None) -> None:
    first = reverb.Server(tables(), port=0)
    port = first.port
    client = reverb.aio.Client(f"localhost:{port}")
    writers = [await client.trajectory_writer(2, validate_items=False) for _ in range(2)]
    try:
        for index, writer in enumerate(writers):
            writer.append({"v": np.int64(index)})
            writer.create_item("t", 1.0, {"v": writer.history["v"][-1]})
            await writer.flush()
        assert first.tables[0].info.current_size == 2
        first.stop()
        second = reverb.Server(tables(), port=port)
        try:
            for step in range(1, 4):
                for index, writer in enumerate(writers):
                    writer.append({"v": np.int64(step * 10 + index)})
                    writer.create_item("t", 1.0, {"v": writer.history["v"][-1]})
            for writer in writers:
                await writer.flush(timeout_ms=30_000)
            assert not any(member(writer).alone for writer in writers)
            assert sorted(await all_values(client, 6)) == sorted(
                (step * 10 + index,) for step in range(1, 4) for index in range(2)
            )
        finally:
            for writer in writers:
                await writer.close()
            await client.close()
            second.stop()
    finally:
        first.stop()


async def test_a_writer_joining_a_stream_its_last_writer_just_left(
    server: reverb.Server, share_at_once: None
) -> None:
    """The stream of a group whose writers all closed is stopped; a writer that joins it
    in the same turn of the loop (as ``aio.Client.insert`` does, a writer per call) gets
    a new one."""
    async with reverb.aio.Client(f"localhost:{server.port}") as client:
        group = None
        for value in range(3):
            writer = await client.trajectory_writer(1, validate_items=False)
            assert group is None or member(writer).group is group
            group = member(writer).group
            writer.append({"v": np.int64(value)})
            writer.create_item("t", 1.0, {"v": writer.history["v"][-1]})
            await writer.flush(timeout_ms=30_000)
            await writer.close()
        assert server.tables[0].info.current_size == 3
