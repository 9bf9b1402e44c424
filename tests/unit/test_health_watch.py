"""The health service's Watch stream, driven step by step: a change made while a
response is being sent is never lost, and the stream ends only after NOT_SERVING."""

from __future__ import annotations

from typing import Any

import pytest
from grpc_health.v1 import health_pb2

from reverb_py.server._health import NOT_SERVING, SERVING, Health


class _Server:
    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self.handlers = handlers


def _status(response: bytes) -> int:
    return health_pb2.HealthCheckResponse.FromString(response).status


def _watch(health: Health) -> Any:
    return health._watch(health_pb2.HealthCheckRequest().SerializeToString(), None)


async def test_stopping_while_serving_is_sent_still_sends_not_serving() -> None:
    health = Health(_Server())  # type: ignore[arg-type]
    await health.serving()
    watch = _watch(health)
    assert _status(await watch.__anext__()) == SERVING
    # The server begins to stop while SERVING is on its way (the generator is paused at
    # its yield): the next response is still NOT_SERVING, then the stream ends.
    await health.stopping()
    assert _status(await watch.__anext__()) == NOT_SERVING
    with pytest.raises(StopAsyncIteration):
        await watch.__anext__()


async def test_a_change_made_while_a_response_is_sent_is_not_lost() -> None:
    health = Health(_Server())  # type: ignore[arg-type]
    watch = _watch(health)
    assert _status(await watch.__anext__()) == NOT_SERVING
    await health.serving()
    assert _status(await watch.__anext__()) == SERVING
    await health.stopping()
    assert _status(await watch.__anext__()) == NOT_SERVING
    with pytest.raises(StopAsyncIteration):
        await watch.__anext__()
