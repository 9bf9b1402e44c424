"""The server's wire work on the insert and sample streams, by hand on protobuf bytes.

Insert requests are split into their chunks, items and kept chunk keys without decoding
the chunks; sample replies (``SampleInfo`` and ``SampleStreamResponse``) are assembled
from the bytes of the chunks as they arrived (PERF(sample-info): no message objects per
sample).
"""

from __future__ import annotations

from collections.abc import Iterator

from reverb_py import _impl
from reverb_py.server._chunks import Chunk
from reverb_py.table import SampledItem

__all__ = ["parse_insert_request", "sample_info", "sample_responses"]

# Reverb's limit: chunk bytes per sample response before splitting.
_MAX_RESPONSE_CHUNK_BYTES = 2 * 1024 * 1024

_END_OF_SEQUENCE = b"\x18\x01"  # field 3, varint, true


def parse_insert_request(data: bytes) -> tuple[list[bytes], list[bytes], list[int]]:
    """Splits an ``InsertStreamRequest`` into its chunks, items (bytes each, not decoded)
    and ``keep_chunk_keys``.

    Raises:
      InvalidArgumentError: the bytes are not a well-formed message.
    """
    return _impl.checkpoint_records.split_insert_request(data)


def sample_info(table_field: bytes, record: SampledItem) -> bytes:
    """Encodes a ``SampleInfo`` by hand (PERF(sample-info): no message objects per sample).

    ``table_field`` is the encoded ``PrioritizedItem.table`` field (tag included). Zero
    values are left out, as protobuf does.
    """
    return _impl.checkpoint_records.encode_sample_info(table_field, record)


def sample_responses(table: str, records: list[SampledItem]) -> Iterator[bytes]:
    """Packs samples into ``SampleStreamResponse`` messages of about 2 MiB of chunks.

    A generator: each response is built when the previous one has been taken, so a
    stream holds one response (and one sample's pieces) at a time, whatever the batch.
    Whole samples share a response; a sample with more chunk bytes than a response
    holds is split over several (the entries after its first carry no info).
    """
    table_field = _impl.wire.length_delimited(b"\x12", table.encode())
    pack = _impl.checkpoint_records.encode_sample_response
    start = 0
    while start < len(records):
        response, end = pack(table_field, records, start, _MAX_RESPONSE_CHUNK_BYTES)
        if response is None:
            yield from _split_sample(table_field, records[start])
            start += 1
        else:
            yield response
            start = end


def _split_sample(table_field: bytes, record: SampledItem) -> Iterator[bytes]:
    """The responses of one sample too big for one: its chunks spread over them."""
    chunks: list[Chunk] = list(record.item.chunks)
    parts = [_impl.wire.length_delimited(b"\x0a", sample_info(table_field, record))]
    size = 0
    for index, chunk in enumerate(chunks):
        if size and size + len(chunk.data) > _MAX_RESPONSE_CHUNK_BYTES:
            # Close the current entry and response; the sample continues in the next.
            yield _impl.wire.length_delimited(b"\x0a", b"".join(parts))
            parts = []
            size = 0
        parts.append(_impl.wire.length_delimited(b"\x12", chunk.data))
        size += len(chunk.data)
        if index == len(chunks) - 1:
            parts.append(_END_OF_SEQUENCE)
    yield _impl.wire.length_delimited(b"\x0a", b"".join(parts))
