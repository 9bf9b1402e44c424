"""Tokens and PEM files, for clients and servers alike (no gRPC here).

A token comes from code, or else from ``REVERB_PY_TOKEN``, or else from the file named by
``REVERB_PY_TOKEN_FILE``. Its value is never printed: errors name where it came from,
never what it is.
"""

from __future__ import annotations

import os

__all__ = [
    "TOKEN_ENV",
    "TOKEN_FILE_ENV",
    "check_token",
    "read_pem",
    "read_token_file",
    "resolve_token",
]

TOKEN_ENV = "REVERB_PY_TOKEN"
TOKEN_FILE_ENV = "REVERB_PY_TOKEN_FILE"


def check_token(token: str, where: str) -> str:
    """``token`` if it can travel as ``authorization: Bearer <token>``.

    Raises:
      ValueError: empty, or not printable ASCII without spaces; the message names
        ``where`` only.
    """
    if not isinstance(token, str):
        raise TypeError(f"{where}: a token must be a string, got {type(token).__name__}")
    if not token:
        raise ValueError(f"{where}: the token is empty")
    if not all("!" <= char <= "~" for char in token):
        raise ValueError(f"{where}: a token must be printable ASCII without spaces")
    return token


def read_token_file(path: str | os.PathLike[str], where: str) -> str:
    """The token held by the file at ``path`` (surrounding whitespace dropped)."""
    try:
        with open(path, encoding="ascii", errors="strict") as file:
            token = file.read().strip()
    except UnicodeDecodeError:
        raise ValueError(f"{where}: token file {os.fspath(path)!r} is not ASCII") from None
    except OSError as error:
        raise ValueError(
            f"{where}: cannot read token file {os.fspath(path)!r}: {error.strerror or error}"
        ) from None
    return check_token(token, f"{where} ({os.fspath(path)!r})")


def resolve_token(token: str | None) -> str | None:
    """The token to use: ``token`` if given (``""``: none), else the environment's.

    Raises:
      ValueError: both environment variables are set, the file cannot be read, or the
        token is malformed.
    """
    if token is not None:
        return check_token(token, "token") if token else None
    value = os.environ.get(TOKEN_ENV)
    path = os.environ.get(TOKEN_FILE_ENV)
    if value and path:
        raise ValueError(f"set {TOKEN_ENV} or {TOKEN_FILE_ENV}, not both")
    if value:
        return check_token(value, TOKEN_ENV)
    if path:
        return read_token_file(path, TOKEN_FILE_ENV)
    return None


def read_pem(value: bytes | str | os.PathLike[str] | None, where: str) -> bytes | None:
    """PEM bytes: ``value`` itself if bytes, else read from the file it names.

    Raises:
      ValueError: the file cannot be read; names the file, never its contents.
    """
    if value is None or isinstance(value, bytes):
        return value
    try:
        with open(value, "rb") as file:
            return file.read()
    except OSError as error:
        raise ValueError(
            f"{where}: cannot read {os.fspath(value)!r}: {error.strerror or error}"
        ) from None
