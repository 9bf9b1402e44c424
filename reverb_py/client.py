"""The blocking client (Reverb's ``reverb.Client``) and the legacy ``Writer``.

A blocking client runs the asyncio client on one background event-loop thread shared by
every blocking client of the process, so it can be used from plain synchronous code and
from many threads at once.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import grpc

from reverb_py import _impl, aio, errors
from reverb_py._client import polled_insert
from reverb_py._client.channel import (
    MUTATE_PRIORITIES_PATH,
    channel_options,
    shared_loop_thread,
)
from reverb_py._client.mutations import BlockingMutateStreams
from reverb_py._client.sampling import DEFAULT_WAIT_REPORT_S
from reverb_py._client.targets import num_shards
from reverb_py._status import error_from_rpc
from reverb_py._writer import engine, factory
from reverb_py._writer.legacy_writer import Writer, check_arguments
from reverb_py.replay_sample import ReplaySample
from reverb_py.reverb_types import TableInfo
from reverb_py.structured_writer import StructuredWriter
from reverb_py.trajectory_writer import TrajectoryWriter

__all__ = ["Client", "Writer"]

_DONE = object()
# Samples a blocking `sample` iterator decodes ahead of its consumer, and how many the
# consumer takes before it lets the stream go on: a slow consumer holds the stream (and
# the server's flow control), not memory.
_SAMPLE_WINDOW = 64
_SAMPLE_CREDIT = 16


class Client:
    """A blocking client of a reverb_py or Reverb server.

    Args:
      server_address: ``host:port``, or any gRPC target (``dns:///...``, ``ipv4:a,b``)
        to spread calls over several servers (round robin).
      token: The server's bearer token, as for :class:`reverb_py.aio.Client` (None:
        ``$REVERB_PY_TOKEN`` or ``$REVERB_PY_TOKEN_FILE``).
      root_certificates: The CA of the server's certificate (TLS), as for
        :class:`reverb_py.aio.Client`.
      private_key: The client's key (mutual TLS), as for :class:`reverb_py.aio.Client`.
      certificate_chain: The client's certificate (mutual TLS), as for
        :class:`reverb_py.aio.Client`.

    Every writer and sampler of the client uses its credentials.

    Construction never blocks. Clients pickle by address and the credentials given in
    code (as given: file paths stay paths; a token left to the environment is read again
    where the client is unpickled): an unpickled client makes a new connection. Safe to
    share between threads.
    """

    def __init__(
        self,
        server_address: str,
        token: str | None = None,
        root_certificates: bytes | str | None = None,
        private_key: bytes | str | None = None,
        certificate_chain: bytes | str | None = None,
    ) -> None:
        self._server_address = server_address
        self._loop_thread = shared_loop_thread()
        self._client = aio.Client(
            server_address, token, root_certificates, private_key, certificate_chain
        )
        # The blocking channel of mutate_priorities (made on first use), and the same
        # with the token on every call.
        self._blocking_channel: grpc.Channel | None = None
        self._mutate_channel: grpc.Channel | None = None
        self._mutate: Any = None  # the MutatePriorities call on _mutate_channel
        self._mutate_lock = threading.Lock()
        self._mutate_streams = BlockingMutateStreams(
            self._blocking_channel_or_new, self._client._credentials.metadata()
        )
        self._single_server: bool | None = None

    @property
    def server_address(self) -> str:
        return self._server_address

    def __repr__(self) -> str:
        return f"Client, server_address={self._server_address}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._server_address, *self._client._credential_args))

    def _run(self, coro: Any) -> Any:
        return self._loop_thread.run(coro)

    # ------------------------------------------------------------ unary calls

    def server_info(self, timeout: float | None = None) -> dict[str, TableInfo]:
        """The server's tables by name; waits for the server (``timeout`` seconds).

        Raises:
          DeadlineExceededError: the timeout passed first.
        """
        result: dict[str, TableInfo] = self._run(self._client.server_info(timeout))
        return result

    def server_info_with_source(
        self, timeout: float | None = None
    ) -> tuple[str | None, dict[str, TableInfo]]:
        """:meth:`server_info` and the server that answered (``host:port``; None for
        a server that does not say, such as dm-reverb's)."""
        result: tuple[str | None, dict[str, TableInfo]] = self._run(
            self._client.server_info_with_source(timeout)
        )
        return result

    def server_info_by_server(
        self, timeout: float | None = None
    ) -> dict[str, dict[str, TableInfo]]:
        """Every server's tables, keyed by the address the target names it by.

        Raises:
          DeadlineExceededError: a server did not answer within ``timeout`` seconds.
        """
        result: dict[str, dict[str, TableInfo]] = self._run(
            self._client.server_info_by_server(timeout)
        )
        return result

    def shard_clients(self) -> list[Client]:
        """One client per server the target names (``ipv4:``/``ipv6:`` lists split,
        ``dns:`` names resolved now), with this client's credentials.

        A key lives on the server its item was written to, and a server ignores keys
        it does not hold: to update priorities whatever server holds them, call
        :meth:`mutate_priorities` on every shard client.
        """
        return [
            Client(shard.server_address, *self._client._credential_args)
            for shard in self._client.shard_clients()
        ]

    def mutate_priorities(
        self,
        table: str,
        updates: Mapping[int, float] | None = None,
        deletes: Sequence[int] | None = None,
    ) -> None:
        """Updates priorities and deletes items of ``table``; unknown keys are ignored.

        With a target of several servers the call goes to one of them (round robin),
        which ignores the keys it does not hold; see :meth:`shard_clients`.
        """
        encoded = _impl.mutations.encode_mutate_request(table, updates, deletes)
        if encoded is None:
            # Keys or priorities that are not plain numbers: the message raises its errors.
            self._run(self._client.mutate_priorities(table, updates, deletes))
            return
        if self._single_server is None:
            self._single_server = num_shards(self._server_address) == 1
        if self._single_server and self._mutate_streams.send(encoded):
            return
        try:
            self._mutate_call()(encoded, wait_for_ready=True)
        except grpc.RpcError as error:
            raise error_from_rpc(error) from None

    def _mutate_channel_or_new(self) -> grpc.Channel:
        # PERF(sync-mutate): a blocking gRPC channel (made on first use) serves
        # MutatePriorities from the caller's thread (on the mutation stream, else the
        # unary call), with no hand-off to the loop thread and back. It connects like
        # the asyncio channel (same target and options, wait_for_ready) and its errors
        # map the same way.
        channel = self._mutate_channel
        if channel is None:
            plain = self._blocking_channel_or_new()
            with self._mutate_lock:
                if self._mutate_channel is None:
                    self._mutate_channel = self._client._credentials.with_token(plain)
                channel = self._mutate_channel
        return channel

    def _blocking_channel_or_new(self) -> grpc.Channel:
        channel = self._blocking_channel
        if channel is None:
            with self._mutate_lock:
                if self._blocking_channel is None:
                    self._blocking_channel = self._client._credentials.plain_channel(
                        self._server_address, channel_options()
                    )
                channel = self._blocking_channel
        return channel

    def _mutate_call(self) -> Any:
        call = self._mutate
        if call is None:
            call = self._mutate = self._mutate_channel_or_new().unary_unary(MUTATE_PRIORITIES_PATH)
        return call

    def reset(self, table: str) -> None:
        """Removes every item of ``table`` and resets its rate limiter."""
        self._run(self._client.reset(table))

    def checkpoint(self) -> str:
        """Asks the server to write a checkpoint; returns its path."""
        path: str = self._run(self._client.checkpoint())
        return path

    def insert(self, data: Any, priorities: Mapping[str, float]) -> None:
        """Inserts one step of ``data`` as an item in every table of ``priorities``.

        Blocks until the server confirmed every item. The first call fetches the
        tables' signatures (waiting for the server); they are kept for later calls.

        Raises:
          InvalidArgumentError: ``priorities`` is empty, names a table the server does
            not have, or ``data`` does not match a table's signature (number of leaves,
            a dtype, or a shape compatible neither per step nor with the time
            dimension). Nothing is inserted then.
        """
        self._run(self._client.insert(data, priorities))

    def _insert(self, data: Any, items: Sequence[tuple[str, float]]) -> None:
        """:meth:`insert` of one item per ``(table, priority)`` (a table may repeat)."""
        self._run(self._client._insert(data, items))

    # ------------------------------------------------------------ sampling

    def sample(
        self,
        table: str,
        num_samples: int = 1,
        *,
        emit_timesteps: bool = True,
        unpack_as_table_signature: bool = False,
        rate_limiter_timeout_ms: int | None = None,
        wait_report_s: float | None = DEFAULT_WAIT_REPORT_S,
    ) -> Iterator[ReplaySample | list[ReplaySample]]:
        """A generator of ``num_samples`` samples of ``table``.

        Nothing is requested before the first ``next()``. Blocks while the rate limiter
        forbids sampling (at most ``rate_limiter_timeout_ms`` when given); every
        ``wait_report_s`` seconds of waiting it logs (INFO, logger ``reverb_py``) what the
        table's rate limiter waits for (None: never).

        Yields:
          With ``emit_timesteps`` (the default) a list of :class:`ReplaySample`, one per
          time step; otherwise one :class:`ReplaySample` with the whole trajectory.
        """
        if num_samples < 1:
            raise errors.InvalidArgumentError(f"num_samples must be >= 1, got {num_samples}.")
        return self._sample(
            table,
            num_samples,
            emit_timesteps,
            unpack_as_table_signature,
            rate_limiter_timeout_ms,
            wait_report_s,
        )

    def _sample(
        self,
        table: str,
        num_samples: int,
        emit_timesteps: bool,
        unpack_as_table_signature: bool,
        rate_limiter_timeout_ms: int | None,
        wait_report_s: float | None,
    ) -> Iterator[ReplaySample | list[ReplaySample]]:
        results: queue.SimpleQueue[Any] = queue.SimpleQueue()
        stop = threading.Event()
        loop = self._loop_thread.loop
        # Credit for the pump (touched on the loop only): samples it may still hand over.
        credit = [_SAMPLE_WINDOW]
        waiter: list[asyncio.Future[None] | None] = [None]

        def grant(n: int) -> None:
            credit[0] += n
            pending = waiter[0]
            if pending is not None and not pending.done():
                pending.set_result(None)

        async def pump() -> None:
            try:
                async for sample in self._client.sample(
                    table,
                    num_samples,
                    emit_timesteps=emit_timesteps,
                    unpack_as_table_signature=unpack_as_table_signature,
                    rate_limiter_timeout_ms=rate_limiter_timeout_ms,
                    wait_report_s=wait_report_s,
                ):
                    results.put(sample)
                    if stop.is_set():
                        return
                    credit[0] -= 1
                    while credit[0] <= 0:
                        room: asyncio.Future[None] = loop.create_future()
                        waiter[0] = room
                        await room
            except asyncio.CancelledError:
                raise
            except BaseException as error:  # noqa: BLE001 - handed to the consumer.
                results.put(error)
                return
            results.put(_DONE)

        future = self._loop_thread.submit(pump())
        taken = 0
        try:
            while True:
                item = results.get()
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                taken += 1
                if taken == _SAMPLE_CREDIT:
                    loop.call_soon_threadsafe(grant, taken)
                    taken = 0
                yield item
        finally:
            stop.set()
            if not future.done():
                future.cancel()

    # ------------------------------------------------------------ writers

    def trajectory_writer(
        self,
        num_keep_alive_refs: int,
        *,
        validate_items: bool = True,
        get_signature_timeout_ms: int | None = -1,
    ) -> TrajectoryWriter:
        """A new :class:`reverb_py.TrajectoryWriter` streaming to this server.

        With ``validate_items`` the server's tables and signatures are fetched first
        (waiting for the server) and every item is checked against them.

        Args:
          num_keep_alive_refs: the most steps an item may span.
          validate_items: check every item against the tables' signatures.
          get_signature_timeout_ms: as in Reverb's later releases: wait at most this
            long for the signatures (a negative value, the default: as long as the
            server takes); None: do not fetch them (no checks).

        Raises:
          DeadlineExceededError: the signatures did not come within
            ``get_signature_timeout_ms``.
        """
        factory.check_num_keep_alive_refs(num_keep_alive_refs)
        wait = factory.signature_wait(validate_items, get_signature_timeout_ms)
        signatures = None if wait is None else self._run(self._client._flat_signatures(wait))
        return factory.new_writer(
            self._channel_on_loop,
            self._loop_thread.loop,
            engine.AutoTunedChunkerOptions(num_keep_alive_refs),
            signatures,
            lambda internal, _transport: TrajectoryWriter(internal),
            self._insert_transport_maker(),
        )

    def structured_writer(self, configs: Sequence[Any]) -> StructuredWriter:
        """A new :class:`reverb_py.structured_writer.StructuredWriter` of ``configs``.

        Args:
          configs: ``StructuredWriterConfig`` messages (``structured_writer.create_config``;
            dm-reverb's config messages and serialised configs are accepted too).

        Raises:
          ValueError: ``configs`` is empty or holds an invalid config.
        """
        return factory.new_structured_writer(
            self._channel_on_loop,
            self._loop_thread.loop,
            configs,
            StructuredWriter,
            self._insert_transport_maker(),
        )

    def writer(
        self,
        max_sequence_length: int,
        delta_encoded: bool = False,
        chunk_length: int | None = None,
        max_in_flight_items: int | None = 25,
    ) -> Writer:
        """A legacy :class:`reverb_py.Writer` (one episode per writer).

        Fetches the server's table signatures first (waiting for the server).

        Raises:
          ValueError: ``max_sequence_length < 1``, ``chunk_length`` outside
            ``[1, max_sequence_length]`` or ``max_in_flight_items < 1``.
        """
        # Checked before the signatures are fetched: bad arguments fail at once.
        chunk_length, max_in_flight_items = check_arguments(
            max_sequence_length, chunk_length, max_in_flight_items
        )
        signatures = self._run(self._client._flat_signatures())
        return factory.new_writer(
            self._channel_on_loop,
            self._loop_thread.loop,
            engine.ConstantChunkerOptions(chunk_length, max_sequence_length),
            signatures,
            lambda internal, _transport: Writer(
                internal,
                max_sequence_length,
                chunk_length=chunk_length,
                max_in_flight_items=max_in_flight_items,
                delta_encoded=delta_encoded,
            ),
            self._insert_transport_maker(),
        )

    def _insert_transport_maker(self) -> Callable[[], Any] | None:
        """Makes a writer's transport: the stream the writer's threads drive themselves
        (``PolledInsertTransport``) for a one-server target where this gRPC allows it;
        None: the asyncio ``InsertTransport`` on the loop thread."""
        if not polled_insert.available() or not polled_insert.ENABLED:
            return None
        if self._single_server is None:
            self._single_server = num_shards(self._server_address) == 1
        if not self._single_server:
            # Several servers: writers' streams spread over them from the asyncio
            # channel, whose connections the client's other calls keep up.
            return None
        metadata = self._client._credentials.metadata()
        return lambda: polled_insert.PolledInsertTransport(self._blocking_channel_or_new, metadata)

    def _channel_on_loop(self) -> Any:
        return self._client.channel()
