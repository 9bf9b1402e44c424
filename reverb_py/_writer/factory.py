"""The one construction path of every writer: engine, insert stream and Reverb's API.

``Client.trajectory_writer``, ``Client.writer`` and ``aio.Client.trajectory_writer``
each fetch what they need (the table signatures) their own way, blocking or awaiting,
then call :func:`new_writer`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import grpc

from reverb_py._client.insert_transport import InsertTransport
from reverb_py._writer import engine

__all__ = ["check_num_keep_alive_refs", "new_writer"]

W = TypeVar("W")


def check_num_keep_alive_refs(num_keep_alive_refs: int) -> None:
    """Raises ``ValueError`` unless ``num_keep_alive_refs`` is at least 1 (as Reverb)."""
    if num_keep_alive_refs < 1:
        raise ValueError(f"num_keep_alive_refs ({num_keep_alive_refs}) must be a positive integer")


def new_writer(
    channel_getter: Callable[[], grpc.aio.Channel],
    loop: asyncio.AbstractEventLoop,
    options: engine.ChunkerOptions,
    signatures: Mapping[str, Any] | None,
    wrap: Callable[[engine.InternalTrajectoryWriter, InsertTransport], W],
) -> W:
    """A writer on a new engine streaming over a new insert stream.

    Args:
      channel_getter: Returns the channel to open the insert stream on (called on
        ``loop``).
      loop: The event loop the stream's task runs on.
      options: The engine's default chunker options.
      signatures: Flat table signatures to check items against; None: no checks.
      wrap: Makes the user's writer of the engine and its transport.
    """
    transport = InsertTransport(channel_getter, loop)
    internal = engine.InternalTrajectoryWriter(transport, options, signatures=signatures)
    transport.attach(internal)
    return wrap(internal, transport)
