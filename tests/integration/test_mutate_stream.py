"""MutatePriorities on reverb_py's mutation stream: both clients send their calls on
pooled streams of a reverb_py server, and fall back to Reverb's unary call wherever the
stream does not answer (a server without it, the stream limit, a broken stream, a
refused request), with the unary call's outcome."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest

import reverb_py as reverb
from reverb_py import _impl, errors
from reverb_py._client import mutations
from reverb_py._client.channel import MUTATE_STREAM_PATH, PATH_PREFIX, identity
from reverb_py._proto import reverb_service_pb2 as pb
from reverb_py.server import Server, ServerLimits
from reverb_py.server._service import ReverbServicer

encode_mutate_request = _impl.mutations.encode_mutate_request


def new_tables() -> list[reverb.Table]:
    return [
        reverb.Table(
            "prio",
            reverb.selectors.Prioritized(0.8),
            reverb.selectors.Fifo(),
            1000,
            reverb.rate_limiters.MinSize(1),
        )
    ]


@pytest.fixture
def server() -> Iterator[Server]:
    server = Server(new_tables(), port=0)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["polled", "threads"])
def blocking_way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The blocking client's streams: taken by the caller's thread (the default where
    gRPC allows), or driven by gRPC's blocking API (its request and polling threads)."""
    if request.param == "threads":
        monkeypatch.setattr(mutations, "_POLLED", False)
    else:
        assert mutations._POLLED
    return str(request.param)


def open_mutate_streams(server: Server) -> int:
    return int(server._servicer.streams_by_method["MutatePrioritiesStream"])


def fill(server: Server, count: int) -> list[int]:
    client = reverb.Client(f"localhost:{server.port}")
    for value in range(count):
        client.insert([float(value)], priorities={"prio": 1.0})
    return [item.key for item in server.tables[0].items()]


def open_call(channel: grpc.aio.Channel) -> grpc.aio.StreamStreamCall:
    """A mutation stream of ``channel``, raw: requests and answers as bytes."""
    return channel.stream_stream(
        MUTATE_STREAM_PATH, request_serializer=identity, response_deserializer=identity
    )()


def priorities(server: Server) -> dict[int, float]:
    return {item.key: item.priority for item in server.tables[0].items()}


# ---------------------------------------------------------------- the blocking client


def test_blocking_calls_share_one_stream(server: Server, blocking_way: str) -> None:
    keys = fill(server, 4)
    client = reverb.Client(f"localhost:{server.port}")
    client.mutate_priorities("prio", updates=dict.fromkeys(keys[:3], 1.0))
    [stream] = client._mutate_streams._idle
    for round_ in range(5):
        client.mutate_priorities("prio", updates=dict.fromkeys(keys[:3], 2.0 + round_))
        assert client._mutate_streams._idle == [stream]  # The same stream each time.
        assert open_mutate_streams(server) == 1
    client.mutate_priorities("prio", deletes=[keys[3]])
    assert priorities(server) == dict.fromkeys(keys[:3], 6.0)
    assert client._mutate_streams.supported
    assert client._mutate is None  # The unary call was never needed.
    assert isinstance(stream, mutations._PolledStream) == (blocking_way == "polled")


def test_blocking_errors_are_the_unary_calls(server: Server, blocking_way: str) -> None:
    keys = fill(server, 1)
    client = reverb.Client(f"localhost:{server.port}")
    with pytest.raises(errors.NotFoundError, match="Priority table nope was not found"):
        client.mutate_priorities("nope", updates={keys[0]: 3.0})
    with pytest.raises(errors.InvalidArgumentError):
        client.mutate_priorities("prio", updates={keys[0]: -1.0})
    assert priorities(server) == {keys[0]: 1.0}
    # The refused requests ended their streams; the next call has a new one.
    client.mutate_priorities("prio", updates={keys[0]: 3.0})
    assert priorities(server) == {keys[0]: 3.0}
    assert open_mutate_streams(server) == 1


