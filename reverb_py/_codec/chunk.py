"""Chunk encoding: columns of numpy arrays ⇄ Reverb's ``ChunkData``, and sampled items.

A chunk holds one compressed ``TensorProto`` per column (see
:mod:`reverb_py._codec.tensor`), its key, its episode's step range and, for integer
columns, optional delta encoding (docs/REVERB_SPEC.md §2.3). A sampled item's columns are
reassembled from its ``FlatTrajectory`` and the decoded chunks (§2.5).

Decoding never trusts its input: malformed data raises
:class:`~reverb_py.errors.InvalidArgumentError`.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from reverb_py import _impl
from reverb_py._codec import tensor as _tensor
from reverb_py._proto import schema_pb2
from reverb_py.errors import InvalidArgumentError

__all__ = [
    "ChunkCache",
    "checked_columns",
    "decode_chunk",
    "encode_chunk",
    "encode_column_chunk",
    "encode_plain_column_chunk",
    "unpack_columns",
    "unpack_trajectory",
]

Array = npt.NDArray[Any]


def checked_columns(
    start: int,
    end: int,
    columns: Sequence[npt.ArrayLike],
    *,
    delta_encoded: bool = False,
    sparse: bool = False,
) -> Iterator[Array]:
    """Checks a chunk's range now, then yields its columns as arrays, each once it is
    checked (delta-encoded when ``delta_encoded``): every chunk encoder refuses the same
    chunks with the same errors, in the same order.

    Raises:
      InvalidArgumentError: ``end < start`` (at the call), or (while iterating) a column
        without a non-empty time axis or, unless ``sparse``, whose length is not that of
        the range.
    """
    if end < start:
        raise InvalidArgumentError(f"Chunk range end ({end}) is before its start ({start}).")
    return _checked_columns(start, end, columns, delta_encoded, sparse)


def _checked_columns(
    start: int, end: int, columns: Sequence[npt.ArrayLike], delta_encoded: bool, sparse: bool
) -> Iterator[Array]:
    length = end - start + 1
    for index, column in enumerate(columns):
        array = _tensor.as_array(column)
        if array.ndim == 0 or array.shape[0] == 0:
            raise InvalidArgumentError(
                f"Chunk column {index} needs a non-empty leading time axis, got shape "
                f"{list(array.shape)}."
            )
        if not sparse and array.shape[0] != length:
            raise InvalidArgumentError(
                f"Chunk column {index} has {array.shape[0]} steps, the range "
                f"[{start}, {end}] has {length}."
            )
        yield _tensor.delta_encode(array) if delta_encoded else array


def encode_chunk(
    chunk_key: int,
    episode_id: int,
    start: int,
    end: int,
    columns: Sequence[npt.ArrayLike],
    *,
    delta_encoded: bool = False,
    sparse: bool = False,
) -> bytes:
    """A serialised ``ChunkData`` holding one compressed tensor per column, written
    without building the message.

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
      The bytes protobuf would write for the message (fields at their default value
      left out).

    Raises:
      InvalidArgumentError: as :func:`checked_columns`, or an unsupported dtype.
    """
    arrays = checked_columns(start, end, columns, delta_encoded=delta_encoded, sparse=sparse)
    tensors: list[bytes] = []
    append = tensors.append
    uncompressed = 0
    for array in arrays:
        tensor, size = _tensor.encode_tensor_bytes(array)
        uncompressed += size
        append(tensor)
    return _impl.wire.encode_chunk_data(
        chunk_key, episode_id, start, end, sparse, delta_encoded, tensors, uncompressed
    )


def encode_column_chunk(
    chunk_key: int,
    episode_id: int,
    start: int,
    end: int,
    column: Array,
    *,
    delta_encoded: bool = False,
    sparse: bool = False,
) -> bytes:
    """:func:`encode_chunk` of one column its caller has already checked: an array with
    a leading time axis of ``end - start + 1`` steps (of at least one step when
    ``sparse``). The writer's engine, which batches its columns itself, calls this.

    Raises:
      InvalidArgumentError: an unsupported dtype.
    """
    tensor, uncompressed = _tensor.encode_tensor_bytes(
        _tensor.delta_encode(column) if delta_encoded else column
    )
    return _impl.wire.encode_chunk_data(
        chunk_key, episode_id, start, end, sparse, delta_encoded, [tensor], uncompressed
    )


def encode_plain_column_chunk(
    chunk_key: int, episode_id: int, start: int, end: int, sparse: bool, enum: int, column: Array
) -> bytes:
    """:func:`encode_column_chunk` (not delta encoded) of a C-contiguous column whose
    dtype has ``enum == tensor.plain_enum(column.dtype)``, not 0 (not checked): the
    writer's common case, without the general path's conversions."""
    return _impl.wire.encode_chunk_data(
        chunk_key,
        episode_id,
        start,
        end,
        sparse,
        False,
        [_tensor.encode_plain_tensor_bytes(enum, column)],
        column.nbytes,
    )


def decode_chunk(chunk: schema_pb2.ChunkData) -> list[Array]:
    """Decodes every tensor of a chunk (undoing delta encoding when flagged).

    Reads ``data.tensors``, or the legacy ``deprecated_data`` when ``data`` holds none.

    Raises:
      InvalidArgumentError: a tensor is malformed.
    """
    tensors = chunk.data.tensors
    if not tensors:
        tensors = chunk.deprecated_data
    columns = [_tensor.decode_tensor(tensor) for tensor in tensors]
    if chunk.delta_encoded:
        columns = [_tensor.delta_decode(column) for column in columns]
    return columns


class ChunkCache:
    """Decoded chunks by key; the least recently used is dropped past ``capacity``.

    Not thread-safe. The cached arrays are shared: don't modify them (
    :func:`unpack_trajectory` copies by default).
    """

    def __init__(self, capacity: int = 256) -> None:
        """Initializes an empty cache.

        Args:
          capacity: how many chunks to keep (≥ 1).

        Raises:
          ValueError: ``capacity < 1``.
        """
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._capacity = capacity
        self._chunks: collections.OrderedDict[int, list[Array]] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._chunks)

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def entries(self) -> collections.OrderedDict[int, list[Array]]:
        """The cache itself, least recently used first (for compiled readers that
        update it as :meth:`get` and :meth:`put` do)."""
        return self._chunks

    def __contains__(self, chunk_key: object) -> bool:
        return chunk_key in self._chunks

    def decode(self, chunk: schema_pb2.ChunkData) -> list[Array]:
        """Returns the decoded columns of ``chunk``, decoding it only if not cached.

        Raises:
          InvalidArgumentError: a tensor is malformed.
        """
        key = chunk.chunk_key
        columns = self._chunks.get(key)
        if columns is not None:
            self._chunks.move_to_end(key)
            return columns
        columns = decode_chunk(chunk)
        self._chunks[key] = columns
        if len(self._chunks) > self._capacity:
            self._chunks.popitem(last=False)
        return columns

    def get(self, chunk_key: int) -> list[Array] | None:
        """The cached columns of a chunk (marked as used), or None."""
        columns = self._chunks.get(chunk_key)
        if columns is not None:
            self._chunks.move_to_end(chunk_key)
        return columns

    def put(self, chunk_key: int, columns: list[Array]) -> None:
        """Caches a chunk's decoded columns (dropping the least recently used)."""
        self._chunks[chunk_key] = columns
        if len(self._chunks) > self._capacity:
            self._chunks.popitem(last=False)

    def clear(self) -> None:
        """Drops every cached chunk."""
        self._chunks.clear()


