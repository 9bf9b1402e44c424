"""The insert stream of a blocking writer, driven by the threads that use the writer.

PERF(polled-insert): the asyncio transport (:mod:`reverb_py._client.insert_transport`)
moves every request from the writer's thread to the client's loop thread and every
confirmation back, through gRPC's polling thread: several thread wake-ups per round trip,
each waiting for the GIL. Here the stream is a gRPC call with a completion queue of its
own (what gRPC's blocking unary calls use, :class:`reverb_py._client.mutations._PolledStream`
for ``mutate_priorities``): the writer's thread starts each write itself and, when it
waits for confirmations, takes the call's completed operations from the queue itself.

Rules:

* One write at a time (gRPC's rule): :meth:`PolledInsertTransport.notify` serialises
  the ready batches into the outbox, starts a write when none is under way and waits for
  its completion (a local event: the request is with gRPC). The outbox goes out as one
  message when a write completes.
* One receive is always due while the stream is open, so confirmations are read as
  they come whenever a thread takes events.
* One thread takes events at a time (``_poll_lock``). A wait with a timeout, or a wait
  while another thread takes events, starts the transport's own thread, which from then
  on takes every event of the writer's streams; waits then block on the writer's
  condition, which confirmations signal (no event of gRPC's queue can be waited for
  with a timeout).
* A stream that ends with UNAVAILABLE or CANCELLED is replaced after a backoff and every
  unconfirmed item is sent again (as the asyncio transport does); any other status fails
  the writer with its error. Every operation a call started is taken from its queue
  before the call is dropped, so gRPC releases it.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from reverb_py import errors
from reverb_py._client.channel import INSERT_STREAM_PATH
from reverb_py._client.insert_transport import RETRYABLE, ReconnectBackoff, next_request
from reverb_py._client.mutations import _cygrpc, open_polled_call, polled_calls_work
from reverb_py._proto import reverb_service_pb2
from reverb_py._status import error_for_status

__all__ = ["PolledInsertTransport", "available"]

_logger = logging.getLogger("reverb_py")

_METHOD = INSERT_STREAM_PATH.encode()
_NO_FLAGS = 0

# gRPC core's status numbers -> grpc.StatusCode.
_STATUS_CODES = {code.value[0]: code for code in grpc.StatusCode}
# The operation types of the events taken (where the calls are to be had).
_KINDS = (
    (
        _cygrpc.OperationType.send_message,
        _cygrpc.OperationType.receive_message,
        _cygrpc.OperationType.receive_status_on_client,
    )
    if polled_calls_work()
    else (None, None, None)
)


ENABLED = True
"""Whether blocking clients give their writers this transport (where :func:`available`
and the target is one server); False: the asyncio ``InsertTransport`` on the client's
loop thread, as for several servers. ``benchmarks.insert_transport`` compares the two."""


def available() -> bool:
    """Whether this gRPC offers the calls the transport is made of."""
    return polled_calls_work()


class _Stream:
    """One insert stream: its call and the count of its operations still due."""

    __slots__ = ("call", "due", "ended", "opened", "sending")

    def __init__(self, channel: grpc.Channel, metadata: tuple[tuple[str, str], ...]) -> None:
        self.due = 0
        self.sending = False
        # (code, details) once the status has been received.
        self.ended: tuple[grpc.StatusCode, str] | None = None
        self.opened = time.monotonic()
        self.call = open_polled_call(channel, _METHOD, metadata, receive_first=True)
        self.due = 4

    def start(self, operation: Any) -> bool:
        """Starts one operation; False when the call is over."""
        try:
            started = bool(self.call.operate((operation,), None))
        except ValueError:  # gRPC core refused the operation: the call is over.
            return False
        if started:
            self.due += 1
        return started


class PolledInsertTransport:
    """Moves a blocking writer's chunks and items to the server over one insert stream.

    Args:
      channel_getter: Returns the blocking channel to open streams on (one gRPC made,
        with no interceptor).
      metadata: What every stream sends as its metadata (the token).
      max_request_bytes: The most chunk bytes in one request.
    """

    def __init__(
        self,
        channel_getter: Callable[[], grpc.Channel],
        metadata: tuple[tuple[str, str], ...] = (),
        max_request_bytes: int = 32 * 2**20,
    ) -> None:
        self._channel_getter = channel_getter
        self._metadata = metadata
        self._max_request_bytes = max_request_bytes
        self._writer: Any = None
        # Guards the stream state and the outbox; never held while taking events.
        self._lock = threading.Lock()
        # Held by the one thread that takes events (and replaces streams).
        self._poll_lock = threading.Lock()
        self._stream: _Stream | None = None
        # Serialised requests (body, keep_chunk_keys) taken from the writer, not yet written.
        self._outbox: collections.deque[tuple[bytes, bytes]] = collections.deque()
        self._closed = False
        self._error: errors.ReverbError | None = None
        self._backoff = ReconnectBackoff()
        self._helper: threading.Thread | None = None

    # ------------------------------------------------------------ wiring

    def attach(self, writer: Any) -> None:
        """Connects the transport to its writer (before the first notify)."""
        self._writer = writer

    # ------------------------------------------------------------ WriterTransport

    def notify(self) -> None:
        """New data is ready: write it now (or as soon as the write under way is done)."""
        if self._closed or self._error is not None:
            return
        with self._lock:
            self._take_locked()
            stream = self._stream
            if stream is not None:
                self._send_locked(stream)
        if not self._poll_lock.acquire(blocking=False):
            return  # Another thread takes events; it writes the outbox.
        try:
            if self._stream is None:
                self._open()
            # The write's completion is local (the request is with gRPC): wait for it,
            # so that the next item goes out at once. A stream that has ended is left
            # for the next wait to replace: a write never waits for a server to return.
            while not self._closed and self._error is None:
                stream = self._stream
                if stream is None or not stream.sending or stream.due == 0:
                    break
                self._take_event(stream)
        finally:
            self._poll_lock.release()

    def wait_confirmed(self, max_pending: int, timeout: float | None) -> bool:
        """Blocks until at most ``max_pending`` items are unconfirmed.

        Returns:
          False if ``timeout`` seconds passed first.

        Raises:
          ReverbError: the stream failed for good.
        """
        writer = self._writer
        while True:
            self._raise_if_failed()
            # Only checks (raises after Close or the stream's terminal error).
            if writer.wait_until_pending_at_most(max_pending, 0):
                return True
            if timeout is not None or not self._poll_lock.acquire(blocking=False):
                break
            try:
                self._progress()
            finally:
                self._poll_lock.release()
        # A timeout, or events taken by another thread: the transport's thread takes
        # them from now on, and confirmations signal the writer's condition.
        self._start_helper()
        done = writer.wait_until_pending_at_most(max_pending, timeout)
        self._raise_if_failed()
        return bool(done)

    async def wait_confirmed_async(self, max_pending: int, timeout: float | None) -> bool:
        raise errors.UsageError("This writer belongs to a blocking client; use its flush().")

    def close(self) -> None:
        """Ends the stream; unsent items are dropped. Idempotent, any thread."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            stream = self._stream
            if stream is not None and stream.due > 0:
                stream.call.cancel(_cygrpc.StatusCode.cancelled, "the writer was closed")
        if self._poll_lock.acquire(blocking=False):
            try:
                self._drain()
            finally:
                self._poll_lock.release()
        # Otherwise the thread that takes events finds the call cancelled and drains it.

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001, S110 - nothing to report at collection.
            pass

    # ------------------------------------------------------------ with _lock held

    def _take_locked(self) -> None:
        """Moves every batch the writer has ready into the outbox, serialised."""
        while True:
            batch = self._writer.take_outgoing(self._max_request_bytes)
            if batch is None:
                return
            body, keep = batch.serialize_parts()
            self._outbox.append((body, keep))

    def _send_locked(self, stream: _Stream) -> None:
        """Starts writing the outbox unless a write is under way."""
        if stream.sending or not self._outbox or stream.ended is not None:
            return
        request = next_request(self._outbox)
        if stream.start(_cygrpc.SendMessageOperation(request, _NO_FLAGS)):
            stream.sending = True

    # ------------------------------------------------------------ with _poll_lock held

    def _open(self) -> None:
        """Opens a stream and writes what is waiting."""
        try:
            stream = _Stream(self._channel_getter(), self._metadata)
        except ValueError as error:  # The channel was closed.
            self._fail(errors.CancelledOperationError(f"the insert stream cannot open: {error}"))
            return
        with self._lock:
            self._stream = stream
            self._send_locked(stream)

    def _progress(self) -> None:
        """One step towards the next confirmation: take an event, or replace a stream."""
        stream = self._stream
        if stream is None:
            self._open()
        else:
            self._step(stream)

    def _step(self, stream: _Stream) -> None:
        """Takes one event of ``stream``; replaces the stream once it has ended."""
        if stream.due > 0:
            self._take_event(stream)
        if stream.due == 0:
            self._replace(stream)

    def _take_event(self, stream: _Stream) -> None:
        try:
            event = stream.call.next_event()
        except BaseException:
            # A signal's exception (KeyboardInterrupt): gRPC has released the call. Its
            # unconfirmed items go again on the next stream.
            stream.due = 0
            stream.ended = (grpc.StatusCode.CANCELLED, "interrupted")
            raise
        stream.due -= 1
        kind_send, kind_receive, kind_status = _KINDS
        for operation in event.batch_operations:
            kind = operation.type()
            if kind == kind_send:
                with self._lock:
                    stream.sending = False
                    if event.success:
                        self._send_locked(stream)
            elif kind == kind_receive:
                message = operation.message() if event.success else None
                if message is None:
                    continue  # The stream is ending: its status follows.
                keys = reverb_service_pb2.InsertStreamResponse.FromString(message).keys
                self._backoff.reset()
                more = self._writer.confirm(keys)
                with self._lock:
                    if stream.ended is None:
                        stream.start(_cygrpc.ReceiveMessageOperation(_NO_FLAGS))
                    if more:
                        self._take_locked()
                        self._send_locked(stream)
            elif kind == kind_status:
                code = _STATUS_CODES.get(operation.code(), grpc.StatusCode.UNKNOWN)
                stream.ended = (code, operation.details() or str(code))
                if stream.due > 0 and not self._closed:
                    # Whatever is still due completes once the call is cancelled.
                    stream.call.cancel(_cygrpc.StatusCode.cancelled, "the stream ended")

    def _drain(self) -> None:
        stream = self._stream
        while stream is not None and stream.due > 0:
            self._take_event(stream)

    def _replace(self, stream: _Stream) -> None:
        """``stream`` has ended and released its call: open the next one, or fail."""
        with self._lock:
            if self._stream is stream:
                self._stream = None
        code, details = stream.ended or (grpc.StatusCode.UNAVAILABLE, "the stream ended")
        if self._closed or self._error is not None:
            return
        if code == grpc.StatusCode.OK:
            code, details = grpc.StatusCode.UNAVAILABLE, "the server closed the stream"
        if code not in RETRYABLE:
            self._fail(error_for_status(code, details))
            return
        delay = self._backoff.next_delay(stream.opened)
        _logger.debug("insert stream %s; reconnecting in %.3fs", code, delay)
        time.sleep(delay)
        with self._lock:
            # Requests taken for the ended stream: their items were in flight and go
            # back to the queue with every other in-flight item.
            self._outbox.clear()
            self._writer.resend_all()
            self._take_locked()
        self._open()

    def _fail(self, error: errors.ReverbError) -> None:
        self._error = error
        self._writer.fail(error)

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    # ------------------------------------------------------------ the transport's thread

    def _start_helper(self) -> None:
        with self._lock:
            if self._helper is not None or self._closed or self._error is not None:
                return
            self._helper = threading.Thread(
                target=self._take_events, name="reverb_py-insert", daemon=True
            )
        self._helper.start()

    def _take_events(self) -> None:
        with self._poll_lock:
            try:
                while not self._closed and self._error is None:
                    self._progress()
                self._drain()
            except Exception as error:  # noqa: BLE001 - a writer must never hang.
                self._fail(errors.InternalError(f"insert stream failed: {error!r}"))
