"""Who may call the server: the bind address.

:func:`resolve_host`: the interface to bind (``host=``, else ``REVERB_PY_HOST``, else
``localhost``) and :func:`exposure_warning`, the warning logged when a server that other
machines can reach does not authenticate its clients.
"""

from __future__ import annotations

import ipaddress
import os
import socket

__all__ = [
    "HOST_ENV",
    "exposure_warning",
    "is_loopback",
    "resolve_host",
]

HOST_ENV = "REVERB_PY_HOST"
DEFAULT_HOST = "localhost"


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
