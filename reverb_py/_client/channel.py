"""What every client of the process shares: channel settings, method paths, the loop.

* :func:`channel_options`: Reverb's client channel settings, for the asyncio channels
  and the blocking ``MutatePriorities`` channel alike;
* the method paths, under Reverb's service name :data:`reverb_py._proto.SERVICE`, and
  the one reverb_py adds (:data:`MUTATE_STREAM_PATH`);
* :func:`identity`: the (de)serializer of calls whose messages are bytes already;
* :func:`shared_loop_thread`: the background event loop every blocking client runs on.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from reverb_py._loop_thread import LoopThread
from reverb_py._proto import EXTENSION_SERVICE, SERVICE

__all__ = [
    "INSERT_STREAM_PATH",
    "MUTATE_PRIORITIES_PATH",
    "MUTATE_STREAM_PATH",
    "PATH_PREFIX",
    "SAMPLE_STREAM_PATH",
    "SERVER_INFO_PATH",
    "channel_options",
    "identity",
    "shared_loop_thread",
]

PATH_PREFIX = f"/{SERVICE}/"
"""Every method is at ``PATH_PREFIX + <Method>`` (Reverb's paths)."""

INSERT_STREAM_PATH = PATH_PREFIX + "InsertStream"
SAMPLE_STREAM_PATH = PATH_PREFIX + "SampleStream"
MUTATE_PRIORITIES_PATH = PATH_PREFIX + "MutatePriorities"
SERVER_INFO_PATH = PATH_PREFIX + "ServerInfo"
MUTATE_STREAM_PATH = f"/{EXTENSION_SERVICE}/MutatePrioritiesStream"
"""reverb_py's own method: ``MutatePriorities`` as one bidirectional stream of many
calls (see :mod:`reverb_py._client.mutations`)."""


def channel_options() -> list[tuple[str, Any]]:
    """Reverb's client channel settings: round robin, unlimited sizes, 30 s backoff; and
    connections of the channel's own."""
    return [
        ("grpc.lb_policy_name", "round_robin"),
        ("grpc.max_send_message_length", -1),
        ("grpc.max_receive_message_length", -1),
        ("grpc.max_reconnect_backoff_ms", 30_000),
        ("grpc.enable_retries", 0),
        # A channel's connections are its own: a new client reaches a server that came
        # back on the same address at once, instead of sharing the connections of an
        # older client's channel that are waiting out their reconnect backoff (gRPC's
        # process-wide pool would fail its first calls with UNAVAILABLE).
        ("grpc.use_local_subchannel_pool", 1),
    ]


def identity(data: bytes) -> bytes:
    """The serializer (and deserializer) of a message that is already bytes."""
    return data


_shared_loop: LoopThread | None = None
_shared_loop_lock = threading.Lock()
_forked_while_running = False


def shared_loop_thread() -> LoopThread:
    """The event-loop thread of every blocking client (started on first use).

    Raises:
      RuntimeError: this process was forked while its parent's loop thread ran gRPC
        calls, which gRPC cannot continue in a child (it would abort the process).
    """
    global _shared_loop
    with _shared_loop_lock:
        if _forked_while_running:
            raise RuntimeError(
                "This process was forked from one whose reverb_py clients were running; "
                "gRPC cannot be used after such a fork. Create clients and datasets after "
                "forking (e.g. in each DataLoader worker), or start the workers with the "
                "'spawn' or 'forkserver' method (DataLoader(multiprocessing_context=...))."
            )
        if _shared_loop is None:
            _shared_loop = LoopThread(name="reverb_py-client")
        return _shared_loop


def _after_fork_in_child() -> None:
    # The parent's loop thread does not exist in the child: never hand it out.
    global _shared_loop, _shared_loop_lock, _forked_while_running
    _forked_while_running = _forked_while_running or _shared_loop is not None
    _shared_loop = None
    _shared_loop_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