def unpack_trajectory(
    trajectory: schema_pb2.FlatTrajectory,
    chunks: Mapping[int, Sequence[Array]],
    *,
    copy: bool = True,
) -> list[Array]:
    """Assembles the columns of an item from its decoded chunks.

    Each column is the concatenation along the time axis of
    ``chunks[key][index][offset:offset + length]`` over its slices; a ``squeeze``
    column drops its time axis, which must then have length 1.

    Args:
      trajectory: the item's ``FlatTrajectory``.
      chunks: decoded chunk tensors by chunk key (as :meth:`ChunkCache.decode` gives them).
      copy: return arrays that share no memory with ``chunks`` (a single-slice column
        is otherwise a view into its chunk tensor).

    Returns:
      One array per column.

    Raises:
      InvalidArgumentError: a missing chunk, a tensor index or slice out of range,
        slices that do not concatenate, or a squeezed column whose length is not 1.
    """
    columns = [
        (
            column.squeeze,
            [
                (piece.chunk_key, piece.offset, piece.length, piece.index)
                for piece in column.chunk_slices
            ],
        )
        for column in trajectory.columns
    ]
    return unpack_columns(columns, chunks, copy=copy)


Slice = tuple[int, int, int, int]
"""A chunk slice: ``(chunk_key, offset, length, index)``."""


