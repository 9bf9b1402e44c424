"""SampleStream responses read from their wire bytes (pure twin: no fast path).

The compiled twin (``_speedups/sample_wire.pyx``) reads plain responses and chunks
straight from their bytes. Here both functions return None for every input, which sends
the caller down the general path (``reverb_py._codec`` over protobuf's messages): that
path is the reference whose results the compiled twin must give.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BatchFiller",
    "assemble_plain",
    "decode_chunk_bytes",
    "read_info",
    "split_response",
    "unsnappy",
]


def split_response(data: bytes) -> list[tuple[bytes | None, list[tuple[int, bytes]], bool]] | None:
    """Always None: the caller parses the response with protobuf."""
    return None


def decode_chunk_bytes(data: bytes) -> list[Any] | None:
    """Always None: the caller decodes the chunk with ``reverb_py._codec.chunk``."""
    return None


def read_info(data: bytes) -> tuple[Any, ...] | None:
    """Always None: the caller parses the ``SampleInfo`` with protobuf."""
    return None


def assemble_plain(
    data: bytes, cache: Any, capacity: int, info_class: Any, copy: bool
) -> list[Any] | None:
    """Always None: the caller reassembles the samples itself."""
    return None


class BatchFiller:
    """No fast path: :meth:`add` reads nothing, so every sample takes the per-sample path."""

    def __init__(self, capacity: int, info_class: Any, error_class: Any, first: int = 0) -> None:
        if capacity < 1:
            raise ValueError("capacity must be positive")

    @property
    def rows(self) -> int:
        return 0

    def add(self, data: bytes) -> tuple[list[Any], int]:
        """Always ``([], 0)``: the caller reassembles the response's samples itself."""
        return [], 0

    def flush(self) -> None:
        """Always None: no batch is ever being filled."""
        return None


def unsnappy(data: bytes, length: int) -> bytes | None:
    """Always None: the pure twin decompresses with cramjam only."""
    return None
