"""The asyncio client: Reverb's client operations as coroutines.

Many actor coroutines can share one :class:`Client`. A client belongs to the event loop
it is first used on (gRPC's asyncio channels do); use one client per loop.

Example::

    client = reverb_py.aio.Client("localhost:8000")
    async with await client.trajectory_writer(num_keep_alive_refs=2) as writer:
        writer.append({"obs": obs})
        writer.create_item("my_table", 1.0, {"obs": writer.history["obs"][-1]})
        await writer.flush()
    async for sample in client.sample("my_table", num_samples=8):
        ...
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import grpc

from reverb_py import _impl, errors
from reverb_py._client.channel import (
    MUTATE_PRIORITIES_PATH,
    PATH_PREFIX,
    channel_options,
    identity,
)
from reverb_py._client.credentials import ClientCredentials
from reverb_py._client.mutations import MutateStreams
from reverb_py._client.sampling import (
    DEFAULT_WAIT_REPORT_S,
    spread_sample_stream,
    to_replay_samples,
)
from reverb_py._client.shared_insert import InsertStreamPool, SharedInsertMember
from reverb_py._client.targets import SERVER_ID_HEADER, addresses, num_shards
from reverb_py._codec import nest
from reverb_py._codec.signature import flatten_signature
from reverb_py._proto import reverb_service_pb2, schema_pb2
from reverb_py._status import error_from_rpc
from reverb_py._writer import engine, factory
from reverb_py._writer.legacy_writer import check_signature
from reverb_py.replay_sample import ReplaySample
from reverb_py.reverb_types import TableInfo
from reverb_py.structured_writer import AsyncStructuredWriter
from reverb_py.tensor_spec import TensorSpec
from reverb_py.trajectory_writer import AsyncTrajectoryWriter

__all__ = ["Client", "channel_options"]


# How long a client of several servers waits, before its first writer, for its channel to
# reach every server (see Client._reach_every_server).
_REACH_EVERY_SERVER_S = 1.0


class Client:
    """An asyncio client of a reverb_py or Reverb server.

    Args:
      server_address: ``host:port``, or any gRPC target (``dns:///...``, ``ipv4:a,b``)
        to spread calls over several servers.
      token: The server's bearer token, sent as ``authorization: Bearer <token>`` on
        every call. None: ``$REVERB_PY_TOKEN``, else the file ``$REVERB_PY_TOKEN_FILE``
        names, else none; ``""``: none.
      root_certificates: The CA that signed the server's certificate (PEM bytes or a
        file path); given, the client connects with TLS.
      private_key: The client's private key (PEM bytes or a file path), for a server
        that asks for a client certificate (mutual TLS).
      certificate_chain: The client's certificate chain (PEM bytes or a file path), with
        ``private_key``.

    Construction never blocks or connects; the connection is made on first use. Every
    writer and sampler of the client uses its credentials. Without a token and TLS the
    wire is Reverb's.
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
        self._credential_args = (token, root_certificates, private_key, certificate_chain)
        self._credentials = ClientCredentials(*self._credential_args)
        self._channel: grpc.aio.Channel | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # The tables' signatures from the first ServerInfo answer: writers made later
        # validate against them without asking again (as Reverb's client caches them),
        # so every new writer stream is the next call the channel spreads.
        self._signatures: dict[str, Any] | None = None
        # The same flattened (see _flat_signatures), made on first use.
        self._flat_signature_cache: dict[str, list[tuple[str, TensorSpec]] | None] | None = None
        self._shards: int | None = None
        # Idle MutatePrioritiesStream calls of the current channel.
        self._mutate_streams = MutateStreams()
        # The insert streams writers share (one server only).
        self._insert_pool: InsertStreamPool | None = None

    @property
    def server_address(self) -> str:
        return self._server_address

    def __repr__(self) -> str:
        return f"reverb_py.aio.Client, server_address={self._server_address}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._server_address, *self._credential_args))

    def channel(self) -> grpc.aio.Channel:
        """The gRPC channel of the running loop (created on first use)."""
        loop = asyncio.get_running_loop()
        if self._channel is None or self._loop is not loop:
            self._channel = self._credentials.aio_channel(self._server_address, channel_options())
            self._loop = loop
            supported = self._mutate_streams.supported
            self._mutate_streams = MutateStreams()
            self._mutate_streams.supported = supported
        return self._channel

    async def close(self) -> None:
        """Closes the channel; open streams are cancelled. Idempotent."""
        if self._channel is not None:
            channel, self._channel = self._channel, None
            self._insert_pool = None
            self._mutate_streams.close()
            await channel.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _unary(
        self,
        method: str,
        request: Any,
        response_cls: Any,
        *,
        timeout: float | None = None,
        wait_for_ready: bool = True,
    ) -> Any:
        call = self.channel().unary_unary(
            PATH_PREFIX + method,
            request_serializer=type(request).SerializeToString,
            response_deserializer=response_cls.FromString,
        )
        try:
            return await call(request, timeout=timeout, wait_for_ready=wait_for_ready)
        except grpc.aio.AioRpcError as error:
            raise error_from_rpc(error) from None

    # ------------------------------------------------------------ unary calls

    async def server_info(self, timeout: float | None = None) -> dict[str, TableInfo]:
        """The tables of the server, by name. Waits for the server to be reachable.

        With a target of several servers, one of them answers (round robin);
        :meth:`server_info_with_source` says which, :meth:`server_info_by_server`
        asks every one.

        Args:
          timeout: Seconds to wait; None or 0 waits forever.

        Raises:
          DeadlineExceededError: the timeout passed first.
        """
        _, infos = await self.server_info_with_source(timeout)
        return infos

    async def server_info_with_source(
        self, timeout: float | None = None
    ) -> tuple[str | None, dict[str, TableInfo]]:
        """:meth:`server_info`, and the server that answered.

        Returns:
          ``(server, tables)``: ``server`` is how a reverb_py server names itself (the
          ``host:port`` it is bound to; the machine's name for a server on every
          interface), None for a server that does not say (dm-reverb).
        """
        call = self.channel().unary_unary(
            PATH_PREFIX + "ServerInfo",
            request_serializer=reverb_service_pb2.ServerInfoRequest.SerializeToString,
            response_deserializer=reverb_service_pb2.ServerInfoResponse.FromString,
        )(reverb_service_pb2.ServerInfoRequest(), timeout=timeout or None, wait_for_ready=True)
        try:
            response = await call
            metadata = await call.initial_metadata()
        except grpc.aio.AioRpcError as error:
            failure = error_from_rpc(error)
            if isinstance(failure, errors.DeadlineExceededError):
                raise errors.DeadlineExceededError(
                    f"ServerInfo call did not complete within provided timeout of {timeout}s"
                ) from None
            raise failure from None
        source = None
        for key, value in metadata or ():
            if key == SERVER_ID_HEADER:
                source = value if isinstance(value, str) else value.decode()
        infos = {info.name: TableInfo.from_proto(info) for info in response.table_info}
        if self._signatures is None:
            self._signatures = {name: info.signature for name, info in infos.items()}
        return source, infos

    def shard_clients(self) -> list[Client]:
        """One client per server the target names, with this client's credentials.

        ``ipv4:``/``ipv6:`` lists are split, ``dns:`` names resolved now; a plain
        ``host:port`` gives one client of it.
        """
        targets = addresses(self._server_address)
        return [Client(address, *self._credential_args) for address in targets]

    async def server_info_by_server(
        self, timeout: float | None = None
    ) -> dict[str, dict[str, TableInfo]]:
        """Every server's tables, keyed by the address the target names it by.

        Raises:
          DeadlineExceededError: a server did not answer within ``timeout`` seconds.
        """
        shards = self.shard_clients()
        try:
            infos = await asyncio.gather(*(shard.server_info(timeout) for shard in shards))
        finally:
            await asyncio.gather(*(shard.close() for shard in shards))
        return {shard.server_address: info for shard, info in zip(shards, infos)}

    async def mutate_priorities(
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
        if encoded is not None:
            channel = self.channel()
            if self._num_shards() == 1 and await self._mutate_streams.send(channel, encoded):
                return
            call = channel.unary_unary(
                MUTATE_PRIORITIES_PATH,
                request_serializer=identity,
                response_deserializer=reverb_service_pb2.MutatePrioritiesResponse.FromString,
            )
            try:
                await call(encoded, wait_for_ready=True)
            except grpc.aio.AioRpcError as error:
                raise error_from_rpc(error) from None
            return
        # Keys or priorities that are not plain numbers: the message raises its errors.
        request = reverb_service_pb2.MutatePrioritiesRequest(table=table)
        if updates:
            request.updates.extend(
                schema_pb2.KeyWithPriority(key=key, priority=priority)
                for key, priority in updates.items()
            )
        if deletes:
            request.delete_keys.extend(deletes)
        await self._unary("MutatePriorities", request, reverb_service_pb2.MutatePrioritiesResponse)

    async def reset(self, table: str) -> None:
        """Removes every item of ``table`` and resets its rate limiter."""
        await self._unary(
            "Reset", reverb_service_pb2.ResetRequest(table=table), reverb_service_pb2.ResetResponse
        )

    async def checkpoint(self) -> str:
        """Asks the server to write a checkpoint; returns its path. Fails fast."""
        response = await self._unary(
            "Checkpoint",
            reverb_service_pb2.CheckpointRequest(),
            reverb_service_pb2.CheckpointResponse,
            wait_for_ready=False,
        )
        return str(response.checkpoint_path)

    # ------------------------------------------------------------ sampling

    async def sample(
        self,
        table: str,
        num_samples: int = 1,
        *,
        emit_timesteps: bool = True,
        unpack_as_table_signature: bool = False,
        rate_limiter_timeout_ms: int | None = None,
        wait_report_s: float | None = DEFAULT_WAIT_REPORT_S,
    ) -> AsyncIterator[ReplaySample | list[ReplaySample]]:
        """Yields ``num_samples`` samples of ``table`` (an async iterator).

        All samples are asked for in one request; the server packs many per response.
        Waits while the rate limiter forbids sampling, at most
        ``rate_limiter_timeout_ms`` when given; every ``wait_report_s`` seconds of waiting
        it logs (INFO, logger ``reverb_py``) what the table's rate limiter waits for
        (None: never).

        Yields:
          With ``emit_timesteps`` (the default) a list of :class:`ReplaySample`, one per
          time step; otherwise one :class:`ReplaySample` with the whole trajectory.
        """
        signature = None
        if unpack_as_table_signature:
            signature = await self._table_signature(table)
        async for info, columns in spread_sample_stream(
            self.channel(),
            table,
            num_samples,
            rate_limiter_timeout_ms,
            self._num_shards(),
            wait_report_s,
        ):
            yield to_replay_samples(
                info, columns, emit_timesteps=emit_timesteps, signature=signature
            )

    def _num_shards(self) -> int:
        if self._shards is None:
            self._shards = num_shards(self._server_address)
        return self._shards

    async def _reach_every_server(self, first: str | None) -> None:
        """Before a client's first writer, with a target of several servers: asks
        ``ServerInfo`` until every server has answered on this channel, for at most
        ``_REACH_EVERY_SERVER_S``. Round robin only picks servers already connected, so
        writers made at once would otherwise all stream to the first ones to connect.
        Ends at once with a server that does not name itself (dm-reverb) and on an error;
        a server that is down holds the first writer back by that bound."""
        shards = self._num_shards()
        if shards <= 1 or first is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _REACH_EVERY_SERVER_S
        seen = {first}
        pause = 0.001
        while len(seen) < shards:
            for _ in range(shards):
                left = deadline - loop.time()
                if left <= 0:
                    return
                try:
                    source, _ = await self.server_info_with_source(left)
                except errors.ReverbError:
                    return
                if source is None:
                    return
                seen.add(source)
            if len(seen) < shards:
                # The others are still connecting: calls now would reach the same ones.
                await asyncio.sleep(min(pause, max(deadline - loop.time(), 0)))
                pause = min(pause * 2, 0.05)

    async def _table_signature(self, table: str) -> Any:
        if self._signatures is None:
            await self.server_info()
        assert self._signatures is not None
        if table not in self._signatures:
            raise errors.InvalidArgumentError(
                f'Could not find table "{table}". The following tables exists: '
                f"{', '.join(sorted(self._signatures))}"
            )
        return self._signatures[table]

    # ------------------------------------------------------------ writing

    async def insert(self, data: Any, priorities: Mapping[str, float]) -> None:
        """Inserts one step of ``data`` as an item of every table in ``priorities``.

        The data is sent once and shared by the items. Returns when the server has
        confirmed every item (a full queue makes this wait). The first call fetches the
        tables' signatures (waiting for the server); they are kept for later calls.

        Raises:
          InvalidArgumentError: ``priorities`` is empty, names a table the server does
            not have, or ``data`` does not match a table's signature (number of leaves,
            a dtype, or a shape compatible neither per step nor with the time
            dimension). Nothing is inserted then.
        """
        if not priorities:
            raise errors.InvalidArgumentError("priorities must contain at least one item")
        await self._insert(data, list(priorities.items()))

    async def _insert(self, data: Any, items: Sequence[tuple[str, float]]) -> None:
        """:meth:`insert` of one item per ``(table, priority)`` (a table may repeat)."""
        signatures = await self._flat_signatures()
        writer = await self.trajectory_writer(1, validate_items=False)
        try:
            writer.append(data)
            item = _last_step_of_every_column(writer)
            # As Reverb's Client.insert (a legacy Writer of one step): each table's
            # signature is checked, all of them before the first item is created.
            step = [(column.dtype, column.shape[1:]) for column in nest.flatten(item)]
            for table, _ in items:
                check_signature(signatures, table, 1, step)
            for table, priority in items:
                writer.create_item(table, priority, item)
            await writer.flush()
        finally:
            await writer.close()

    async def trajectory_writer(
        self,
        num_keep_alive_refs: int,
        *,
        validate_items: bool = True,
        get_signature_timeout_ms: int | None = -1,
    ) -> AsyncTrajectoryWriter:
        """A new :class:`reverb_py.trajectory_writer.AsyncTrajectoryWriter`; the
        arguments and errors of :meth:`reverb_py.Client.trajectory_writer`."""
        factory.check_num_keep_alive_refs(num_keep_alive_refs)
        wait = factory.signature_wait(validate_items, get_signature_timeout_ms)
        signatures = None if wait is None else await self._flat_signatures(wait)
        return factory.new_writer(
            self.channel,
            asyncio.get_running_loop(),
            engine.AutoTunedChunkerOptions(num_keep_alive_refs),
            signatures,
            AsyncTrajectoryWriter,
            self._insert_transport_maker(),
        )

    async def structured_writer(self, configs: Sequence[Any]) -> AsyncStructuredWriter:
        """A new :class:`reverb_py.structured_writer.AsyncStructuredWriter` of ``configs``.

        Args:
          configs: ``StructuredWriterConfig`` messages (``structured_writer.create_config``;
            dm-reverb's config messages and serialised configs are accepted too).

        Raises:
          ValueError: ``configs`` is empty or holds an invalid config.
        """
        return factory.new_structured_writer(
            self.channel,
            asyncio.get_running_loop(),
            configs,
            AsyncStructuredWriter,
            self._insert_transport_maker(),
        )

    def _insert_transport_maker(self) -> Callable[[], SharedInsertMember] | None:
        """Makes a new writer's transport: a place on the client's shared insert streams
        (``shared_insert``) when the target is one server; None (a stream of its own,
        which the channel spreads over the servers) otherwise."""
        if self._num_shards() != 1:
            return None
        loop = asyncio.get_running_loop()
        pool = self._insert_pool
        if pool is None or pool.loop is not loop:
            pool = self._insert_pool = InsertStreamPool(self.channel, loop)
        return pool.member

    async def _flat_signatures(
        self, timeout: float | None = None
    ) -> dict[str, list[tuple[str, TensorSpec]] | None]:
        """The tables' flattened ``(name, spec)`` signatures (None: no signature), from
        the first ``ServerInfo`` answer (asked for here when there was none yet, waiting
        ``timeout`` seconds; None or 0: as long as it takes)."""
        if self._flat_signature_cache is None:
            if self._signatures is None:
                source, _ = await self.server_info_with_source(timeout)
                await self._reach_every_server(source)
            assert self._signatures is not None
            self._flat_signature_cache = {
                name: flatten_signature(signature) if signature is not None else None
                for name, signature in self._signatures.items()
            }
        return self._flat_signature_cache


def _last_step_of_every_column(writer: Any) -> Any:
    """The trajectory of ``Client.insert``: each column's last step, with its time axis."""
    return nest.map_structure(lambda column: column[-1:], writer.history)