def test_blocking_calls_from_many_threads(server: Server, blocking_way: str) -> None:
    keys = fill(server, 16)
    client = reverb.Client(f"localhost:{server.port}")
    failures: list[BaseException] = []
    start = threading.Barrier(8)

    def mutate(index: int) -> None:
        try:
            start.wait()
            for round_ in range(20):
                client.mutate_priorities("prio", updates={keys[index * 2]: float(round_ + 1)})
                client.mutate_priorities("prio", updates={keys[index * 2 + 1]: float(index + 1)})
        except BaseException as error:  # noqa: BLE001 - reported below.
            failures.append(error)

    threads = [threading.Thread(target=mutate, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert priorities(server) == {
        key: 20.0 if position % 2 == 0 else float(position // 2 + 1)
        for position, key in enumerate(keys)
    }
    assert len(client._mutate_streams._idle) <= mutations.MAX_IDLE_STREAMS


async def test_the_stream_limit_falls_back_to_the_unary_call(blocking_way: str) -> None:
    server = Server(new_tables(), port=0, limits=ServerLimits(max_streams=1))
    try:
        async with grpc.aio.insecure_channel(f"localhost:{server.port}") as channel:
            # A sample stream waiting on the empty table holds the one stream allowed.
            waiting = channel.stream_stream(
                PATH_PREFIX + "SampleStream",
                request_serializer=pb.SampleStreamRequest.SerializeToString,
                response_deserializer=identity,
            )()
            await waiting.write(pb.SampleStreamRequest(table="prio", num_samples=1))
            await _until(lambda: server._servicer.open_streams == 1)
            client = reverb.Client(f"localhost:{server.port}")
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, lambda: client.mutate_priorities("prio", {1: 2.0}))
            assert client._mutate is not None  # Refused: the unary call served.
            assert client._mutate_streams.supported  # A refusal is not UNIMPLEMENTED.
            assert open_mutate_streams(server) == 0
            waiting.cancel()
    finally:
        server.stop()


def test_a_target_of_several_servers_uses_the_unary_call() -> None:
    first, second = Server(new_tables(), port=0), Server(new_tables(), port=0)
    try:
        keys = fill(first, 1) + fill(second, 1)
        client = reverb.Client(f"ipv4:127.0.0.1:{first.port},127.0.0.1:{second.port}")
        for _ in range(4):  # Round robin: each server gets some calls.
            client.mutate_priorities("prio", updates=dict.fromkeys(keys, 4.0))
        assert priorities(first) == {keys[0]: 4.0} and priorities(second) == {keys[1]: 4.0}
        assert open_mutate_streams(first) == open_mutate_streams(second) == 0
    finally:
        first.stop()
        second.stop()


def test_a_stream_broken_by_a_restart_is_replaced(tmp_path, blocking_way: str) -> None:
    server = Server(new_tables(), port=0)
    port = server.port
    client = reverb.Client(f"localhost:{port}")
    try:
        client.mutate_priorities("prio", deletes=[1])
        assert open_mutate_streams(server) == 1
        server.stop()
        server = Server(new_tables(), port=port)
        keys = fill(server, 1)
        # The pooled stream is dead: the call goes through (the unary call or a new
        # stream), and the call after it is on a new stream.
        client.mutate_priorities("prio", updates={keys[0]: 5.0})
        client.mutate_priorities("prio", updates={keys[0]: 6.0})
        assert priorities(server) == {keys[0]: 6.0}
        assert open_mutate_streams(server) == 1
    finally:
        server.stop()


# ---------------------------------------------------------------- a server without it


@pytest.fixture
async def reverb_only_server() -> AsyncIterator[tuple[int, ReverbServicer]]:
    """A server of Reverb's methods only (as dm-reverb's): the stream is UNIMPLEMENTED."""
    servicer = ReverbServicer({table.name: table for table in new_tables()})
    grpc_server = grpc.aio.server()
    grpc_server.add_generic_rpc_handlers(servicer.handlers()[:1])
    port = grpc_server.add_insecure_port("127.0.0.1:0")
    await grpc_server.start()
    try:
        yield port, servicer
    finally:
        await grpc_server.stop(None)


async def test_async_client_falls_back_for_good_on_unimplemented(reverb_only_server) -> None:
    port, servicer = reverb_only_server
    servicer._tables["prio"].reset()
    client = reverb.aio.Client(f"127.0.0.1:{port}")
    try:
        await client.mutate_priorities("prio", updates={1: 2.0}, deletes=[3])
        assert not client._mutate_streams.supported
        await client.mutate_priorities("prio", updates={1: 2.0})
        with pytest.raises(errors.NotFoundError):
            await client.mutate_priorities("nope", deletes=[1])
    finally:
        await client.close()


async def test_blocking_client_falls_back_for_good_on_unimplemented(
    reverb_only_server, blocking_way: str
) -> None:
    port, _ = reverb_only_server
    client = reverb.Client(f"127.0.0.1:{port}")
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, lambda: client.mutate_priorities("prio", deletes=[3]))
    assert not client._mutate_streams.supported
    assert client._mutate is not None
    with pytest.raises(errors.NotFoundError):
        await loop.run_in_executor(None, lambda: client.mutate_priorities("nope", deletes=[1]))


# ---------------------------------------------------------------- the asyncio client


async def test_async_calls_share_pooled_streams(server: Server) -> None:
    keys = await asyncio.get_running_loop().run_in_executor(None, fill, server, 8)
    client = reverb.aio.Client(f"localhost:{server.port}")
    try:
        await client.mutate_priorities("prio", updates={keys[0]: 3.0})
        [stream] = client._mutate_streams._idle
        await client.mutate_priorities("prio", updates={keys[1]: 3.0})
        assert client._mutate_streams._idle == [stream]
        assert open_mutate_streams(server) == 1
        # Calls at once each take a stream; the pool keeps MAX_IDLE_STREAMS of them.
        await asyncio.gather(
            *(client.mutate_priorities("prio", updates={key: 7.0}) for key in keys)
        )
        assert priorities(server) == dict.fromkeys(keys, 7.0)
        assert len(client._mutate_streams._idle) <= mutations.MAX_IDLE_STREAMS
        with pytest.raises(errors.NotFoundError, match="Priority table nope was not found"):
            await client.mutate_priorities("nope", deletes=[1])
        await client.mutate_priorities("prio", deletes=keys[:2])
        assert set(priorities(server)) == set(keys[2:])
    finally:
        await client.close()
    # Closing the client ends its streams.
    await _until_no_mutate_streams(server)


async def _until_no_mutate_streams(server: Server) -> None:
    await _until(lambda: open_mutate_streams(server) == 0)


async def _until(condition) -> None:
    """Polls a condition of the server (which runs on its own thread), for 10 s at most."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the server never got there")


async def test_a_cancelled_async_call_does_not_return_its_stream() -> None:
    # No server: the call waits for one (wait_for_ready) until it is cancelled.
    with socket_port() as port:
        client = reverb.aio.Client(f"127.0.0.1:{port}")
        try:
            call = asyncio.ensure_future(client.mutate_priorities("prio", deletes=[1]))
            await asyncio.sleep(0)  # the call starts
            await asyncio.sleep(0)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            assert client._mutate_streams._idle == []
        finally:
            await client.close()


class socket_port:
    """A free local port nothing listens on (held bound, not listening)."""

    def __enter__(self) -> int:
        import socket

        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        return int(self._socket.getsockname()[1])

    def __exit__(self, *exc_info: object) -> None:
        self._socket.close()


async def test_the_stream_answers_each_request_in_order(server: Server) -> None:
    keys = await asyncio.get_running_loop().run_in_executor(None, fill, server, 2)
    async with grpc.aio.insecure_channel(f"localhost:{server.port}") as channel:
        call = open_call(channel)
        for value in (2.0, 3.0):
            await call.write(encode_mutate_request("prio", {keys[0]: value}, None))
            assert await call.read() == b""
            assert priorities(server)[keys[0]] == value
        await call.write(encode_mutate_request("nope", {keys[0]: 1.0}, None))
        with pytest.raises(grpc.aio.AioRpcError):
            await call.read()
        assert await call.code() == grpc.StatusCode.NOT_FOUND
        assert "Priority table nope was not found" in await call.details()


@pytest.mark.parametrize("answer_task", [True, False])
async def test_requests_sent_ahead_are_answered_in_order_before_a_refusal(
    server: Server, answer_task: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A client may write requests without waiting for their answers: each is applied and
    # answered in order, and a refused one ends the stream after every earlier answer;
    # whether answers are written by a task (the default) or awaited in turn.
    from reverb_py.server import _service

    monkeypatch.setattr(_service, "ANSWER_TASK", answer_task)
    keys = await asyncio.get_running_loop().run_in_executor(None, fill, server, 1)
    async with grpc.aio.insecure_channel(f"localhost:{server.port}") as channel:
        call = open_call(channel)
        for value in range(1, 21):
            await call.write(encode_mutate_request("prio", {keys[0]: float(value)}, None))
        await call.write(encode_mutate_request("nope", {keys[0]: 1.0}, None))
        answers = [await call.read() for _ in range(20)]
        assert answers == [b""] * 20
        assert priorities(server)[keys[0]] == 20.0
        with pytest.raises(grpc.aio.AioRpcError):
            await call.read()
        assert await call.code() == grpc.StatusCode.NOT_FOUND


async def test_a_stream_cancelled_with_answers_due_is_released(server: Server) -> None:
    # The client stops reading, then cancels: the server ends the stream (its answer
    # writes included) and goes on answering others.
    keys = await asyncio.get_running_loop().run_in_executor(None, fill, server, 1)
    async with grpc.aio.insecure_channel(f"localhost:{server.port}") as channel:
        call = open_call(channel)
        for value in range(1, 51):
            await call.write(encode_mutate_request("prio", {keys[0]: float(value)}, None))
        await _until(lambda: priorities(server)[keys[0]] == 50.0)
        call.cancel()
        await _until_no_mutate_streams(server)
        other = open_call(channel)
        await other.write(encode_mutate_request("prio", {keys[0]: 2.0}, None))
        assert await other.read() == b""
        assert priorities(server)[keys[0]] == 2.0
        other.cancel()


async def test_a_cancelled_handler_cancels_the_answer_under_way() -> None:
    # The handler is cancelled (the client went away) while gRPC still holds an answer
    # (a client that stopped reading): the write is cancelled, not waited for, and the
    # stream is counted closed.
    servicer = ReverbServicer({table.name: table for table in new_tables()})
    write_started = asyncio.Event()
    write_cancelled = asyncio.Event()

    class Context:
        async def write(self, message: bytes) -> None:
            write_started.set()
            try:
                await asyncio.Event().wait()  # never taken
            except asyncio.CancelledError:
                write_cancelled.set()
                raise

    async def requests() -> AsyncIterator[bytes]:
        yield encode_mutate_request("prio", {}, None)
        await asyncio.Event().wait()  # the client sends nothing more

    handler = asyncio.ensure_future(servicer.MutatePrioritiesStream(requests(), Context()))
    await write_started.wait()
    assert servicer.streams_by_method["MutatePrioritiesStream"] == 1
    handler.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(handler, timeout=10)
    assert write_cancelled.is_set()
    assert servicer.streams_by_method["MutatePrioritiesStream"] == 0
    assert servicer.open_streams == 0


async def test_an_answer_write_left_behind_is_settled() -> None:
    # A handler that ends with an answer's write under way cancels it; one that failed
    # has its error taken, so asyncio reports no "exception was never retrieved".
    from reverb_py.server._service import _settle

    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        under_way = loop.create_future()
        _settle(under_way)
        assert under_way.cancelled()
        failed = loop.create_future()
        failed.set_exception(RuntimeError("the client went away"))
        _settle(failed)
        del failed
        gc.collect()
        assert reported == []
    finally:
        loop.set_exception_handler(previous)


def test_a_process_with_an_idle_stream_exits(server: Server, blocking_way: str) -> None:
    code = (
        "import reverb_py\n"
        "from reverb_py._client import mutations\n"
        f"mutations._POLLED = {blocking_way == 'polled'}\n"
        f"c = reverb_py.Client('localhost:{server.port}')\n"
        "c.mutate_priorities('prio', deletes=[1])\n"
        "print('done')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"


# ---------------------------------------------------------------- the polled stream


def _wait_until(condition) -> None:
    """Waits for a condition of the server (on its own thread), 10 s at most."""
    done = threading.Event()
    for _ in range(1000):
        if condition():
            return
        done.wait(0.01)
    raise AssertionError("the server never got there")


def test_a_collected_client_ends_its_streams(server: Server, blocking_way: str) -> None:
    keys = fill(server, 2)
    client = reverb.Client(f"localhost:{server.port}")
    client.mutate_priorities("prio", updates={keys[0]: 2.0})
    assert open_mutate_streams(server) == 1
    del client
    gc.collect()
    _wait_until(lambda: open_mutate_streams(server) == 0)
    assert priorities(server)[keys[0]] == 2.0


def test_a_polled_stream_ended_by_the_server_is_released(server: Server) -> None:
    from reverb_py import _impl

    keys = fill(server, 1)
    channel = grpc.insecure_channel(f"localhost:{server.port}")
    try:
        stream = mutations._PolledStream(channel, ())
        good = _impl.mutations.encode_mutate_request("prio", {keys[0]: 4.0}, None)
        assert stream.send(good) and stream.send(good)
        assert stream.code is None and 1 <= stream._due <= 3  # the status at least
        assert not stream.send(_impl.mutations.encode_mutate_request("nope", {1: 1.0}, None))
        # Every operation was taken back: gRPC has released the call and its queue.
        assert stream._due == 0
        assert stream.code == grpc_core_code(grpc.StatusCode.NOT_FOUND)
        assert not stream.unimplemented()
        assert not stream.send(good)  # An ended stream sends nothing more.
        stream.close()  # Nothing left to cancel.
        assert priorities(server) == {keys[0]: 4.0}
        # The server's handler counts its stream closed once it has ended it.
        _wait_until(lambda: open_mutate_streams(server) == 0)
        # Closing an open stream cancels it.
        other = mutations._PolledStream(channel, ())
        assert other.send(good)
        other.close()
        assert other._due == 0
        _wait_until(lambda: open_mutate_streams(server) == 0)
    finally:
        channel.close()


def grpc_core_code(code: grpc.StatusCode) -> int:
    return int(code.value[0])


class _Passthrough(grpc.StreamStreamClientInterceptor, grpc.UnaryUnaryClientInterceptor):
    def intercept_stream_stream(self, continuation, details, requests):  # type: ignore[no-untyped-def]
        return continuation(details, requests)

    def intercept_unary_unary(self, continuation, details, request):  # type: ignore[no-untyped-def]
        return continuation(details, request)


def test_a_channel_grpc_did_not_make_is_driven_by_grpcs_threads(server: Server) -> None:
    from reverb_py import _impl

    keys = fill(server, 1)
    plain = grpc.insecure_channel(f"localhost:{server.port}")
    try:
        wrapped = grpc.intercept_channel(plain, _Passthrough())
        streams = mutations.BlockingMutateStreams(lambda: wrapped)
        assert streams.polled
        request = _impl.mutations.encode_mutate_request("prio", {keys[0]: 9.0}, None)
        assert streams.send(request)
        assert not streams.polled  # Learned once, for good.
        [stream] = streams._idle
        assert isinstance(stream, mutations._BlockingStream)
        assert streams.send(request)
        assert priorities(server) == {keys[0]: 9.0}
    finally:
        plain.close()