def unpack_columns(
    columns: Sequence[tuple[bool, Sequence[Slice]]],
    chunks: Mapping[int, Sequence[Array]],
    *,
    copy: bool = True,
) -> list[Array]:
    """:func:`unpack_trajectory` of an item's columns given as ``(squeeze, slices)``.

    Raises:
      InvalidArgumentError: as :func:`unpack_trajectory`.
    """
    result: list[Array] = []
    append = result.append
    column_index = 0
    for squeeze, slices in columns:
        # PERF(unpack): one slice in range, the common case, without the general path.
        if len(slices) == 1:
            key, offset, length, index = slices[0]
            tensors = chunks.get(key)
            if tensors is not None and 0 <= index < len(tensors):
                tensor = tensors[index]
                shape = tensor.shape
                if (
                    shape
                    and offset >= 0
                    and length >= 0
                    and offset + length <= shape[0]
                    and (not squeeze or length == 1)
                ):
                    data = (
                        tensor
                        if offset == 0 and length == shape[0]
                        else tensor[offset : offset + length]
                    )
                    if copy:
                        data = data.copy()
                    append(data[0, ...] if squeeze else data)
                    column_index += 1
                    continue
        append(_column(column_index, squeeze, slices, chunks, copy))
        column_index += 1
    return result


def _column(
    column_index: int,
    squeeze: bool,
    slices: Sequence[Slice],
    chunks: Mapping[int, Sequence[Array]],
    copy: bool,
) -> Array:
    """One column of :func:`unpack_columns`, every case and every check."""
    pieces: list[Array] = []
    for key, offset, length, index in slices:
        tensors = chunks.get(key)
        if tensors is None:
            raise InvalidArgumentError(
                f"Column {column_index} references chunk {key}, which the sample lacks."
            )
        if not 0 <= index < len(tensors):
            raise InvalidArgumentError(
                f"Column {column_index} references tensor {index} of chunk {key}, "
                f"which has {len(tensors)} tensors."
            )
        tensor = tensors[index]
        if tensor.ndim == 0:
            raise InvalidArgumentError(
                f"Tensor {index} of chunk {key} has no time axis (column {column_index})."
            )
        steps = tensor.shape[0]
        if offset < 0 or length < 0 or offset + length > steps:
            raise InvalidArgumentError(
                f"Column {column_index} slices [{offset}, {offset + length}) of tensor "
                f"{index} of chunk {key}, which has {steps} steps."
            )
        pieces.append(
            tensor if offset == 0 and length == steps else tensor[offset : offset + length]
        )
    if not pieces:
        raise InvalidArgumentError(f"Column {column_index} has no chunk slices.")
    if len(pieces) == 1:
        data = pieces[0].copy() if copy else pieces[0]
    else:
        dtypes = {piece.dtype for piece in pieces}
        if len(dtypes) > 1:
            raise InvalidArgumentError(
                f"The slices of column {column_index} have different dtypes: "
                f"{sorted(str(dtype) for dtype in dtypes)}."
            )
        try:
            data = np.concatenate(pieces, axis=0)
        except ValueError as error:
            raise InvalidArgumentError(
                f"The slices of column {column_index} do not concatenate: {error}"
            ) from None
    if squeeze:
        if data.shape[0] != 1:
            raise InvalidArgumentError(
                f"Column {column_index} is squeezed but has {data.shape[0]} steps."
            )
        data = data[0, ...]
    return data
