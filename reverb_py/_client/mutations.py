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
import importlib
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from reverb_py._client.channel import MUTATE_STREAM_PATH, identity

__all__ = ["BlockingMutateStreams", "MutateStreams", "open_polled_call", "polled_calls_work"]

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

# gRPC core's calls as grpcio's Cython layer offers them (what its blocking API uses).
_cygrpc: Any
try:
    _cygrpc = importlib.import_module("grpc._cython.cygrpc")
except ImportError:  # pragma: no cover - every grpcio has it today
    _cygrpc = None

_NO_FLAGS = 0
_MUTATE_STREAM_METHOD = MUTATE_STREAM_PATH.encode()


class _BlockingStream:
    """One mutation stream of a blocking channel: requests go through a queue that
    gRPC's request thread reads; the caller's thread reads the answer."""

    def __init__(self, channel: grpc.Channel, metadata: tuple[tuple[str, str], ...]) -> None:
        self._requests: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        requests: Iterator[bytes] = iter(self._requests.get, _END)
        self._responses = channel.stream_stream(
            MUTATE_STREAM_PATH, request_serializer=identity, response_deserializer=identity
        )(requests, metadata=metadata or None, wait_for_ready=True)

    def send(self, request: bytes) -> bool:
        self._requests.put(request)
        try:
            next(self._responses)
        except (grpc.RpcError, StopIteration):
            return False
        return True

    def unimplemented(self) -> bool:
        """Whether the server answered the stream with UNIMPLEMENTED."""
        return bool(self._responses.code() == grpc.StatusCode.UNIMPLEMENTED)

    def close(self) -> None:
        """Ends the requests; the server then ends the stream."""
        self._requests.put(_END)

    def cancel(self) -> None:
        self._requests.put(_END)
        self._responses.cancel()


class _PolledStream:
    """One mutation stream whose events the thread that sends takes itself.

    PERF(polled-mutate): gRPC's blocking stream hands each request to the thread that
    reads its request iterator, and each answer over from the channel's polling thread.
    A call with a completion queue of its own (what gRPC's blocking unary calls use)
    lets the caller's thread write, wait and read with no other thread involved.

    The call lives while one of its operations is due: receiving the status is due from
    the start until the stream ends. Every operation started is taken from the queue
    again (``_due`` counts them), also when the stream is cancelled or ends, so gRPC
    releases the call and its queue.
    """

    __slots__ = ("_call", "_due", "code")

    def __init__(self, channel: grpc.Channel, metadata: tuple[tuple[str, str], ...]) -> None:
        flags = (
            _cygrpc.InitialMetadataFlags.wait_for_ready
            | _cygrpc.InitialMetadataFlags.wait_for_ready_explicitly_set
        )
        self._due = 0
        # The status code once the stream has ended (gRPC core's number).
        self.code: int | None = None
        self._call = open_polled_call(channel, _MUTATE_STREAM_METHOD, metadata, flags)
        self._due = 3

    def send(self, request: bytes) -> bool:
        """Writes ``request`` and reads its answer; False if the stream ended first."""
        call = self._call
        if self.code is not None:
            return False
        try:
            if not call.operate((_cygrpc.SendMessageOperation(request, _NO_FLAGS),), None):
                return False
            self._due += 1
            sending = True
            if not call.operate((_cygrpc.ReceiveMessageOperation(_NO_FLAGS),), None):
                return False
            self._due += 1
        except ValueError:  # gRPC core refused the operation: the call is over.
            self._drain()
            return False
        answered: bytes | None = None
        receiving = True
        while sending or receiving:
            kinds, message = self._next()
            if _SEND_MESSAGE in kinds:
                sending = False
            if _RECEIVE_MESSAGE in kinds:
                receiving = False
                answered = message
        if answered is None:
            self._drain()  # Ended: the status follows.
            return False
        return True

    def _next(self) -> tuple[set[int], bytes | None]:
        """Takes the next completed operation batch: its kinds, a received message."""
        try:
            event = self._call.next_event()
        except BaseException:
            # A signal's exception (KeyboardInterrupt): gRPC has released the call.
            self._due = 0
            self.code = _cygrpc.StatusCode.cancelled
            raise
        self._due -= 1
        kinds = set()
        message = None
        for operation in event.batch_operations:
            kind = operation.type()
            kinds.add(kind)
            if kind == _RECEIVE_MESSAGE:
                message = operation.message() if event.success else None
            elif kind == _RECEIVE_STATUS:
                self.code = operation.code()
        return kinds, message

    def _drain(self) -> None:
        """Takes every operation still due (the stream has ended or been cancelled)."""
        while self._due > 0:
            self._next()

    def unimplemented(self) -> bool:
        """Whether the server answered the stream with UNIMPLEMENTED."""
        return bool(self.code == _cygrpc.StatusCode.unimplemented)

    def close(self) -> None:
        """Cancels the stream (the server's handler sees CANCELLED) and releases it."""
        if self._due > 0:
            self._call.cancel(_cygrpc.StatusCode.cancelled, "closed by the client")
            self._drain()

    cancel = close

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001, S110 - nothing to report at collection.
            pass


