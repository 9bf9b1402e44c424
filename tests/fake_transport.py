"""An in-memory writer transport that checks the InsertStream rules of a Reverb server.

``FakeTransport`` plays both the client stream and the server end of one
``InsertStream`` (docs/REVERB_SPEC.md §2.4), synchronously:

* ``notify()`` (called by the writer on the user's thread) drains
  ``writer.take_outgoing()`` and "receives" each batch like a server would: the request
  must carry chunks or items; chunks are added to the stream's chunk map before the
  items are resolved; every chunk an item references must be held; after an
  item-bearing request every chunk not listed in ``keep_chunk_keys`` is dropped, and
  asking to keep a chunk the stream does not hold is an error. A violation raises
  ``AssertionError`` right away (so the test fails where it happened) and is also kept
  in ``violations``.
* Items are confirmed immediately (``auto_confirm=True``) or only when the test calls
  :meth:`FakeTransport.confirm_all` / :meth:`FakeTransport.confirm`.
* :meth:`FakeTransport.reconnect` simulates a new stream after UNAVAILABLE: the chunk
  map is emptied, unconfirmed items are forgotten by the "server" and the writer's
  ``resend_all()`` is called before draining again.

Everything the server accepted is kept in ``inserted`` with the chunks it resolved, so
tests can decode the data with :meth:`FakeTransport.decoded`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any

import numpy as np

from reverb_py._codec import chunk as _chunk
from reverb_py._proto import schema_pb2
from reverb_py._writer.engine import InternalTrajectoryWriter, OutgoingBatch


@dataclasses.dataclass
class Request:
    """One received request."""

    stream: int
    chunks: list[schema_pb2.ChunkData]
    items: list[schema_pb2.PrioritizedItem]
    keep_chunk_keys: list[int]

    @property
    def chunk_keys(self) -> list[int]:
        return [chunk.chunk_key for chunk in self.chunks]

    @property
    def item_keys(self) -> list[int]:
        return [item.key for item in self.items]


@dataclasses.dataclass
class Inserted:
    """An item the fake server accepted, with the chunks it resolved."""

    stream: int
    item: schema_pb2.PrioritizedItem
    chunks: dict[int, schema_pb2.ChunkData]


class FakeTransport:
    """Synchronous in-memory transport; see the module docstring.

    Attributes:
      writer: the writer (set with :meth:`attach`).
      auto_confirm: confirm items as soon as they are received.
      max_bytes: the ``max_bytes`` passed to ``take_outgoing``.
      requests: every received request.
      inserted: every accepted item with its chunks (in arrival order).
      unconfirmed: keys received and not yet confirmed (manual mode).
      stream: the current stream number (0, then +1 per reconnect).
      server_chunks: the chunk map of the current stream.
      violations: descriptions of broken protocol rules.
      closed: whether ``close()`` was called.
      notifications: how many times ``notify()`` was called.
      wait_calls: the ``(max_pending, timeout)`` of every ``wait_confirmed`` call.
      waiting: set when a ``wait_confirmed`` call starts (for tests that block).
    """

    def __init__(self, *, auto_confirm: bool = True, max_bytes: int = 32 * 2**20) -> None:
        self.writer: InternalTrajectoryWriter | None = None
        self.auto_confirm = auto_confirm
        self.max_bytes = max_bytes
        self.requests: list[Request] = []
        self.inserted: list[Inserted] = []
        self.unconfirmed: list[int] = []
        self.stream = 0
        self.server_chunks: dict[int, schema_pb2.ChunkData] = {}
        self.violations: list[str] = []
        self.closed = False
        self.notifications = 0
        self.wait_calls: list[tuple[int, float | None]] = []
        self.waiting = threading.Event()
        self.paused = False
        self._lock = threading.RLock()

    def attach(self, writer: InternalTrajectoryWriter) -> InternalTrajectoryWriter:
        self.writer = writer
        return writer

    # -------------------------------------------------------------- WriterTransport

    def notify(self) -> None:
        self.notifications += 1
        if not self.paused:
            self.pump()

    def wait_confirmed(self, max_pending: int, timeout: float | None) -> bool:
        assert self.writer is not None
        self.wait_calls.append((max_pending, timeout))
        self.waiting.set()
        return self.writer.wait_until_pending_at_most(max_pending, timeout)

    def close(self) -> None:
        self.closed = True

    # -------------------------------------------------------------- test controls

    def pump(self) -> int:
        """Receives every batch the writer has ready; returns how many."""
        assert self.writer is not None
        count = 0
        with self._lock:
            while True:
                batch = self.writer.take_outgoing(self.max_bytes)
                if batch is None:
                    return count
                count += 1
                self._receive(batch)

    def confirm(self, keys: list[int]) -> None:
        assert self.writer is not None
        with self._lock:
            for key in keys:
                self.unconfirmed.remove(key)
        if self.writer.confirm(keys) and not self.paused:
            self.pump()  # as the real transport: a confirmation may release held items

    def confirm_all(self) -> None:
        with self._lock:
            keys = list(self.unconfirmed)
        self.confirm(keys)

    def reconnect(self) -> None:
        """A new stream: the server forgets chunks and unconfirmed items are re-sent."""
        assert self.writer is not None
        with self._lock:
            self.stream += 1
            self.server_chunks = {}
            self.unconfirmed = []
        self.writer.resend_all()
        self.pump()

    def fail(self, error: BaseException) -> None:
        assert self.writer is not None
        self.writer.fail(error)

    # -------------------------------------------------------------- the fake server

    def _violation(self, message: str) -> None:
        self.violations.append(message)
        raise AssertionError(message)

    def _receive(self, batch: OutgoingBatch) -> None:
        request = Request(
            self.stream, list(batch.chunks), list(batch.items), list(batch.keep_chunk_keys)
        )
        self.requests.append(request)
        if not request.chunks and not request.items:
            self._violation("INVALID_ARGUMENT: request with neither chunks nor items")
        for chunk in request.chunks:
            self.server_chunks.setdefault(chunk.chunk_key, chunk)
        for item in request.items:
            used: dict[int, schema_pb2.ChunkData] = {}
            for column in item.flat_trajectory.columns:
                for chunk_slice in column.chunk_slices:
                    held = self.server_chunks.get(chunk_slice.chunk_key)
                    if held is None:
                        self._violation(
                            f"INTERNAL: Could not find sequence chunk {chunk_slice.chunk_key}."
                        )
                    else:
                        used[chunk_slice.chunk_key] = held
            self.inserted.append(Inserted(self.stream, item, used))
        if request.items:
            keep = set(request.keep_chunk_keys)
            missing = keep - set(self.server_chunks)
            self.server_chunks = {
                key: chunk for key, chunk in self.server_chunks.items() if key in keep
            }
            if missing:
                self._violation(
                    f"FAILED_PRECONDITION: asked to keep chunks never sent: {sorted(missing)}"
                )
        keys = request.item_keys
        if self.auto_confirm:
            assert self.writer is not None
            self.writer.confirm(keys)
        else:
            self.unconfirmed.extend(keys)

    # -------------------------------------------------------------- decoding

    def decoded(self, index: int | None = None) -> Any:
        """The columns of inserted item ``index`` (all items' when None)."""
        if index is None:
            return [self.decoded(i) for i in range(len(self.inserted))]
        inserted = self.inserted[index]
        chunks = {key: _chunk.decode_chunk(chunk) for key, chunk in inserted.chunks.items()}
        return _chunk.unpack_trajectory(inserted.item.flat_trajectory, chunks)

    def items_for(self, table: str) -> list[schema_pb2.PrioritizedItem]:
        return [entry.item for entry in self.inserted if entry.item.table == table]

    @property
    def chunks_sent(self) -> list[schema_pb2.ChunkData]:
        return [chunk for request in self.requests for chunk in request.chunks]


class FakeAsyncTransport(FakeTransport):
    """:class:`FakeTransport` plus ``wait_confirmed_async`` for ``AsyncTrajectoryWriter``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.async_wait_calls: list[tuple[int, float | None]] = []

    async def wait_confirmed_async(self, max_pending: int, timeout: float | None) -> bool:
        assert self.writer is not None
        writer = self.writer
        self.async_wait_calls.append((max_pending, timeout))
        loop = asyncio.get_running_loop()
        event = asyncio.Event()

        def wake() -> None:
            loop.call_soon_threadsafe(event.set)

        writer.add_pending_listener(wake)
        try:
            deadline = None if timeout is None else loop.time() + timeout
            while True:
                event.clear()
                if writer.wait_until_pending_at_most(max_pending, 0):
                    return True
                if deadline is None:
                    await event.wait()
                    continue
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return False
                try:
                    await asyncio.wait_for(event.wait(), remaining)
                except asyncio.TimeoutError:
                    return writer.wait_until_pending_at_most(max_pending, 0)
        finally:
            writer.remove_pending_listener(wake)


def make_writer(
    chunker_options: Any = None,
    *,
    transport: FakeTransport | None = None,
    **kwargs: Any,
) -> tuple[InternalTrajectoryWriter, FakeTransport]:
    """An InternalTrajectoryWriter on a FakeTransport (constant chunks of 1, keep 10)."""
    from reverb_py._writer.engine import ConstantChunkerOptions

    fake = transport if transport is not None else FakeTransport()
    options = chunker_options or ConstantChunkerOptions(max_chunk_length=1, num_keep_alive_refs=10)
    writer = InternalTrajectoryWriter(fake, options, **kwargs)
    fake.attach(writer)
    return writer, fake


def assert_arrays_equal(actual: Any, expected: Any) -> None:
    """Exact equality of arrays: same dtype, shape and values (bytes for strings)."""
    actual = np.asarray(actual) if not isinstance(actual, np.ndarray) else actual
    expected = np.asarray(expected) if not isinstance(expected, np.ndarray) else expected
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if actual.dtype == object:
        assert actual.tolist() == expected.tolist()
    else:
        np.testing.assert_array_equal(actual, expected)
