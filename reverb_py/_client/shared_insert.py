"""Insert streams shared by the asyncio writers of one client.

PERF(shared-insert): every request on a stream costs both ends a fixed amount whatever it
carries (gRPC's write and read of a message, the server's request handling), and a
writer's requests are small: with ``flush(block_until_num_items=16)`` after each step a
writer has at most ~16 items on the wire, so its requests hold about 15 small items. The
writers of one ``aio.Client`` on one server therefore share ``InsertStream``s, and a
request carries the ready batches of all the writers of its stream.

Rules:

* A client's first :data:`STREAMS_BEFORE_SHARING` writers each start a group; every later
  writer joins the group with the fewest writers, or starts one when all hold
  :data:`WRITERS_PER_STREAM` (:class:`InsertStreamPool`). One stream per group, one write
  at a time (gRPC's rule): a few streams keep requests in flight side by side, which a
  few writers need more than they need fewer requests. The thread that makes a batch
  ready takes and serialises it into the group's outbox, as
  :class:`~reverb_py._client.insert_transport.InsertTransport` does for one writer.
* A request is the outbox merged up to ``_MERGE_BYTES``, followed by the
  ``keep_chunk_keys`` of every writer of the group: for a writer with batches in the
  request, those of its last one; for the others, those it last sent. Protobuf joins the
  occurrences of a repeated field, so the server keeps the chunks any writer still needs.
* Every writer of the stream is given every confirmation: a writer ignores keys it did not
  send (keys are random 64-bit numbers), and no map of keys to writers is kept.
* A stream that ends with UNAVAILABLE or CANCELLED is replaced after a backoff and every
  writer's unconfirmed items are sent again.
* Any other end (the server refused something, and its status does not say whose) breaks
  the group up: each writer goes on alone on an ``InsertTransport`` of its own and sends
  its unconfirmed items again there, so the writer at fault gets the error on its own
  stream and the others are not harmed.
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
from reverb_py._client.credentials import BROKEN_STREAM
from reverb_py._client.insert_transport import (
    RETRYABLE,
    InsertTransport,
    ReconnectBackoff,
    _StreamEnded,
    run_stream,
)
from reverb_py._client.loop_wake import LoopWaker, PendingWaiters, call_on_loop, running_on

__all__ = [
    "STREAMS_BEFORE_SHARING",
    "WRITERS_PER_STREAM",
    "InsertStreamGroup",
    "InsertStreamPool",
    "SharedInsertMember",
]

_logger = logging.getLogger("reverb_py")

STREAMS_BEFORE_SHARING = 4
"""How many streams a client's writers open before they share them."""

WRITERS_PER_STREAM = 8
"""The most writers on one stream (then another stream is opened)."""

_MERGE_BYTES = 1 << 20


class InsertStreamPool:
    """The shared insert streams of one client's writers on one event loop.

    Args:
      channel_getter, loop: As for :class:`InsertStreamGroup`.
    """

    def __init__(
        self, channel_getter: Callable[[], grpc.aio.Channel], loop: asyncio.AbstractEventLoop
    ) -> None:
        self._channel_getter = channel_getter
        self.loop = loop
        self.groups: list[InsertStreamGroup] = []

    def member(self) -> SharedInsertMember:
        """A new writer's transport, in the group it is to join."""
        groups = [group for group in self.groups if not group.broken_up]
        self.groups = groups
        group = min(groups, key=lambda g: g.size, default=None)
        if (
            group is None
            or len(groups) < STREAMS_BEFORE_SHARING
            or group.size >= WRITERS_PER_STREAM
        ):
            group = InsertStreamGroup(self._channel_getter, self.loop)
            groups.append(group)
        return group.member()


