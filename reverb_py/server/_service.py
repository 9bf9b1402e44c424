"""The gRPC servicer: Reverb's RPCs mapped onto :class:`~reverb_py.table.Table` calls.

Served at Reverb's method paths ``/deepmind.reverb.ReverbService/<Method>``, so Reverb's
clients can use it. The servicer holds no rules of its own: it decodes requests, calls
the tables and encodes replies.

The server never decodes tensors. A chunk is kept as the exact bytes of the
``ChunkData`` message that arrived (only its key and episode id are read), and sample
replies are assembled from those bytes.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message import DecodeError

from reverb_py import _impl, errors
from reverb_py._client.channel import identity
from reverb_py._client.targets import SERVER_ID_HEADER
from reverb_py._proto import EXTENSION_SERVICE, SERVICE, reverb_service_pb2, schema_pb2
from reverb_py._status import status_for_error
from reverb_py.server._chunks import Chunk, LiveChunks, chunks_of_item, parse_chunk
from reverb_py.server._limits import ServerLimits, describe_bytes
from reverb_py.server._logs import (
    directory_bytes,
    log_call_error,
    log_checkpoint,
    log_checkpoint_failed,
    peer_of,
)
from reverb_py.server._replies import parse_insert_request, sample_responses
from reverb_py.table import Item, Table

if TYPE_CHECKING:
    from reverb_py.server._metrics import ServerMetrics

__all__ = ["ReverbServicer"]

_logger = logging.getLogger("reverb_py")

ANSWER_TASK = True
"""Whether a ``MutatePrioritiesStream`` answer is written by a task of its own while the
next request is read; False: each answer's write is awaited before the next read (the
former way). ``benchmarks.mutate_answers`` compares the two."""

# The first batch asked of a table by a sample stream; later batches (of this request
# and the stream's next ones) double, within both bounds below.
FIRST_SAMPLE_BATCH = 16
# The most samples taken from a table at once for one stream, so a stream asking for
# millions of samples holds (and loses, if it is cancelled) at most this many taken but
# not yet sent.
MAX_SAMPLE_BATCH = 256
# The most bytes a batch's responses may take, judged by the previous batch's: a
# batch of large items stays small (items evicted while a batch is being sent stay alive
# until it is sent).
MAX_SAMPLE_BATCH_BYTES = 32 * 1024 * 1024
# How long a failing insert stream waits for its last confirmations to be written before
# it sends the error anyway.
_CONFIRMATION_DRAIN_S = 5.0


# ---------------------------------------------------------------- the servicer


class ReverbServicer:
    """Implements Reverb's RPCs over a fixed set of tables (all on one event loop)."""

    def __init__(
        self,
        tables: Mapping[str, Table],
        checkpointer: Any = None,
        limits: ServerLimits | None = None,
    ) -> None:
        self._tables = dict(tables)
        self._checkpointer = checkpointer
        self.limits = limits if limits is not None else ServerLimits()
        # Insert and sample streams open now, and the chunk bytes insert streams keep.
        self.open_streams = 0
        self.streams_by_method = {
            "InsertStream": 0,
            "SampleStream": 0,
            "MutatePrioritiesStream": 0,
        }
        self.held_chunk_bytes = 0
        # The server's metrics, when it has them (calls and checkpoints are counted as
        # they happen; set before handlers() is asked).
        self.metrics: ServerMetrics | None = None
        # How the server names itself to clients (``host:port``, set once bound): sent
        # with every ServerInfo reply, so a client of several servers knows which one
        # answered.
        self.server_id: str | None = None
        self._checkpoint_lock = asyncio.Lock()
        token = secrets.randbits(128)
        self._tables_state_id = schema_pb2.Uint128(high=token >> 64, low=token & (2**64 - 1))
        # Every chunk the server holds (in a table or an insert stream), by key: a chunk
        # sent again must have the same bytes.
        self._live_chunks = LiveChunks()
        for table in self._tables.values():
            for held in table.items():
                for chunk in held.chunks:
                    if type(chunk) is Chunk:
                        self._live_chunks.add(chunk)

    def _table(self, name: str) -> Table:
        table = self._tables.get(name)
        if table is None:
            raise errors.NotFoundError(f"Priority table {name} was not found")
        return table

    def handlers(self) -> tuple[grpc.GenericRpcHandler, ...]:
        """The generic handlers serving this servicer: Reverb's method paths, and the
        method reverb_py adds (``MutatePrioritiesStream``)."""
        methods: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
            "ServerInfo": grpc.unary_unary_rpc_method_handler(
                self.ServerInfo,
                request_deserializer=identity,
                response_serializer=reverb_service_pb2.ServerInfoResponse.SerializeToString,
            ),
            "Reset": grpc.unary_unary_rpc_method_handler(
                self.Reset,
                request_deserializer=identity,
                response_serializer=reverb_service_pb2.ResetResponse.SerializeToString,
            ),
            # PERF(mutate-decode): the request is read straight into lists (see
            # MutatePriorities); the empty response is written as its empty bytes.
            "MutatePriorities": grpc.unary_unary_rpc_method_handler(
                self.MutatePriorities,
                request_deserializer=identity,
                response_serializer=identity,
            ),
            "Checkpoint": grpc.unary_unary_rpc_method_handler(
                self.Checkpoint,
                request_deserializer=identity,
                response_serializer=reverb_service_pb2.CheckpointResponse.SerializeToString,
            ),
            "InsertStream": grpc.stream_stream_rpc_method_handler(
                self.InsertStream,
                request_deserializer=identity,
                response_serializer=reverb_service_pb2.InsertStreamResponse.SerializeToString,
            ),
            "SampleStream": grpc.stream_stream_rpc_method_handler(
                self.SampleStream,
                request_deserializer=identity,
                response_serializer=identity,
            ),
            "InitializeConnection": grpc.stream_stream_rpc_method_handler(
                self.InitializeConnection,
                request_deserializer=identity,
                response_serializer=(
                    reverb_service_pb2.InitializeConnectionResponse.SerializeToString
                ),
            ),
        }
        extensions: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
            "MutatePrioritiesStream": grpc.stream_stream_rpc_method_handler(
                self.MutatePrioritiesStream,
                request_deserializer=identity,
                response_serializer=identity,
            ),
        }
        metrics = self.metrics
        if metrics is not None:
            methods = {name: metrics.timed(name, handler) for name, handler in methods.items()}
            extensions = {
                name: metrics.timed(name, handler) for name, handler in extensions.items()
            }
        return (
            grpc.method_handlers_generic_handler(SERVICE, methods),
            grpc.method_handlers_generic_handler(EXTENSION_SERVICE, extensions),
        )

    async def _abort(
        self, context: grpc.aio.ServicerContext[Any, Any], error: BaseException
    ) -> None:
        code = status_for_error(error)
        self.call_failed(context, code, str(error))
        await context.abort(code, str(error))

    def call_failed(
        self, context: grpc.aio.ServicerContext[Any, Any], code: grpc.StatusCode, message: str
    ) -> None:
        """Logs a call about to end with ``code`` (the metrics count it as it ends)."""
        log_call_error(context, code, message)

    def live_chunk_bytes(self) -> int:
        """The bytes of every chunk the server holds (tables, insert streams), each once.

        PERF(live-chunk-bytes): O(1) with the compiled records, O(chunks held) with the
        pure ones; on a scrape only.
        """
        return self._live_chunks.nbytes

    def _open_stream(self, method: str) -> None:
        """Counts a stream in; past ``max_streams`` it is refused."""
        limit = self.limits.max_streams
        if limit is not None and self.open_streams >= limit:
            raise errors.ResourceExhaustedError(
                f"The server has {self.open_streams} streams open, its limit "
                f"(ServerLimits.max_streams={limit}): try again later."
            )
        self.open_streams += 1
        self.streams_by_method[method] += 1

    # ------------------------------------------------------------ unary

    async def ServerInfo(  # noqa: N802 - the proto's method name.
        self,
        request: Any,
        context: grpc.aio.ServicerContext[bytes, reverb_service_pb2.ServerInfoResponse],
    ) -> reverb_service_pb2.ServerInfoResponse:
        try:
            _parse(reverb_service_pb2.ServerInfoRequest, request)
        except errors.ReverbError as error:
            await self._abort(context, error)
        if self.server_id is not None:
            await context.send_initial_metadata(((SERVER_ID_HEADER, self.server_id),))
        response = reverb_service_pb2.ServerInfoResponse()
        response.tables_state_id.CopyFrom(self._tables_state_id)
        response.table_info.extend(table.info_proto() for table in self._tables.values())
        return response

    async def Reset(  # noqa: N802
        self,
        request: Any,
        context: grpc.aio.ServicerContext[bytes, reverb_service_pb2.ResetResponse],
    ) -> reverb_service_pb2.ResetResponse:
        try:
            self._table(_parse(reverb_service_pb2.ResetRequest, request).table).reset()
        except errors.ReverbError as error:
            await self._abort(context, error)
        return reverb_service_pb2.ResetResponse()

    async def MutatePriorities(  # noqa: N802
        self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]
    ) -> bytes:
        try:
            # A malformed request is an InvalidArgumentError (INVALID_ARGUMENT).
            name, keys, priorities, deletes = _impl.mutations.decode_mutate_request(request)
            self._table(name).mutate_columns(keys, priorities, deletes)
        except errors.ReverbError as error:
            await self._abort(context, error)
        return b""  # an empty MutatePrioritiesResponse

    async def MutatePrioritiesStream(  # noqa: N802
        self, request_iterator: Any, context: grpc.aio.ServicerContext[bytes, bytes]
    ) -> None:
        """reverb_py's own method: many ``MutatePriorities`` calls on one stream.

        Each request is a ``MutatePrioritiesRequest``, applied as the unary call applies
        it and answered (in order) with an empty ``MutatePrioritiesResponse``. A request
        the unary call would refuse ends the stream with the unary call's status.

        PERF(mutate-stream): a unary call costs a new HTTP/2 stream on both ends; a
        message on an open stream costs a fraction of it.

        PERF(mutate-answer-task): each answer is written by a task of its own while the
        next request is read, so gRPC is already waiting for that request when it comes
        (an awaited write would first take the write's completion through gRPC's polling
        thread and the event loop). One answer is written at a time, in order: a request
        is applied (or refused) once the answer before it has been written.
        """
        try:
            self._open_stream("MutatePrioritiesStream")
        except errors.ReverbError as error:
            await self._abort(context, error)
        answer: asyncio.Future[None] | None = None
        try:
            async for request in request_iterator:
                if answer is not None:
                    await answer
                try:
                    name, keys, priorities, deletes = _impl.mutations.decode_mutate_request(request)
                    self._table(name).mutate_columns(keys, priorities, deletes)
                except errors.ReverbError as error:
                    await self._abort(context, error)
                if ANSWER_TASK:
                    answer = asyncio.ensure_future(context.write(b""))
                else:
                    await context.write(b"")
            if answer is not None:
                await answer
        finally:
            if answer is not None:
                _settle(answer)
            self.open_streams -= 1
            self.streams_by_method["MutatePrioritiesStream"] -= 1

    async def Checkpoint(  # noqa: N802
        self,
        request: Any,
        context: grpc.aio.ServicerContext[bytes, reverb_service_pb2.CheckpointResponse],
    ) -> reverb_service_pb2.CheckpointResponse:
        try:
            _parse(reverb_service_pb2.CheckpointRequest, request)
        except errors.ReverbError as error:
            await self._abort(context, error)
        if self._checkpointer is None:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "This server has no checkpointer configured."
            )
        # checkpoint() logs a failure: the call ends without a second line.
        try:
            path = await self.checkpoint(peer=peer_of(context))
        except errors.ReverbError as error:
            await context.abort(status_for_error(error), str(error))
        except (OSError, ValueError) as error:
            await context.abort(grpc.StatusCode.INTERNAL, f"Checkpoint failed: {error}")
        return reverb_service_pb2.CheckpointResponse(checkpoint_path=path)

    async def checkpoint(self, kind: str | None = None, peer: str | None = None) -> str:
        """Snapshots every table on the loop, then writes the files in a worker thread.

        The snapshot is taken in one go on the event loop (chunk bytes never change, so
        they need no copy); inserts and samples continue while the files are written.
        One checkpoint is written at a time. Logs one line, written or failed, with its
        ``kind`` (the daemon's ``periodic`` or ``shutdown``) or the ``peer`` that asked.
        """
        async with self._checkpoint_lock:
            started = time.monotonic()
            loop = asyncio.get_running_loop()
            try:
                snapshots = [table.snapshot() for table in self._tables.values()]
                items = sum(len(table) for table in self._tables.values())
                path: str = await loop.run_in_executor(None, self._checkpointer.save, snapshots)
                size = await loop.run_in_executor(None, directory_bytes, path)
            except Exception as error:
                log_checkpoint_failed(time.monotonic() - started, error, kind, peer)
                if self.metrics is not None:
                    self.metrics.checkpoint_failed()
                raise
            seconds = time.monotonic() - started
            log_checkpoint("written to", path, seconds, len(snapshots), items, size, kind, peer)
            if self.metrics is not None:
                self.metrics.checkpoint_written(seconds, size, items)
            return path

    async def InitializeConnection(  # noqa: N802
        self,
        request_iterator: Any,
        context: grpc.aio.ServicerContext[
            bytes,
            reverb_service_pb2.InitializeConnectionResponse,
        ],
    ) -> Any:
        # The in-process shortcut is not offered: answer address 0 and end.
        async for data in request_iterator:
            try:
                _parse(reverb_service_pb2.InitializeConnectionRequest, data)
            except errors.ReverbError as error:
                await self._abort(context, error)
            yield reverb_service_pb2.InitializeConnectionResponse(address=0)
            return

    # ------------------------------------------------------------ insert

    async def InsertStream(  # noqa: N802
        self,
        request_iterator: Any,
        context: grpc.aio.ServicerContext[bytes, reverb_service_pb2.InsertStreamResponse],
    ) -> None:
        try:
            self._open_stream("InsertStream")
        except errors.ReverbError as error:
            await self._abort(context, error)
        stream = _InsertStream(self, context)
        try:
            await stream.run(request_iterator)
        finally:
            stream.release()
            self.open_streams -= 1
            self.streams_by_method["InsertStream"] -= 1

    # ------------------------------------------------------------ sample

    async def SampleStream(  # noqa: N802
        self,
        request_iterator: Any,
        context: grpc.aio.ServicerContext[bytes, bytes],
    ) -> None:
        try:
            self._open_stream("SampleStream")
        except errors.ReverbError as error:
            await self._abort(context, error)
        try:
            await self._sample_stream(request_iterator, context)
        finally:
            self.open_streams -= 1
            self.streams_by_method["SampleStream"] -= 1

    async def _sample_stream(
        self, request_iterator: Any, context: grpc.aio.ServicerContext[bytes, bytes]
    ) -> None:
        # The batch size carries over from one request of the stream to the next.
        batch = FIRST_SAMPLE_BATCH
        try:
            async for data in request_iterator:
                request = _parse(reverb_service_pb2.SampleStreamRequest, data)
                if request.num_samples <= 0:
                    raise errors.InvalidArgumentError(
                        f"num_samples must be > 0, got {request.num_samples}."
                    )
                table = self._table(request.table)
                timeout_ms = request.rate_limiter_timeout.milliseconds
                timeout = timeout_ms / 1000 if timeout_ms > 0 else None
                remaining = request.num_samples
                while remaining > 0:
                    records = await table.sample(min(batch, remaining), timeout=timeout)
                    remaining -= len(records)
                    sent = 0
                    # Each write waits until gRPC's flow control has taken the response:
                    # a client that reads slowly holds the stream here, not in memory.
                    for response in sample_responses(table.name, records):
                        sent += len(response)
                        await context.write(response)
                    batch = next_sample_batch(batch, len(records), sent)
        except errors.ReverbError as error:
            await self._abort(context, error)


