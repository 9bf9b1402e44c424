"""What the server logs about its clients and its checkpoints, and at which level.

A call that fails because of its client is logged with the peer and the status: at
WARNING when the operator should hear of it (bad input, a limit reached, an unknown
table), at DEBUG when it is part of normal operation (a rate-limiter timeout, a call
cancelled by a stopping server or its own client), at ERROR for the server's own
failures. Checkpoint saves and loads are logged at INFO with their durations.
"""

from __future__ import annotations

import logging
import urllib.parse
from typing import Any

import grpc

__all__ = ["level_of", "log_call_error", "log_checkpoint"]

_logger = logging.getLogger("reverb_py")

_QUIET = {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
_SERVER_FAULTS = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DATA_LOSS}


def level_of(code: grpc.StatusCode) -> int:
    """The level a failed call of status ``code`` is logged at."""
    if code in _QUIET:
        return logging.DEBUG
    if code in _SERVER_FAULTS:
        return logging.ERROR
    return logging.WARNING


def peer_of(context: Any) -> str:
    """The caller's address, readable (gRPC percent-encodes IPv6 brackets)."""
    try:
        return urllib.parse.unquote(context.peer())
    except Exception:  # noqa: BLE001 - the log line must not fail the call.
        return "an unknown peer"


def log_call_error(context: Any, code: grpc.StatusCode, message: str) -> None:
    """Logs a call about to end with ``code``."""
    level = level_of(code)
    if _logger.isEnabledFor(level):
        _logger.log(level, "%s from %s: %s", code.name, peer_of(context), message)


def log_checkpoint(action: str, path: str, seconds: float, tables: int, items: int) -> None:
    """Logs a checkpoint written or loaded: where, how long, how much."""
    _logger.info(
        "checkpoint %s %s in %.3f s (%d tables, %d items)", action, path, seconds, tables, items
    )
