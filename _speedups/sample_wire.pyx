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

from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.buffer cimport PyBUF_WRITE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.string cimport memcpy

__all__ = [
    "BatchFiller",
    "assemble_plain",
    "decode_chunk_bytes",
    "read_info",
    "split_response",
    "unsnappy",
]

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


cdef enum:
    _MAX_DIMS = 8          # dims of a chunk's tensor
    _MAX_TENSORS = 256     # tensors in the chunks of one entry
    _MAX_CHUNKS = 256      # chunks in one entry
    _MAX_SLICES = 1024     # slices of one sample's columns
    _MAX_COLUMNS = 256     # columns of one sample
    _SMALL_TENSOR = 4096   # decompressed bytes below which `_unsnappy` is used
    _ALIGNMENT = 64        # of a batch's arrays

cdef struct _TensorRef:
    int64_t dtype
    int64_t itemsize
    int ndim
    int64_t dims[_MAX_DIMS]
    int64_t nbytes
    const unsigned char* content
    uint64_t content_length

cdef struct _ChunkRef:
    uint64_t key
    int first
    int count

cdef struct _SliceRef:
    uint64_t key
    int64_t offset
    int64_t length
    int64_t index

cdef struct _ColumnRef:
    bint squeeze
    int first
    int count

cdef struct _InfoRef:
    uint64_t key
    double probability
    int64_t table_size
    double priority
    int32_t times_sampled

# Item sizes of the numeric TensorFlow DataTypes of _DTYPES (0: not numeric).
cdef int64_t _ITEMSIZE[32]
_ITEMSIZE[:] = [0] * 32
for _number, _dtype in _DTYPES.items():
    _ITEMSIZE[_number] = _dtype.itemsize


cdef inline bint _unsnappy(const unsigned char* src, uint64_t src_length,
                           unsigned char* dst, uint64_t dst_length) noexcept:
    """Decompresses snappy's raw format into exactly ``dst_length`` bytes.

    False for anything else: a length header that differs, a truncated element, a copy
    reaching before the start or past the end. Never reads or writes out of bounds.
    """
    cdef const unsigned char* end = src + src_length
    cdef uint64_t length, offset, written = 0, index
    cdef unsigned char tag
    cdef int extra
    if not _varint(&src, end, &length) or length != dst_length:
        return False
    while src < end:
        tag = src[0]
        src += 1
        if (tag & 3) == 0:
            length = tag >> 2
            if length >= 60:
                extra = <int>length - 59
                if end - src < extra:
                    return False
                length = 0
                for index in range(<uint64_t>extra):
                    length |= (<uint64_t>src[index]) << (8 * index)
                src += extra
            length += 1
            if length > <uint64_t>(end - src) or length > dst_length - written:
                return False
            memcpy(dst + written, src, length)
            src += length
            written += length
            continue
        if (tag & 3) == 1:
            if end - src < 1:
                return False
            length = 4 + ((tag >> 2) & 7)
            offset = ((<uint64_t>(tag >> 5)) << 8) | src[0]
            src += 1
        elif (tag & 3) == 2:
            if end - src < 2:
                return False
            length = 1 + (tag >> 2)
            offset = (<uint64_t>src[0]) | ((<uint64_t>src[1]) << 8)
            src += 2
        else:
            if end - src < 4:
                return False
            length = 1 + (tag >> 2)
            offset = ((<uint64_t>src[0]) | ((<uint64_t>src[1]) << 8)
                      | ((<uint64_t>src[2]) << 16) | ((<uint64_t>src[3]) << 24))
            src += 4
        if offset == 0 or offset > written or length > dst_length - written:
            return False
        if offset >= length:
            memcpy(dst + written, dst + written - offset, length)
        else:
            for index in range(length):
                dst[written + index] = dst[written - offset + index]
        written += length
    return written == dst_length


