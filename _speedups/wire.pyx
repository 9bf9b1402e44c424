# cython: language_level=3, annotation_typing=False, auto_pickle=False
"""Protobuf wire-format encoders of the writer's hot path (compiled twin).

The pure-Python twin is ``reverb_py._pure.wire``, the reference for behaviour and
errors; this module has the same API and produces the same bytes.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.float cimport PyFloat_AsDouble
from cpython.long cimport PyLong_AsLongLong, PyLong_AsUnsignedLongLong
from cpython.number cimport PyNumber_Index
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy
from libcpp.vector cimport vector

from _varint cimport put_varint, varint_size

__all__ = [
    "encode_chunk_data",
    "encode_column",
    "encode_item",
    "encode_tensor",
    "encode_varint",
    "encode_varints",
    "length_delimited",
]


cdef uint64_t _as_u64(object value) except? 0:
    """``value`` as 64 bits: [0, 2**64) as is, [-2**63, 0) as two's complement."""
    cdef object index = PyNumber_Index(value)
    if index >= 0:
        if index > 0xFFFFFFFFFFFFFFFF:  # KEY_MAX of reverb_py._pure._common
            raise OverflowError(f"{index} does not fit in 64 bits")
        return <uint64_t>PyLong_AsUnsignedLongLong(index)
    if index < -0x8000000000000000:
        raise OverflowError(f"{index} does not fit in 64 bits")
    return <uint64_t>(<int64_t>PyLong_AsLongLong(index))


def encode_varint(value):
    """Encodes an integer as a protobuf varint.

    Negative values are encoded as 64-bit two's complement (like ``int64`` fields).

    Raises:
      OverflowError: ``value`` is outside ``[-2**63, 2**64)``.
      TypeError: ``value`` is not an integer.
    """
    cdef unsigned char buffer[10]
    cdef uint64_t number = _as_u64(value)
    return PyBytes_FromStringAndSize(<char*>buffer, put_varint(buffer, number))


def encode_varints(values):
    """The varints of ``values``, concatenated (the payload of a packed repeated field).

    Raises:
      OverflowError, TypeError: as :func:`encode_varint`.
    """
    cdef list numbers = [_as_u64(value) for value in values]
    cdef Py_ssize_t size = 0
    cdef uint64_t number
    for number in numbers:
        size += varint_size(number)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
    cdef unsigned char* pos = <unsigned char*>PyBytes_AS_STRING(out)
    for number in numbers:
        pos += put_varint(pos, number)
    return out


def length_delimited(tag, payload):
    """``tag`` (an encoded field key of wire type 2), the payload's length, the payload.

    ``payload`` may be any bytes-like object.
    """
    cdef Py_buffer tag_view
    cdef Py_buffer view
    cdef unsigned char header[10]
    cdef Py_ssize_t header_size
    cdef bytes out
    cdef char* pos
    PyObject_GetBuffer(tag, &tag_view, PyBUF_SIMPLE)
    try:
        PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
        try:
            header_size = put_varint(header, <uint64_t>view.len)
            out = PyBytes_FromStringAndSize(NULL, tag_view.len + header_size + view.len)
            pos = PyBytes_AS_STRING(out)
            memcpy(pos, tag_view.buf, tag_view.len)
            pos += tag_view.len
            memcpy(pos, header, header_size)
            pos += header_size
            memcpy(pos, view.buf, view.len)
        finally:
            PyBuffer_Release(&view)
    finally:
        PyBuffer_Release(&tag_view)
    return out


