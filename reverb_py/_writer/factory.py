"""The one construction path of every writer: engine, insert stream and Reverb's API.

``Client.trajectory_writer``, ``Client.writer`` and ``aio.Client.trajectory_writer``
each fetch what they need (the table signatures) their own way, blocking or awaiting,
then call :func:`new_writer`; the clients' ``structured_writer`` call
:func:`new_structured_writer`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import grpc

from reverb_py._client.insert_transport import InsertTransport
from reverb_py._writer import engine
from reverb_py._writer import structured_writer as _structured

__all__ = ["check_num_keep_alive_refs", "new_structured_writer", "new_writer"]

W = TypeVar("W")


def check_num_keep_alive_refs(num_keep_alive_refs: int) -> None:
    """Raises ``ValueError`` unless ``num_keep_alive_refs`` is at least 1 (as Reverb)."""
    if num_keep_alive_refs < 1:
        raise ValueError(f"num_keep_alive_refs ({num_keep_alive_refs}) must be a positive integer")
    if num_keep_alive_refs > engine.MAX_CHUNKER_VALUE:
        raise ValueError(
            f"num_keep_alive_refs ({num_keep_alive_refs}) must be <= {engine.MAX_CHUNKER_VALUE}"
        )


def signature_wait(validate_items: bool, get_signature_timeout_ms: int | None) -> float | None:
    """How the writer fetches the tables' signatures: None, not at all; 0, waiting as long
    as the server takes; else at most this many seconds.

    ``get_signature_timeout_ms`` is the argument of Reverb's later releases: None fetches
    nothing, a negative value (the default) waits as long as it takes.
    """
    if not validate_items or get_signature_timeout_ms is None:
        return None
    if get_signature_timeout_ms < 0:
        return 0.0
    return max(get_signature_timeout_ms, 1) / 1000


def new_writer(
    channel_getter: Callable[[], grpc.aio.Channel],
    loop: asyncio.AbstractEventLoop,
    options: engine.ChunkerOptions,
    signatures: Mapping[str, Any] | None,
    wrap: Callable[[engine.InternalTrajectoryWriter, Any], W],
    make_transport: Callable[[], Any] | None = None,
) -> W:
    """A writer on a new engine streaming over a new insert stream.

    Args:
      channel_getter: Returns the channel to open the insert stream on (called on
        ``loop``).
      loop: The event loop the stream's task runs on.
      options: The engine's default chunker options.
      signatures: Flat table signatures to check items against; None: no checks.
      wrap: Makes the user's writer of the engine and its transport.
      make_transport: Makes the transport instead (a blocking client's
        ``PolledInsertTransport``); None: an ``InsertTransport`` on ``loop``.
    """
    transport: Any = (
        InsertTransport(channel_getter, loop) if make_transport is None else make_transport()
    )
    internal = engine.InternalTrajectoryWriter(transport, options, signatures=signatures)
    transport.attach(internal)
    return wrap(internal, transport)


def new_structured_writer(
    channel_getter: Callable[[], grpc.aio.Channel],
    loop: asyncio.AbstractEventLoop,
    configs: Sequence[Any],
    wrap: Callable[[_structured.InternalStructuredWriter, Any], W],
    make_transport: Callable[[], Any] | None = None,
) -> W:
    """A structured writer of ``configs`` on a new engine and insert stream.

    The configs are checked before anything is opened. Each column keeps as many
    references alive as the oldest step a config reads of it; items are not checked
    against table signatures (as in Reverb, the server checks them).

    Args:
      channel_getter, loop, make_transport: as for :func:`new_writer`.
      configs: ``StructuredWriterConfig`` messages (reverb_py's, dm-reverb's, or their
        serialised bytes).
      wrap: Makes the user's writer of the structured engine and the transport.

    Raises:
      ValueError: no configs, or an invalid one (``Invalid configuration at position
        <i>: ...``).
      TypeError: an element that is not a config.
    """
    parsed = _structured.as_configs(configs)
    _structured.validate_configs(parsed)
    keep_alive = max([1, *_structured.max_history_per_column(parsed)])
    return new_writer(
        channel_getter,
        loop,
        engine.AutoTunedChunkerOptions(keep_alive),
        None,
        lambda internal, transport: wrap(
            _structured.InternalStructuredWriter(internal, parsed), transport
        ),
        make_transport,
    )
