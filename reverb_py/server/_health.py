"""The standard gRPC health service (``grpc.health.v1.Health``) of a server.

Orchestrators (Kubernetes' gRPC probes, ``grpc_health_probe``, load balancers) ask
``Check`` or ``Watch`` for the whole server (service ``""``) or for Reverb's service
(``deepmind.reverb.ReverbService``). Both are NOT_SERVING until the server has loaded
its checkpoint and started, SERVING while it serves, and NOT_SERVING from the moment it
starts stopping. The health service needs no token (probes carry none); it is an extra
service beside Reverb's, which it leaves unchanged.
"""

from __future__ import annotations

from typing import Any

import grpc

from reverb_py._proto import SERVICE

__all__ = ["HEALTH_SERVICE", "Health"]

HEALTH_SERVICE = "grpc.health.v1.Health"


class Health:
    """The health service of one ``grpc.aio`` server (used on the server's loop)."""

    SERVICES = ("", SERVICE)

    def __init__(self, server: grpc.aio.Server) -> None:
        from grpc_health.v1 import health, health_pb2, health_pb2_grpc

        self._pb2: Any = health_pb2
        self._servicer: Any = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._servicer, server)

    async def _set_all(self, status: Any) -> None:
        for service in self.SERVICES:
            await self._servicer.set(service, status)

    async def not_serving(self) -> None:
        """Before the server serves: NOT_SERVING (the servicer's own default is SERVING)."""
        await self._set_all(self._pb2.HealthCheckResponse.NOT_SERVING)

    async def serving(self) -> None:
        await self._set_all(self._pb2.HealthCheckResponse.SERVING)

    async def stopping(self) -> None:
        """NOT_SERVING for good: later calls to :meth:`serving` change nothing."""
        await self._servicer.enter_graceful_shutdown()
