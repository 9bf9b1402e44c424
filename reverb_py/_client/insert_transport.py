"""The background insert stream behind every writer.

One ``InsertStream`` per writer, driven by a task on an event loop (the client's
background loop for blocking writers, the caller's loop for asyncio writers). The
writer's user thread hands over work with :meth:`InsertTransport.notify`; the task takes
everything that is ready as one request (many chunks and items per message), sends it,
and feeds confirmations back to the writer. On UNAVAILABLE or CANCELLED it reconnects
with exponential backoff and resends every unconfirmed item; any other status is
terminal for the writer.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from reverb_py import errors
from reverb_py._client.channel import INSERT_STREAM_PATH, identity
from reverb_py._client.credentials import (
    BROKEN_STREAM,
    explain_internal_error,
    failed_write_status,
)
from reverb_py._client.loop_wake import LoopWaker, PendingWaiters, call_on_loop, running_on
from reverb_py._proto import reverb_service_pb2
from reverb_py._status import error_for_status, error_from_rpc

__all__ = ["RETRYABLE", "InsertTransport", "ReconnectBackoff", "next_request", "run_stream"]

_logger = logging.getLogger("reverb_py")

RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
"""The statuses an insert stream ends with that make a transport open a new stream and
send its unconfirmed items again."""
_MIN_BACKOFF = 0.001
_MAX_BACKOFF = 1.0
_STABLE_STREAM_SECONDS = 2.0
# Streams in a row that may break with their server reachable and nothing confirmed
# before the writer fails: e.g. a server that ends every stream over an item it refuses,
# its status lost to gRPC's "Internal error from Core".
_MAX_BROKEN_STREAMS = 3
# Requests waiting in the outbox are written as one message up to this many bytes: their
# chunks and items concatenated, followed by the last request's keep_chunk_keys.
_MERGE_BYTES = 1 << 20


def next_request(outbox: collections.deque[tuple[bytes, bytes]]) -> bytes:
    """Takes the next request to write from a non-empty outbox of serialised requests
    (body, keep_chunk_keys): the first, merged with those after it up to _MERGE_BYTES.
    Only the last keep list goes: the server releases chunks after all the items."""
    body, keep = outbox.popleft()
    if not outbox or len(body) >= _MERGE_BYTES:
        return body + keep
    bodies = [body]
    size = len(body)
    while outbox and size + len(outbox[0][0]) <= _MERGE_BYTES:
        body, keep = outbox.popleft()
        bodies.append(body)
        size += len(body)
    bodies.append(keep)
    return b"".join(bodies)


class ReconnectBackoff:
    """The delays before an insert stream is opened again: doubling from 1 ms up to 1 s,
    and back to 1 ms after a stream that lasted :data:`_STABLE_STREAM_SECONDS` (or on
    :meth:`reset`)."""

    __slots__ = ("_delay",)

    def __init__(self) -> None:
        self._delay = _MIN_BACKOFF

    def reset(self) -> None:
        self._delay = _MIN_BACKOFF

    def next_delay(self, stream_started: float) -> float:
        """The delay before the next stream, for one that began at ``stream_started``
        (``time.monotonic()``)."""
        if time.monotonic() - stream_started >= _STABLE_STREAM_SECONDS:
            self._delay = _MIN_BACKOFF
        delay = self._delay
        self._delay = min(delay * 2, _MAX_BACKOFF)
        return delay

    async def sleep(self, stream_started: float, code: grpc.StatusCode) -> None:
        """Logs the stream's end and waits :meth:`next_delay` seconds."""
        delay = self.next_delay(stream_started)
        _logger.debug("insert stream %s; reconnecting in %.3fs", code, delay)
        await asyncio.sleep(delay)


class _StreamEnded(Exception):
    """The insert stream ended with a status (seen where no ``AioRpcError`` is raised)."""

    def __init__(self, code: grpc.StatusCode, details: str | None) -> None:
        super().__init__(code, details)
        self.code = code
        self.details = details or str(code)


def _open_insert_stream(channel: grpc.aio.Channel) -> Any:
    """A new ``InsertStream`` call on ``channel`` (requests written as bytes)."""
    return channel.stream_stream(
        INSERT_STREAM_PATH,
        request_serializer=identity,
        response_deserializer=reverb_service_pb2.InsertStreamResponse.FromString,
    )()


