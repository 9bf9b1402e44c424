# cython: language_level=3, annotation_typing=False, auto_pickle=False, embedsignature=False
# cython: boundscheck=False, wraparound=False
"""SampleStream responses read from their wire bytes: the fast path (compiled twin).

``split_response`` cuts a serialised ``SampleStreamResponse`` into its entries (the
``SampleInfo`` bytes, each chunk's key and bytes, ``end_of_sequence``) and
``decode_chunk_bytes`` decodes a plain chunk (numeric tensors, snappy ``tensor_content``,
no delta encoding) into its arrays, and ``read_info`` reads a ``SampleInfo``'s fields and
its item's column slices, without protobuf message objects. Both return None
for anything else (another field, a string or bfloat16 tensor, a duplicate field, bytes
that do not parse, a big-endian host): the caller then takes the general path
(``reverb_py._codec``), which decodes every valid input and raises the errors. Results
are the general path's (tested in ``tests/parity/test_sample_wire.py``).

The pure twin (``reverb_py._pure.sample_wire``) has no fast path: it always returns None.
"""

import sys

import cramjam
import numpy as np

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.string cimport memcpy

__all__ = ["assemble_plain", "decode_chunk_bytes", "read_info", "split_response"]

cdef object _decompress_into = cramjam.snappy.decompress_raw_into
cdef object _decompressed_len = cramjam.snappy.decompress_raw_len
cdef object _empty = np.empty
cdef bint _LITTLE = sys.byteorder == "little"
cdef int64_t _MAX_BYTES = 1 << 40

# TensorFlow DataType numbers of the numeric dtypes (little-endian storage).
cdef dict _DTYPES = {
    number: np.dtype(name)
    for number, name in (
        (1, "<f4"), (2, "<f8"), (3, "<i4"), (4, "u1"), (5, "<i2"), (6, "i1"),
        (8, "<c8"), (9, "<i8"), (10, "?"), (17, "<u2"), (18, "<c16"), (19, "<f2"),
        (22, "<u4"), (23, "<u8"),
    )
}


cdef inline bint _varint(const unsigned char** at, const unsigned char* end,
                         uint64_t* out) noexcept:
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef unsigned char byte
    while True:
        if at[0] >= end or shift > 63:
            return False
        byte = at[0][0]
        at[0] += 1
        result |= (<uint64_t>(byte & 0x7F)) << shift
        if byte < 0x80:
            out[0] = result
            return True
        shift += 7


cdef inline bint _small(const unsigned char** at, const unsigned char* end,
                        uint64_t* out) noexcept:
    """A tag or length: at most 5 bytes and 32 bits (protobuf's parser refuses more)."""
    cdef const unsigned char* start = at[0]
    if not _varint(at, end, out):
        return False
    return at[0] - start <= 5 and out[0] <= 0xFFFFFFFF


cdef inline bint _tag(const unsigned char** at, const unsigned char* end,
                      uint64_t* out) noexcept:
    """A field's tag (field number 0 is refused)."""
    return _small(at, end, out) and (out[0] >> 3) != 0


cdef inline bint _length(const unsigned char** at, const unsigned char* end,
                         uint64_t* out) noexcept:
    """A length prefix that fits in what is left."""
    if not _small(at, end, out):
        return False
    return out[0] <= <uint64_t>(end - at[0])


cdef bint _valid_message(const unsigned char* at, const unsigned char* end) noexcept:
    """Bytes that parse as a message whose fields are all scalars or left unread."""
    cdef uint64_t tag
    while at < end:
        if not _tag(&at, end, &tag) or not _skip(&at, end, tag):
            return False
    return True


cdef bint _utf8(const unsigned char* at, uint64_t length):
    """A proto3 string field must be valid UTF-8."""
    cdef uint64_t index
    for index in range(length):
        if at[index] >= 0x80:
            try:
                PyUnicode_DecodeUTF8(<const char*>at, length, NULL)
            except UnicodeDecodeError:
                return False
            return True
    return True


cdef inline bint _skip(const unsigned char** at, const unsigned char* end,
                       uint64_t tag) noexcept:
    """Skips a field's value (wire types 0, 1, 2, 5; groups are refused)."""
    cdef uint64_t value
    cdef int kind = tag & 7
    if kind == 0:
        return _varint(at, end, &value)
    if kind == 1:
        if end - at[0] < 8:
            return False
        at[0] += 8
        return True
    if kind == 2:
        if not _length(at, end, &value):
            return False
        at[0] += value
        return True
    if kind == 5:
        if end - at[0] < 4:
            return False
        at[0] += 4
        return True
    return False


