"""Client side of ``SampleStream``: requests, reassembly of entries, decoding.

One request asks for all the samples wanted; the server answers with many samples per
response. Chunks are decoded once per stream and kept in a small cache
(:class:`reverb_py._codec.chunk.ChunkCache`), because overlapping sequence items share chunks.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, cast

import grpc
import numpy as np
from google.protobuf.message import DecodeError

from reverb_py import _impl, errors
from reverb_py._client.channel import SAMPLE_STREAM_PATH, SERVER_INFO_PATH, identity
from reverb_py._client.credentials import explain_internal_error, write_or_raise
from reverb_py._codec.chunk import ChunkCache, decode_chunk, unpack_columns
from reverb_py._proto import reverb_service_pb2, schema_pb2
from reverb_py._status import error_for_status, error_from_rpc
from reverb_py.replay_sample import ReplaySample, SampleInfo

__all__ = [
    "DEFAULT_WAIT_REPORT_S",
    "Decoded",
    "SampleAssembler",
    "WaitReporter",
    "describe_wait",
    "sample_stream",
    "spread_sample_stream",
    "to_replay_samples",
]

_logger = logging.getLogger("reverb_py")

#: How often a sampler that gets no sample logs what the table's rate limiter waits for.
DEFAULT_WAIT_REPORT_S = 30.0

# The pause before a stream replaces one whose server went away (doubling up to the max).
_MIN_BACKOFF_S = 0.005
# The longest a sampler of several servers waits on one before it asks the next.
_MAX_SHARE_MS = 500
_MAX_BACKOFF_S = 0.5


Decoded = tuple[SampleInfo, list[np.ndarray], tuple[bool, ...]]
"""A reassembled sample: its info, its columns and which of them are squeezed."""


class SampleAssembler:
    """Reassembles the samples of one stream from its responses.

    A sample's first entry carries its info, its last has ``end_of_sequence``; chunks
    are decoded once per stream (kept in a :class:`ChunkCache`: overlapping sequence
    items share chunks). Plain responses are read straight from their bytes
    (``_impl.sample_wire``, compiled); anything else through protobuf's messages.

    Args:
      copy: columns share no memory with the cached chunks (else a column taken from
        one chunk is a view of it: read it, never modify it).
    """

    def __init__(self, *, copy: bool = True) -> None:
        self._cache = ChunkCache()
        self._copy = copy
        self._info: tuple[Any, ...] | None = None
        self._chunks: dict[int, list[np.ndarray]] = {}

    @property
    def idle(self) -> bool:
        """No sample is half reassembled (the next response starts a new one)."""
        return self._info is None

    def add(self, response: reverb_service_pb2.SampleStreamResponse) -> list[Decoded]:
        """The samples ``response`` completes.

        Raises:
          InternalError: an entry ends a sample that never began.
          InvalidArgumentError: a chunk or the item's slices are malformed.
        """
        done: list[Decoded] = []
        cache = self._cache
        for entry in response.entries:
            if entry.HasField("info"):
                self._info = _info_fields(entry.info)
                self._chunks = {}
            chunks = self._chunks
            for chunk in entry.data:
                key = chunk.chunk_key
                columns = cache.get(key)
                if columns is None:
                    columns = decode_chunk(chunk)
                    cache.put(key, columns)
                chunks[key] = columns
            if entry.end_of_sequence:
                done.append(self._finish())
        return done

    def add_bytes(self, data: bytes) -> list[Decoded]:
        """:meth:`add` of a serialised response.

        Raises:
          InvalidArgumentError: bytes that are not a response, or as :meth:`add`.
        """
        wire = _impl.sample_wire
        if self._info is None:
            # PERF(sample-wire): whole plain samples, reassembled by compiled code.
            cache = self._cache
            plain = wire.assemble_plain(data, cache.entries, cache.capacity, SampleInfo, self._copy)
            if plain is not None:
                return cast(list[Decoded], plain)
        entries = wire.split_response(data)
        if entries is None:
            try:
                response = reverb_service_pb2.SampleStreamResponse.FromString(data)
            except DecodeError:
                raise errors.InvalidArgumentError(
                    "Malformed SampleStreamResponse: its bytes do not parse."
                ) from None
            return self.add(response)
        done: list[Decoded] = []
        cache = self._cache
        fast = wire.decode_chunk_bytes
        for info_bytes, entry_chunks, end_of_sequence in entries:
            if info_bytes is not None:
                fields = wire.read_info(info_bytes)
                if fields is None:
                    fields = _info_fields(_parse(schema_pb2.SampleInfo, info_bytes))
                self._info = fields
                self._chunks = {}
            chunks = self._chunks
            for key, raw in entry_chunks:
                columns = cache.get(key)
                if columns is None:
                    columns = fast(raw)
                    if columns is None:
                        columns = decode_chunk(_parse(schema_pb2.ChunkData, raw))
                    cache.put(key, columns)
                chunks[key] = columns
            if end_of_sequence:
                done.append(self._finish())
        return done

    def _finish(self) -> Decoded:
        fields = self._info
        if fields is None:
            raise errors.InternalError("Sample entry without info.")
        self._info = None
        key, probability, table_size, priority, times_sampled, layout = fields
        columns = unpack_columns(layout, self._chunks, copy=self._copy)
        info = SampleInfo(key, probability, table_size, priority, times_sampled)
        return info, columns, tuple([squeeze for squeeze, _ in layout])


def _info_fields(message: schema_pb2.SampleInfo) -> tuple[Any, ...]:
    """What :func:`reverb_py._impl.sample_wire.read_info` reads, from the message."""
    item = message.item
    layout = [
        (
            column.squeeze,
            [
                (piece.chunk_key, piece.offset, piece.length, piece.index)
                for piece in column.chunk_slices
            ],
        )
        for column in item.flat_trajectory.columns
    ]
    return (
        int(item.key),
        float(message.probability),
        int(message.table_size),
        float(item.priority),
        int(item.times_sampled),
        layout,
    )


def _parse(message_class: Any, data: bytes) -> Any:
    try:
        return message_class.FromString(data)
    except DecodeError:
        name = message_class.DESCRIPTOR.name
        raise errors.InvalidArgumentError(f"Malformed {name} in a sample response.") from None


def describe_wait(table: str, info: schema_pb2.TableInfo) -> str:
    """What sampling ``table`` (its ``ServerInfo`` entry) waits for, in a few words:
    ``table 'replay': 3 of 1000 items (min_size_to_sample)``."""
    limiter = info.rate_limiter_info
    size = int(info.current_size)
    if size < limiter.min_size_to_sample:
        return f"table {table!r}: {size} of {limiter.min_size_to_sample} items (min_size_to_sample)"
    inserts = int(limiter.insert_stats.completed)
    samples = int(limiter.sample_stats.completed)
    spi = float(limiter.samples_per_insert)
    # A sample is allowed while inserts * spi - (samples + 1) >= min_diff.
    missing = limiter.min_diff - (inserts * spi - samples - 1)
    if missing > 0 and spi > 0:
        needed = max(1, math.ceil(missing / spi))
        return (
            f"table {table!r}: {samples} samples of {inserts} inserts at samples_per_insert "
            f"{spi:g}: {needed} more insert{'s' if needed > 1 else ''} needed"
        )
    return f"table {table!r}: {size} items, sampling allowed now (other samplers served first?)"


async def _ask_wait(channel: grpc.aio.Channel, table: str, timeout: float) -> str:
    """:func:`describe_wait` of the server's answer, or why there is none."""
    try:
        response = await channel.unary_unary(
            SERVER_INFO_PATH,
            request_serializer=reverb_service_pb2.ServerInfoRequest.SerializeToString,
            response_deserializer=reverb_service_pb2.ServerInfoResponse.FromString,
        )(reverb_service_pb2.ServerInfoRequest(), timeout=timeout)
    except grpc.aio.AioRpcError as error:
        return f"the server did not say ({error.code().name})"
    for info in response.table_info:
        if info.name == table:
            return describe_wait(table, info)
    return f"the server has no table {table!r}"