async def _read_response(call: Any) -> Any:
    """The next ``InsertStreamResponse`` of ``call``; None when the stream ended with OK.

    Raises:
      _StreamEnded: the stream ended with another status.
    """
    response = await call.read()
    if response is grpc.aio.EOF:
        code = await call.code()
        if code != grpc.StatusCode.OK:
            raise _StreamEnded(code, await call.details())
        return None
    return response


async def _write_requests(
    call: Any,
    next_request: Callable[[], bytes | None],
    wakeup: asyncio.Event,
    reader: asyncio.Future[None],
    channel_getter: Callable[[], grpc.aio.Channel],
) -> None:
    """Writes every request ``next_request()`` gives on ``call``, waiting for ``wakeup``
    while it gives none, until ``reader`` (the task reading the confirmations) ends.

    Returns when the reader returned (the stream ended with OK). Raises what the reader
    raised, or, when a write fails, :class:`_StreamEnded` with what the call ended with.
    The reader and the call are cancelled when this ends otherwise.
    """
    waiter: asyncio.Future[Any] | None = None
    try:
        while True:
            request = next_request()
            if request is None:
                if reader.done():
                    reader.result()
                    return
                wakeup.clear()
                # A task and asyncio.wait rather than a bare future: the later write takes
                # more batches (fewer, larger requests pay; benchmarks/README.md).
                waiter = asyncio.ensure_future(wakeup.wait())
                done, _ = await asyncio.wait({waiter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if reader in done:
                    reader.result()  # Raises the stream's error.
                    return
                continue
            try:
                await call.write(request)
            except (asyncio.InvalidStateError, grpc.aio.AioRpcError):
                # The call already ended, or ended during the write (the server went
                # away: gRPC then says only "Internal error from Core"): the call's own
                # status says why, and whether to reconnect.
                code, details = await failed_write_status(channel_getter(), call)
                raise _StreamEnded(code, details) from None
    finally:
        if waiter is not None and not waiter.done():
            waiter.cancel()
        if not reader.done():
            reader.cancel()
            call.cancel()


async def run_stream(
    channel_getter: Callable[[], grpc.aio.Channel],
    next_request: Callable[[], bytes | None],
    wakeup: asyncio.Event,
    on_response: Callable[[Any], None],
) -> None:
    """Runs one ``InsertStream``: writes every request ``next_request()`` gives (waiting
    for ``wakeup`` while it gives none) and hands each ``InsertStreamResponse`` to
    ``on_response``.

    Returns when the stream ended with OK. Raises :class:`_StreamEnded` when it ended
    with another status or a write failed (with what the call ended with), or what
    ``on_response`` raised.
    """
    call = _open_insert_stream(channel_getter())

    async def read() -> None:
        while (response := await _read_response(call)) is not None:
            on_response(response)

    reader = asyncio.ensure_future(read())
    await _write_requests(call, next_request, wakeup, reader, channel_getter)


class InsertTransport:
    """Moves a writer's chunks and items to the server over one insert stream.

    Args:
      channel_getter: Returns the ``grpc.aio.Channel`` to open streams on; called on
        the transport's loop.
      loop: The event loop the stream task runs on.
      max_request_bytes: The most chunk bytes in one request.
    """

    def __init__(
        self,
        channel_getter: Callable[[], grpc.aio.Channel],
        loop: asyncio.AbstractEventLoop,
        max_request_bytes: int = 32 * 2**20,
    ) -> None:
        self._channel_getter = channel_getter
        self._loop = loop
        self._max_request_bytes = max_request_bytes
        self._writer: Any = None
        self._waker = LoopWaker(loop, self._run, lambda: not self._closed)
        self._closed = False
        self._error: errors.ReverbError | None = None
        self._waiters = PendingWaiters(loop)
        # Whether the current stream had a confirmation.
        self._confirmed = False
        # Serialised requests taken from the writer, in take order, not yet written.
        # A blocking writer's thread takes and serialises its own batches (in notify),
        # so the loop thread only writes them and never waits for the writer's lock
        # to send. `_take_lock` makes "take from the writer + enqueue" atomic so the
        # outbox order is the take order, whichever thread took.
        self._outbox: collections.deque[tuple[bytes, bytes]] = collections.deque()
        self._take_lock = threading.Lock()

    # ------------------------------------------------------------ wiring

    def attach(self, writer: Any) -> None:
        """Connects the transport to its writer (before the first notify)."""
        self._writer = writer
        if hasattr(writer, "add_pending_listener"):
            writer.add_pending_listener(self._on_pending_changed)

    # ------------------------------------------------------------ WriterTransport

    def notify(self) -> None:
        """New data is ready: wake the stream task (cheap; callable from any thread).

        The calling thread takes the ready batches from the writer and serialises them
        into the outbox; the stream task only writes them (so the loop thread never
        competes for the writer's lock to send).
        """
        if self._closed:
            return
        self._take_into_outbox()
        self._waker.wake()

    def _take_into_outbox(self) -> None:
        """Moves every batch the writer has ready into the outbox, serialised."""
        with self._take_lock:
            self._take_into_outbox_locked()

    def _take_into_outbox_locked(self) -> None:
        while True:
            batch = self._writer.take_outgoing(self._max_request_bytes)
            if batch is None:
                return
            self._outbox.append(batch.serialize_parts())

    def _next_request(self) -> bytes | None:
        """The next request to write (outbox requests merged), or None."""
        return next_request(self._outbox) if self._outbox else None

    def wait_confirmed(self, max_pending: int, timeout: float | None) -> bool:
        """Blocks the calling thread until at most ``max_pending`` items are unconfirmed.

        Returns:
          False if ``timeout`` seconds passed first.

        Raises:
          ReverbError: the stream failed for good.
        """
        if running_on(self._loop):
            raise errors.UsageError(
                "A blocking writer cannot wait on its own event loop; use the asyncio client."
            )
        done = self._writer.wait_until_pending_at_most(max_pending, timeout)
        self._raise_if_failed()
        return bool(done)

    async def wait_confirmed_async(self, max_pending: int, timeout: float | None) -> bool:
        """Waits (without blocking the loop) until at most ``max_pending`` are unconfirmed."""
        self._raise_if_failed()
        if self._writer.num_pending_items() <= max_pending:
            return True
        if not await self._waiters.wait(max_pending, timeout):
            return False
        self._raise_if_failed()
        return True

    def _on_pending_changed(self) -> None:
        if self._waiters:
            call_on_loop(self._loop, self._release_waiters)

    def _release_waiters(self) -> None:
        if self._waiters:
            self._waiters.release(
                self._writer.num_pending_items(), everyone=self._error is not None
            )

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Stops the stream; unsent items are dropped. Idempotent, any thread."""
        if self._closed:
            return
        self._closed = True
        call_on_loop(self._loop, self._cancel)

    def _cancel(self) -> None:
        self._waker.cancel()
        self._waiters.cancel()

    # ------------------------------------------------------------ the stream task

    async def _run(self) -> None:
        backoff = ReconnectBackoff()
        broken = 0  # Streams in a row that broke as BROKEN_STREAM says.
        first = True
        while not self._closed:
            if not first:
                with self._take_lock:
                    # Requests taken for the failed stream: their items are in flight
                    # and go back to the queue with every other in-flight item.
                    self._outbox.clear()
                    self._writer.resend_all()
                    self._take_into_outbox_locked()
            first = False
            started = time.monotonic()
            self._confirmed = False
            try:
                await self._stream()
                return
            except grpc.aio.AioRpcError as error:
                if error.code() in RETRYABLE and not self._closed:
                    await backoff.sleep(started, error.code())
                    continue
                self._fail(await self._explained(error_from_rpc(error)))
                return
            except _StreamEnded as ended:
                if ended.details == BROKEN_STREAM and not self._confirmed:
                    broken += 1
                    if broken >= _MAX_BROKEN_STREAMS:
                        self._fail(
                            errors.InternalError(
                                f"the insert stream broke {broken} times in a row with "
                                "nothing confirmed while the server could be reached"
                            )
                        )
                        return
                else:
                    broken = 0
                if ended.code in RETRYABLE and not self._closed:
                    await backoff.sleep(started, ended.code)
                    continue
                self._fail(await self._explained(error_for_status(ended.code, ended.details)))
                return
            except errors.ReverbError as error:
                self._fail(error)
                return
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - a writer must never hang.
                self._fail(errors.InternalError(f"insert stream failed: {error!r}"))
                return

    async def _explained(self, error: errors.ReverbError) -> errors.ReverbError:
        return await explain_internal_error(self._channel_getter(), error)

    def _fail(self, error: errors.ReverbError) -> None:
        self._error = error
        self._writer.fail(error)
        self._release_waiters()

    async def _stream(self) -> None:
        await run_stream(self._channel_getter, self._next_request, self._waker.event, self._confirm)

    def _confirm(self, response: Any) -> None:
        self._confirmed = True
        if self._writer.confirm(response.keys):
            self.notify()
        self._release_waiters()
