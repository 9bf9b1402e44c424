"""The error tree: every error is a ReverbError and the builtin Reverb raised."""

from __future__ import annotations

import pytest

import reverb_py
from reverb_py import errors

BUILTINS = {
    errors.DeadlineExceededError: (TimeoutError, RuntimeError),
    errors.InvalidArgumentError: (ValueError,),
    errors.NotFoundError: (LookupError, RuntimeError),
    errors.UnavailableError: (ConnectionError, RuntimeError),
    errors.CancelledOperationError: (RuntimeError,),
    errors.ResourceExhaustedError: (IndexError,),
    errors.FailedPreconditionError: (RuntimeError,),
    errors.UsageError: (RuntimeError,),
    errors.InternalError: (RuntimeError,),
    errors.UnimplementedError: (NotImplementedError,),
    errors.UnauthenticatedError: (PermissionError,),
    errors.UnknownError: (RuntimeError,),
}


@pytest.mark.parametrize("cls", list(BUILTINS), ids=lambda c: c.__name__)
def test_each_error_is_a_reverb_error_and_its_builtins(cls) -> None:
    error = cls("message")
    assert isinstance(error, errors.ReverbError)
    for builtin in BUILTINS[cls]:
        assert isinstance(error, builtin)
    assert str(error) == "message"


def test_not_found_is_not_a_key_error() -> None:
    assert not issubclass(errors.NotFoundError, KeyError)
    assert str(errors.NotFoundError("Priority table x was not found")) == (
        "Priority table x was not found"
    )


def test_top_level_names() -> None:
    assert reverb_py.ReverbError is errors.ReverbError
    assert reverb_py.DeadlineExceededError is errors.DeadlineExceededError
    assert set(errors.__all__) == {c.__name__ for c in BUILTINS} | {
        "ReverbError",
        "CorruptRecordError",
        "ConfigError",
    }


def test_corrupt_record_and_config_errors_keep_their_bases() -> None:
    assert errors.CorruptRecordError.__bases__ == (errors.ReverbError, ValueError)
    assert errors.ConfigError.__bases__ == (ValueError,)
    error = errors.CorruptRecordError("bad", "/x/items.tfrecord")
    assert str(error) == "/x/items.tfrecord: bad" and error.path == "/x/items.tfrecord"
    from reverb_py import checkpointers
    from reverb_py.server import _daemon

    assert _daemon.ConfigError is errors.ConfigError
    assert checkpointers.CheckpointCorruptedError is errors.CorruptRecordError
