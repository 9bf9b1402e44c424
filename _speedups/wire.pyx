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

from _varint cimport put_varint, varint_size

__all__ = [
    "encode_column",
    "encode_item",
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
