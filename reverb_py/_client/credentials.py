"""How a client proves itself: TLS and the bearer token, for every channel it opens.

:class:`ClientCredentials` holds what ``Client(address, token=..., root_certificates=...,
private_key=..., certificate_chain=...)`` was given (the token read from
``REVERB_PY_TOKEN`` / ``REVERB_PY_TOKEN_FILE`` when none was) and opens the asyncio
channels (writers, samplers and unary calls all use them) and the blocking
``MutatePriorities`` channel. With neither TLS nor a token the channels are plain
``insecure_channel`` ones: the wire is Reverb's. A token travels as
``authorization: Bearer <token>`` metadata on every call, added to every call of the
channel; it never appears in a repr.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

import grpc

from reverb_py import _secrets, errors
from reverb_py._client.channel import SERVER_INFO_PATH, identity
from reverb_py._loop_thread import quiet_grpc_wakeups
from reverb_py._status import error_for_status, error_from_rpc

__all__ = [
    "BROKEN_STREAM",
    "ClientCredentials",
    "explain_internal_error",
    "failed_write_status",
    "write_or_raise",
]

# How long the probe of explain_internal_error may take.
_PROBE_SECONDS = 5.0
# How long a stream whose write failed may take to report its status.
_STATUS_WAIT_SECONDS = 5.0
# All the status a call keeps when gRPC's core fails one of its writes.
_CORE_WRITE_FAILURE = "Internal error from Core"

BROKEN_STREAM = "the stream broke while its server could be reached"
"""The details of :func:`failed_write_status`'s UNAVAILABLE for a stream that broke
while its channel still reaches a server."""

Pem = bytes | str | os.PathLike[str] | None


class ClientCredentials:
    """TLS settings and a token for a client's channels.

    Args:
      token: The bearer token; None reads ``REVERB_PY_TOKEN`` (or the file named by
        ``REVERB_PY_TOKEN_FILE``); ``""`` sends none.
      root_certificates: PEM bytes or a file path of the CA to verify the server's
        certificate with; setting it (or the two below) makes the channel use TLS.
      private_key, certificate_chain: The client's key and certificate (PEM bytes or
        file paths) for mutual TLS.

    Raises:
      ValueError: a file cannot be read, only one of ``private_key`` and
        ``certificate_chain`` is given, or the token is malformed (the message never
        holds the token).
    """

    def __init__(
        self,
        token: str | None = None,
        root_certificates: Pem = None,
        private_key: Pem = None,
        certificate_chain: Pem = None,
    ) -> None:
        self._token = _secrets.resolve_token(token)
        self._root = _secrets.read_pem(root_certificates, "root_certificates")
        self._key = _secrets.read_pem(private_key, "private_key")
        self._chain = _secrets.read_pem(certificate_chain, "certificate_chain")
        if (self._key is None) != (self._chain is None):
            raise ValueError("private_key and certificate_chain are given together (mutual TLS)")

    @property
    def tls(self) -> bool:
        return self._root is not None or self._chain is not None

    @property
    def has_token(self) -> bool:
        return self._token is not None

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The call metadata that carries the token (empty without one)."""
        if self._token is None:
            return ()
        return (("authorization", f"Bearer {self._token}"),)

    def _channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self._root,
            private_key=self._key,
            certificate_chain=self._chain,
        )

    def aio_channel(self, target: str, options: Sequence[tuple[str, Any]]) -> grpc.aio.Channel:
        """A new asyncio channel to ``target`` with these credentials."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # No running loop: gRPC binds the channel to another.
            loop = None
        if loop is not None:
            quiet_grpc_wakeups(loop)
        if self.tls:
            channel = grpc.aio.secure_channel(target, self._channel_credentials(), options=options)
        else:
            channel = grpc.aio.insecure_channel(target, options=options)
        if self._token is None:
            return channel
        return _TokenChannel(channel, self.metadata())

    def channel(self, target: str, options: Sequence[tuple[str, Any]]) -> grpc.Channel:
        """A new blocking channel to ``target`` with these credentials."""
        return self.with_token(self.plain_channel(target, options))

    def plain_channel(self, target: str, options: Sequence[tuple[str, Any]]) -> grpc.Channel:
        """A new blocking channel to ``target`` with the TLS settings only: its calls
        carry the token where :meth:`metadata` is given to them."""
        if self.tls:
            return grpc.secure_channel(target, self._channel_credentials(), options=options)
        return grpc.insecure_channel(target, options=options)

    def with_token(self, channel: grpc.Channel) -> grpc.Channel:
        """``channel`` with the token on every call (``channel`` itself without one)."""
        if self._token is None:
            return channel
        return grpc.intercept_channel(channel, _BlockingTokenInterceptor(self.metadata()))

    def __repr__(self) -> str:
        mode = "mutual TLS" if self._chain is not None else "TLS" if self.tls else "plaintext"
        return f"ClientCredentials({mode}, token={'set' if self._token else 'none'})"


def _with_metadata(details: Any, metadata: tuple[tuple[str, str], ...]) -> Any:
    """``details`` (a blocking ClientCallDetails) with ``metadata`` added."""
    existing = tuple(details.metadata or ())
    return details._replace(metadata=existing + metadata)


class _CallWithMetadata:
    """A multi-callable that adds ``metadata`` to every call it makes."""

    __slots__ = ("_callable", "_metadata")

    def __init__(self, callable_: Any, metadata: tuple[tuple[str, str], ...]) -> None:
        self._callable = callable_
        self._metadata = metadata

    def __call__(self, *args: Any, metadata: Any = None, **kwargs: Any) -> Any:
        merged = tuple(metadata or ()) + self._metadata
        return self._callable(*args, metadata=merged, **kwargs)


class _TokenChannel(grpc.aio.Channel):
    """An asyncio channel whose calls all carry the token.

    gRPC's asyncio client interceptors would do the same, but they wrap every stream in
    a second call object (and leave tasks behind when a stream is cancelled); this
    returns the channel's own calls.
    """

    def __init__(self, channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...]) -> None:
        self._channel = channel
        self._metadata = metadata

    def __repr__(self) -> str:
        return f"<token channel over {self._channel!r}>"

    async def __aenter__(self) -> _TokenChannel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._channel.close(None)

    async def close(self, grace: float | None = None) -> None:
        await self._channel.close(grace)

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return self._channel.get_state(try_to_connect)

    async def wait_for_state_change(self, last_observed_state: grpc.ChannelConnectivity) -> None:
        await self._channel.wait_for_state_change(last_observed_state)

    async def channel_ready(self) -> None:
        await self._channel.channel_ready()

    def unary_unary(self, *args: Any, **kwargs: Any) -> Any:
        return _CallWithMetadata(self._channel.unary_unary(*args, **kwargs), self._metadata)

    def unary_stream(self, *args: Any, **kwargs: Any) -> Any:
        return _CallWithMetadata(self._channel.unary_stream(*args, **kwargs), self._metadata)

    def stream_unary(self, *args: Any, **kwargs: Any) -> Any:
        return _CallWithMetadata(self._channel.stream_unary(*args, **kwargs), self._metadata)

    def stream_stream(self, *args: Any, **kwargs: Any) -> Any:
        return _CallWithMetadata(self._channel.stream_stream(*args, **kwargs), self._metadata)


class _BlockingTokenInterceptor(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self._metadata = metadata

    def __repr__(self) -> str:
        return "_BlockingTokenInterceptor()"

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(_with_metadata(details, self._metadata), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(_with_metadata(details, self._metadata), request)

    def intercept_stream_unary(self, continuation: Any, details: Any, request_iterator: Any) -> Any:
        return continuation(_with_metadata(details, self._metadata), request_iterator)

    def intercept_stream_stream(
        self, continuation: Any, details: Any, request_iterator: Any
    ) -> Any:
        return continuation(_with_metadata(details, self._metadata), request_iterator)


async def explain_internal_error(
    channel: grpc.aio.Channel, error: errors.ReverbError
) -> errors.ReverbError:
    """``error``, or the refusal of the credentials that it stands for.

    A server that refuses a stream's credentials ends the stream before reading it; a
    request written after that makes gRPC report only ``INTERNAL: Internal error from
    Core`` for the call. A ``ServerInfo`` call on the same channel then tells whether
    the credentials were the reason. Only ever called after such a failure, so the wire
    of calls that work is unchanged.
    """
    if not isinstance(error, errors.InternalError):
        return error
    refusal = await _probe(channel)
    if refusal is not None and refusal.code() == grpc.StatusCode.UNAUTHENTICATED:
        return error_from_rpc(refusal)
    return error


async def failed_write_status(channel: grpc.aio.Channel, call: Any) -> tuple[grpc.StatusCode, str]:
    """What a stream ``call`` on ``channel`` whose write failed ended with.

    The call's own status when the server ended the stream with one. When gRPC's core
    failed the write, the call keeps only ``INTERNAL: Internal error from Core`` (the
    server's own status, if one came, arrives later or never): a ``ServerInfo`` probe
    on the channel then tells a refusal of the credentials (UNAUTHENTICATED) from a
    stream that broke (UNAVAILABLE; its details :data:`BROKEN_STREAM` when the probe
    reached a server, e.g. another shard's). UNAVAILABLE also when no status comes in
    time, or the server ended the stream with OK while requests were being written.
    """
    try:
        code = await asyncio.wait_for(call.code(), _STATUS_WAIT_SECONDS)
        details = await asyncio.wait_for(call.details(), _STATUS_WAIT_SECONDS) or ""
    except asyncio.TimeoutError:
        call.cancel()
        return grpc.StatusCode.UNAVAILABLE, "the stream broke"
    if code in (grpc.StatusCode.OK, None):
        return grpc.StatusCode.UNAVAILABLE, "the server closed the stream"
    if code != grpc.StatusCode.INTERNAL or details != _CORE_WRITE_FAILURE:
        return code, details
    refusal = await _probe(channel)
    if refusal is None:
        return grpc.StatusCode.UNAVAILABLE, BROKEN_STREAM
    if refusal.code() == grpc.StatusCode.UNAUTHENTICATED:
        return grpc.StatusCode.UNAUTHENTICATED, refusal.details() or ""
    return grpc.StatusCode.UNAVAILABLE, f"the stream broke: {refusal.details() or refusal.code()}"


async def write_or_raise(channel: grpc.aio.Channel, call: Any, request: Any) -> None:
    """Writes ``request`` on the stream ``call``; a failed write raises the error for
    what the stream ended with (:func:`failed_write_status`)."""
    try:
        await call.write(request)
    except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
        code, details = await failed_write_status(channel, call)
        raise error_for_status(code, details) from None


async def _probe(channel: grpc.aio.Channel) -> grpc.aio.AioRpcError | None:
    """The error of a ``ServerInfo`` call on ``channel``; None when a server answers."""
    probe = channel.unary_unary(
        SERVER_INFO_PATH, request_serializer=identity, response_deserializer=identity
    )
    try:
        await probe(b"", timeout=_PROBE_SECONDS)
    except grpc.aio.AioRpcError as error:
        return error
    return None
