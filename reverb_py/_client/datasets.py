"""The sampling core of the datasets: streams kept full, samples handed to a consumer.

A :class:`Sampler` runs its workers (one ``SampleStream`` each, at a time) as tasks on
the blocking clients' loop thread (:func:`reverb_py._client.channel.shared_loop_thread`).
A worker asks for ``max_in_flight_samples_per_worker`` samples per request once that many
places are free in the sampler's bounded buffer, decodes every sample as its last entry
arrives (on the loop thread, never on the consumer's) and re-opens its stream after
``max_samples_per_stream`` samples. The consumer takes whole blocks of samples at a time
(:meth:`Sampler.take`); :func:`trajectories` and :func:`timesteps` turn them into
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
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import grpc
import numpy as np

from reverb_py import errors
from reverb_py._client.channel import (
    SAMPLE_STREAM_PATH,
    channel_options,
    identity,
    shared_loop_thread,
)
from reverb_py._client.credentials import ClientCredentials, explain_internal_error
from reverb_py._client.sampling import Decoded, SampleAssembler
from reverb_py._codec.dtypes import tf_dtype_name
from reverb_py._proto import reverb_service_pb2
from reverb_py._status import error_for_status, error_from_rpc
from reverb_py.replay_sample import ReplaySample, SampleInfo
from reverb_py.tensor_spec import Shape, shapes_compatible

__all__ = [
    "DEFAULT_MAX_SAMPLES_PER_STREAM",
    "DEFAULT_NUM_WORKERS",
    "NUM_INFO_TENSORS",
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

Sample = Decoded
"""One decoded sample: its info, its columns, which columns are squeezed."""

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
    """

    def __init__(
        self,
        server_address: str,
        table: str,
        options: SamplerOptions,
        *,
        copy: bool = True,
        credentials: ClientCredentials | None = None,
    ) -> None:
        self._credentials = credentials if credentials is not None else ClientCredentials()
        self._server_address = server_address
        self._table = table
        self._options = options
        self._copy = copy
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._buffer: collections.deque[Sample] = collections.deque()
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

    @property
    def table(self) -> str:
        return self._table

    # ------------------------------------------------------------ consumer side

    def take(self, limit: int | None = None) -> list[Sample]:
        """Up to ``limit`` samples (all that are buffered when None), waiting for one.

        Returns:
          At least one sample, or ``[]`` when the iteration has ended (``max_samples``
          returned, a rate-limiter timeout while waiting, or :meth:`close`).

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
                self._waiting += 1
                try:
                    self._ready.wait(1.0)
                finally:
                    self._waiting -= 1
            buffer = self._buffer
            if limit is None or limit >= len(buffer):
                block = list(buffer)
                buffer.clear()
            else:
                block = [buffer.popleft() for _ in range(limit)]
            self._returned += len(block)
            self._free += len(block)
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
        if wait and not _on_loop(self._loop):
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
        channel = self._credentials.aio_channel(self._server_address, channel_options())
        try:
            workers = [
                asyncio.ensure_future(self._worker(channel))
                for _ in range(self._options.num_workers)
            ]
            try:
                await asyncio.gather(*workers)
            finally:
                for worker in workers:
                    worker.cancel()
                await asyncio.gather(*workers, return_exceptions=True)
        finally:
            await channel.close()

    async def _worker(self, channel: grpc.aio.Channel) -> None:
        try:
            while True:
                budget = self._take_budget()
                if budget == 0:
                    return
                try:
                    await self._stream(channel, budget)
                except _RateLimiterTimeout:
                    with self._ready:
                        if self._waiting == 0 and not self._closed:
                            continue  # Nobody waits for data: a new stream.
                        self._ended = True
                        self._ready.notify_all()
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
        received = 0
        reserved = 0
        try:
            while received < budget:
                count = min(options.max_in_flight_samples_per_worker, budget - received)
                await self._reserve(count)
                reserved = count
                request = reverb_service_pb2.SampleStreamRequest(
                    table=self._table, num_samples=count
                )
                if options.rate_limiter_timeout_ms >= 0:
                    # 0 ms on the wire means "forever", as in Reverb (over gRPC).
                    request.rate_limiter_timeout.milliseconds = options.rate_limiter_timeout_ms
                await call.write(request)
                while reserved > 0:
                    response = await call.read()
                    if response is grpc.aio.EOF:
                        raise error_for_status(await call.code(), await call.details() or "")
                    samples = assembler.add_bytes(cast(bytes, response))
                    if samples:
                        reserved -= len(samples)
                        received += len(samples)
                        with self._ready:
                            self._buffer.extend(samples)
                            self._ready.notify()
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
            with self._lock:
                self._free += max(reserved, 0)
                self._requested -= budget - received

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


def _on_loop(loop: asyncio.AbstractEventLoop | None) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


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


def _stack(table: str, arrays: list[np.ndarray], index: int) -> np.ndarray:
    try:
        return np.stack(arrays)
    except ValueError:
        shapes = sorted({format_shape(array.shape) for array in arrays})
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
            block = sampler.take()
            if not block:
                return
            for info, columns, _ in block:
                checker.check(columns)
                yield ReplaySample(_scalar_info(info), pack(columns))
    pending: list[Sample] = []
    while True:
        block = sampler.take(batch_size - len(pending))
        if block:
            pending.extend(block)
            if len(pending) < batch_size:
                continue
        elif not pending or drop_remainder:
            return
        info = _batched_info([sample[0] for sample in pending])
        count = len(pending[0][1])
        for _, columns, _ in pending:
            if len(columns) != count:
                checker.check(columns)
                raise errors.InvalidArgumentError(
                    f"Cannot batch the samples of table '{sampler.table}': they have "
                    "different numbers of columns."
                )
        stacked = [
            _stack(sampler.table, [sample[1][index] for sample in pending], index)
            for index in range(count)
        ]
        pending = []
        checker.check(stacked, leading=1)
        yield ReplaySample(info, pack(stacked))
        if not block:
            return


def _stacked(checker: _Checker, samples: list[Sample], pack: Callable[[list[Any]], Any]) -> Any:
    info = _batched_info([sample[0] for sample in samples])
    count = len(samples[0][1])
    stacked = [np.stack([sample[1][index] for sample in samples]) for index in range(count)]
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
            yield _stacked(checker, block, pack)
        except ValueError as error:
            if isinstance(error, errors.InvalidArgumentError):
                raise
            for sample in block:  # Shapes differ: one sample per block.
                checker.check(sample[1])
                yield _stacked(checker, [sample], pack)


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
            block = sampler.take(batch_size)
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
            block = sampler.take()
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
                block = sampler.take()
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
