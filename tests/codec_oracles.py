"""Test oracles of the codec: chunks and tensors built as protobuf messages.

Production writes chunks straight to wire bytes (:func:`reverb_py._codec.chunk.encode_chunk`)
and never builds these messages; the tests compare its bytes with
``build_chunk(...).SerializeToString()`` and read what the builders give.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from reverb_py._codec import chunk as _chunk
from reverb_py._codec.tensor import (
    _SNAPPY,
    STRING_ELEMENT_OVERHEAD,
    _encode_dtype,
    _encode_string_list,
    as_array,
)
from reverb_py._proto import schema_pb2, tensor_pb2

__all__ = ["build_chunk", "decode_sample_chunks", "encode_tensor"]

Array = npt.NDArray[Any]


def build_chunk(
    chunk_key: int,
    episode_id: int,
    start: int,
    end: int,
    columns: Sequence[npt.ArrayLike],
    *,
    delta_encoded: bool = False,
    sparse: bool = False,
) -> schema_pb2.ChunkData:
    """Builds a ``ChunkData`` holding one compressed tensor per column (the message
    whose serialisation :func:`reverb_py._codec.chunk.encode_chunk` writes).

    Args:
      chunk_key: the chunk's key.
      episode_id: the episode the steps belong to.
      start: the first step (episode position) in the chunk.
      end: the last step, inclusive.
      columns: the chunk's columns, each batched with a leading time axis of length
        ``end - start + 1`` (any length ≥ 1 when ``sparse``).
      delta_encoded: delta-encode the integer columns of rank ≥ 2 and set the flag.
      sparse: the steps of the chunk are not consecutive.

    Returns:
      The chunk.

    Raises:
      InvalidArgumentError: as :func:`reverb_py._codec.chunk.checked_columns`, or an
        unsupported dtype.
    """
    arrays = _chunk.checked_columns(start, end, columns, delta_encoded=delta_encoded, sparse=sparse)
    chunk = schema_pb2.ChunkData(
        chunk_key=chunk_key,
        sequence_range=schema_pb2.SequenceRange(
            episode_id=episode_id, start=start, end=end, sparse=sparse
        ),
        data_tensors_len=len(columns),
        delta_encoded=delta_encoded,
    )
    tensors = chunk.data.tensors
    uncompressed = 0
    for array in arrays:
        uncompressed += _encode_into(array, tensors.add())
    chunk.data_uncompressed_size = uncompressed
    return chunk


def _encode_into(array: Array, proto: tensor_pb2.TensorProto) -> int:
    """Fills an empty ``proto`` with the compressed encoding of ``array``.

    Returns:
      The uncompressed byte size (see ``ChunkData.data_uncompressed_size``).
    """
    enum, storage = _encode_dtype(array.dtype)
    proto.dtype = enum  # type: ignore[assignment]
    dims = proto.tensor_shape.dim
    for size in array.shape:
        dims.add(size=size)
    if storage is None:
        proto.tensor_content, data_bytes, count = _encode_string_list(array)
        return data_bytes + STRING_ELEMENT_OVERHEAD * count
    little = np.asarray(array, dtype=storage, order="C")
    # A flat view: cramjam rejects 0-d buffers.
    proto.tensor_content = bytes(_SNAPPY.compress_raw(little.reshape(-1).data))
    return int(little.nbytes)


def encode_tensor(array: npt.ArrayLike) -> tensor_pb2.TensorProto:
    """Encodes an array as a chunk ``TensorProto`` (snappy-compressed when numeric).

    Args:
      array: a numpy array of a supported dtype (docs/REVERB_SPEC.md §1.15); other
        values go through ``np.asarray``. Strings may be object arrays of ``bytes`` or
        ``str``, or numpy ``'S'`` / ``'U'`` arrays; ``str`` is encoded as UTF-8.

    Returns:
      A new ``TensorProto``.

    Raises:
      InvalidArgumentError: unsupported dtype, or an object array holding something
        other than strings.
    """
    proto = tensor_pb2.TensorProto()
    _encode_into(as_array(array), proto)
    return proto


def decode_sample_chunks(
    chunks: Iterable[schema_pb2.ChunkData], cache: _chunk.ChunkCache | None = None
) -> dict[int, list[Array]]:
    """Decodes the chunks of a sample, each distinct key once.

    Args:
      chunks: the chunks, possibly with repeated keys (the first one is used).
      cache: a cache to take already-decoded chunks from and to add the others to.

    Returns:
      The decoded columns by chunk key.

    Raises:
      InvalidArgumentError: a tensor is malformed.
    """
    decoded: dict[int, list[Array]] = {}
    for chunk in chunks:
        key = chunk.chunk_key
        if key in decoded:
            continue
        decoded[key] = cache.decode(chunk) if cache is not None else _chunk.decode_chunk(chunk)
    return decoded