def polled_calls_work() -> bool:
    """Whether this gRPC has the core calls :class:`_PolledStream` (and the polled
    insert stream) use."""
    if _cygrpc is None:
        return False
    names = (
        "InitialMetadataFlags",
        "PropagationConstants",
        "SendInitialMetadataOperation",
        "ReceiveStatusOnClientOperation",
        "ReceiveInitialMetadataOperation",
        "SendMessageOperation",
        "ReceiveMessageOperation",
        "OperationType",
        "StatusCode",
    )
    return all(hasattr(_cygrpc, name) for name in names)


def open_polled_call(
    channel: grpc.Channel,
    method: bytes,
    metadata: tuple[tuple[str, str], ...],
    flags: int = 0,
    receive_first: bool = False,
) -> Any:
    """A stream call on ``channel`` whose events its caller takes (``next_event``), with
    its metadata sent and its status and initial metadata asked for (3 operations due;
    4 with ``receive_first``, a first message asked for too)."""
    operations = [
        ((_cygrpc.SendInitialMetadataOperation(metadata, flags),), None),
        ((_cygrpc.ReceiveStatusOnClientOperation(_NO_FLAGS),), None),
        ((_cygrpc.ReceiveInitialMetadataOperation(_NO_FLAGS),), None),
    ]
    if receive_first:
        operations.append(((_cygrpc.ReceiveMessageOperation(_NO_FLAGS),), None))
    return channel._channel.segregated_call(  # type: ignore[attr-defined]
        _cygrpc.PropagationConstants.GRPC_PROPAGATE_DEFAULTS,
        method,
        None,
        None,
        metadata,
        None,
        tuple(operations),
        None,
        None,
    )


_POLLED = polled_calls_work()
if _POLLED:
    _SEND_MESSAGE = _cygrpc.OperationType.send_message
    _RECEIVE_MESSAGE = _cygrpc.OperationType.receive_message
    _RECEIVE_STATUS = _cygrpc.OperationType.receive_status_on_client


class BlockingMutateStreams:
    """The blocking client's pool of mutation streams (any thread).

    Args:
      channel_getter: Returns the blocking channel to open streams on: the channel
        gRPC made (``grpc.insecure_channel`` or ``grpc.secure_channel``), with no
        interceptor.
      metadata: What every stream sends as its metadata (the token).
    """

    def __init__(
        self,
        channel_getter: Callable[[], grpc.Channel],
        metadata: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self._channel_getter = channel_getter
        self._metadata = metadata
        self._idle: list[_PolledStream | _BlockingStream] = []
        self._lock = threading.Lock()
        self.supported = True
        # Streams whose events the caller takes (_PolledStream), where gRPC allows it.
        self.polled = _POLLED

    def _new_stream(self) -> _PolledStream | _BlockingStream:
        channel = self._channel_getter()
        if self.polled:
            try:
                return _PolledStream(channel, self._metadata)
            except (AttributeError, TypeError):
                # Not a channel of gRPC's own, or a gRPC whose core calls differ.
                self.polled = False
        return _BlockingStream(channel, self._metadata)

    def send(self, request: bytes) -> bool:
        """Sends ``request`` on a stream; True once it is answered (False: make the
        unary call)."""
        if not self.supported:
            return False
        with self._lock:
            stream = self._idle.pop() if self._idle else None
        if stream is None:
            stream = self._new_stream()
        answered = False
        try:
            answered = stream.send(request)
        finally:
            if not answered:
                stream.cancel()
        if not answered:
            if stream.unimplemented():
                self.supported = False
            return False
        with self._lock:
            if len(self._idle) < MAX_IDLE_STREAMS:
                self._idle.append(stream)
                return True
        stream.close()
        return True