class InsertStreamGroup:
    """One insert stream for up to :data:`WRITERS_PER_STREAM` writers.

    Args:
      channel_getter: Returns the ``grpc.aio.Channel`` to open streams on (called on
        ``loop``).
      loop: The event loop the stream task runs on.
      max_request_bytes: The most chunk bytes in one batch of a writer.
    """

    def __init__(
        self,
        channel_getter: Callable[[], grpc.aio.Channel],
        loop: asyncio.AbstractEventLoop,
        max_request_bytes: int = 32 * 2**20,
    ) -> None:
        self._channel_getter = channel_getter
        self.loop = loop
        self._max_request_bytes = max_request_bytes
        self._members: list[SharedInsertMember] = []
        # Members made and not yet closed (attached or about to be).
        self.size = 0
        self._broken_up = False
        # (member, body, keep_chunk_keys field) per batch taken, in take order.
        self._outbox: collections.deque[tuple[SharedInsertMember, bytes, bytes]] = (
            collections.deque()
        )
        # The keep_chunk_keys field each member last sent on the current stream.
        self._sent_keep: dict[SharedInsertMember, bytes] = {}
        self._take_lock = threading.Lock()
        self._waker = LoopWaker(
            loop, self._run, lambda: not self._broken_up and bool(self._members)
        )
        self.requests = 0  # requests made, on every stream (tests)

    def member(self) -> SharedInsertMember:
        """A new writer's transport in this group."""
        self.size += 1
        return SharedInsertMember(self)

    @property
    def broken_up(self) -> bool:
        return self._broken_up

    # ------------------------------------------------------------ members' calls

    def _add(self, member: SharedInsertMember) -> None:
        with self._take_lock:
            self._members.append(member)

    def _remove(self, member: SharedInsertMember) -> None:
        with self._take_lock:
            self.size -= 1
            if member in self._members:
                self._members.remove(member)
            self._sent_keep.pop(member, None)
            last = not self._members
        if last:
            call_on_loop(self.loop, self._stop)

    def _notify(self, member: SharedInsertMember) -> None:
        with self._take_lock:
            if self._broken_up:
                return
            self._take_locked(member)
        self._waker.wake()

    def _take_locked(self, member: SharedInsertMember) -> None:
        writer = member.writer
        outbox = self._outbox
        while True:
            batch = writer.take_outgoing(self._max_request_bytes)
            if batch is None:
                return
            body, keep = batch.serialize_parts()
            outbox.append((member, body, keep))

    def _stop(self) -> None:
        if not self._members:
            # Forgotten at once: a writer joining before it has ended starts a new one.
            self._waker.cancel()

    def _next_request(self) -> bytes | None:
        """The next request: batches merged, then every member's keep_chunk_keys."""
        with self._take_lock:
            outbox = self._outbox
            bodies: list[bytes] = []
            size = 0
            sent_keep = self._sent_keep
            while outbox:
                member, body, keep = outbox[0]
                if bodies and size + len(body) > _MERGE_BYTES:
                    break
                outbox.popleft()
                if member.closed:
                    continue
                bodies.append(body)
                size += len(body)
                sent_keep[member] = keep
            if not bodies:
                return None
            bodies.extend(sent_keep.values())
            self.requests += 1
            return b"".join(bodies)

    # ------------------------------------------------------------ the stream task

    async def _run(self) -> None:
        backoff = ReconnectBackoff()
        first = True
        while self._members:
            if not first:
                with self._take_lock:
                    # Everything in flight goes again, on the new stream.
                    self._outbox.clear()
                    self._sent_keep.clear()
                    for member in self._members:
                        member.writer.resend_all()
                        self._take_locked(member)
            first = False
            started = time.monotonic()
            try:
                await self._stream()
                return
            except grpc.aio.AioRpcError as error:
                code, details = error.code(), error.details()
            except _StreamEnded as ended:
                code, details = ended.code, ended.details
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - a writer must never hang.
                code, details = grpc.StatusCode.INTERNAL, repr(error)
            if code in RETRYABLE and details != BROKEN_STREAM and self._members:
                await backoff.sleep(started, code)
                continue
            _logger.debug("shared insert stream ended (%s: %s); writers go on alone", code, details)
            self._break_up()
            return

    def _break_up(self) -> None:
        with self._take_lock:
            self._broken_up = True
            members = list(self._members)
            self._members.clear()
            self._outbox.clear()
            self._sent_keep.clear()
        for member in members:
            member._go_alone()

    async def _stream(self) -> None:
        await run_stream(self._channel_getter, self._next_request, self._waker.event, self._confirm)

    def _confirm(self, response: Any) -> None:
        """Gives the confirmations to every writer of the stream."""
        members = list(self._members)
        keys = response.keys if len(members) == 1 else list(response.keys)
        for member in members:
            if not member.closed and member.writer.confirm(keys):
                self._notify(member)