class WaitReporter:
    """Logs (INFO) what the rate limiter of ``table`` waits for, every ``interval``
    seconds that a sampler waits without getting a sample.

    Made and used on the channel's loop. ``waiting()`` says whether someone waits for a
    sample now; ``progress()`` changes whenever samples arrive.
    """

    def __init__(
        self,
        channel: grpc.aio.Channel,
        table: str,
        interval: float,
        waiting: Callable[[], bool],
        progress: Callable[[], int],
    ) -> None:
        if not interval > 0:
            raise ValueError(f"the wait report interval must be positive, got {interval!r}")
        self._channel = channel
        self._table = table
        self._interval = interval
        self._waiting = waiting
        self._progress = progress
        self._seen = progress()
        self._quiet = 0  # Ticks in a row with someone waiting and no sample.
        self._report: asyncio.Task[None] | None = None
        self._loop = asyncio.get_running_loop()
        self._timer = self._loop.call_later(interval, self._tick)

    def _tick(self) -> None:
        progress = self._progress()
        if progress != self._seen or not self._waiting():
            self._seen = progress
            self._quiet = 0
        else:
            self._quiet += 1
            if self._report is None or self._report.done():
                self._report = self._loop.create_task(self._log(self._quiet * self._interval))
        self._timer = self._loop.call_later(self._interval, self._tick)

    async def _log(self, waited: float) -> None:
        reason = await _ask_wait(self._channel, self._table, min(self._interval, 10.0))
        _logger.info("sampling has waited %.0f s: %s", waited, reason)

    def close(self) -> None:
        self._timer.cancel()
        if self._report is not None:
            self._report.cancel()


