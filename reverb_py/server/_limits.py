"""What one client can make a server hold: the limits of :class:`ServerLimits`.

A table's own settings (``max_size``, its rate limiter's queue) bound what the tables
hold. These limits bound what the streams hold: chunks that an insert stream keeps for
items still to come, requests being read, and the number of streams. A client that goes
past one gets ``RESOURCE_EXHAUSTED`` naming the limit, its stream ends and releases all
it held; other clients are not affected.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["ServerLimits"]

_MIB = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class ServerLimits:
    """Bounds on what clients can make a server hold. ``None`` lifts a bound.

    Attributes:
      max_message_bytes: The largest request the server reads (gRPC's
        ``max_receive_message_length``); a larger one is refused by gRPC with
        ``RESOURCE_EXHAUSTED`` before it is read. Below 2 GiB (gRPC's bound). 256 MiB: a
        writer's request holds the chunks of one flush, far less.
      max_streams: Insert and sample streams open at once, over all clients. 1,024.
      max_stream_chunk_bytes: Chunk bytes one insert stream keeps between requests
        (the chunks its ``keep_chunk_keys`` name, which later items may reference). A
        writer keeps about ``num_keep_alive_refs`` steps of each column: 1 GiB.
      max_held_chunk_bytes: Chunk bytes all insert streams keep together. 4 GiB.
    """

    max_message_bytes: int | None = 256 * _MIB
    max_streams: int | None = 1024
    max_stream_chunk_bytes: int | None = 1024 * _MIB
    max_held_chunk_bytes: int | None = 4096 * _MIB

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(
                    f"ServerLimits.{field.name} must be a positive integer or None, got {value!r}"
                )
        if self.max_message_bytes is not None and self.max_message_bytes >= 2**31:
            raise ValueError(
                "ServerLimits.max_message_bytes must be below 2 GiB (gRPC's bound), or None, "
                f"got {self.max_message_bytes}"
            )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], where: str = "limits") -> ServerLimits:
        """Limits from a config table: known names only; ``0`` or ``-1`` lift a bound."""
        names = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(
                f"{where}: unknown setting(s) {', '.join(unknown)}; known: "
                f"{', '.join(sorted(names))}"
            )
        kwargs: dict[str, Any] = {}
        for name, value in values.items():
            kwargs[name] = None if value in (0, -1) and not isinstance(value, bool) else value
        try:
            return cls(**kwargs)
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None

    def grpc_options(self) -> list[tuple[str, Any]]:
        """The gRPC server options these limits set."""
        receive = -1 if self.max_message_bytes is None else self.max_message_bytes
        return [("grpc.max_receive_message_length", receive)]


def describe_bytes(n: int) -> str:
    """``n`` bytes in KiB or MiB, for error messages."""
    if n < _MIB:
        return f"{n / 1024:.1f} KiB"
    return f"{n / _MIB:.1f} MiB"
