"""Who may call the server: the bind address, TLS and the bearer token.

* :func:`resolve_host`: the interface to bind (``host=``, else ``REVERB_PY_HOST``, else
  ``localhost``) and :func:`exposure_warning`, the warning logged when a server that
  other machines can reach does not authenticate its clients;
* :class:`ServerTLS`: the server's certificate and key, and the CA of client
  certificates for mutual TLS;
* :class:`TokenInterceptor`: checks ``authorization: Bearer <token>`` on every call
  (unary and streaming) with a constant-time comparison; a call without it, or with
  another token, ends with ``UNAUTHENTICATED`` before its handler runs. The health
  service is exempt (orchestrators' probes carry no token).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import socket
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

from reverb_py import _secrets
from reverb_py.errors import ConfigError

__all__ = [
    "HOST_ENV",
    "ServerTLS",
    "TokenInterceptor",
    "daemon_credentials",
    "exposure_warning",
    "is_loopback",
    "resolve_host",
]

_logger = logging.getLogger("reverb_py")

HOST_ENV = "REVERB_PY_HOST"
DEFAULT_HOST = "localhost"
_EXEMPT_PREFIX = "/grpc.health.v1.Health/"
if TYPE_CHECKING:
    _Handler = grpc.RpcMethodHandler[Any, Any]


def resolve_host(host: str | None) -> str:
    """``host`` if given, else ``$REVERB_PY_HOST``, else ``localhost``."""
    if host is not None:
        if not isinstance(host, str) or not host:
            raise ValueError(f"host must be a non-empty string, got {host!r}")
        return host
    return os.environ.get(HOST_ENV) or DEFAULT_HOST


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine's loopback interface."""
    name = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        pass
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(name, None)}
    except OSError:
        return False
    return bool(addresses) and all(
        ipaddress.ip_address(str(address).split("%")[0]).is_loopback for address in addresses
    )


def exposure_warning(host: str, port: int, *, tls: bool, token: bool, mtls: bool) -> str | None:
    """The risk of serving on ``host`` as configured, or None when there is none."""
    if is_loopback(host):
        return None
    where = f"{host}:{port} is reachable from other machines"
    if not token and not mtls:
        return (
            f"{where} and clients are not authenticated (no token, no mutual TLS): anyone "
            "who can reach the port can read, insert, reset and checkpoint every table. "
            "Set a token (REVERB_PY_TOKEN, token_file) and TLS, or bind localhost."
        )
    if not tls:
        return (
            f"{where} without TLS: the token and all data travel in clear text, readable "
            "and reusable by anyone on the network path. Set tls_cert_file and tls_key_file."
        )
    return None


class ServerTLS:
    """The server's TLS settings.

    Args:
      certificate_chain: The server's certificate chain (PEM bytes, or a file path).
      private_key: Its private key (PEM bytes, or a file path).
      client_ca: For mutual TLS: the CA (PEM bytes, or a file path) that client
        certificates must be signed by; clients without one are refused. None: clients
        are not asked for certificates.

    The key's contents never appear in the repr or in errors.
    """

    def __init__(
        self,
        certificate_chain: bytes | str | os.PathLike[str],
        private_key: bytes | str | os.PathLike[str],
        client_ca: bytes | str | os.PathLike[str] | None = None,
    ) -> None:
        chain = _secrets.read_pem(certificate_chain, "tls certificate")
        key = _secrets.read_pem(private_key, "tls private key")
        assert chain is not None and key is not None
        if not chain or not key:
            raise ValueError("tls: the certificate chain and the private key must not be empty")
        self._chain = chain
        self._key = key
        self._client_ca = _secrets.read_pem(client_ca, "tls client CA")

    @property
    def mutual(self) -> bool:
        """Whether clients must present a certificate signed by ``client_ca``."""
        return self._client_ca is not None

    def server_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self._key, self._chain)],
            root_certificates=self._client_ca,
            require_client_auth=self._client_ca is not None,
        )

    def __repr__(self) -> str:
        return f"ServerTLS(mutual={self.mutual})"

    def __reduce__(self) -> Any:
        raise TypeError("ServerTLS holds a private key and is not pickled")


def _refusal(handler: _Handler, reason: str) -> _Handler:
    """A handler of ``handler``'s kind that ends the call with UNAUTHENTICATED."""

    async def refuse(_request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        _logger.warning("refused a call from %s: %s", urllib.parse.unquote(context.peer()), reason)
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, reason)

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse)
    return grpc.unary_unary_rpc_method_handler(refuse)


class TokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuses every call without ``authorization: Bearer <token>`` (UNAUTHENTICATED).

    ``on_refused`` (if given) is called with the method of each refused call (the
    server's metrics).
    """

    def __init__(self, token: str, on_refused: Callable[[str], None] | None = None) -> None:
        self._expected = f"Bearer {_secrets.check_token(token, 'token')}".encode("ascii")
        self._on_refused = on_refused

    def __repr__(self) -> str:
        return "TokenInterceptor()"

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[_Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> _Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(_EXEMPT_PREFIX):
            return handler
        given = [
            value
            for key, value in (handler_call_details.invocation_metadata or ())
            if key == "authorization"
        ]
        if not given:
            return self._refuse(
                handler,
                handler_call_details.method,
                "missing bearer token (authorization metadata)",
            )
        value = given[0]
        offered = value.encode("utf-8", "replace") if isinstance(value, str) else bytes(value)
        if len(given) != 1 or not hmac.compare_digest(offered, self._expected):
            return self._refuse(handler, handler_call_details.method, "invalid bearer token")
        return handler

    def _refuse(self, handler: _Handler, method: str, reason: str) -> _Handler:
        if self._on_refused is not None:
            self._on_refused(method)
        return _refusal(handler, reason)


def daemon_credentials(
    token_file: str | None,
    tls_cert_file: str | None,
    tls_key_file: str | None,
    tls_client_ca_file: str | None,
) -> tuple[str | None, ServerTLS | None]:
    """The daemon's token and TLS settings from its file options.

    Returns ``(token, tls)``. Without ``token_file`` the token is the environment's
    (``REVERB_PY_TOKEN`` / ``REVERB_PY_TOKEN_FILE``), or None.

    Raises:
      ConfigError: a file cannot be read, both token variables are set, or only one of
        the certificate and the key is given (the message names options and files, never
        their contents).
    """
    token: str | None
    try:
        if token_file is not None:
            token = _secrets.read_token_file(token_file, "token_file")
        else:
            token = _secrets.resolve_token(None)
        if (tls_cert_file is None) != (tls_key_file is None):
            raise ConfigError("tls_cert_file and tls_key_file: give both, or neither")
        if tls_client_ca_file is not None and tls_cert_file is None:
            raise ConfigError("tls_client_ca_file: needs tls_cert_file and tls_key_file")
        tls = None
        if tls_cert_file is not None and tls_key_file is not None:
            tls = ServerTLS(tls_cert_file, tls_key_file, tls_client_ca_file)
    except ConfigError:
        raise
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return token, tls