class _Reading:
    """Whether a stream waits for a response now, and how many it got."""

    __slots__ = ("responses", "waiting")

    def __init__(self) -> None:
        self.waiting = False
        self.responses = 0


async def sample_stream(
    channel: grpc.aio.Channel,
    table: str,
    num_samples: int,
    rate_limiter_timeout_ms: int | None = None,
    wait_report_s: float | None = DEFAULT_WAIT_REPORT_S,
) -> AsyncIterator[tuple[SampleInfo, list[np.ndarray]]]:
    """Yields ``(info, columns)`` for ``num_samples`` samples of ``table``.

    Every ``wait_report_s`` seconds that it waits for a sample it logs what the table's
    rate limiter waits for (:class:`WaitReporter`); None: never.

    Raises:
      InvalidArgumentError: ``num_samples < 1``.
      ReverbError: the server refused or the stream failed (mapped from its status).
    """
    if num_samples < 1:
        raise errors.InvalidArgumentError(f"num_samples must be >= 1, got {num_samples}.")
    request = reverb_service_pb2.SampleStreamRequest(table=table, num_samples=num_samples)
    if rate_limiter_timeout_ms is not None and rate_limiter_timeout_ms >= 0:
        # 0 would mean "forever" on the wire; a zero timeout is asked as 1 ms.
        request.rate_limiter_timeout.milliseconds = max(1, rate_limiter_timeout_ms)
    call = channel.stream_stream(
        SAMPLE_STREAM_PATH,
        request_serializer=reverb_service_pb2.SampleStreamRequest.SerializeToString,
        response_deserializer=identity,  # Read by SampleAssembler.add_bytes.
    )()
    assembler = SampleAssembler()
    produced = 0
    reading = _Reading()
    reporter = None
    if wait_report_s is not None:
        reporter = WaitReporter(
            channel, table, wait_report_s, lambda: reading.waiting, lambda: reading.responses
        )
    try:
        await write_or_raise(channel, call, request)
        while produced < num_samples:
            reading.waiting = True
            response = await call.read()
            reading.waiting = False
            reading.responses += 1
            if response is grpc.aio.EOF:
                code = await call.code()
                raise errors.UnavailableError(
                    f"Sample stream ended after {produced} of {num_samples} samples ({code})."
                )
            # The stubs type read() as `object` (EOF or a message); past EOF it is a message.
            for info, columns, _ in assembler.add_bytes(cast(bytes, response)):
                produced += 1
                yield info, columns
    except grpc.aio.AioRpcError as error:
        failure = error_from_rpc(error)
        if produced == 0:
            failure = await explain_internal_error(channel, failure)
        raise failure from None
    except asyncio.InvalidStateError:
        # The call already ended (e.g. the server went away): report its status.
        raise error_for_status(await call.code(), await call.details() or "") from None
    finally:
        if reporter is not None:
            reporter.close()
        call.cancel()