cdef object _chunk_key(const unsigned char* at, const unsigned char* end):
    """The ``chunk_key`` of a chunk's bytes (0 when absent), or None."""
    cdef uint64_t tag, key = 0
    cdef bint seen = False
    while at < end:
        if not _tag(&at, end, &tag):
            return None
        if tag == 0x08:
            if seen or not _varint(&at, end, &key):
                return None
            seen = True
        elif (tag >> 3) == 1 or not _skip(&at, end, tag):
            return None
    return key


def split_response(bytes data):
    """``[(info bytes or None, [(chunk key, chunk bytes), ...], end_of_sequence), ...]``
    for the entries of a serialised ``SampleStreamResponse``, or None."""
    cdef const unsigned char* base = <const unsigned char*>PyBytes_AS_STRING(data)
    cdef const unsigned char* at = base
    cdef const unsigned char* end = base + PyBytes_GET_SIZE(data)
    cdef const unsigned char* entry_end
    cdef uint64_t tag, length, flag
    cdef list entries = []
    cdef list chunks
    cdef object info, key
    cdef bint end_of_sequence
    if not _LITTLE:
        return None
    while at < end:
        if not _tag(&at, end, &tag) or tag != 0x0A or not _length(&at, end, &length):
            return None
        entry_end = at + length
        info = None
        chunks = []
        end_of_sequence = False
        while at < entry_end:
            if not _tag(&at, entry_end, &tag):
                return None
            if tag == 0x0A:
                if info is not None or not _length(&at, entry_end, &length):
                    return None
                info = PyBytes_FromStringAndSize(<const char*>at, length)
                at += length
            elif tag == 0x12:
                if not _length(&at, entry_end, &length):
                    return None
                key = _chunk_key(at, at + length)
                if key is None:
                    return None
                chunks.append((key, PyBytes_FromStringAndSize(<const char*>at, length)))
                at += length
            elif tag == 0x18:
                if not _varint(&at, entry_end, &flag):
                    return None
                end_of_sequence = flag != 0
            else:
                return None
        entries.append((info, chunks, end_of_sequence))
    return entries