cdef bint _parse_shape(const unsigned char* at, const unsigned char* end,
                       _TensorRef* tensor) noexcept:
    cdef uint64_t tag, length, value
    cdef const unsigned char* dim_end
    cdef int64_t size, total = 1
    cdef bint seen
    tensor.ndim = 0
    while at < end:
        if not _tag(&at, end, &tag):
            return False
        if tag == 0x12:
            if not _length(&at, end, &length):
                return False
            dim_end = at + length
            size = 0
            seen = False
            while at < dim_end:
                if not _tag(&at, dim_end, &tag):
                    return False
                if tag == 0x08:
                    if seen or not _varint(&at, dim_end, &value):
                        return False
                    size = <int64_t>value
                    seen = True
                elif tag == 0x12:
                    if not _length(&at, dim_end, &value) or not _utf8(at, value):
                        return False
                    at += value
                else:
                    return False
            if size < 0 or (size and total > _MAX_BYTES // size):
                return False
            if tensor.ndim >= _MAX_DIMS:
                return False
            total *= size
            tensor.dims[tensor.ndim] = size
            tensor.ndim += 1
        elif tag == 0x18:
            if not _varint(&at, end, &value) or value:
                return False
        else:
            return False
    tensor.nbytes = total
    return True


cdef bint _parse_tensor(const unsigned char* at, const unsigned char* end,
                        _TensorRef* tensor) noexcept:
    """A plain numeric ``TensorProto``: its dtype, dims and snappy content."""
    cdef uint64_t tag, length, dtype = 0
    cdef unsigned char empty = 0
    cdef const unsigned char* header
    cdef bint seen_dtype = False, seen_shape = False, seen_content = False
    tensor.ndim = 0
    tensor.nbytes = 1
    tensor.content = NULL
    tensor.content_length = 0
    while at < end:
        if not _tag(&at, end, &tag):
            return False
        if tag == 0x08:
            if seen_dtype or not _varint(&at, end, &dtype):
                return False
            seen_dtype = True
        elif tag == 0x12:
            if seen_shape or not _length(&at, end, &length):
                return False
            if not _parse_shape(at, at + length, tensor):
                return False
            seen_shape = True
            at += length
        elif tag == 0x22:
            if seen_content or not _length(&at, end, &length):
                return False
            tensor.content = at
            tensor.content_length = length
            seen_content = True
            at += length
        else:
            return False
    if dtype >= 32 or _ITEMSIZE[dtype] == 0:
        return False
    tensor.dtype = <int64_t>dtype
    tensor.itemsize = _ITEMSIZE[dtype]
    if tensor.nbytes > _MAX_BYTES // tensor.itemsize:
        return False
    tensor.nbytes *= tensor.itemsize
    if tensor.nbytes == 0:
        # No content, or content that decompresses to nothing.
        return tensor.content_length == 0 or _unsnappy(
            tensor.content, tensor.content_length, &empty, 0)
    # Before anything is allocated for it: the snappy header must give the tensor's
    # size, and a size snappy cannot reach from this much content (it expands at most
    # 64 bytes per 3) is refused.
    header = tensor.content
    if (not _varint(&header, tensor.content + tensor.content_length, &length)
            or <int64_t>length != tensor.nbytes
            or <uint64_t>tensor.nbytes > 22 * tensor.content_length + 64):
        return False
    return True


cdef object _tensor(object data, const unsigned char* base, const unsigned char* at,
                    const unsigned char* end):
    """A plain numeric ``TensorProto``'s array, or None."""
    cdef _TensorRef tensor
    cdef int dim
    cdef Py_ssize_t start
    if not _parse_tensor(at, end, &tensor):
        return None
    out = _empty(tuple([tensor.dims[dim] for dim in range(tensor.ndim)]), _DTYPES[tensor.dtype])
    if tensor.nbytes == 0:
        return out
    start = tensor.content - base
    content = memoryview(data)[start : start + <Py_ssize_t>tensor.content_length]
    try:
        if _decompressed_len(content) != tensor.nbytes:
            return None
        if _decompress_into(content, out.reshape(-1).data) != tensor.nbytes:
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


cdef bint _read_slice(const unsigned char* at, const unsigned char* end,
                      _SliceRef* piece) noexcept:
    """A ``ChunkSlice`` (every field a varint)."""
    cdef uint64_t tag, value
    piece.key = 0
    piece.offset = 0
    piece.length = 0
    piece.index = 0
    while at < end:
        if not _tag(&at, end, &tag) or not _varint(&at, end, &value):
            return False
        if tag == 0x08:
            piece.key = value
        elif tag == 0x10:
            piece.offset = <int32_t>value
        elif tag == 0x18:
            piece.length = <int32_t>value
        elif tag == 0x20:
            piece.index = <int32_t>value
        else:
            return False
    return True


cdef bint _parse_info(const unsigned char* at, const unsigned char* end, _InfoRef* info,
                      _ColumnRef* layout, _SliceRef* slices, int* columns) noexcept:
    """A serialised ``SampleInfo``: its fields into ``info``, its item's columns into
    ``layout`` (each a run of ``slices``); ``columns`` of them (0 without a trajectory).
    False for anything else (another field, a duplicate message field, too many columns
    or slices, bytes that do not parse)."""
    cdef const unsigned char* item_end
    cdef const unsigned char* trajectory_end = NULL
    cdef const unsigned char* trajectory = NULL
    cdef const unsigned char* column_end
    cdef uint64_t tag, length, value
    cdef bint seen_item = False
    cdef int count_slices = 0, count = 0
    info.key = 0
    info.probability = 0.0
    info.table_size = 0
    info.priority = 0.0
    info.times_sampled = 0
    while at < end:
        if not _tag(&at, end, &tag):
            return False
        if tag == 0x0A:
            if seen_item or not _length(&at, end, &length):
                return False
            seen_item = True
            item_end = at + length
            while at < item_end:
                if not _tag(&at, item_end, &tag):
                    return False
                if tag == 0x08:
                    if not _varint(&at, item_end, &info.key):
                        return False
                elif tag == 0x29:
                    if not _fixed64(&at, item_end, &info.priority):
                        return False
                elif tag == 0x30:
                    if not _varint(&at, item_end, &value):
                        return False
                    info.times_sampled = <int32_t>value
                elif tag == 0x12:
                    if not _length(&at, item_end, &length) or not _utf8(at, length):
                        return False
                    at += length
                elif tag == 0x3A:
                    if not _length(&at, item_end, &length):
                        return False
                    if not _valid_message(at, at + length):
                        return False
                    at += length
                elif tag == 0x42:
                    if trajectory != NULL or not _length(&at, item_end, &length):
                        return False
                    trajectory = at
                    trajectory_end = at + length
                    at += length
                else:
                    return False
        elif tag == 0x11:
            if not _fixed64(&at, end, &info.probability):
                return False
        elif tag == 0x18:
            if not _varint(&at, end, &value):
                return False
            info.table_size = <int64_t>value
        elif tag == 0x20:
            if not _varint(&at, end, &value):
                return False
        else:
            return False
    columns[0] = 0
    if trajectory == NULL:
        return True
    at = trajectory
    while at < trajectory_end:
        if not _tag(&at, trajectory_end, &tag) or tag != 0x0A:
            return False
        if not _length(&at, trajectory_end, &length) or count >= _MAX_COLUMNS:
            return False
        column_end = at + length
        layout[count].squeeze = False
        layout[count].first = count_slices
        layout[count].count = 0
        while at < column_end:
            if not _tag(&at, column_end, &tag):
                return False
            if tag == 0x0A:
                if not _length(&at, column_end, &length) or count_slices >= _MAX_SLICES:
                    return False
                if not _read_slice(at, at + length, &slices[count_slices]):
                    return False
                count_slices += 1
                layout[count].count += 1
                at += length
            elif tag == 0x10:
                if not _varint(&at, column_end, &value):
                    return False
                layout[count].squeeze = value != 0
            else:
                return False
        count += 1
    columns[0] = count
    return True


# read_info's scratch: it runs holding the GIL from start to end.
cdef _ColumnRef _INFO_LAYOUT[_MAX_COLUMNS]
cdef _SliceRef _INFO_SLICES[_MAX_SLICES]


def read_info(bytes data):
    """A serialised ``SampleInfo`` as ``(key, probability, table_size, priority,
    times_sampled, columns)`` (``columns`` as ``[(squeeze, [(chunk_key, offset, length,
    index), ...]), ...]``), or None."""
    cdef _InfoRef info
    cdef int columns, column, position
    cdef _SliceRef* piece
    if not _LITTLE:
        return None
    if not _parse_info(<const unsigned char*>PyBytes_AS_STRING(data),
                       <const unsigned char*>PyBytes_AS_STRING(data) + PyBytes_GET_SIZE(data),
                       &info, _INFO_LAYOUT, _INFO_SLICES, &columns):
        return None
    layout = []
    for column in range(columns):
        slices = []
        for position in range(_INFO_LAYOUT[column].first,
                              _INFO_LAYOUT[column].first + _INFO_LAYOUT[column].count):
            piece = &_INFO_SLICES[position]
            slices.append((piece.key, piece.offset, piece.length, piece.index))
        layout.append((bool(_INFO_LAYOUT[column].squeeze), slices))
    return (info.key, info.probability, info.table_size, info.priority, info.times_sampled,
            layout)


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


# ------------------------------------------------------------------ batches
#
# PERF(sample-batch): a learner asking for batches gets its samples written straight
# into the batch's arrays: a plain sample's columns are decompressed into their rows and
# its info into the info arrays, with no Python object per sample (the per-sample path
# above makes ~20). Tiny tensors are decompressed by `_unsnappy` below, because one call
# of cramjam costs more than decompressing them; tensors of _SMALL_TENSOR bytes or more
# go through cramjam.

def unsnappy(data, Py_ssize_t length):
    """``data`` (snappy's raw format) decompressed to ``length`` bytes, or None.

    The decoder of the batch path, exposed for its parity test against cramjam."""
    cdef const unsigned char[::1] view = data
    out = bytearray(length)
    cdef unsigned char[::1] target = out
    cdef const unsigned char* src = &view[0] if view.shape[0] else <const unsigned char*>""
    cdef unsigned char* dst = &target[0] if length else <unsigned char*>NULL
    cdef unsigned char dummy = 0
    if dst == NULL:
        dst = &dummy
    if not _unsnappy(src, view.shape[0], dst, length):
        return None
    return bytes(out)


cdef bint _parse_chunk(const unsigned char* at, const unsigned char* end,
                       _ChunkRef* chunk, _TensorRef* tensors, int* used) noexcept:
    """A plain chunk's key and tensors (appended to ``tensors`` from ``used``)."""
    cdef uint64_t tag, length, value
    cdef const unsigned char* tensors_start = NULL
    cdef const unsigned char* tensors_end = NULL
    cdef bint seen_key = False
    chunk.key = 0
    while at < end:
        if not _tag(&at, end, &tag):
            return False
        if tag == 0x08:
            if seen_key or not _varint(&at, end, &chunk.key):
                return False
            seen_key = True
        elif tag == 0x2A:
            if tensors_start != NULL or not _length(&at, end, &length):
                return False
            tensors_start = at
            tensors_end = at + length
            at += length
        elif tag == 0x20:
            if not _varint(&at, end, &value) or value:
                return False  # Delta encoding: the per-sample path.
        elif tag == 0x12:
            if not _length(&at, end, &length) or not _valid_message(at, at + length):
                return False
            at += length
        elif tag == 0x30 or tag == 0x38:
            if not _skip(&at, end, tag):
                return False
        else:
            return False
    if tensors_start == NULL:
        return False
    chunk.first = used[0]
    chunk.count = 0
    at = tensors_start
    while at < tensors_end:
        if not _tag(&at, tensors_end, &tag) or tag != 0x0A:
            return False
        if not _length(&at, tensors_end, &length):
            return False
        if used[0] >= _MAX_TENSORS:
            return False
        if not _parse_tensor(at, at + length, &tensors[used[0]]):
            return False
        used[0] += 1
        chunk.count += 1
        at += length
    return chunk.count > 0


cdef object _aligned(tuple shape, object dtype, int64_t nbytes):
    """An array whose data starts on a 64-byte boundary: JAX's CPU devices then use it
    in place (``jax.device_put`` copies any other)."""
    buffer = _empty(nbytes + _ALIGNMENT, np.uint8)
    cdef size_t address = <size_t>buffer.ctypes.data
    cdef Py_ssize_t offset = (_ALIGNMENT - address % _ALIGNMENT) % _ALIGNMENT
    return buffer[offset : offset + nbytes].view(dtype).reshape(shape)


cdef class BatchFiller:
    """Writes the plain samples of a stream's responses into batches of ``capacity``
    (the first of ``first`` when given: the rest of a batch begun elsewhere).

    :meth:`add` takes a response's bytes; it writes each entry that is a whole plain
    sample (its info, its chunks, ``end_of_sequence``; plain numeric chunks; every
    column made of slices of one dtype and step shape) into the current batch, and
    stops at the first entry that is not, or whose columns differ from the batch's.
    It returns ``(batches, consumed)``: the batches it filled, as ``(info, columns,
    rows)`` with ``info`` a ``info_class`` of one array per field and ``columns`` one
    array per column (rows along the first axis), and how many bytes of ``data`` it
    read (whole entries; the rest is for the per-sample path, and its samples follow
    this filler's). A sample whose columns differ from the batch's ends the batch
    (:meth:`flush`). :meth:`flush` returns the batch being filled (fewer rows), or None.

    Raises:
      InvalidArgumentError: (from :meth:`add`) a plain tensor whose data does not
        decompress to its size. The samples before it are kept.
    """

    cdef Py_ssize_t _capacity
    cdef Py_ssize_t _block
    cdef Py_ssize_t _next
    cdef object _info_class
    cdef object _error_class
    cdef Py_ssize_t _rows
    cdef int _columns
    # The current batch: its arrays and each column's dtype, step shape, row layout.
    cdef list _arrays
    cdef list _info_arrays
    cdef unsigned char* _data[_MAX_COLUMNS]
    cdef int64_t _row_bytes[_MAX_COLUMNS]
    cdef int64_t _dtype[_MAX_COLUMNS]
    cdef bint _squeeze[_MAX_COLUMNS]
    cdef int _ndim[_MAX_COLUMNS]
    cdef int64_t _dims[_MAX_COLUMNS][_MAX_DIMS + 1]
    cdef uint64_t* _keys
    cdef double* _probabilities
    cdef int64_t* _table_sizes
    cdef double* _priorities
    cdef int32_t* _times_sampled
    # One entry's pieces.
    cdef _TensorRef _tensors[_MAX_TENSORS]
    cdef _ChunkRef _chunks[_MAX_CHUNKS]
    cdef _SliceRef _slices[_MAX_SLICES]
    cdef _ColumnRef _layout[_MAX_COLUMNS]
    # The entry's columns as it would write them.
    cdef int64_t _s_dtype[_MAX_COLUMNS]
    cdef int _s_ndim[_MAX_COLUMNS]
    cdef int64_t _s_dims[_MAX_COLUMNS][_MAX_DIMS + 1]
    cdef int64_t _s_row_bytes[_MAX_COLUMNS]
    cdef object _scratch

    def __cinit__(self, Py_ssize_t capacity, object info_class, object error_class,
                  Py_ssize_t first=0):
        if capacity < 1:
            raise ValueError("capacity must be positive")
        self._capacity = capacity
        self._block = capacity
        self._next = first if 0 < first < capacity else capacity
        self._info_class = info_class
        self._error_class = error_class
        self._rows = 0
        self._columns = -1
        self._arrays = None
        self._info_arrays = None
        self._scratch = bytearray()

    @property
    def rows(self):
        """Samples in the batch being filled."""
        return self._rows

    def flush(self):
        """The batch being filled, as ``(info, columns, rows)``, or None when empty."""
        cdef Py_ssize_t rows = self._rows
        if self._columns < 0 or rows == 0:
            self._columns = -1
            return None
        arrays = self._arrays
        infos = self._info_arrays
        self._columns = -1
        self._rows = 0
        self._arrays = None
        self._info_arrays = None
        if rows == self._block:
            return (self._info_class(*infos), arrays, rows)
        return (
            self._info_class(*[array[:rows] for array in infos]),
            [array[:rows] for array in arrays],
            rows,
        )

    cdef bint _read_info(self, const unsigned char* at, const unsigned char* end,
                         _InfoRef* info, int* columns) noexcept:
        return (_parse_info(at, end, info, self._layout, self._slices, columns)
                and columns[0] > 0)

    cdef _TensorRef* _find(self, int chunks, uint64_t key, int64_t index) noexcept:
        cdef int position
        for position in range(chunks):
            if self._chunks[position].key == key:
                if index < 0 or index >= self._chunks[position].count:
                    return NULL
                return &self._tensors[self._chunks[position].first + index]
        return NULL

    cdef bint _shape_columns(self, int columns, int chunks) noexcept:
        """Each column's dtype, step shape and row bytes, or False."""
        cdef int column, position, dim
        cdef _TensorRef* tensor
        cdef _TensorRef* first
        cdef _SliceRef* piece
        cdef int64_t steps, step_bytes
        for column in range(columns):
            if self._layout[column].count < 1:
                return False
            first = NULL
            steps = 0
            step_bytes = 0
            for position in range(self._layout[column].first,
                                  self._layout[column].first + self._layout[column].count):
                piece = &self._slices[position]
                tensor = self._find(chunks, piece.key, piece.index)
                if tensor == NULL or tensor.ndim < 1:
                    return False
                if (piece.offset < 0 or piece.length < 0
                        or piece.offset + piece.length > tensor.dims[0]):
                    return False
                if first == NULL:
                    first = tensor
                    step_bytes = tensor.itemsize
                    for dim in range(1, tensor.ndim):
                        step_bytes *= tensor.dims[dim]
                else:
                    if tensor.dtype != first.dtype or tensor.ndim != first.ndim:
                        return False
                    for dim in range(1, tensor.ndim):
                        if tensor.dims[dim] != first.dims[dim]:
                            return False
                steps += piece.length
            if self._layout[column].squeeze and steps != 1:
                return False
            self._s_dtype[column] = first.dtype
            self._s_row_bytes[column] = steps * step_bytes
            if self._layout[column].squeeze:
                self._s_ndim[column] = first.ndim - 1
                for dim in range(1, first.ndim):
                    self._s_dims[column][dim - 1] = first.dims[dim]
            else:
                self._s_ndim[column] = first.ndim
                self._s_dims[column][0] = steps
                for dim in range(1, first.ndim):
                    self._s_dims[column][dim] = first.dims[dim]
        return True

    cdef bint _same_columns(self, int columns) noexcept:
        cdef int column, dim
        if columns != self._columns:
            return False
        for column in range(columns):
            if (self._s_dtype[column] != self._dtype[column]
                    or self._layout[column].squeeze != self._squeeze[column]
                    or self._s_ndim[column] != self._ndim[column]):
                return False
            for dim in range(self._s_ndim[column]):
                if self._s_dims[column][dim] != self._dims[column][dim]:
                    return False
        return True

    cdef int _start(self, int columns) except -1:
        """A new batch with the entry's columns."""
        cdef int column, dim
        cdef Py_ssize_t capacity = self._next
        self._block = capacity
        self._next = self._capacity
        arrays = []
        for column in range(columns):
            shape = [capacity]
            for dim in range(self._s_ndim[column]):
                shape.append(self._s_dims[column][dim])
            array = _aligned(tuple(shape), _DTYPES[self._s_dtype[column]],
                             capacity * self._s_row_bytes[column])
            arrays.append(array)
            self._data[column] = <unsigned char*><size_t>array.ctypes.data
            self._row_bytes[column] = self._s_row_bytes[column]
            self._dtype[column] = self._s_dtype[column]
            self._squeeze[column] = self._layout[column].squeeze
            self._ndim[column] = self._s_ndim[column]
            for dim in range(self._s_ndim[column]):
                self._dims[column][dim] = self._s_dims[column][dim]
        infos = [
            _empty(capacity, np.uint64), _empty(capacity, np.float64),
            _empty(capacity, np.int64), _empty(capacity, np.float64),
            _empty(capacity, np.int32),
        ]
        self._keys = <uint64_t*><size_t>infos[0].ctypes.data
        self._probabilities = <double*><size_t>infos[1].ctypes.data
        self._table_sizes = <int64_t*><size_t>infos[2].ctypes.data
        self._priorities = <double*><size_t>infos[3].ctypes.data
        self._times_sampled = <int32_t*><size_t>infos[4].ctypes.data
        self._arrays = arrays
        self._info_arrays = infos
        self._columns = columns
        self._rows = 0
        return 0

    cdef int _decompress(self, object data, const unsigned char* base, _TensorRef* tensor,
                         unsigned char* target) except -1:
        """Decompresses ``tensor`` into ``target`` (its ``nbytes``)."""
        cdef bint ok
        cdef Py_ssize_t start
        if tensor.nbytes == 0:
            return 0
        if tensor.nbytes < _SMALL_TENSOR:
            ok = _unsnappy(tensor.content, tensor.content_length, target, tensor.nbytes)
        else:
            start = tensor.content - base
            source = memoryview(data)[start : start + <Py_ssize_t>tensor.content_length]
            out = PyMemoryView_FromMemory(<char*>target, tensor.nbytes, PyBUF_WRITE)
            try:
                ok = (_decompressed_len(source) == tensor.nbytes
                      and _decompress_into(source, out) == tensor.nbytes)
            except Exception:
                ok = False
        if not ok:
            raise self._error_class(
                "A sampled chunk's tensor data does not decompress to its size "
                f"({tensor.nbytes} bytes)."
            )
        return 0

    cdef int _write(self, object data, const unsigned char* base, int columns,
                    int chunks) except -1:
        cdef int column, position
        cdef _TensorRef* tensor
        cdef _SliceRef* piece
        cdef unsigned char* target
        cdef unsigned char* scratch
        cdef int64_t step_bytes, dim
        for column in range(columns):
            target = self._data[column] + self._rows * self._row_bytes[column]
            for position in range(self._layout[column].first,
                                  self._layout[column].first + self._layout[column].count):
                piece = &self._slices[position]
                tensor = self._find(chunks, piece.key, piece.index)
                step_bytes = tensor.itemsize
                for dim in range(1, tensor.ndim):
                    step_bytes *= tensor.dims[dim]
                if piece.offset == 0 and piece.length == tensor.dims[0]:
                    self._decompress(data, base, tensor, target)
                elif piece.length:
                    if len(self._scratch) < tensor.nbytes:
                        self._scratch = bytearray(tensor.nbytes)
                    scratch = <unsigned char*>PyByteArray_AS_STRING(self._scratch)
                    self._decompress(data, base, tensor, scratch)
                    memcpy(target, scratch + piece.offset * step_bytes,
                           piece.length * step_bytes)
                target += piece.length * step_bytes
        return 0

    def add(self, bytes data):
        cdef const unsigned char* base = <const unsigned char*>PyBytes_AS_STRING(data)
        cdef const unsigned char* at = base
        cdef const unsigned char* end = base + PyBytes_GET_SIZE(data)
        cdef const unsigned char* entry_start
        cdef const unsigned char* entry_end
        cdef const unsigned char* info = NULL
        cdef const unsigned char* info_end = NULL
        cdef uint64_t tag, length, flag
        cdef _InfoRef sample
        cdef int chunks, used, columns
        cdef bint end_of_sequence
        cdef list done = []
        if not _LITTLE:
            return done, 0
        while at < end:
            entry_start = at
            if not _tag(&at, end, &tag) or tag != 0x0A or not _length(&at, end, &length):
                at = entry_start
                break
            entry_end = at + length
            info = NULL
            chunks = 0
            used = 0
            end_of_sequence = False
            while at < entry_end:
                if not _tag(&at, entry_end, &tag):
                    break
                if tag == 0x0A:
                    if info != NULL or not _length(&at, entry_end, &length):
                        break
                    info = at
                    info_end = at + length
                    at += length
                elif tag == 0x12:
                    if not _length(&at, entry_end, &length) or chunks >= _MAX_CHUNKS:
                        break
                    if not _parse_chunk(at, at + length, &self._chunks[chunks],
                                        self._tensors, &used):
                        break
                    chunks += 1
                    at += length
                elif tag == 0x18:
                    if not _varint(&at, entry_end, &flag):
                        break
                    end_of_sequence = flag != 0
                else:
                    break
            if at != entry_end or info == NULL or not end_of_sequence:
                at = entry_start
                break
            if not self._read_info(info, info_end, &sample, &columns):
                at = entry_start
                break
            if not self._shape_columns(columns, chunks):
                at = entry_start
                break
            if self._columns >= 0 and not self._same_columns(columns):
                batch = self.flush()
                if batch is not None:
                    done.append(batch)
            if self._columns < 0:
                self._start(columns)
            self._write(data, base, columns, chunks)
            self._keys[self._rows] = sample.key
            self._probabilities[self._rows] = sample.probability
            self._table_sizes[self._rows] = sample.table_size
            self._priorities[self._rows] = sample.priority
            self._times_sampled[self._rows] = sample.times_sampled
            self._rows += 1
            if self._rows == self._block:
                done.append(self.flush())
        return done, at - base
