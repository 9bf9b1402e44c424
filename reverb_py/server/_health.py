"""The standard gRPC health service (``grpc.health.v1.Health``) of a server.

Orchestrators (Kubernetes' gRPC probes, ``grpc_health_probe``, load balancers) ask
``Check`` or ``Watch`` for the whole server (service ``""``) or for Reverb's service
(``deepmind.reverb.ReverbService``). Both are NOT_SERVING while the server loads its
checkpoint (the port is bound and answers meanwhile, so a readiness probe tells a
loading server from a dead one), SERVING while it serves, and NOT_SERVING from the
moment it starts stopping. Reverb's calls that arrive during the load wait for it
(:class:`ReadyGate`), as they would wait for a server not yet listening. The health
service needs no token (probes carry none); it is an extra service beside Reverb's,
which it leaves unchanged.

The two messages are tiny (``HealthCheckRequest.service`` is field 1, a string;
``HealthCheckResponse.status`` field 1, an enum) and are read and written here by hand:
``grpcio-health-checking``, which would provide them, requires a protobuf as new as its
grpcio, and so cannot be installed beside TensorFlow 2.15-2.20 (protobuf < 5 or < 6).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from reverb_py import errors
from reverb_py._client.channel import identity
from reverb_py._codec.fields import message_fields
from reverb_py._proto import SERVICE

__all__ = ["HEALTH_SERVICE", "NOT_SERVING", "SERVICE_UNKNOWN", "SERVING", "Health", "ReadyGate"]

HEALTH_SERVICE = "grpc.health.v1.Health"
_HEALTH_PREFIX = f"/{HEALTH_SERVICE}/"

# HealthCheckResponse.ServingStatus.
SERVING = 1
NOT_SERVING = 2
SERVICE_UNKNOWN = 3


def _response(status: int) -> bytes:
    return bytes((0x08, status))  # field 1, varint


def _service_of(request: bytes) -> str:
    """``HealthCheckRequest.service`` (the last one, as protobuf merges)."""
    service = b""
    for number, wire_type, value in message_fields(request):
        if number == 1 and wire_type == 2:
            service = bytes(value)
    return service.decode("utf-8", errors="replace")


class Health:
    """The health service of one ``grpc.aio`` server (used on the server's loop)."""

    SERVICES = ("", SERVICE)

    def __init__(self, server: grpc.aio.Server) -> None:
        self._status = dict.fromkeys(self.SERVICES, NOT_SERVING)
        self._stopping = False
        self._changed = asyncio.Event()
        server.add_generic_rpc_handlers((self._handler(),))

    def _handler(self) -> grpc.GenericRpcHandler:
        methods: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
            "Check": grpc.unary_unary_rpc_method_handler(
                self._check, request_deserializer=identity, response_serializer=identity
            ),
            "Watch": grpc.unary_stream_rpc_method_handler(
                self._watch, request_deserializer=identity, response_serializer=identity
            ),
        }
        return grpc.method_handlers_generic_handler(HEALTH_SERVICE, methods)

    def _parse(self, request: bytes) -> str:
        try:
            return _service_of(request)
        except errors.ReverbError as error:
            raise errors.InvalidArgumentError(f"Malformed HealthCheckRequest: {error}") from None

    async def _check(self, request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        try:
            service = self._parse(request)
        except errors.InvalidArgumentError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        status = self._status.get(service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {service!r}")
        return _response(status)

    async def _watch(
        self, request: bytes, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[bytes]:
        try:
            service = self._parse(request)
        except errors.InvalidArgumentError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        last = None
        while True:
            status = self._status.get(service, SERVICE_UNKNOWN)
            if status != last:
                yield _response(status)
                last = status
                # The status may have changed (or the server begun stopping) while the
                # response was sent: look again before ending or waiting.
                continue
            if self._stopping:
                return
            await self._changed.wait()

    def _set_all(self, status: int) -> None:
        for service in self.SERVICES:
            self._status[service] = status
        # Wake every watcher once; later waits use a fresh event.
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def not_serving(self) -> None:
        """Before the server serves: NOT_SERVING."""
        self._set_all(NOT_SERVING)

    async def serving(self) -> None:
        if not self._stopping:
            self._set_all(SERVING)

    async def stopping(self) -> None:
        """NOT_SERVING for good: later calls to :meth:`serving` change nothing; watchers
        get the change and their streams end."""
        self._stopping = True
        self._set_all(NOT_SERVING)


class ReadyGate(grpc.aio.ServerInterceptor):
    """Holds every call but the health service's until :meth:`open` (the server has
    loaded its checkpoint). Made and used on the server's loop."""

    def __init__(self) -> None:
        self._open = False
        self._opened = asyncio.Event()

    def __repr__(self) -> str:
        return f"ReadyGate(open={self._open})"

    def open(self) -> None:
        self._open = True
        self._opened.set()

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        # PERF(ready-gate): once open, one attribute test per call (not per message).
        if not self._open and not handler_call_details.method.startswith(_HEALTH_PREFIX):
            await self._opened.wait()
        return await continuation(handler_call_details)