async def spread_sample_stream(
    channel: grpc.aio.Channel,
    table: str,
    num_samples: int,
    rate_limiter_timeout_ms: int | None,
    shards: int,
    wait_report_s: float | None = DEFAULT_WAIT_REPORT_S,
) -> AsyncIterator[tuple[SampleInfo, list[np.ndarray]]]:
    """:func:`sample_stream` over a target of ``shards`` servers (each stream logs its
    waits every ``wait_report_s`` seconds).

    One server (``shards == 1``): one stream, as Reverb. Several: a server that cannot
    serve within its share of the timeout (``rate_limiter_timeout_ms / shards``, at
    most 0.5 s) or goes away hands the samples still wanted to a new stream, which the channel's
    round robin sends to the next server; the whole call still ends with the rate
    limiter's ``DeadlineExceededError`` once ``rate_limiter_timeout_ms`` has passed.
    Without a timeout a stream waits on its server for as long as it takes (Reverb's
    semantics); only a server going away moves it on.

    Raises:
      DeadlineExceededError: no server served the samples within the timeout.
      UnavailableError: the servers kept going away (``2 * shards + 1`` streams in a
        row ended without a sample).
    """
    if shards <= 1:
        async for sample in sample_stream(
            channel, table, num_samples, rate_limiter_timeout_ms, wait_report_s
        ):
            yield sample
        return
    timed = rate_limiter_timeout_ms is not None and rate_limiter_timeout_ms >= 0
    deadline = 0.0
    share_ms = 0
    if timed:
        assert rate_limiter_timeout_ms is not None
        deadline = time.monotonic() + rate_limiter_timeout_ms / 1000
        share_ms = max(1, min(_MAX_SHARE_MS, -(-rate_limiter_timeout_ms // shards)))
    remaining = num_samples
    lost = 0  # Streams in a row that ended without a sample because a server went.
    backoff = _MIN_BACKOFF_S
    while True:
        attempt_ms = None
        if timed:
            left_ms = int((deadline - time.monotonic()) * 1000)
            attempt_ms = max(1, min(share_ms, left_ms))
        served = 0
        try:
            async for sample in sample_stream(channel, table, remaining, attempt_ms, wait_report_s):
                served += 1
                remaining -= 1
                yield sample
            return
        except errors.DeadlineExceededError:
            if not timed or time.monotonic() >= deadline:
                raise
        except (errors.UnavailableError, errors.CancelledOperationError):
            lost = 0 if served else lost + 1
            if lost > 2 * shards:
                raise
            if timed and time.monotonic() >= deadline:
                raise
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF_S)


def to_replay_samples(
    info: SampleInfo,
    columns: list[np.ndarray],
    *,
    emit_timesteps: bool,
    signature: Any = None,
) -> ReplaySample | list[ReplaySample]:
    """Shapes one sample as Reverb's ``Client.sample`` does.

    Args:
      info: The sample's info.
      columns: The item's columns, each with its time axis (unless squeezed).
      emit_timesteps: Split into one :class:`ReplaySample` per time step.
      signature: A signature nest to unflatten the data into, or None for flat lists.

    Raises:
      ValueError: ``emit_timesteps`` with columns of different lengths.
      TypeError: ``emit_timesteps`` with a squeezed scalar column.
    """
    pack = _packer(signature)
    if not emit_timesteps:
        return ReplaySample(info=info, data=pack(columns))
    lengths = set()
    for column in columns:
        if column.ndim == 0:
            raise TypeError(
                "Can't split a squeezed scalar column into timesteps; use emit_timesteps=False."
            )
        lengths.add(len(column))
    if len(lengths) > 1:
        raise ValueError("Can't split non timestep trajectory into timesteps.")
    steps = lengths.pop() if lengths else 0
    return [
        ReplaySample(
            info=info,
            data=pack([np.asarray(column[step], column.dtype) for column in columns]),
        )
        for step in range(steps)
    ]


def _packer(signature: Any) -> Any:
    if signature is None:
        return list
    from reverb_py._codec.nest import unflatten_as

    def pack(values: Sequence[Any]) -> Any:
        return unflatten_as(signature, list(values))

    return pack