cdef object _shape(const unsigned char* at, const unsigned char* end, int64_t* count):
    """A ``TensorShapeProto``'s dims as a tuple (fully defined), or None."""
    cdef uint64_t tag, length, value
    cdef const unsigned char* dim_end
    cdef list dims = []
    cdef int64_t size, total = 1
    cdef bint seen
    while at < end:
        if not _tag(&at, end, &tag):
            return None
        if tag == 0x12:
            if not _length(&at, end, &length):
                return None
            dim_end = at + length
            size = 0
            seen = False
            while at < dim_end:
                if not _tag(&at, dim_end, &tag):
                    return None
                if tag == 0x08:
                    if seen or not _varint(&at, dim_end, &value):
                        return None
                    size = <int64_t>value
                    seen = True
                elif tag == 0x12:
                    if not _length(&at, dim_end, &value) or not _utf8(at, value):
                        return None
                    at += value
                else:
                    return None
            if size < 0 or (size and total > _MAX_BYTES // size):
                return None
            total *= size
            dims.append(size)
        elif tag == 0x18:
            if not _varint(&at, end, &value) or value:
                return None
        else:
            return None
    count[0] = total
    return tuple(dims)


cdef object _tensor(object data, const unsigned char* base, const unsigned char* at,
                    const unsigned char* end):
    """A plain numeric ``TensorProto``'s array, or None."""
    cdef uint64_t tag, length, value
    cdef uint64_t dtype = 0
    cdef object shape = ()
    cdef int64_t count = 1, expected
    cdef Py_ssize_t content_start = 0, content_length = 0
    cdef bint seen_dtype = False, seen_shape = False, seen_content = False
    while at < end:
        if not _tag(&at, end, &tag):
            return None
        if tag == 0x08:
            if seen_dtype or not _varint(&at, end, &dtype):
                return None
            seen_dtype = True
        elif tag == 0x12:
            if seen_shape or not _length(&at, end, &length):
                return None
            shape = _shape(at, at + length, &count)
            if shape is None:
                return None
            seen_shape = True
            at += length
        elif tag == 0x22:
            if seen_content or not _length(&at, end, &length):
                return None
            content_start = at - base
            content_length = length
            seen_content = True
            at += length
        else:
            return None
    numpy_dtype = _DTYPES.get(dtype)
    if numpy_dtype is None:
        return None
    expected = count * (<int64_t>numpy_dtype.itemsize)
    if expected > _MAX_BYTES:
        return None
    out = _empty(shape, numpy_dtype)
    if content_length == 0:
        return out if expected == 0 else None
    content = memoryview(data)[content_start : content_start + content_length]
    try:
        if _decompressed_len(content) != expected:
            return None
        if _decompress_into(content, out.reshape(-1).data) != expected:
            return None
    except Exception:
        return None
    return out


def decode_chunk_bytes(bytes data):
    """The arrays of a plain chunk's bytes (one per tensor), or None."""
    cdef const unsigned char* base = <const unsigned char*>PyBytes_AS_STRING(data)
    cdef const unsigned char* at = base
    cdef const unsigned char* end = base + PyBytes_GET_SIZE(data)
    cdef const unsigned char* tensors_start = NULL
    cdef const unsigned char* tensors_end = NULL
    cdef const unsigned char* tensor_end
    cdef uint64_t tag, length, value
    cdef list columns = []
    if not _LITTLE:
        return None
    while at < end:
        if not _tag(&at, end, &tag):
            return None
        if tag == 0x2A:
            if tensors_start != NULL or not _length(&at, end, &length):
                return None
            tensors_start = at
            tensors_end = at + length
            at += length
        elif tag == 0x20:
            if not _varint(&at, end, &value) or value:
                return None  # Delta encoding: the general path.
        elif tag == 0x12:
            if not _length(&at, end, &length) or not _valid_message(at, at + length):
                return None
            at += length
        elif tag == 0x08 or tag == 0x30 or tag == 0x38:
            if not _skip(&at, end, tag):
                return None
        else:
            return None
    if tensors_start == NULL:
        return None
    at = tensors_start
    while at < tensors_end:
        if not _tag(&at, tensors_end, &tag) or tag != 0x0A:
            return None
        if not _length(&at, tensors_end, &length):
            return None
        tensor_end = at + length
        array = _tensor(data, base, at, tensor_end)
        if array is None:
            return None
        columns.append(array)
        at = tensor_end
    if not columns:
        return None
    return columns


cdef inline bint _fixed64(const unsigned char** at, const unsigned char* end,
                          double* out) noexcept:
    if end - at[0] < 8:
        return False
    memcpy(out, at[0], 8)
    at[0] += 8
    return True


cdef object _slice(const unsigned char* at, const unsigned char* end):
    """A ``ChunkSlice`` as ``(chunk_key, offset, length, index)``, or None."""
    cdef uint64_t tag, value
    cdef uint64_t key = 0
    cdef int32_t offset = 0, length = 0, index = 0
    while at < end:
        if not _tag(&at, end, &tag) or not _varint(&at, end, &value):
            return None  # Every field of a ChunkSlice is a varint.
        if tag == 0x08:
            key = value
        elif tag == 0x10:
            offset = <int32_t>value
        elif tag == 0x18:
            length = <int32_t>value
        elif tag == 0x20:
            index = <int32_t>value
        else:
            return None
    return (key, offset, length, index)


cdef object _columns(const unsigned char* at, const unsigned char* end):
    """A ``FlatTrajectory`` as ``[(squeeze, [slice, ...]), ...]``, or None."""
    cdef uint64_t tag, length, value
    cdef const unsigned char* column_end
    cdef list columns = []
    cdef list slices
    cdef bint squeeze
    while at < end:
        if not _tag(&at, end, &tag) or tag != 0x0A or not _length(&at, end, &length):
            return None
        column_end = at + length
        slices = []
        squeeze = False
        while at < column_end:
            if not _tag(&at, column_end, &tag):
                return None
            if tag == 0x0A:
                if not _length(&at, column_end, &length):
                    return None
                piece = _slice(at, at + length)
                if piece is None:
                    return None
                slices.append(piece)
                at += length
            elif tag == 0x10:
                if not _varint(&at, column_end, &value):
                    return None
                squeeze = value != 0
            else:
                return None
        columns.append((squeeze, slices))
    return columns


def read_info(bytes data):
    """A serialised ``SampleInfo`` as ``(key, probability, table_size, priority,
    times_sampled, columns)`` (``columns`` as ``_columns`` gives them), or None."""
    cdef const unsigned char* at = <const unsigned char*>PyBytes_AS_STRING(data)
    cdef const unsigned char* end = at + PyBytes_GET_SIZE(data)
    cdef const unsigned char* item_end
    cdef uint64_t tag, length, value
    cdef uint64_t key = 0
    cdef double probability = 0.0, priority = 0.0
    cdef int64_t table_size = 0
    cdef int32_t times_sampled = 0
    cdef object columns = []
    cdef bint seen_item = False, seen_trajectory = False
    if not _LITTLE:
        return None
    while at < end:
        if not _tag(&at, end, &tag):
            return None
        if tag == 0x0A:
            if seen_item or not _length(&at, end, &length):
                return None
            seen_item = True
            item_end = at + length
            while at < item_end:
                if not _tag(&at, item_end, &tag):
                    return None
                if tag == 0x08:
                    if not _varint(&at, item_end, &key):
                        return None
                elif tag == 0x29:
                    if not _fixed64(&at, item_end, &priority):
                        return None
                elif tag == 0x30:
                    if not _varint(&at, item_end, &value):
                        return None
                    times_sampled = <int32_t>value
                elif tag == 0x12:
                    if not _length(&at, item_end, &length) or not _utf8(at, length):
                        return None
                    at += length
                elif tag == 0x3A:
                    if not _length(&at, item_end, &length):
                        return None
                    if not _valid_message(at, at + length):
                        return None
                    at += length
                elif tag == 0x42:
                    if seen_trajectory or not _length(&at, item_end, &length):
                        return None
                    seen_trajectory = True
                    columns = _columns(at, at + length)
                    if columns is None:
                        return None
                    at += length
                else:
                    return None
        elif tag == 0x11:
            if not _fixed64(&at, end, &probability):
                return None
        elif tag == 0x18:
            if not _varint(&at, end, &value):
                return None
            table_size = <int64_t>value
        elif tag == 0x20:
            if not _varint(&at, end, &value):
                return None
        else:
            return None
    return (key, probability, table_size, priority, times_sampled, columns)


cdef object _unpack_plain(list layout, dict chunks, bint copy):
    """The columns of a sample whose every column is one in-range slice, or None."""
    cdef list result = []
    cdef tuple column, piece
    cdef object tensors, tensor, data
    cdef Py_ssize_t offset, length, index, steps
    for column in layout:
        slices = column[1]
        if len(slices) != 1:
            return None
        piece = slices[0]
        tensors = chunks.get(piece[0])
        if tensors is None:
            return None
        offset = piece[1]
        length = piece[2]
        index = piece[3]
        if index < 0 or index >= len(tensors):
            return None
        tensor = tensors[index]
        shape = tensor.shape
        if not shape:
            return None
        steps = shape[0]
        if offset < 0 or length < 0 or offset + length > steps:
            return None
        if column[0] and length != 1:
            return None
        data = tensor if offset == 0 and length == steps else tensor[offset : offset + length]
        if copy:
            data = data.copy()
        result.append(data[0, ...] if column[0] else data)
    return result


def assemble_plain(bytes data, object cache, Py_ssize_t capacity, object info_class,
                   bint copy):
    """The samples of a response made of whole plain samples (each entry one sample:
    its info, its chunks, ``end_of_sequence``; every chunk plain or in ``cache``, every
    column one slice in range), as ``[(info, columns, squeeze flags), ...]``, or None.

    ``cache`` is the stream's ``OrderedDict`` of decoded chunks (least recently used
    first, at most ``capacity``); it is updated as the general path updates it. None
    leaves it as it was only for the chunks it did not reach: the caller's general path
    then decodes the response again, with the same results.
    """
    entries = split_response(data)
    if entries is None:
        return None
    cdef list done = []
    cdef dict chunks
    cdef tuple entry
    for entry in entries:
        info_bytes = entry[0]
        if info_bytes is None or not entry[2]:
            return None
        fields = read_info(info_bytes)
        if fields is None:
            return None
        chunks = {}
        for key, raw in entry[1]:
            columns = cache.get(key)
            if columns is None:
                columns = decode_chunk_bytes(raw)
                if columns is None:
                    return None
                cache[key] = columns
                if len(cache) > capacity:
                    cache.popitem(last=False)
            else:
                cache.move_to_end(key)
            chunks[key] = columns
        layout = fields[5]
        columns = _unpack_plain(layout, chunks, copy)
        if columns is None:
            return None
        done.append(
            (
                info_class(fields[0], fields[1], fields[2], fields[3], fields[4]),
                columns,
                tuple([column[0] for column in layout]),
            )
        )
    return done
