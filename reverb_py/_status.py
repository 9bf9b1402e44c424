"""The one table mapping gRPC status codes to reverb_py errors, in both directions."""

from __future__ import annotations

import grpc

from reverb_py import errors

__all__ = ["error_for_status", "status_for_error", "error_from_rpc"]

_TABLE: tuple[tuple[grpc.StatusCode, type[errors.ReverbError]], ...] = (
    (grpc.StatusCode.DEADLINE_EXCEEDED, errors.DeadlineExceededError),
    (grpc.StatusCode.INVALID_ARGUMENT, errors.InvalidArgumentError),
    (grpc.StatusCode.NOT_FOUND, errors.NotFoundError),
    (grpc.StatusCode.UNAVAILABLE, errors.UnavailableError),
    (grpc.StatusCode.CANCELLED, errors.CancelledOperationError),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, errors.ResourceExhaustedError),
    (grpc.StatusCode.FAILED_PRECONDITION, errors.FailedPreconditionError),
    (grpc.StatusCode.INTERNAL, errors.InternalError),
    (grpc.StatusCode.UNIMPLEMENTED, errors.UnimplementedError),
    (grpc.StatusCode.UNAUTHENTICATED, errors.UnauthenticatedError),
    (grpc.StatusCode.UNKNOWN, errors.UnknownError),
)
_ERROR_FOR_CODE = dict(_TABLE)


def error_for_status(code: grpc.StatusCode, message: str) -> errors.ReverbError:
    """The error a client raises for a failed call."""
    return _ERROR_FOR_CODE.get(code, errors.UnknownError)(message)


def error_from_rpc(error: grpc.RpcError) -> errors.ReverbError:
    """Maps a failed gRPC call (sync or aio) to a reverb_py error."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    return error_for_status(code, details or str(code))


def status_for_error(error: BaseException) -> grpc.StatusCode:
    """The status a server sends for an error (INTERNAL for anything unexpected)."""
    for code, cls in _TABLE:
        if isinstance(error, cls):
            return code
    return grpc.StatusCode.INTERNAL
