"""gRPC targets that name several servers (shards), and the addresses they name.

A client given ``ipv4:a:p,b:p``, ``ipv6:[a]:p,[b]:p`` or ``dns:///name:port`` spreads
its calls over every address by gRPC's round robin (the channel's own policy): each new
stream goes to the next server and stays there. This module only reads targets, for
the few places that need to know how many servers there are or ask each one.
"""

from __future__ import annotations

import socket

__all__ = ["SERVER_ID_HEADER", "addresses", "num_shards"]

SERVER_ID_HEADER = "reverb-py-server"
"""The initial-metadata key a reverb_py server names itself with (``host:port``)."""

_LIST_SCHEMES = ("ipv4:", "ipv6:")


def _split_list(body: str) -> list[str]:
    return [address.strip() for address in body.split(",") if address.strip()]


def _strip_authority(body: str) -> tuple[str, str]:
    """``(authority, rest)`` of the part after ``dns:`` (``//auth/rest`` or ``rest``)."""
    if body.startswith("//"):
        authority, _, rest = body[2:].partition("/")
        return authority, rest
    return "", body


def _host_port(address: str) -> tuple[str, str]:
    if address.startswith("["):
        host, _, port = address[1:].partition("]")
        return host, port.lstrip(":")
    host, _, port = address.rpartition(":")
    return host, port


def addresses(target: str) -> list[str]:
    """The ``host:port`` addresses ``target`` names, in its order.

    ``ipv4:``/``ipv6:`` lists are split; ``dns:`` names are resolved here with the
    system's resolver (each address once); any other target is one address, as given.

    Raises:
      ValueError: a ``dns:`` target names a DNS server (``dns://server/...``): this
        resolver cannot ask it; pass the addresses instead.
      OSError: the name does not resolve.
    """
    for scheme in _LIST_SCHEMES:
        if target.startswith(scheme):
            return _split_list(target[len(scheme) :])
    if not target.startswith("dns:"):
        return [target]
    authority, name = _strip_authority(target[len("dns:") :])
    if authority:
        raise ValueError(
            f"Cannot resolve {target!r} here: it asks the DNS server {authority!r}; "
            "give the servers' addresses instead."
        )
    host, port = _host_port(name)
    found: list[str] = []
    for family, _, _, _, sockaddr in socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM):
        ip = str(sockaddr[0])
        address = f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}"
        if address not in found:
            found.append(address)
    return found


def num_shards(target: str) -> int:
    """How many servers ``target`` spreads over (1 for a plain ``host:port``).

    ``dns:`` targets count the addresses their name resolves to now (1 when it cannot
    be resolved here).
    """
    if target.startswith(_LIST_SCHEMES):
        return max(1, len(addresses(target)))
    if target.startswith("dns:"):
        try:
            return max(1, len(addresses(target)))
        except (OSError, ValueError):
            return 1
    return 1
