"""The gRPC core settings reverb_py chooses for its process, before gRPC starts.

gRPC's C core reads its settings from the environment once, when ``grpc`` is first
imported. :func:`apply` runs before anything in reverb_py imports gRPC:

* ``GRPC_VERBOSITY`` is set to ``ERROR`` unless already set: the core otherwise prints
  INFO lines ("Got goaway ...") on every client when a server stops. It stays set (set it
  to ``INFO`` or ``DEBUG`` to see them).
* ``GRPC_EXPERIMENTS`` is set to :data:`EXPERIMENTS` only while ``grpc`` is imported (so
  subprocesses do not inherit it), unless it is already set (even to ``""``, which keeps
  gRPC's own defaults) or ``grpc`` was imported before reverb_py. It turns off the core's
  EventEngine for client channels and server listeners, which costs extra thread hand-offs
  per message: over loopback a unary call takes about half as long without it and a
  stream's request/response about two thirds (``benchmarks/README.md``, "Where the time
  goes").
"""

from __future__ import annotations

import os
import sys

__all__ = ["EXPERIMENTS", "apply", "experiments_applied", "grpcio_version"]

EXPERIMENTS = "-event_engine_client,-event_engine_listener"
"""The value of ``GRPC_EXPERIMENTS`` while reverb_py imports gRPC."""

# reverb_py's grpcio floor: the core of every grpcio from it on knows both experiments by
# these names.
_OLDEST = (1, 65)

_applied = False


def experiments_applied() -> bool:
    """Whether this process imported gRPC with :data:`EXPERIMENTS`."""
    return _applied


def apply() -> None:
    """Sets gRPC's settings, then imports ``grpc``; does nothing the second time."""
    global _applied
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    if "grpc" in sys.modules or "GRPC_EXPERIMENTS" in os.environ or not _known_grpcio():
        return
    os.environ["GRPC_EXPERIMENTS"] = EXPERIMENTS
    try:
        import grpc  # noqa: F401 - the core reads the variable now.

        _applied = True
    finally:
        del os.environ["GRPC_EXPERIMENTS"]


def grpcio_version() -> tuple[int, int] | None:
    """The installed grpcio's (major, minor) version; None when it cannot be read."""
    from importlib import metadata

    try:
        version = metadata.version("grpcio")
    except metadata.PackageNotFoundError:
        return None
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def _known_grpcio() -> bool:
    version = grpcio_version()
    return version is not None and version >= _OLDEST