def encode_item(key, bytes table, priority, flat_trajectory):
    """A serialised ``PrioritizedItem`` with key (1), table (2), priority (5) and
    flat_trajectory (8); fields at their default value are left out, as protobuf does.

    Args:
      key: the item key.
      table: ``length_delimited(b"\\x12", name.encode())`` (cache it per table), or
        ``b""`` for an empty name.
      priority: the priority.
      flat_trajectory: the serialised ``FlatTrajectory``.
    """
    cdef uint64_t number = _as_u64(key)
    cdef double value = PyFloat_AsDouble(priority)
    cdef uint64_t bits
    memcpy(&bits, &value, 8)
    cdef Py_buffer view
    cdef Py_ssize_t size
    cdef bytes out
    cdef unsigned char* pos
    cdef int shift
    PyObject_GetBuffer(flat_trajectory, &view, PyBUF_SIMPLE)
    try:
        size = PyBytes_GET_SIZE(table) + 1 + varint_size(<uint64_t>view.len) + view.len
        if number:
            size += 1 + varint_size(number)
        if bits:
            size += 9
        out = PyBytes_FromStringAndSize(NULL, size)
        pos = <unsigned char*>PyBytes_AS_STRING(out)
        if number:
            pos[0] = 0x08
            pos += 1 + put_varint(pos + 1, number)
        memcpy(pos, PyBytes_AS_STRING(table), PyBytes_GET_SIZE(table))
        pos += PyBytes_GET_SIZE(table)
        if bits:
            pos[0] = 0x29
            for shift in range(8):  # fixed64: little-endian whatever the host
                pos[1 + shift] = <unsigned char>(bits >> (8 * shift))
            pos += 9
        pos[0] = 0x42
        pos += 1 + put_varint(pos + 1, <uint64_t>view.len)
        memcpy(pos, view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return out


def encode_column(slices, squeeze):
    """One ``FlatTrajectory.columns`` entry (field 1 of ``FlatTrajectory``, with its tag).

    Args:
      slices: per ``ChunkSlice``, its encoded ``chunk_key`` field (``b"\\x08"`` and the
        key's varint, cached per chunk), its offset and its length (index 0).
      squeeze: the column's ``squeeze`` flag.
    """
    cdef list rows = []
    cdef Py_ssize_t body = 0
    cdef Py_ssize_t inner
    cdef bytes key_field
    cdef uint64_t offset, length
    for key_field, offset_object, length_object in slices:
        offset = _as_u64(offset_object)
        length = _as_u64(length_object)
        inner = PyBytes_GET_SIZE(key_field)
        if offset:
            inner += 1 + varint_size(offset)
        if length:
            inner += 1 + varint_size(length)
        rows.append((key_field, offset, length, inner))
        body += 1 + varint_size(<uint64_t>inner) + inner
    cdef bint flag = bool(squeeze)
    if flag:
        body += 2
    cdef bytes out = PyBytes_FromStringAndSize(
        NULL, 1 + varint_size(<uint64_t>body) + body
    )
    cdef unsigned char* pos = <unsigned char*>PyBytes_AS_STRING(out)
    pos[0] = 0x0A
    pos += 1 + put_varint(pos + 1, <uint64_t>body)
    for key_field, offset, length, inner in rows:
        pos[0] = 0x0A
        pos += 1 + put_varint(pos + 1, <uint64_t>inner)
        memcpy(pos, PyBytes_AS_STRING(key_field), PyBytes_GET_SIZE(key_field))
        pos += PyBytes_GET_SIZE(key_field)
        if offset:
            pos[0] = 0x10
            pos += 1 + put_varint(pos + 1, offset)
        if length:
            pos[0] = 0x18
            pos += 1 + put_varint(pos + 1, length)
    if flag:
        pos[0] = 0x10
        pos[1] = 0x01
    return out


cdef inline Py_ssize_t _field_size(uint64_t value) noexcept nogil:
    """A varint field's size with its one-byte tag; 0 for a value left out (0)."""
    return 1 + varint_size(value) if value else 0


cdef inline Py_ssize_t _delimited_size(Py_ssize_t size) noexcept nogil:
    """A length-delimited field's size with its one-byte tag."""
    return 1 + varint_size(<uint64_t>size) + size


cdef inline unsigned char* _put_field(unsigned char* pos, unsigned char tag,
                                      uint64_t value) noexcept nogil:
    """Writes a varint field unless its value is 0; returns the new position."""
    if value:
        pos[0] = tag
        pos += 1 + put_varint(pos + 1, value)
    return pos


cdef inline unsigned char* _put_header(unsigned char* pos, unsigned char tag,
                                       Py_ssize_t size) noexcept nogil:
    """Writes a length-delimited field's tag and length; returns the new position."""
    pos[0] = tag
    return pos + 1 + put_varint(pos + 1, <uint64_t>size)


def encode_tensor(dtype, shape, content):
    """A serialised ``TensorProto`` with dtype (1), tensor_shape (2) and tensor_content
    (4): the dtype left out when 0, the shape when it has no dims, the content when empty.

    Args:
      dtype: the ``DataType`` number.
      shape: the dims (each ``TensorShapeProto.Dim`` with its size only).
      content: the ``tensor_content``, any bytes-like object.

    Raises:
      OverflowError, TypeError: a number as :func:`encode_varint` refuses it.
    """
    cdef uint64_t enum = _as_u64(dtype)
    # Each dim converted once: the sizes computed are the sizes written.
    cdef vector[uint64_t] dims
    for dim in shape:
        dims.push_back(_as_u64(dim))
    cdef Py_ssize_t rank = dims.size()
    cdef Py_ssize_t index
    cdef uint64_t size
    cdef Py_ssize_t shape_size = 0
    for index in range(rank):
        shape_size += _delimited_size(_field_size(dims[index]))
    cdef Py_buffer view
    cdef Py_ssize_t total
    cdef bytes out
    cdef unsigned char* pos
    PyObject_GetBuffer(content, &view, PyBUF_SIMPLE)
    try:
        total = _field_size(enum)
        if rank:
            total += _delimited_size(shape_size)
        if view.len:
            total += _delimited_size(view.len)
        out = PyBytes_FromStringAndSize(NULL, total)
        pos = <unsigned char*>PyBytes_AS_STRING(out)
        pos = _put_field(pos, 0x08, enum)
        if rank:
            pos = _put_header(pos, 0x12, shape_size)
            for index in range(rank):
                size = dims[index]
                pos = _put_header(pos, 0x12, _field_size(size))
                pos = _put_field(pos, 0x08, size)
        if view.len:
            pos = _put_header(pos, 0x22, view.len)
            memcpy(pos, view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return out


def encode_chunk_data(chunk_key, episode_id, start, end, sparse, delta_encoded,
                      tensors, uncompressed):
    """A serialised ``ChunkData``: chunk_key (1), sequence_range (2, always written),
    delta_encoded (4), the tensors in data (5) and their number (6), and
    data_uncompressed_size (7); other fields at their default value are left out.

    Args:
      chunk_key: the chunk's key.
      episode_id, start, end, sparse: the ``SequenceRange``.
      delta_encoded: the flag.
      tensors: the serialised ``TensorProto`` of every column.
      uncompressed: ``data_uncompressed_size``.

    Raises:
      OverflowError, TypeError: a number as :func:`encode_varint` refuses it.
    """
    cdef uint64_t key = _as_u64(chunk_key)
    cdef uint64_t episode = _as_u64(episode_id)
    cdef uint64_t first = _as_u64(start)
    cdef uint64_t last = _as_u64(end)
    cdef bint is_sparse = bool(sparse)
    cdef bint is_delta = bool(delta_encoded)
    cdef list payloads = list(tensors)
    cdef Py_ssize_t count = len(payloads)
    cdef uint64_t raw_size = _as_u64(uncompressed)
    cdef bytes tensor
    cdef Py_ssize_t body = 0
    for tensor in payloads:  # a TypeError for anything but bytes, before any writing
        if tensor is None:
            raise TypeError("a tensor must be bytes, got None")
        body += _delimited_size(PyBytes_GET_SIZE(tensor))
    cdef Py_ssize_t range_size = (
        _field_size(episode) + _field_size(first) + _field_size(last) + _field_size(is_sparse)
    )
    cdef Py_ssize_t total = _field_size(key) + _delimited_size(range_size) + _field_size(is_delta)
    if count:
        total += _delimited_size(body) + _field_size(<uint64_t>count)
    total += _field_size(raw_size)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    cdef unsigned char* pos = <unsigned char*>PyBytes_AS_STRING(out)
    pos = _put_field(pos, 0x08, key)
    pos = _put_header(pos, 0x12, range_size)
    pos = _put_field(pos, 0x08, episode)
    pos = _put_field(pos, 0x10, first)
    pos = _put_field(pos, 0x18, last)
    pos = _put_field(pos, 0x20, is_sparse)
    pos = _put_field(pos, 0x20, is_delta)
    if count:
        pos = _put_header(pos, 0x2A, body)
        for tensor in payloads:
            pos = _put_header(pos, 0x0A, PyBytes_GET_SIZE(tensor))
            memcpy(pos, PyBytes_AS_STRING(tensor), PyBytes_GET_SIZE(tensor))
            pos += PyBytes_GET_SIZE(tensor)
        pos = _put_field(pos, 0x30, <uint64_t>count)
    pos = _put_field(pos, 0x38, raw_size)
    return out
