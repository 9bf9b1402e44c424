"""Errors raised by reverb_py.

Every error raised on purpose derives from :class:`ReverbError`. Each leaf also derives
from the builtin that dm-reverb raises for the same condition, so code written against
Reverb (``except ValueError``, ``except RuntimeError``) keeps working:

================================  =======================================  ===================
class                             also a                                    gRPC status
================================  =======================================  ===================
:class:`DeadlineExceededError`    ``TimeoutError``, ``RuntimeError``        DEADLINE_EXCEEDED
:class:`InvalidArgumentError`     ``ValueError``                            INVALID_ARGUMENT
:class:`NotFoundError`            ``LookupError``, ``RuntimeError``         NOT_FOUND
:class:`UnavailableError`         ``ConnectionError``, ``RuntimeError``     UNAVAILABLE
:class:`CancelledOperationError`  ``RuntimeError``                          CANCELLED
:class:`ResourceExhaustedError`   ``IndexError``                            RESOURCE_EXHAUSTED
:class:`FailedPreconditionError`  ``RuntimeError``                          FAILED_PRECONDITION
:class:`UsageError`               ``RuntimeError``                          (client side only)
:class:`InternalError`            ``RuntimeError``                          INTERNAL
:class:`UnimplementedError`       ``NotImplementedError``                   UNIMPLEMENTED
:class:`UnauthenticatedError`     ``PermissionError``                       UNAUTHENTICATED
:class:`UnknownError`             ``RuntimeError``                          any other code
:class:`CorruptRecordError`       ``ValueError``                            (checkpoint files)
================================  =======================================  ===================

One error is not a :class:`ReverbError`: :class:`ConfigError`, a ``ValueError`` the
daemon raises for a config file it cannot use.

``asyncio.CancelledError`` is never wrapped: cancelling a waiting call cancels it.
"""

from __future__ import annotations

__all__ = [
    "ReverbError",
    "DeadlineExceededError",
    "InvalidArgumentError",
    "NotFoundError",
    "UnavailableError",
    "CancelledOperationError",
    "ResourceExhaustedError",
    "FailedPreconditionError",
    "UsageError",
    "InternalError",
    "UnimplementedError",
    "UnauthenticatedError",
    "UnknownError",
    "CorruptRecordError",
    "ConfigError",
]


class ReverbError(Exception):
    """Root of every error reverb_py raises on purpose."""


class DeadlineExceededError(ReverbError, TimeoutError, RuntimeError):
    """A deadline passed: an RPC timeout or a rate-limiter timeout."""


class InvalidArgumentError(ReverbError, ValueError):
    """A bad argument, detected on the client or on the server."""


class NotFoundError(ReverbError, LookupError, RuntimeError):
    """An unknown table or key.

    Not a ``KeyError``: its ``str()`` would quote the message.
    """


class UnavailableError(ReverbError, ConnectionError, RuntimeError):
    """The server cannot be reached or has stopped."""


class CancelledOperationError(ReverbError, RuntimeError):
    """The operation was cancelled by the other side, e.g. a table closing on server stop."""


class ResourceExhaustedError(ReverbError, IndexError):
    """A resource limit was hit."""


class FailedPreconditionError(ReverbError, RuntimeError):
    """The system is not in a state the operation needs."""


class UsageError(ReverbError, RuntimeError):
    """The API was used the wrong way, e.g. a call on a closed object."""


class InternalError(ReverbError, RuntimeError):
    """A bug on the server side."""


class UnimplementedError(ReverbError, NotImplementedError):
    """The other side does not implement the operation."""


class UnauthenticatedError(ReverbError, PermissionError):
    """The server refused the call's credentials (no token, or another one)."""


class UnknownError(ReverbError, RuntimeError):
    """A failure with a status that has no more specific class."""


class CorruptRecordError(ReverbError, ValueError):
    """A TFRecord file is damaged: checksum mismatch, truncation or a broken zlib stream.

    Also a checkpoint that cannot be read (``reverb_py.checkpointers`` names it
    ``CheckpointCorruptedError``).

    Attributes:
      path: The file, when known.
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the bad field."""
