"""The sampling core of the datasets: streams kept full, samples handed to a consumer.

A :class:`Sampler` runs its workers (one ``SampleStream`` each, at a time) as tasks on
the blocking clients' loop thread (:func:`reverb_py._client.channel.shared_loop_thread`).
A worker asks for ``max_in_flight_samples_per_worker`` samples per request once that many
places are free in the sampler's bounded buffer, decodes every sample as its last entry
arrives (on the loop thread, never on the consumer's) and re-opens its stream after
``max_samples_per_stream`` samples. The consumer takes every sample buffered at a time
(:meth:`Sampler.take`), each handed on once it is complete: a block being filled goes to
a consumer that waits, as it is; :func:`trajectories` and :func:`timesteps` turn them into
:class:`~reverb_py.replay_sample.ReplaySample` values, one per sample (or time step) or
one per batch, the batch's arrays stacked once per batch.

Semantics follow Reverb's ``Sampler`` (docs/REVERB_SPEC.md §1.14): a rate-limiter timeout
while the consumer waits ends the iteration cleanly (while nobody waits the stream is
re-opened); after ``max_samples`` samples the iteration ends and no more are asked for.
Unlike Reverb, a stream that fails (a server that stops or cannot be reached) raises its
error in the consumer instead of being retried forever.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import operator
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, cast

import grpc
import numpy as np

from reverb_py import _impl, errors
from reverb_py._client.channel import (
    SAMPLE_STREAM_PATH,
    channel_options,
    identity,
    shared_loop_thread,
)
from reverb_py._client.credentials import (
    ClientCredentials,
    explain_internal_error,
    write_or_raise,
)
from reverb_py._client.loop_wake import running_on
from reverb_py._client.sampling import (
    DEFAULT_WAIT_REPORT_S,
    Decoded,
    SampleAssembler,
    WaitReporter,
)
from reverb_py._client.targets import num_shards
from reverb_py._codec.dtypes import tf_dtype_name
from reverb_py._proto import reverb_service_pb2
from reverb_py._status import error_for_status, error_from_rpc
from reverb_py.replay_sample import ReplaySample, SampleInfo
from reverb_py.tensor_spec import Shape, shapes_compatible

__all__ = [
    "DEFAULT_MAX_SAMPLES_PER_STREAM",
    "DEFAULT_NUM_WORKERS",
    "NUM_INFO_TENSORS",
    "Block",
    "Piece",
    "Sampler",
    "SamplerOptions",
    "Spec",
    "format_shape",
    "specs_string",
    "timesteps",
    "trajectories",
]

DEFAULT_NUM_WORKERS = 1
"""Workers of ``num_workers_per_iterator=-1`` (Reverb's auto value)."""

DEFAULT_MAX_SAMPLES_PER_STREAM = 10_000
"""Samples per stream of ``max_samples_per_stream=-1`` (Reverb's auto value)."""

NUM_INFO_TENSORS = len(SampleInfo._fields)
"""The info fields a sample carries before its data."""

_INFO_DTYPES = SampleInfo.dtypes()
# The pause before a stream replaces one whose server went away (doubling up to the max).
_MIN_BACKOFF_S = 0.005
_MAX_BACKOFF_S = 0.5
# The longest a stream of several servers waits on one before the next stream.
_MAX_SHARE_MS = 500

Sample = Decoded
"""One decoded sample: its info, its columns, which columns are squeezed."""


class Block(NamedTuple):
    """Consecutive samples written straight into batch arrays (the compiled batch path):
    ``info`` holds one array per field, each column one array, ``rows`` along axis 0."""

    info: Any  # A SampleInfo of arrays.
    columns: list[np.ndarray]
    rows: int

    def split(self, count: int) -> tuple[Block, Block]:
        """The first ``count`` rows and the rest (views)."""
        head = Block(
            SampleInfo(*(field[:count] for field in self.info)),
            [column[:count] for column in self.columns],
            count,
        )
        tail = Block(
            SampleInfo(*(field[count:] for field in self.info)),
            [column[count:] for column in self.columns],
            self.rows - count,
        )
        return head, tail


Piece = Decoded | Block
"""What a sampler hands out: one sample, or a block of them."""


def _rows(piece: Piece) -> int:
    return piece.rows if isinstance(piece, Block) else 1


Spec = tuple[np.dtype[Any], Shape]
"""What a column must be: its dtype and a (compatible) shape."""


def _integer(name: str, value: object) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {value!r}") from None


@dataclasses.dataclass(frozen=True)
class SamplerOptions:
    """Reverb's dataset options, checked as Reverb checks them.

    Raises:
      ValueError: an option out of its range (Reverb's messages).
      TypeError: an option that is not an integer.
    """

    max_in_flight_samples_per_worker: int
    num_workers_per_iterator: int = -1
    max_samples_per_stream: int = -1
    rate_limiter_timeout_ms: int = -1
    max_samples: int = -1

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            object.__setattr__(self, field.name, _integer(field.name, getattr(self, field.name)))
        if self.max_in_flight_samples_per_worker < 1:
            raise ValueError(
                f"max_in_flight_samples_per_worker ({self.max_in_flight_samples_per_worker}) "
                "must be a positive integer"
            )
        if self.num_workers_per_iterator < 1 and self.num_workers_per_iterator != -1:
            raise ValueError(
                f"num_workers_per_iterator ({self.num_workers_per_iterator}) must be a "
                "positive integer or -1"
            )
        if self.max_samples_per_stream < 1 and self.max_samples_per_stream != -1:
            raise ValueError(
                f"max_samples_per_stream ({self.max_samples_per_stream}) must be a "
                "positive integer or -1"
            )
        if self.rate_limiter_timeout_ms < -1:
            raise ValueError(
                f"rate_limiter_timeout_ms ({self.rate_limiter_timeout_ms}) must be an integer >= -1"
            )
        if self.max_samples < 1 and self.max_samples != -1:
            raise ValueError(f"max_samples ({self.max_samples}) must be a positive integer or -1")

    @property
    def total(self) -> int | None:
        """``max_samples``, or None for no limit."""
        return None if self.max_samples == -1 else self.max_samples

    @property
    def num_workers(self) -> int:
        """Reverb's count: no more workers than ``max_samples`` needs for a first request."""
        wanted = (
            DEFAULT_NUM_WORKERS
            if self.num_workers_per_iterator == -1
            else self.num_workers_per_iterator
        )
        if self.total is None:
            return wanted
        return min(wanted, max(1, self.total // self.max_in_flight_samples_per_worker))

    @property
    def samples_per_stream(self) -> int:
        if self.max_samples_per_stream == -1:
            return DEFAULT_MAX_SAMPLES_PER_STREAM
        return self.max_samples_per_stream

    @property
    def capacity(self) -> int:
        """Samples buffered or in flight at most: ``max_in_flight × workers``."""
        return self.max_in_flight_samples_per_worker * self.num_workers


class _RateLimiterTimeout(Exception):
    """A stream's rate-limiter timeout (handled by the worker)."""


class Sampler:
    """Samples of one table, streamed by workers into a bounded buffer.

    Nothing starts before the first :meth:`take`. :meth:`close` (or garbage collection
    of the object that owns the sampler) cancels the streams. Thread-safe for one
    consumer at a time.

    Args:
      server_address: the server's gRPC target.
      table: the table to sample.
      options: the dataset options.
      copy: samples share no memory with the decoded chunks of their stream (False
        suits consumers that copy anyway, e.g. when stacking a batch).
      credentials: TLS and the token for the streams; None: no TLS, and the token of
        ``REVERB_PY_TOKEN`` / ``REVERB_PY_TOKEN_FILE`` if set (as a client's).
      batch: plain samples come in :class:`Block` s of up to this many, written
        straight into their arrays by the compiled ``sample_wire.BatchFiller`` (a
        block is handed out when full, before a sample that cannot join it, when its
        stream ends, and, with the rows it has, whenever the consumer waits: no sample
        that has arrived waits for later ones); None, or the pure implementation: one
        :data:`Sample` each.
      channel: called on the loop thread: the channel for the streams (the sampler
        leaves it open, e.g. a blocking client's) and how many servers it spreads
        over; None: a channel of the sampler's own.
      wait_report_s: while the consumer waits without a sample, log what the table's
        rate limiter waits for every this many seconds (INFO); None: never.
    """

    def __init__(
        self,
        server_address: str,
        table: str,
        options: SamplerOptions,
        *,
        copy: bool = True,
        credentials: ClientCredentials | None = None,
        batch: int | None = None,
        channel: Callable[[], tuple[grpc.aio.Channel, int]] | None = None,
        wait_report_s: float | None = DEFAULT_WAIT_REPORT_S,
    ) -> None:
        self._wait_report_s = wait_report_s
        self._credentials = credentials if credentials is not None else ClientCredentials()
        self._channel = channel
        self._server_address = server_address
        self._table = table
        self._options = options
        self._copy = copy
        self._batch = batch
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._buffer: collections.deque[Piece] = collections.deque()
        self._buffered = 0
        self._pushed = 0
        self._free = options.capacity
        self._requested = 0
        self._returned = 0
        self._waiting = 0
        self._workers = 0
        self._error: BaseException | None = None
        self._ended = False
        self._closed = False
        self._future: concurrent.futures.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._space: asyncio.Event | None = None
        self._space_wanted = False
        # The blocks the streams are filling (loop thread), the samples they hold, and
        # whether the consumer asked for them (a callback on the loop is pending).
        self._fillings: list[_Filling] = []
        self._held = 0
        self._cut_asked = False
        # How many held samples a waiting consumer needs before they are handed on.
        self._needed = 1
        # The rate-limiter timeout each stream asks for (a share of it with several
        # servers, set when the streams start).
        self._request_timeout_ms = options.rate_limiter_timeout_ms

    @property
    def table(self) -> str:
        return self._table

    # ------------------------------------------------------------ consumer side

    def take(self, limit: int | None = None, *, needed: int = 1) -> list[Piece]:
        """Up to ``limit`` samples (all that are buffered when None), waiting for one.

        While it waits, samples held in blocks being filled (``batch``) are handed on
        as they are once ``needed`` of them have arrived: the samples the consumer
        cannot do without (a batch waits for its last sample: a block completes with
        it, unless the batch's samples came on several streams).

        Returns:
          Samples and blocks of samples (``batch``) holding at least one sample and at
          most ``limit`` in all (a block is split to keep within it), or ``[]`` when
          the iteration has ended (``max_samples`` returned, a rate-limiter timeout
          while waiting, or :meth:`close`).

        Raises:
          ReverbError: a stream failed (e.g. ``UnavailableError`` or
            ``CancelledOperationError`` when the server went away, ``NotFoundError``
            for an unknown table).
        """
        if self._future is None and not self._closed:
            self._start()
        with self._ready:
            while not self._buffer:
                if self._error is not None:
                    raise self._error
                if self._ended or self._closed:
                    return []
                future = self._future
                if future is not None and future.done() and self._workers == 0:
                    # Every worker has finished: nothing more will come.
                    if not future.cancelled() and future.exception() is not None:
                        raise errors.InternalError(
                            f"The sampler of table '{self._table}' failed: {future.exception()!r}"
                        )
                    return []
                self._needed = needed
                if self._held >= needed and not self._cut_asked and self._loop is not None:
                    # Samples wait in blocks being filled: handed on as they are.
                    self._cut_asked = True
                    try:
                        self._loop.call_soon_threadsafe(self._cut_held)
                    except RuntimeError:  # The loop has closed (interpreter exit).
                        pass
                self._waiting += 1
                try:
                    self._ready.wait(1.0)
                finally:
                    self._waiting -= 1
            buffer = self._buffer
            if limit is None or limit >= self._buffered:
                block = list(buffer)
                buffer.clear()
                count = self._buffered
            else:
                block = []
                count = 0
                while count < limit:
                    piece = buffer.popleft()
                    rows = _rows(piece)
                    if count + rows > limit:
                        assert isinstance(piece, Block)
                        piece, rest = piece.split(limit - count)
                        buffer.appendleft(rest)
                        rows = piece.rows
                    block.append(piece)
                    count += rows
            self._buffered -= count
            self._returned += count
            self._free += count
            wake = self._space_wanted
            self._space_wanted = False
            total = self._options.total
            if total is not None and self._returned >= total:
                self._ended = True
        if wake and self._loop is not None and self._space is not None:
            try:
                self._loop.call_soon_threadsafe(self._space.set)
            except RuntimeError:  # The loop has closed (interpreter exit).
                pass
        return block

    def close(self, wait: bool = True) -> None:
        """Cancels the streams and ends the iteration. Idempotent.

        Args:
          wait: wait (at most 10 s) until the streams are closed, unless called on the
            loop thread itself.
        """
        with self._ready:
            if self._closed:
                return
            self._closed = True
            self._ready.notify_all()
            future = self._future
        if future is None:
            return
        future.cancel()
        if wait and not running_on(self._loop):
            concurrent.futures.wait([future], timeout=10.0)

    # ------------------------------------------------------------ loop side

    def _start(self) -> None:
        loop_thread = shared_loop_thread()
        self._loop = loop_thread.loop
        with self._lock:
            self._workers = self._options.num_workers
        self._future = loop_thread.submit(self._run())

    async def _run(self) -> None:
        self._space = asyncio.Event()
        if self._channel is None:
            channel = self._credentials.aio_channel(self._server_address, channel_options())
            shards = await asyncio.get_running_loop().run_in_executor(
                None, num_shards, self._server_address
            )
        else:
            channel, shards = self._channel()
        timeout_ms = self._options.rate_limiter_timeout_ms
        if shards > 1 and timeout_ms > 0:
            # Each stream waits on its server for a share of the timeout, then the next
            # stream asks the next server; the dataset ends once the whole timeout has
            # passed without a sample (see _worker).
            self._request_timeout_ms = max(1, min(_MAX_SHARE_MS, -(-timeout_ms // shards)))
        reporter = None
        if self._wait_report_s is not None:
            reporter = WaitReporter(
                channel,
                self._table,
                self._wait_report_s,
                lambda: self._waiting > 0,
                lambda: self._pushed,
            )
        try:
            workers = [
                asyncio.ensure_future(self._worker(channel, shards))
                for _ in range(self._options.num_workers)
            ]
            try:
                await asyncio.gather(*workers)
            finally:
                for worker in workers:
                    worker.cancel()
                await asyncio.gather(*workers, return_exceptions=True)
        finally:
            if reporter is not None:
                reporter.close()
            if self._channel is None:
                await channel.close()

    async def _worker(self, channel: grpc.aio.Channel, shards: int) -> None:
        # With several servers, streams in a row that timed out (each new stream goes to
        # the next server) and that ended without a sample because a server went away.
        timed_out = 0
        lost = 0
        backoff = _MIN_BACKOFF_S
        served_at = time.monotonic()  # When this worker last received a sample.
        timeout_s = self._options.rate_limiter_timeout_ms / 1000
        try:
            while True:
                budget = self._take_budget()
                if budget == 0:
                    return
                pushed = self._pushed
                try:
                    await self._stream(channel, budget)
                    timed_out = lost = 0
                    served_at = time.monotonic()
                except _RateLimiterTimeout:
                    now = time.monotonic()
                    if self._pushed != pushed:
                        timed_out, served_at = 1, now
                    else:
                        timed_out += 1
                    # Another server may serve: a new stream. Round robin visits every
                    # server in `shards` streams once all are connected; the rounds
                    # before may repeat one (a new channel spreads over the servers
                    # connected so far), hence twice as many.
                    if shards > 1 and (timed_out < 2 * shards or now - served_at < timeout_s):
                        continue
                    with self._ready:
                        if self._waiting == 0 and not self._closed:
                            continue  # Nobody waits for data: a new stream.
                        self._ended = True
                        self._ready.notify_all()
                    return
                except (errors.UnavailableError, errors.CancelledOperationError) as error:
                    lost = 0 if self._pushed != pushed else lost + 1
                    if shards > 1 and lost <= 2 * shards:
                        # A server went away: the next stream goes to another.
                        await asyncio.sleep(backoff)
                        backoff = min(backoff * 2, _MAX_BACKOFF_S)
                        continue
                    self._fail(await explain_internal_error(channel, error))
                    return
                except errors.ReverbError as error:
                    # A stream refused for its credentials may say only INTERNAL.
                    self._fail(await explain_internal_error(channel, error))
                    return
        except BaseException as error:
            if not isinstance(error, (asyncio.CancelledError, GeneratorExit)):
                self._fail(error)
            raise
        finally:
            with self._ready:
                self._workers -= 1
                self._ready.notify_all()

    def _fail(self, error: BaseException) -> None:
        with self._ready:
            if self._error is None and not self._closed:
                self._error = error
            self._ready.notify_all()

    def _take_budget(self) -> int:
        """How many samples the next stream may ask for (0: stop)."""
        with self._lock:
            if self._closed or self._ended or self._error is not None:
                return 0
            budget = self._options.samples_per_stream
            total = self._options.total
            if total is not None:
                budget = min(budget, total - self._requested)
            self._requested += max(budget, 0)
            return max(budget, 0)

    def _try_reserve(self, count: int) -> int:
        """Takes up to ``count`` free places of the buffer without waiting."""
        with self._lock:
            taken = max(0, min(count, self._free))
            self._free -= taken
            return taken

    async def _reserve(self, count: int) -> None:
        """Waits until ``count`` places of the buffer are free and takes them."""
        assert self._space is not None
        while True:
            with self._lock:
                if self._free >= count:
                    self._free -= count
                    return
                self._space_wanted = True
                self._space.clear()
            await self._space.wait()

    async def _stream(self, channel: grpc.aio.Channel, budget: int) -> None:
        options = self._options
        call = channel.stream_stream(
            SAMPLE_STREAM_PATH,
            request_serializer=reverb_service_pb2.SampleStreamRequest.SerializeToString,
            response_deserializer=identity,  # Read by SampleAssembler.add_bytes.
        )()
        assembler = SampleAssembler(copy=self._copy)
        filling = None
        if self._batch is not None:
            filling = _Filling(self._next_filler())
            self._fillings.append(filling)
        in_flight = options.max_in_flight_samples_per_worker
        received = 0
        asked = 0
        # Samples asked for on this stream and not yet received (their places taken).
        reserved = 0
        try:
            while received < budget:
                if reserved == 0:
                    count = min(in_flight, budget - asked)
                    await self._reserve(count)
                    reserved = count
                    asked += count
                    await write_or_raise(channel, call, self._request(count))
                response = await call.read()
                if response is grpc.aio.EOF:
                    raise error_for_status(await call.code(), await call.details() or "")
                data = cast(bytes, response)
                if filling is None:
                    pieces: list[Piece] = list(assembler.add_bytes(data))
                    count = len(pieces)
                else:
                    pieces, count = _fill(filling.filler, assembler, data)
                if count:
                    reserved -= count
                    received += count
                    self._push(pieces, count, filling)
                # PERF(sample-pipeline): ask for more before the last request is
                # answered (at most `in_flight` outstanding), so the server never
                # waits for the round trip of the next request.
                more = min(in_flight - reserved, budget - asked)
                if reserved and more >= max(1, in_flight // 2):
                    more = self._try_reserve(more)
                    if more:
                        reserved += more
                        asked += more
                        await write_or_raise(channel, call, self._request(more))
        except grpc.aio.AioRpcError as error:
            raise self._stream_error(error_from_rpc(error)) from None
        except asyncio.InvalidStateError:
            raise self._stream_error(
                error_for_status(await call.code(), await call.details() or "")
            ) from None
        except errors.ReverbError as error:
            # E.g. the status of a stream the server ended early (EOF above).
            raise self._stream_error(error) from None
        finally:
            call.cancel()
            if filling is not None:
                self._fillings.remove(filling)
                with self._ready:
                    self._cut(filling, renew=False)
            with self._lock:
                self._free += max(reserved, 0)
                self._requested -= budget - received

    def _request(self, count: int) -> reverb_service_pb2.SampleStreamRequest:
        request = reverb_service_pb2.SampleStreamRequest(table=self._table, num_samples=count)
        timeout_ms = self._request_timeout_ms
        if timeout_ms >= 0:
            # 0 ms on the wire means "forever", as in Reverb (over gRPC).
            request.rate_limiter_timeout.milliseconds = timeout_ms
        return request

    def _push(self, pieces: list[Piece], received: int, filling: _Filling | None) -> None:
        """Hands out ``pieces``, ``received`` samples having arrived (some of them, with
        ``filling``, in the block it fills: handed on as well if the consumer waits).

        The samples of a block being filled take no place of the buffer: a consumer
        that waits has emptied the buffer, so the stream can always ask for the samples
        that complete the block (a block is at most ``batch`` samples beyond the
        buffer's bound).
        """
        rows = sum(_rows(piece) for piece in pieces)
        with self._ready:
            self._free += received - rows
            if pieces:
                self._buffer.extend(pieces)
                self._buffered += rows
                self._pushed += rows
                self._ready.notify()
            if filling is not None:
                held = filling.filler.rows
                self._held += held - filling.held
                filling.held = held
                if self._waiting and self._buffered < self._needed <= self._buffered + self._held:
                    self._cut_all()

    def _next_filler(self) -> Any:
        """A filler whose first block completes the consumer's current batch (the rows
        handed out so far may end within one), so that later blocks are whole batches."""
        assert self._batch is not None
        return _new_filler(self._batch, self._batch - self._pushed % self._batch)

    def _cut(self, filling: _Filling, *, renew: bool) -> None:
        """Hands out the block ``filling`` holds, as it is (lock held, on the loop);
        ``renew``: the stream goes on with a new filler."""
        batch = filling.filler.flush()
        self._held -= filling.held
        filling.held = 0
        if batch is not None:
            block = Block(*batch)
            self._buffer.append(block)
            self._buffered += block.rows
            self._pushed += block.rows
            self._free -= block.rows
            self._ready.notify()
        if renew:
            filling.filler = self._next_filler()

    def _cut_held(self) -> None:
        """The consumer waits for samples held in blocks being filled: hands them out as
        they are."""
        with self._ready:
            self._cut_asked = False
            if self._waiting and self._buffered < self._needed <= self._buffered + self._held:
                self._cut_all()

    def _cut_all(self) -> None:
        """Hands out every block being filled, as it is (lock held, on the loop): called
        when the consumer waits for samples that only these blocks hold (a consumer
        just woken still counts as waiting: the buffer may have what it needs)."""
        for filling in self._fillings:
            if filling.held:
                self._cut(filling, renew=True)

    def _stream_error(self, error: errors.ReverbError) -> BaseException:
        if (
            isinstance(error, errors.DeadlineExceededError)
            and self._options.rate_limiter_timeout_ms >= 0
        ):
            return _RateLimiterTimeout(str(error))
        if isinstance(error, (errors.UnavailableError, errors.CancelledOperationError)) and (
            self._server_address not in str(error)
        ):
            return type(error)(
                f"Sampling table '{self._table}' at {self._server_address} failed: {error}"
            )
        return error


class _Filling:
    """The filler of a stream's blocks and the samples it holds, as the sampler counts
    them (changed under the sampler's lock)."""

    __slots__ = ("filler", "held")

    def __init__(self, filler: Any) -> None:
        self.filler = filler
        self.held = 0


def _new_filler(capacity: int, first: int) -> Any:
    return _impl.sample_wire.BatchFiller(capacity, SampleInfo, errors.InvalidArgumentError, first)


def _append(pieces: list[Piece], batch: Any) -> None:
    if batch is not None:
        pieces.append(Block(*batch))


def _fill(filler: Any, assembler: SampleAssembler, data: bytes) -> tuple[list[Piece], int]:
    """A response's samples: the plain ones written into ``filler``'s blocks, the others
    (from the first that is not) reassembled one by one, in the order they came.

    Returns:
      The pieces to hand out and how many samples the response completed (those
      left in the block being filled included).
    """
    if not assembler.idle:  # A sample begun in an earlier response: the filler is empty.
        samples = assembler.add_bytes(data)
        return list(samples), len(samples)
    before = filler.rows
    batches, consumed = filler.add(data)
    pieces: list[Piece] = [Block(*batch) for batch in batches]
    count = sum(batch[2] for batch in batches) + filler.rows - before
    if consumed < len(data):
        _append(pieces, filler.flush())
        samples = assembler.add_bytes(data[consumed:] if consumed else data)
        pieces.extend(samples)
        count += len(samples)
    return pieces, count


# ------------------------------------------------------------------ shaping


def format_shape(shape: Shape) -> str:
    """A shape as TensorFlow prints it: ``[]``, ``[3,?]``, ``<unknown>``."""
    if shape is None:
        return "<unknown>"
    return "[" + ",".join("?" if size is None else str(size) for size in shape) + "]"


def specs_string(specs: Sequence[tuple[str, np.dtype[Any], Shape]]) -> str:
    """Specs as Reverb lists them: ``0: Tensor<name: 'a', dtype: float, shape: [?,3]>``."""
    return ", ".join(
        f"{index}: Tensor<name: '{name}', dtype: {tf_dtype_name(dtype)}, "
        f"shape: {format_shape(shape)}>"
        for index, (name, dtype, shape) in enumerate(specs)
    )


def _unnamed(specs: Sequence[Spec]) -> str:
    return specs_string([("?", dtype, shape) for dtype, shape in specs])


class _Checker:
    """Checks sampled columns against the expected specs (Reverb's messages)."""

    def __init__(self, table: str, specs: Sequence[Spec] | None) -> None:
        self._table = table
        self._specs = None if specs is None else list(specs)

    def check(self, columns: Sequence[Any], *, leading: int = 0) -> None:
        """Checks each column's dtype and shape (past ``leading`` batch/time axes)."""
        specs = self._specs
        if specs is None:
            return
        if len(columns) != len(specs):
            incoming = [("", column.dtype, column.shape[leading:]) for column in columns]
            raise errors.InvalidArgumentError(
                f"Inconsistent number of tensors received from table '{self._table}'.  "
                f"Specification has {len(specs)} tensors, but data coming from the table "
                f"shows {len(columns)} tensors.\nTable signature: {_unnamed(specs)}.\n"
                f"Incoming tensor signature: {specs_string(incoming)}"
            )
        for index, (column, (dtype, shape)) in enumerate(zip(columns, specs)):
            got = column.shape[leading:]
            if column.dtype != dtype or not shapes_compatible(shape, got):
                raise errors.InvalidArgumentError(
                    f"Received incompatible tensor at flattened index {index} from table "
                    f"'{self._table}'.  Specification has (dtype, shape): "
                    f"({tf_dtype_name(dtype)}, {format_shape(shape)}).  Tensor has (dtype, "
                    f"shape): ({tf_dtype_name(column.dtype)}, {format_shape(got)}).\n"
                    f"Table signature: {_unnamed(specs)}"
                )


def _packer(structure: Any) -> Callable[[list[Any]], Any]:
    if structure is None:
        return lambda values: values
    from reverb_py._codec.nest import unflatten_as

    return lambda values: unflatten_as(structure, values)


def _scalar_info(info: SampleInfo) -> SampleInfo:
    return SampleInfo(
        np.uint64(info.key),
        np.float64(info.probability),
        np.int64(info.table_size),
        np.float64(info.priority),
        np.int32(info.times_sampled),
    )


def _batched_info(infos: Sequence[SampleInfo], counts: Any = None) -> SampleInfo:
    """The info of a batch: one array per field (each info ``counts[i]`` times)."""
    fields: list[Any] = []
    for values, dtype in zip(zip(*infos), _INFO_DTYPES):
        array = np.array(values, dtype=cast(np.dtype[Any], dtype))
        fields.append(array if counts is None else np.repeat(array, counts))
    return SampleInfo(*fields)


ALIGNMENT = 64
"""Byte alignment of the arrays of a batch (as the compiled batch path's): JAX's CPU
devices use such arrays in place, and TensorFlow's ``from_generator`` too."""


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """An uninitialised array whose data starts on an :data:`ALIGNMENT` boundary."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buffer = np.empty(nbytes + ALIGNMENT, np.uint8)
    offset = -buffer.ctypes.data % ALIGNMENT
    return buffer[offset : offset + nbytes].view(dtype).reshape(shape)


def _stack(table: str, arrays: list[np.ndarray], index: int) -> np.ndarray:
    """Rows (each array a block of them) concatenated along the first axis."""
    try:
        shape = arrays[0].shape[1:]
        if any(array.shape[1:] != shape for array in arrays):
            raise ValueError("shapes differ")
        dtype = np.result_type(*arrays)
        if dtype.kind == "O":
            return np.concatenate(arrays)
        out = aligned_empty((sum(len(array) for array in arrays), *shape), dtype)
        return np.concatenate(arrays, out=out)
    except ValueError:
        shapes = sorted({format_shape(array.shape[1:]) for array in arrays})
        raise errors.InvalidArgumentError(
            f"Cannot batch the samples of table '{table}': the tensors at flattened index "
            f"{index} have different shapes ({', '.join(shapes)}); use "
            "batch_size=None or items of one shape."
        ) from None


def trajectories(
    sampler: Sampler,
    *,
    specs: Sequence[Spec] | None = None,
    structure: Any = None,
    batch_size: int | None = None,
    drop_remainder: bool = False,
    flexible: bool = False,
) -> Iterator[ReplaySample]:
    """Whole items: one :class:`ReplaySample` per sample, or per ``batch_size`` samples
    (every field stacked along a new leading axis).

    Args:
      sampler: where the samples come from.
      specs: each column's dtype and shape, checked for every sample (None: no check).
      structure: a nest to unflatten the columns into (None: a flat list).
      batch_size: samples per batch, or None for single samples.
      drop_remainder: drop a last batch smaller than ``batch_size``.
      flexible: with ``batch_size``, yield what is buffered (at most ``batch_size``)
        as one block without waiting for more; samples that cannot be stacked with
        the others of their block come in blocks of one.

    Raises:
      InvalidArgumentError: a sample that does not match ``specs``, or batched samples
        whose columns differ in shape.
    """
    checker = _Checker(sampler.table, specs)
    pack = _packer(structure)
    if batch_size is not None and flexible:
        yield from _blocks(sampler, checker, pack, batch_size)
        return
    if batch_size is None:
        while True:
            block = cast(list[Sample], sampler.take())
            if not block:
                return
            for info, columns, _ in block:
                checker.check(columns)
                yield ReplaySample(_scalar_info(info), pack(columns))
    pending: list[Piece] = []
    filled = 0
    while True:
        taken = sampler.take(batch_size - filled, needed=batch_size - filled)
        if taken:
            pending.extend(taken)
            filled += sum(_rows(piece) for piece in taken)
            if filled < batch_size:
                continue
        elif not pending or drop_remainder:
            return
        batch = _combined(sampler.table, checker, pending, pack)
        pending = []
        filled = 0
        yield batch
        if not taken:
            return


def _piece_info(piece: Piece) -> list[np.ndarray]:
    if isinstance(piece, Block):
        return list(piece.info)
    return [
        np.array([value], dtype=cast(np.dtype[Any], dtype))
        for value, dtype in zip(piece[0], _INFO_DTYPES)
    ]


def _combined(
    table: str, checker: _Checker, pieces: list[Piece], pack: Callable[[list[Any]], Any]
) -> ReplaySample:
    """One batch of ``pieces`` (a whole block as it is; else every field concatenated).

    Raises:
      InvalidArgumentError: samples with different numbers of columns or shapes, or
        columns that do not match the checker's specs.
    """
    first = pieces[0]
    if len(pieces) == 1 and isinstance(first, Block):
        checker.check(first.columns, leading=1)
        return ReplaySample(first.info, pack(first.columns))
    if all(not isinstance(piece, Block) for piece in pieces):
        samples = cast(list[Sample], pieces)
        info = _batched_info([sample[0] for sample in samples])
    else:
        fields: list[Any] = [
            np.concatenate(field) for field in zip(*(_piece_info(piece) for piece in pieces))
        ]
        info = SampleInfo(*fields)
    rows = [piece.columns if isinstance(piece, Block) else piece[1] for piece in pieces]
    count = len(rows[0])
    for columns in rows:
        if len(columns) != count:
            checker.check(columns)
            raise errors.InvalidArgumentError(
                f"Cannot batch the samples of table '{table}': they have "
                "different numbers of columns."
            )
    stacked = [
        _stack(
            table,
            [
                columns[index] if isinstance(piece, Block) else columns[index][np.newaxis]
                for piece, columns in zip(pieces, rows)
            ],
            index,
        )
        for index in range(count)
    ]
    checker.check(stacked, leading=1)
    return ReplaySample(info, pack(stacked))


def _blocks(
    sampler: Sampler, checker: _Checker, pack: Callable[[list[Any]], Any], limit: int
) -> Iterator[ReplaySample]:
    while True:
        block = sampler.take(limit)
        if not block:
            return
        try:
            yield _combined(sampler.table, checker, block, pack)
        except errors.InvalidArgumentError as error:
            if "Cannot batch" not in str(error):
                raise
            for piece in block:  # Shapes differ: piece by piece.
                if not isinstance(piece, Block):
                    checker.check(piece[1])
                yield _combined(sampler.table, checker, [piece], pack)


def _unsqueezed(squeezed: tuple[bool, ...], columns: list[np.ndarray]) -> list[np.ndarray]:
    """A squeezed column is one time step (as Reverb's timesteps see it)."""
    if not any(squeezed):
        return columns
    return [column[np.newaxis] if flag else column for flag, column in zip(squeezed, columns)]


def _steps(sampler: Sampler, columns: list[np.ndarray]) -> int:
    lengths = {column.shape[0] for column in columns}
    if len(lengths) != 1:
        raise errors.InvalidArgumentError(
            f"Sampled trajectory of table '{sampler.table}' cannot be decomposed into "
            f"timesteps: its columns have different lengths ({sorted(lengths)})."
        )
    return int(lengths.pop())


def timesteps(
    sampler: Sampler,
    *,
    specs: Sequence[Spec] | None = None,
    structure: Any = None,
    batch_size: int | None = None,
    drop_remainder: bool = False,
    flexible: bool = False,
) -> Iterator[ReplaySample]:
    """Time steps of the sampled items, in order: one :class:`ReplaySample` per step, or
    per ``batch_size`` steps (which may span items; ``info`` repeats each step's item).

    Args: as :func:`trajectories`, ``specs`` describing one step.

    Raises:
      InvalidArgumentError: an item whose columns differ in length (or are squeezed),
        or a step that does not match ``specs``.
    """
    checker = _Checker(sampler.table, specs)
    pack = _packer(structure)
    if batch_size is not None and flexible:
        while True:
            block = cast(list[Sample], sampler.take(batch_size))
            if not block:
                return
            items = []
            for info, columns, squeezed in block:
                columns = _unsqueezed(squeezed, columns)
                items.append((info, columns, _steps(sampler, columns)))
                checker.check(columns, leading=1)
            info = _batched_info([item[0] for item in items], [item[2] for item in items])
            try:
                data = [
                    np.concatenate([item[1][index] for item in items])
                    for index in range(len(items[0][1]))
                ]
            except ValueError:
                for info, columns, steps in items:  # Shapes differ: item by item.
                    yield ReplaySample(_batched_info([info], [steps]), pack(columns))
                continue
            yield ReplaySample(info, pack(data))
    if batch_size is None:
        while True:
            block = cast(list[Sample], sampler.take())
            if not block:
                return
            for info, columns, squeezed in block:
                columns = _unsqueezed(squeezed, columns)
                steps = _steps(sampler, columns)
                checker.check(columns, leading=1)
                scalars = _scalar_info(info)
                for step in range(steps):
                    yield ReplaySample(scalars, pack([column[step, ...] for column in columns]))
    # Pieces of items (info, columns, start, stop) that make up the next batch.
    pieces: list[tuple[SampleInfo, list[np.ndarray], int, int]] = []
    filled = 0
    queue: collections.deque[Sample] = collections.deque()
    current: tuple[SampleInfo, list[np.ndarray]] | None = None
    offset = steps = 0
    ended = False
    while True:
        if current is None or offset == steps:
            if not queue and not ended:
                block = cast(list[Sample], sampler.take())
                if block:
                    queue.extend(block)
                else:
                    ended = True
            if queue:
                info, columns, squeezed = queue.popleft()
                current = (info, _unsqueezed(squeezed, columns))
                steps = _steps(sampler, current[1])
                checker.check(current[1], leading=1)
                offset = 0
                continue
            if not pieces or drop_remainder:
                return
        else:
            take = min(batch_size - filled, steps - offset)
            pieces.append((current[0], current[1], offset, offset + take))
            offset += take
            filled += take
            if filled < batch_size:
                continue
        info = _batched_info(
            [piece[0] for piece in pieces], [piece[3] - piece[2] for piece in pieces]
        )
        data = [
            np.concatenate([piece[1][index][piece[2] : piece[3]] for piece in pieces])
            for index in range(len(pieces[0][1]))
        ]
        pieces = []
        filled = 0
        yield ReplaySample(info, pack(data))
        if ended and not queue and (current is None or offset == steps):
            return
