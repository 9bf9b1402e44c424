"""What the server logs about its clients and its checkpoints, at which level, and how.

A call that fails because of its client is logged with the peer and the status: at
WARNING when the operator should hear of it (bad input, a limit reached, an unknown
table), at DEBUG when it is part of normal operation (a rate-limiter timeout, a call
cancelled by a stopping server or its own client), at ERROR for the server's own
failures. Each checkpoint event is one line: written or loaded at INFO with its
duration and size, failed at ERROR with the reason.

:func:`configure_logging` sets up the process's logging for a server (the daemon calls
it): one line per record, as text (time, level, logger name and process id) or as a JSON
object (``log_format="json"``, for log collectors).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import sys
import urllib.parse
from typing import IO, Any

import grpc

__all__ = [
    "LOG_FORMATS",
    "JsonFormatter",
    "configure_logging",
    "directory_bytes",
    "level_of",
    "log_call_error",
    "log_checkpoint",
    "log_checkpoint_failed",
]

_logger = logging.getLogger("reverb_py")

_QUIET = {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
_SERVER_FAULTS = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DATA_LOSS}

#: The text format: ``2026-12-06 11:07:00,123 INFO reverb_py[4242] message``.
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d] %(message)s"
#: What :func:`configure_logging` accepts as ``log_format``.
LOG_FORMATS = ("text", "json")


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


def log_checkpoint(
    action: str,
    path: str,
    seconds: float,
    tables: int,
    items: int,
    size: int | None = None,
    kind: str | None = None,
    peer: str | None = None,
) -> None:
    """Logs a checkpoint written or loaded: where, how long, how much; ``kind`` (the
    daemon's ``periodic``, ``shutdown``) leads the line, ``peer`` (the client that asked)
    ends it."""
    what = f"{tables} tables, {items} items"
    if size is not None:
        what += f", {size / 1e6:.1f} MB"
    if peer:
        what += f"; asked by {peer}"
    lead = f"{kind} " if kind else ""
    _logger.info("%scheckpoint %s %s in %.3f s (%s)", lead, action, path, seconds, what)


def log_checkpoint_failed(
    seconds: float, error: BaseException, kind: str | None = None, peer: str | None = None
) -> None:
    """Logs a checkpoint that could not be written, and why."""
    lead = f"{kind} " if kind else ""
    asked = f" (asked by {peer})" if peer else ""
    _logger.error("%scheckpoint failed after %.3f s%s: %s", lead, seconds, asked, error)


def directory_bytes(path: str) -> int:
    """The bytes of the files under ``path`` (a checkpoint directory)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``time`` (UTC, ISO 8601), ``level``, ``logger``,
    ``pid``, ``message``, and ``exception`` when the record carries one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        return json.dumps(entry, ensure_ascii=False, default=str)


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`configure_logging` installs (and replaces when called again)."""


def configure_logging(
    level: int | str = logging.INFO, log_format: str = "text", stream: IO[str] | None = None
) -> None:
    """Sends the process's log records to ``stream``, one line each, for a server.

    reverb_py's own records (logger ``reverb_py``) from ``level`` up; other libraries'
    from INFO (or ``level``, if higher) up, so DEBUG stays reverb_py's. Calling it again
    replaces the handler it installed before; other handlers are left alone.

    Args:
      level: A ``logging`` level, or its name (``"debug"``, ``"INFO"``, ...).
      log_format: ``"text"`` (time, level, logger name, process id, message) or
        ``"json"`` (one object per line, see :class:`JsonFormatter`).
      stream: Where the lines go; None: standard error.

    Raises:
      ValueError: an unknown level or format.
    """
    if isinstance(level, str):
        named = logging.getLevelName(level.upper())
        if not isinstance(named, int):
            raise ValueError(f"level: not a logging level: {level!r}")
        level = named
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log_format: one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    handler = _Handler(sys.stderr if stream is None else stream)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(max(level, logging.INFO))
    _logger.setLevel(level)