def next_sample_batch(batch: int, count: int, sent: int) -> int:
    """The next batch size of a sample stream: double the last, at most
    :data:`MAX_SAMPLE_BATCH` samples and about :data:`MAX_SAMPLE_BATCH_BYTES` (judged by
    the last batch: ``count`` samples whose responses took ``sent`` bytes), and at least
    one sample."""
    if not count:
        return batch
    per_sample = max(1, sent // count)
    return max(1, min(2 * batch, MAX_SAMPLE_BATCH, MAX_SAMPLE_BATCH_BYTES // per_sample))


def _settle(write: asyncio.Future[None]) -> None:
    """Ends a stream's answer write that its handler leaves behind (the handler was
    cancelled or failed): cancelled if still under way, else its outcome is taken (no
    "exception was never retrieved" report for an answer the client did not wait for)."""
    if not write.done():
        write.cancel()
    elif not write.cancelled() and write.exception() is not None:
        _logger.debug("mutation stream: answer not sent: %s", write.exception())


def _parse(message_class: Any, data: bytes) -> Any:
    """``message_class.FromString(data)``; malformed bytes are an ``InvalidArgumentError``.

    (Left to gRPC, a request that does not parse is ``UNKNOWN``, with a message naming
    the generated class.)
    """
    try:
        return message_class.FromString(data)
    except DecodeError:
        name = message_class.DESCRIPTOR.name
        raise errors.InvalidArgumentError(
            f"Malformed {name}: the request's bytes are not a valid {name} message."
        ) from None


_decode_insert_item = _impl.checkpoint_records.decode_insert_item


class _InsertStream:
    """The state of one insert stream: its chunks and its unconfirmed inserts."""

    def __init__(
        self,
        servicer: ReverbServicer,
        context: grpc.aio.ServicerContext[bytes, reverb_service_pb2.InsertStreamResponse],
    ) -> None:
        self._servicer = servicer
        self._context = context
        self._chunks: dict[int, Chunk] = {}
        # Bytes of the chunks in self._chunks (also counted in the servicer's total).
        self._chunk_bytes = 0
        self._confirmed: list[int] = []
        self._wakeup = asyncio.Event()
        self._pending: set[asyncio.Future[None]] = set()
        self._error: BaseException | None = None
        self._done = False

    def release(self) -> None:
        self._chunks.clear()
        self._servicer.held_chunk_bytes -= self._chunk_bytes
        self._chunk_bytes = 0
        for future in self._pending:
            future.cancel()
        self._pending.clear()

    async def run(self, request_iterator: Any) -> None:
        writer = asyncio.ensure_future(self._write_confirmations())
        failure: errors.ReverbError | None = None
        try:
            async for raw in request_iterator:
                self._handle(parse_insert_request(raw))
                self._wakeup.set()
                await self._respect_back_pressure()
                if self._error is not None:
                    raise self._error
            # The client finished sending: confirm what is still waiting for its table.
            while self._pending and self._error is None:
                await asyncio.wait(set(self._pending), return_when=asyncio.FIRST_COMPLETED)
            if self._error is not None:
                raise self._error
        except errors.ReverbError as error:
            failure = error
        finally:
            self._done = True
            self._wakeup.set()
            if failure is None:
                await writer
            else:
                # The confirmations already due go out first, then the error: a writer
                # cancelled in the middle of a write would leave the call without a status.
                await self._stop_writer(writer)
        if failure is not None:
            await self._context.abort(status_for_error(failure), str(failure))

    @staticmethod
    async def _stop_writer(writer: asyncio.Future[None]) -> None:
        """Lets the confirmation writer finish, within a bound: a client that does not
        read may keep a write waiting; then the writer is cancelled."""
        done, _ = await asyncio.wait({writer}, timeout=_CONFIRMATION_DRAIN_S)
        if not done:
            writer.cancel()
            await asyncio.wait({writer})
        elif not writer.cancelled() and writer.exception() is not None:
            _logger.debug("insert stream: confirmations not sent: %s", writer.exception())

    def _handle(self, request: tuple[list[bytes], list[bytes], list[int]]) -> None:
        chunk_data, items, keep_chunk_keys = request
        if not chunk_data and not items:
            raise errors.InvalidArgumentError("An insert stream request must hold chunks or items.")
        live = self._servicer._live_chunks
        for data in chunk_data:
            chunk = parse_chunk(data)
            key = chunk.key
            known = live.add(chunk)
            if known is not chunk:
                if known.data != chunk.data:
                    raise errors.InvalidArgumentError(
                        f"Chunk {key} was sent again with different bytes: the server "
                        "already holds a different chunk under that key."
                    )
                chunk = known  # resent as it was (a reconnect): the one copy is shared
            if key not in self._chunks:
                self._hold(chunk)
        # Every item of the request is checked before any goes in.
        inserts = [self._prepare(data) for data in items]
        for table, item in inserts:
            self._insert(table, item)
        if items:
            keep = set(keep_chunk_keys)
            for key in [key for key in self._chunks if key not in keep]:
                self._drop(key)
            # As Reverb: a key listed twice counts twice, so it is refused too.
            if len(self._chunks) < len(keep_chunk_keys):
                raise errors.FailedPreconditionError(
                    "Kept fewer chunks than the client asked to keep: "
                    f"{sorted(keep - set(self._chunks))[:10]} were never sent."
                )

    def _hold(self, chunk: Chunk) -> None:
        size = len(chunk.data)
        limits = self._servicer.limits
        stream_limit = limits.max_stream_chunk_bytes
        if stream_limit is not None and self._chunk_bytes + size > stream_limit:
            raise errors.ResourceExhaustedError(
                f"Chunk {chunk.key} ({describe_bytes(size)}) would make this insert stream "
                f"keep {describe_bytes(self._chunk_bytes + size)} of chunks, over its limit "
                f"(ServerLimits.max_stream_chunk_bytes={stream_limit}): chunks must be "
                "referenced by items or left out of keep_chunk_keys."
            )
        total_limit = limits.max_held_chunk_bytes
        total = self._servicer.held_chunk_bytes
        if total_limit is not None and total + size > total_limit:
            raise errors.ResourceExhaustedError(
                f"Chunk {chunk.key} ({describe_bytes(size)}) would make the insert streams "
                f"keep {describe_bytes(total + size)} of chunks, over the server's limit "
                f"(ServerLimits.max_held_chunk_bytes={total_limit}): try again later."
            )
        self._chunks[chunk.key] = chunk
        self._chunk_bytes += size
        self._servicer.held_chunk_bytes += size

    def _drop(self, key: int) -> None:
        size = len(self._chunks.pop(key).data)
        self._chunk_bytes -= size
        self._servicer.held_chunk_bytes -= size

    def _prepare(self, data: bytes) -> tuple[Table, Item]:
        # PERF(insert-decode): an item in the layout writers send, whose slices all fit
        # chunks this stream holds, is read straight from its bytes; any other is parsed
        # by protobuf and checked below, which says what is wrong with it.
        # An error is raised only from the protobuf path, whose traceback then holds no
        # item (nor its chunks).
        decoded = _decode_insert_item(data, self._chunks, Item)
        if decoded is not None:
            table = self._servicer._tables.get(decoded[0])
            if table is not None:
                return table, decoded[1]
            decoded = None
        message = _parse(schema_pb2.PrioritizedItem, data)
        table = self._servicer._table(message.table)
        columns = message.flat_trajectory.columns
        if not columns or not columns[0].chunk_slices:
            raise errors.InvalidArgumentError(
                f"Item {message.key} has an empty trajectory: it needs at least one column "
                "whose first column has at least one slice."
            )
        chunks = chunks_of_item(message.key, columns, self._chunks)
        item = Item(
            message.key,
            message.priority,
            # NOTE(trajectory-bytes): kept serialised; a parsed sub-message would pin its
            # parent's whole arena (about 1.2 KB per item).
            trajectory=message.flat_trajectory.SerializeToString(),
            chunks=tuple(chunks),
            episode_ids=tuple(chunk.episode_id for chunk in chunks),
            times_sampled=message.times_sampled,
        )
        return table, item

    def _insert(self, table: Table, item: Item) -> None:
        future = table.insert_or_enqueue(item)
        if future is None:
            self._confirmed.append(item.key)
            return
        self._pending.add(future)
        key = item.key

        def done(fut: asyncio.Future[None]) -> None:
            self._pending.discard(fut)
            if fut.cancelled():
                return
            error = fut.exception()
            if error is not None:
                if self._error is None:
                    self._error = error
            else:
                self._confirmed.append(key)
            self._wakeup.set()

        future.add_done_callback(done)

    async def _respect_back_pressure(self) -> None:
        while self._pending and self._error is None:
            full = [
                table
                for table in self._servicer._tables.values()
                if table.num_pending_inserts >= table.max_enqueued_inserts
            ]
            if not full:
                return
            await asyncio.wait(set(self._pending), return_when=asyncio.FIRST_COMPLETED)

    async def _write_confirmations(self) -> None:
        while not self._done:
            await self._wakeup.wait()
            self._wakeup.clear()
            await self._flush_confirmations()
        await self._flush_confirmations()

    async def _flush_confirmations(self) -> None:
        if not self._confirmed:
            return
        keys, self._confirmed = self._confirmed, []
        await self._context.write(reverb_service_pb2.InsertStreamResponse(keys=keys))