class SharedInsertMember:
    """A writer's transport in an :class:`InsertStreamGroup` (then, once the group breaks
    up, on an ``InsertTransport`` of its own)."""

    def __init__(self, group: InsertStreamGroup) -> None:
        self._group = group
        self.writer: Any = None
        self.closed = False
        self._alone: InsertTransport | None = None
        self._waiters = PendingWaiters(group.loop)

    @property
    def group(self) -> InsertStreamGroup:
        return self._group

    @property
    def alone(self) -> bool:
        """Whether the writer streams on its own (its group broke up)."""
        return self._alone is not None

    def attach(self, writer: Any) -> None:
        """Connects the transport to its writer (before the first notify)."""
        self.writer = writer
        writer.add_pending_listener(self._on_pending_changed)
        self._group._add(self)

    def notify(self) -> None:
        """New data is ready (callable from any thread)."""
        if self.closed:
            return
        alone = self._alone
        if alone is not None:
            alone.notify()
        else:
            self._group._notify(self)

    def wait_confirmed(self, max_pending: int, timeout: float | None) -> bool:
        """Blocks the calling thread until at most ``max_pending`` items are unconfirmed."""
        if running_on(self._group.loop):
            raise errors.UsageError(
                "A blocking writer cannot wait on its own event loop; use the asyncio client."
            )
        # Raises the writer's error (from its own stream, once alone).
        return bool(self.writer.wait_until_pending_at_most(max_pending, timeout))

    async def wait_confirmed_async(self, max_pending: int, timeout: float | None) -> bool:
        """Waits (without blocking the loop) until at most ``max_pending`` are unconfirmed.

        A group never fails its writers (it breaks up instead): errors come from the
        writer's own stream once it is alone.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            alone = self._alone
            if alone is not None:
                remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                return await alone.wait_confirmed_async(max_pending, remaining)
            if self.writer.num_pending_items() <= max_pending:
                return True
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            if not await self._waiters.wait(max_pending, remaining):
                return False

    def _on_pending_changed(self) -> None:
        if self._waiters:
            call_on_loop(self._group.loop, self._release_waiters)

    def _release_waiters(self) -> None:
        if not self._waiters:
            return
        writer = self.writer
        # Alone: the waits go on on the writer's own stream.
        released = self._alone is not None or writer.error is not None or writer.closed
        self._waiters.release(writer.num_pending_items(), everyone=released)

    def _go_alone(self) -> None:
        """Continues on a stream of its own, sending its unconfirmed items again."""
        if self.closed:
            return
        group = self._group
        alone = InsertTransport(group._channel_getter, group.loop, group._max_request_bytes)
        alone.attach(self.writer)
        self._alone = alone
        self.writer.resend_all()
        alone.notify()
        self._release_waiters()

    def close(self) -> None:
        """Leaves the stream; items not yet sent are dropped. Idempotent, any thread."""
        if self.closed:
            return
        self.closed = True
        alone = self._alone
        if alone is not None:
            alone.close()
        else:
            self._group._remove(self)
        self._waiters.cancel()
