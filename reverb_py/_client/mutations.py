"""``MutatePriorities`` over a reverb_py server's mutation stream.

A unary ``MutatePriorities`` call opens (and closes) an HTTP/2 stream on both ends, which
costs most of the call. A reverb_py server also serves :data:`MUTATE_STREAM_PATH`: a
bidirectional stream of ``MutatePrioritiesRequest`` messages, each applied as the unary
call applies it and answered in order with an empty ``MutatePrioritiesResponse``. The
clients keep idle streams in a small pool (a call takes one, so calls from several
threads or coroutines run side by side) and send each call on one.

The stream is only a faster road to the same result: whenever it does not deliver the
answer (a server without the method, such as dm-reverb, answers UNIMPLEMENTED; the
stream limit refuses it; the connection broke; the server refused the request), the
call is made again as the unary call, and its outcome (done, or the error it raises) is
the call's. Mutations are idempotent (a priority set twice, a key deleted twice), so a
request the server applied before its stream broke may be applied again. After
UNIMPLEMENTED a client uses the unary call only. Targets of several servers use the
unary call, so that every call is spread by round robin as before.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from reverb_py._client.channel import MUTATE_STREAM_PATH, identity

__all__ = ["BlockingMutateStreams", "MutateStreams"]

# Idle streams a client keeps open; more at once (calls from many threads) are closed
# once their call is done.
MAX_IDLE_STREAMS = 4


class MutateStreams:
    """The asyncio client's pool of mutation streams (one event loop)."""

    def __init__(self) -> None:
        self._idle: list[Any] = []
        self.supported = True

    async def send(self, channel: grpc.aio.Channel, request: bytes) -> bool:
        """Sends ``request`` on a stream of ``channel``; True once it is answered.

        False means the caller must make the unary call.
        """
        if not self.supported:
            return False
        if self._idle:
            call = self._idle.pop()
        else:
            call = channel.stream_stream(
                MUTATE_STREAM_PATH, request_serializer=identity, response_deserializer=identity
            )(wait_for_ready=True)
        answered = False
        try:
            await call.write(request)
            answered = await call.read() is not grpc.aio.EOF
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            pass
        finally:
            if not answered:
                call.cancel()  # Cancelled (by the caller) or failed: never reused.
        if answered:
            if len(self._idle) < MAX_IDLE_STREAMS:
                self._idle.append(call)
            else:
                await call.done_writing()
            return True
        if call.done() and await call.code() == grpc.StatusCode.UNIMPLEMENTED:
            self.supported = False
        return False

    def close(self) -> None:
        """Cancels the idle streams."""
        idle, self._idle = self._idle, []
        for call in idle:
            call.cancel()


_END = None


class _BlockingStream:
    """One mutation stream of a blocking channel: requests go through a queue that
    gRPC's request thread reads; the caller's thread reads the answer."""

    def __init__(self, channel: grpc.Channel) -> None:
        self._requests: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        requests: Iterator[bytes] = iter(self._requests.get, _END)
        self._responses = channel.stream_stream(
            MUTATE_STREAM_PATH, request_serializer=identity, response_deserializer=identity
        )(requests, wait_for_ready=True)

    def send(self, request: bytes) -> bool:
        self._requests.put(request)
        try:
            next(self._responses)
        except (grpc.RpcError, StopIteration):
            return False
        return True

    def code(self) -> grpc.StatusCode | None:
        code: grpc.StatusCode | None = self._responses.code()
        return code

    def close(self) -> None:
        """Ends the requests; the server then ends the stream."""
        self._requests.put(_END)

    def cancel(self) -> None:
        self._requests.put(_END)
        self._responses.cancel()


class BlockingMutateStreams:
    """The blocking client's pool of mutation streams (any thread).

    Args:
      channel_getter: Returns the blocking channel to open streams on.
    """

    def __init__(self, channel_getter: Callable[[], grpc.Channel]) -> None:
        self._channel_getter = channel_getter
        self._idle: list[_BlockingStream] = []
        self._lock = threading.Lock()
        self.supported = True

    def send(self, request: bytes) -> bool:
        """Sends ``request`` on a stream; True once it is answered (False: make the
        unary call)."""
        if not self.supported:
            return False
        with self._lock:
            stream = self._idle.pop() if self._idle else None
        if stream is None:
            stream = _BlockingStream(self._channel_getter())
        answered = False
        try:
            answered = stream.send(request)
        finally:
            if not answered:
                stream.cancel()
        if not answered:
            if stream.code() == grpc.StatusCode.UNIMPLEMENTED:
                self.supported = False
            return False
        with self._lock:
            if len(self._idle) < MAX_IDLE_STREAMS:
                self._idle.append(stream)
                return True
        stream.close()
        return True
