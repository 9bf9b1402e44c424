# cython: language_level=3, annotation_typing=False, auto_pickle=False
"""Checkpoint records: TFRecord framing and stored items, many at a time (compiled twin).

The pure-Python twin is ``reverb_py._pure.checkpoint_records``, the reference for
behaviour and types; this module has the same API and returns the same values.

Stored items in the layout Reverb and reverb_py write (known fields, each message field
once, a ``FlatTrajectory`` in protobuf's own serialisation) are read straight from the
bytes; any other record goes to the pure twin's ``decode_item``, i.e. to protobuf, so
both twins give protobuf's answer for every input. Insert requests and the items in them
likewise: the layout writers send is read here, any other goes to the pure twin.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem
from cpython.list cimport PyList_Append
from cpython.long cimport PyLong_FromLongLong, PyLong_FromUnsignedLongLong
from cpython.ref cimport PyObject
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.ref cimport Py_INCREF
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy
from libcpp.string cimport string
from libcpp.unordered_set cimport unordered_set
from libcpp.vector cimport vector

from _varint cimport put_varint

from operator import index as _index

from reverb_py._codec import fields as _fields
from reverb_py._pure._common import KEY_MAX
from reverb_py.errors import InvalidArgumentError

def _pure_twin():
    """``reverb_py._pure.checkpoint_records``, imported on first use: only unusual input
    goes there, so a compiled process does not import the pure twin (nor its tables)."""
    from reverb_py._pure import checkpoint_records

    return checkpoint_records


def decode_item(payload, chunks, episodes, new_item):
    """The pure twin's ``decode_item`` (protobuf's parse, for any record layout)."""
    return _pure_twin().decode_item(payload, chunks, episodes, new_item)



__all__ = [
    "checked_chunk_header",
    "chunk_header",
    "decode_insert_item",
    "decode_item",
    "decode_items",
    "encode_items",
    "encode_sample_info",
    "encode_sample_response",
    "encode_stored_item",
    "frame_records",
    "masked_crc32c",
    "split_insert_request",
    "split_records",
]

cdef extern from "crc32c.h" nogil:
    uint32_t c_masked_crc32c "reverb_py::MaskedCrc32c"(const unsigned char* data,
                                                       size_t size) noexcept

cdef extern from *:
    """
    #include <limits.h>
    // Sets *out = a * b + c and returns 0, or returns 1 when that overflows long long.
    static inline int reverb_py_mul_add_overflows(long long a, long long b, long long c,
                                                  long long* out) {
    #if defined(__GNUC__) || defined(__clang__)
      long long product;
      if (__builtin_mul_overflow(a, b, &product)) return 1;
      return __builtin_add_overflow(product, c, out);
    #else
      // Portable (MSVC): compare against the limits before any signed operation.
      if (a > 0 ? (b > 0 ? a > LLONG_MAX / b : b < LLONG_MIN / a)
                : (b > 0 ? a < LLONG_MIN / b : (a != 0 && b < LLONG_MAX / a))) {
        return 1;
      }
      long long product = a * b;
      if (c > 0 ? product > LLONG_MAX - c : product < LLONG_MIN - c) return 1;
      *out = product + c;
      return 0;
    #endif
    }
    """
    bint mul_add_overflows "reverb_py_mul_add_overflows"(
        long long a, long long b, long long c, long long* out) noexcept nogil


cdef int64_t _NS = 1000000000
cdef object _KEY_MAX = KEY_MAX

# TFRecord's framing sizes, as C constants for split_records: the Python definitions
# are HEADER_SIZE and FRAMING_SIZE of reverb_py._pure._common (and the mask
# is crc32c.h's copy of its MASK_DELTA).
cdef enum:
    _HEADER_SIZE = 12
    _FRAMING_SIZE = 16
cdef object _INT64_MIN = -(1 << 63)
cdef object _INT64_END = 1 << 63

# Results of _decode_fast.
cdef enum:
    _TAKEN = 0
    _STOP = 1      # well-formed, but not takeable: unknown table or missing chunk
    _FALLBACK = 2  # not the usual layout: decode with protobuf


# ---------------------------------------------------------------------------- writing


cdef inline void _put_le32(string& out, uint32_t value) noexcept:
    cdef unsigned char buf[4]
    buf[0] = value & 0xFF
    buf[1] = (value >> 8) & 0xFF
    buf[2] = (value >> 16) & 0xFF
    buf[3] = (value >> 24) & 0xFF
    out.append(<const char*>buf, 4)


cdef inline void _put_le64(string& out, uint64_t value) noexcept:
    cdef unsigned char buf[8]
    cdef int i
    for i in range(8):
        buf[i] = (value >> (8 * i)) & 0xFF
    out.append(<const char*>buf, 8)


cdef inline void _put_varint(string& out, uint64_t value) noexcept:
    cdef unsigned char buf[10]
    out.append(<const char*>buf, put_varint(buf, value))


cdef inline void _frame(string& out, const char* payload, size_t size) noexcept:
    cdef unsigned char length[8]
    cdef int i
    for i in range(8):
        length[i] = (<uint64_t>size >> (8 * i)) & 0xFF
    out.append(<const char*>length, 8)
    _put_le32(out, c_masked_crc32c(length, 8))
    out.append(payload, size)
    _put_le32(out, c_masked_crc32c(<const unsigned char*>payload, size))


def masked_crc32c(data) -> int:
    """TFRecord's masked CRC32C of ``data``."""
    cdef const unsigned char[::1] view = memoryview(data).cast("B")
    if view.shape[0] == 0:
        return c_masked_crc32c(NULL, 0)
    return c_masked_crc32c(&view[0], view.shape[0])


def frame_records(payloads) -> bytes:
    """The framed records of ``payloads``, concatenated (no compression)."""
    cdef string out
    cdef const unsigned char[::1] view
    for payload in payloads:
        if type(payload) is bytes:
            _frame(out, PyBytes_AS_STRING(payload), <size_t>PyBytes_GET_SIZE(payload))
        else:
            view = memoryview(payload).cast("B")
            if view.shape[0] == 0:
                _frame(out, b"", 0)
            else:
                _frame(out, <const char*>&view[0], view.shape[0])
    return PyBytes_FromStringAndSize(out.data(), out.size())


cdef void _put_stored_item(string& out, uint64_t key, const char* table, size_t table_size,
                           uint64_t priority_bits, const char* trajectory,
                           size_t trajectory_size, int64_t times_sampled,
                           int64_t inserted_at) noexcept:
    """Appends the serialised ``PrioritizedItem`` of :func:`encode_stored_item` to ``out``."""
    cdef unsigned char timestamp[22]
    cdef size_t timestamp_size = 0
    cdef int64_t seconds, nanos
    if key:
        out.push_back(b"\x08")
        _put_varint(out, key)
    out.append(table, table_size)
    if priority_bits:
        out.push_back(b"\x29")
        _put_le64(out, priority_bits)
    out.push_back(b"\x42")
    _put_varint(out, trajectory_size)
    out.append(trajectory, trajectory_size)
    if times_sampled:
        out.push_back(b"\x30")
        _put_varint(out, <uint64_t>times_sampled)
    # Floor division, as Python's divmod: nanos is never negative.
    seconds = inserted_at // _NS
    nanos = inserted_at - seconds * _NS
    if nanos < 0:
        seconds -= 1
        nanos += _NS
    if seconds:
        timestamp[0] = 0x08
        timestamp_size = 1 + put_varint(timestamp + 1, <uint64_t>seconds)
    if nanos:
        timestamp[timestamp_size] = 0x10
        timestamp_size += 1 + put_varint(timestamp + timestamp_size + 1, <uint64_t>nanos)
    out.push_back(b"\x3a")
    _put_varint(out, timestamp_size)
    out.append(<const char*>timestamp, timestamp_size)


def encode_stored_item(key, table, priority, times_sampled, inserted_at_ns,
                       flat_trajectory) -> bytes:
    """A serialised ``PrioritizedItem`` as a server stores it: ``wire.encode_item`` plus
    ``times_sampled`` (6) and ``inserted_at`` (7, a Timestamp); ``table`` as there.

    Raises:
      OverflowError, TypeError: as ``wire.encode_item`` and ``wire.encode_varint``.
    """
    # PERF(stored-item): exact ints in the int64 range (a key in [0, 2**64)), a float
    # priority and bytes are written here; anything else goes to the pure twin, which
    # decides (and raises its errors).
    cdef uint64_t key_value
    cdef double priority_value
    cdef uint64_t priority_bits
    cdef string out
    if (type(key) is not int or type(table) is not bytes or type(priority) is not float
            or type(times_sampled) is not int or type(inserted_at_ns) is not int
            or type(flat_trajectory) is not bytes
            or not 0 <= key <= _KEY_MAX
            or not _INT64_MIN <= times_sampled < _INT64_END
            or not _INT64_MIN <= inserted_at_ns < _INT64_END):
        return _pure_twin().encode_stored_item(
            key, table, priority, times_sampled, inserted_at_ns, flat_trajectory)
    key_value = key
    priority_value = priority
    memcpy(&priority_bits, &priority_value, 8)
    _put_stored_item(out, key_value, PyBytes_AS_STRING(table), <size_t>PyBytes_GET_SIZE(table),
                     priority_bits, PyBytes_AS_STRING(flat_trajectory),
                     <size_t>PyBytes_GET_SIZE(flat_trajectory), times_sampled, inserted_at_ns)
    return PyBytes_FromStringAndSize(out.data(), out.size())


def encode_items(items, bytes table_field) -> bytes:
    """The framed ``PrioritizedItem`` records of table items, as a checkpoint stores them.

    Args:
      items: Objects with ``key`` (int in ``[0, 2**64)``), ``priority`` (a number),
        ``trajectory`` (serialised ``FlatTrajectory`` bytes, a message with
        ``SerializeToString``, or None for an empty one), ``times_sampled`` and
        ``inserted_at`` (ns since the epoch; both ints in the int64 range), as
        :class:`reverb_py.table.Item`.
      table_field: The encoded ``table`` field (``wire.length_delimited(b"\\x12",
        name.encode())``), or ``b""``.

    Returns:
      Each item's record framed as TFRecord, concatenated: the bytes of
      ``frame_records([encode_stored_item(...) for item in items])``.

    Raises:
      InvalidArgumentError: a key, ``times_sampled`` or ``inserted_at`` is out of range.
    """
    cdef string out
    cdef string payload
    cdef uint64_t key
    cdef int64_t times_sampled, inserted_at
    cdef double priority
    cdef uint64_t priority_bits
    cdef const unsigned char[::1] view
    cdef const char* trajectory_data
    cdef size_t trajectory_size
    for item in items:
        key_object = item.key
        if type(key_object) is not int:
            key_object = _index(key_object)
        if not 0 <= key_object <= _KEY_MAX:
            raise InvalidArgumentError(f"Item key {key_object!r} is not in [0, 2**64).")
        key = key_object
        times_object = item.times_sampled
        if type(times_object) is not int:
            times_object = _index(times_object)
        inserted_object = int(item.inserted_at)
        if not (
            _INT64_MIN <= times_object < _INT64_END
            and _INT64_MIN <= inserted_object < _INT64_END
        ):
            raise InvalidArgumentError(
                f"Item {key_object}: times_sampled {times_object!r} or inserted_at "
                f"{inserted_object!r} is out of the int64 range."
            )
        times_sampled = times_object
        inserted_at = inserted_object
        priority = item.priority
        trajectory = item.trajectory
        if trajectory is None:
            trajectory = b""
        elif type(trajectory) is not bytes:
            if not isinstance(trajectory, (bytearray, memoryview)):
                trajectory = trajectory.SerializeToString()
            trajectory = bytes(trajectory)
        trajectory_data = PyBytes_AS_STRING(trajectory)
        trajectory_size = <size_t>PyBytes_GET_SIZE(trajectory)

        memcpy(&priority_bits, &priority, 8)
        payload.clear()
        _put_stored_item(payload, key, PyBytes_AS_STRING(table_field),
                         <size_t>PyBytes_GET_SIZE(table_field), priority_bits,
                         trajectory_data, trajectory_size, times_sampled, inserted_at)
        _frame(out, payload.data(), payload.size())
    return PyBytes_FromStringAndSize(out.data(), out.size())


# ---------------------------------------------------------------------------- reading


cdef inline Py_ssize_t _codec_varint(const uint8_t* data, Py_ssize_t pos, Py_ssize_t end,
                                     uint64_t* out) except -1:
    """``reverb_py._codec.fields.read_varint``: the same values, errors and messages."""
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef uint8_t byte
    while True:
        if pos >= end:
            raise InvalidArgumentError("Truncated message: a varint runs past the end.")
        byte = data[pos]
        pos += 1
        result |= (<uint64_t>(byte & 0x7F)) << shift
        if not byte & 0x80:
            out[0] = result
            return pos
        shift += 7
        if shift > 63:
            raise InvalidArgumentError("Malformed message: a varint is too long.")


cdef inline Py_ssize_t _codec_field(const uint8_t* data, Py_ssize_t pos, Py_ssize_t end,
                                    uint64_t* number, int* wire_type, uint64_t* value,
                                    Py_ssize_t* start) except -1:
    """One step of ``reverb_py._codec.fields.message_fields``: the field at ``pos``; for a
    length-delimited one ``start`` and ``value`` give its bytes (from, size)."""
    cdef uint64_t tag
    pos = _codec_varint(data, pos, end, &tag)
    number[0] = tag >> 3
    wire_type[0] = tag & 7
    if number[0] == 0:
        raise InvalidArgumentError("Malformed message: field number 0.")
    if wire_type[0] == 0:
        return _codec_varint(data, pos, end, value)
    if wire_type[0] == 2:
        pos = _codec_varint(data, pos, end, value)
        if value[0] > <uint64_t>(end - pos):
            raise InvalidArgumentError("Truncated message: a field runs past the end.")
        start[0] = pos
        return pos + <Py_ssize_t>value[0]
    if wire_type[0] == 1 or wire_type[0] == 5:
        pos += 8 if wire_type[0] == 1 else 4
        if pos > end:
            raise InvalidArgumentError("Truncated message: a field runs past the end.")
        return pos
    raise InvalidArgumentError(f"Malformed message: wire type {wire_type[0]}.")


cdef inline int64_t _dim_size(const uint8_t* base, Py_ssize_t pos, Py_ssize_t end) except? -2:
    """``size`` of the ``TensorShapeProto.Dim`` in ``base[pos:end]`` (0 when unset; the
    last when repeated)."""
    cdef Py_ssize_t start = 0
    cdef uint64_t number, value
    cdef int wire_type
    cdef int64_t size = 0
    while pos < end:
        pos = _codec_field(base, pos, end, &number, &wire_type, &value, &start)
        if number == 1 and wire_type == 0:
            size = <int64_t>value
    return size


cdef int64_t _tensor_dims(const uint8_t* base, Py_ssize_t pos, Py_ssize_t end,
                          list shape) except? -2:
    """The dims of the ``TensorProto`` in ``base[pos:end]``: with ``shape`` None the first
    dim's size, or -1 without a dim (reading stops there); else every dim's size appended
    to ``shape`` (returns -1)."""
    cdef Py_ssize_t start = 0, shape_pos, shape_end, dim_start = 0
    cdef uint64_t number, value, dim_number, dim_value
    cdef int wire_type, dim_type
    cdef int64_t size
    while pos < end:
        pos = _codec_field(base, pos, end, &number, &wire_type, &value, &start)
        if number == 2 and wire_type == 2:
            shape_pos = start
            shape_end = start + <Py_ssize_t>value
            while shape_pos < shape_end:
                shape_pos = _codec_field(base, shape_pos, shape_end, &dim_number, &dim_type,
                                         &dim_value, &dim_start)
                if dim_number == 2 and dim_type == 2:
                    size = _dim_size(base, dim_start, dim_start + <Py_ssize_t>dim_value)
                    if shape is None:
                        return size
                    PyList_Append(shape, PyLong_FromLongLong(size))
    return -1


cdef inline int64_t _tensor_steps(const uint8_t* base, Py_ssize_t pos,
                                  Py_ssize_t end) except? -2:
    """``tensor_shape.dim[0].size`` of the ``TensorProto`` in ``base[pos:end]``, or -1
    without a dim (the pure twin's ``_tensor_steps``: reading stops at the first dim)."""
    return _tensor_dims(base, pos, end, None)


# Chunk tensors: the item size of each DataType number a chunk tensor may have (0 for
# the others), the problems _tensor_check names, as reverb_py._codec.fields has them.
cdef enum:
    _DTYPES = 32
cdef int _ITEMSIZE[_DTYPES]
for _number, (_name, _size) in _fields.TENSOR_DTYPES.items():
    if not 0 <= _number < _DTYPES or _size <= 0:
        raise ImportError(f"DataType {_number} does not fit the item size table.")
    _ITEMSIZE[_number] = _size
del _number, _name, _size
cdef int32_t _STRING = _fields.STRING_DTYPE
cdef uint64_t _SNAPPY_MAX = _fields.SNAPPY_MAX_LENGTH
cdef int _DTYPE = _fields.DTYPE
cdef int _UNKNOWN_RANK = _fields.UNKNOWN_RANK
cdef int _UNDEFINED_SHAPE = _fields.UNDEFINED_SHAPE
cdef int _TOO_LARGE = _fields.TOO_LARGE
cdef int _STRING_DATA_FOR_NO_ELEMENTS = _fields.STRING_DATA_FOR_NO_ELEMENTS
cdef int _STRING_DATA_TOO_SHORT = _fields.STRING_DATA_TOO_SHORT
cdef int _STRING_VALUES = _fields.STRING_VALUES
cdef int _NO_DATA = _fields.NO_DATA
cdef int _NOT_SNAPPY = _fields.NOT_SNAPPY
cdef int _SIZE = _fields.SIZE
cdef int _SNAPPY_TOO_LARGE = _fields.SNAPPY_TOO_LARGE
_describe_tensor_defect = _fields.describe_tensor_defect


cdef list _tensor_shape(const uint8_t* base, Py_ssize_t pos, Py_ssize_t end):
    """The dims of the (well-formed) ``TensorProto`` in ``base[pos:end]``, for a defect's
    message."""
    cdef list shape = []
    _tensor_dims(base, pos, end, shape)
    return shape


cdef object _tensor_check(const uint8_t* base, Py_ssize_t pos, Py_ssize_t end,
                          Py_ssize_t index, int64_t* steps):
    """The pure twin's ``_tensor_check`` (``reverb_py._codec.fields``): sets ``steps``
    and returns why the ``TensorProto`` in ``base[pos:end]`` cannot be decoded, or
    None."""
    cdef Py_ssize_t tensor_pos = pos, start = 0, shape_pos, shape_end, dim_start = 0
    cdef Py_ssize_t content_pos = 0, content_end = -1
    cdef uint64_t number, value, dim_number, dim_value
    cdef int wire_type, dim_type
    cdef int64_t size, count, nonzero = 1, needed = 0
    cdef int32_t dtype = 0
    cdef bint unknown_rank = False, has_dim = False, negative = False, zero = False
    cdef bint overflow = False
    cdef uint64_t string_values = 0, held = 0, byte
    cdef int shift, problem = 0, itemsize = 0
    cdef long long product
    steps[0] = -1
    while pos < end:
        pos = _codec_field(base, pos, end, &number, &wire_type, &value, &start)
        if number == 1:
            if wire_type == 0:
                dtype = <int32_t><uint32_t>value
        elif number == 2:
            if wire_type == 2:
                shape_pos = start
                shape_end = start + <Py_ssize_t>value
                while shape_pos < shape_end:
                    shape_pos = _codec_field(base, shape_pos, shape_end, &dim_number,
                                             &dim_type, &dim_value, &dim_start)
                    if dim_number == 2 and dim_type == 2:
                        size = _dim_size(base, dim_start, dim_start + <Py_ssize_t>dim_value)
                        if not has_dim:
                            has_dim = True
                            steps[0] = size
                        if size < 0:
                            negative = True
                        elif size == 0:
                            zero = True
                        elif not overflow:  # the dims not 0, numpy's rule for the size
                            if mul_add_overflows(nonzero, size, 0, &product):
                                overflow = True
                            else:
                                nonzero = product
                    elif dim_number == 3 and dim_type == 0:
                        unknown_rank = dim_value != 0
        elif number == 4:
            if wire_type == 2:
                content_pos = start
                content_end = start + <Py_ssize_t>value
        elif number == 8 and wire_type == 2:
            string_values += 1
    if 0 <= dtype < _DTYPES:
        itemsize = _ITEMSIZE[dtype]
    if itemsize == 0:
        problem = _DTYPE
    elif unknown_rank:
        problem = _UNKNOWN_RANK
    elif negative:
        problem = _UNDEFINED_SHAPE
    elif overflow or mul_add_overflows(nonzero, itemsize, 0, &product):
        problem = _TOO_LARGE
    else:
        count = nonzero
        if zero:
            count = 0
            product = 0
        if dtype == _STRING:
            held = <uint64_t>(content_end - content_pos) if content_end >= 0 else 0
            if held:
                if count == 0:
                    problem = _STRING_DATA_FOR_NO_ELEMENTS
                elif held < <uint64_t>count:
                    problem = _STRING_DATA_TOO_SHORT
                    needed = count
            elif count and string_values != <uint64_t>count:
                problem = _STRING_VALUES
                held = string_values
                needed = count
        else:
            needed = product
            if content_end <= content_pos:
                if needed:
                    problem = _NO_DATA
            else:
                # The snappy length header, read as snappy reads it (see the pure twin).
                problem = _NOT_SNAPPY
                shift = 0
                while content_pos < content_end:
                    byte = base[content_pos]
                    content_pos += 1
                    held |= (byte & 0x7F) << shift
                    if not byte & 0x80:
                        if held != <uint64_t>needed:
                            problem = _SIZE
                        elif held > _SNAPPY_MAX:
                            problem = _SNAPPY_TOO_LARGE
                        else:
                            problem = 0
                        break
                    shift += 7
                    if shift > 63:
                        break
    if not problem:
        return None
    return _describe_tensor_defect(index, problem, dtype, _tensor_shape(base, tensor_pos, end),
                                   PyLong_FromUnsignedLongLong(held), needed)


cdef tuple _read_chunk_header(data, bint check):
    """The pure twin's ``_read_chunk_header``."""
    cdef const unsigned char[::1] view
    cdef const uint8_t* base
    cdef Py_ssize_t end, pos = 0, sub_pos, sub_end, start = 0, sub_start = 0
    cdef uint64_t number, value, sub_number, sub_value
    cdef int wire_type, sub_type
    cdef uint64_t key = 0, episode_id = 0
    cdef int32_t range_start = 0, range_end = 0
    cdef int64_t steps_value
    cdef list steps = []
    defect = None
    if type(data) is bytes:
        base = <const uint8_t*>PyBytes_AS_STRING(data)
        end = PyBytes_GET_SIZE(data)
    else:
        view = memoryview(data).cast("B")
        end = view.shape[0]
        base = &view[0] if end else <const uint8_t*>b""
    while pos < end:
        pos = _codec_field(base, pos, end, &number, &wire_type, &value, &start)
        if number == 1 and wire_type == 0:
            key = value
        elif number == 2 and wire_type == 2:
            sub_pos = start
            sub_end = start + <Py_ssize_t>value
            while sub_pos < sub_end:
                sub_pos = _codec_field(base, sub_pos, sub_end, &sub_number, &sub_type,
                                       &sub_value, &sub_start)
                if sub_type == 0:
                    if sub_number == 1:
                        episode_id = sub_value
                    elif sub_number == 2:
                        range_start = <int32_t><uint32_t>sub_value
                    elif sub_number == 3:
                        range_end = <int32_t><uint32_t>sub_value
        elif number == 5 and wire_type == 2:
            sub_pos = start
            sub_end = start + <Py_ssize_t>value
            while sub_pos < sub_end:
                sub_pos = _codec_field(base, sub_pos, sub_end, &sub_number, &sub_type,
                                       &sub_value, &sub_start)
                if sub_number == 1 and sub_type == 2:
                    if check:
                        problem = _tensor_check(base, sub_start,
                                                sub_start + <Py_ssize_t>sub_value,
                                                len(steps), &steps_value)
                        if defect is None:
                            defect = problem
                    else:
                        steps_value = _tensor_steps(base, sub_start,
                                                    sub_start + <Py_ssize_t>sub_value)
                    PyList_Append(steps, PyLong_FromLongLong(steps_value))
    return (PyLong_FromUnsignedLongLong(key), PyLong_FromUnsignedLongLong(episode_id),
            PyLong_FromLongLong(range_start), PyLong_FromLongLong(range_end), tuple(steps),
            defect)


def chunk_header(data) -> tuple:
    """The fields of a serialised ``ChunkData`` an item's slices are checked against,
    read without decoding (or copying) its tensors: ``(chunk_key, episode_id, start,
    end, steps)`` as the pure twin's (``reverb_py._codec.fields.chunk_header``).

    Raises:
      InvalidArgumentError: the bytes are not a well-formed message.
    """
    return _read_chunk_header(data, False)[:5]


def checked_chunk_header(data) -> tuple:
    """:func:`chunk_header` and why a tensor cannot be decoded, or None, as the pure
    twin's (``reverb_py._codec.fields.checked_chunk_header``).

    Raises:
      InvalidArgumentError: the bytes are not a well-formed message.
    """
    return _read_chunk_header(data, True)


def split_records(data, Py_ssize_t pos=0):
    """The payloads of the complete, intact records in ``data`` from ``pos`` on.

    Stops at the first record that is incomplete (runs past the end of ``data``) or whose
    length or payload checksum does not match.

    Returns:
      ``(payloads, end)``: ``end`` is where the first record not returned starts
      (``len(data)`` when all were); the caller tells an incomplete record from a
      damaged one.

    Raises:
      ValueError: ``pos`` is not within ``data``.
    """
    cdef const unsigned char[::1] view = memoryview(data).cast("B")
    cdef Py_ssize_t size = view.shape[0]
    if not 0 <= pos <= size:
        raise ValueError(f"pos {pos} is outside the data (0..{size}).")
    cdef list payloads = []
    cdef const unsigned char* base = &view[0] if size else NULL
    cdef const unsigned char* p
    cdef uint64_t length
    cdef uint32_t crc
    cdef int i
    while size - pos >= _FRAMING_SIZE:
        p = base + pos
        length = 0
        for i in range(8):
            length |= (<uint64_t>p[i]) << (8 * i)
        crc = p[8] | (<uint32_t>p[9] << 8) | (<uint32_t>p[10] << 16) | (<uint32_t>p[11] << 24)
        if c_masked_crc32c(p, 8) != crc:
            break
        if length > <uint64_t>(size - pos - _FRAMING_SIZE):
            break
        p += _HEADER_SIZE
        crc = (p[length] | (<uint32_t>p[length + 1] << 8) | (<uint32_t>p[length + 2] << 16)
               | (<uint32_t>p[length + 3] << 24))
        if c_masked_crc32c(p, length) != crc:
            break
        PyList_Append(payloads, PyBytes_FromStringAndSize(<const char*>p, length))
        pos += <Py_ssize_t>length + _FRAMING_SIZE
    return payloads, pos


cdef inline bint _read_varint(const uint8_t** cursor, const uint8_t* end,
                              uint64_t* out) noexcept nogil:
    """Reads a varint of at most 64 bits; False when truncated or too long."""
    cdef const uint8_t* p = cursor[0]
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef uint8_t byte
    while True:
        if p >= end:
            return False
        byte = p[0]
        p += 1
        if shift == 63 and byte > 1:
            return False
        result |= (<uint64_t>(byte & 0x7F)) << shift
        if byte < 0x80:
            break
        shift += 7
    cursor[0] = p
    out[0] = result
    return True


cdef inline bint _read_minimal_varint(const uint8_t** cursor, const uint8_t* end,
                                      uint64_t* out) noexcept nogil:
    """:func:`_read_varint` that also refuses padded encodings (protobuf never writes
    them)."""
    cdef const uint8_t* start = cursor[0]
    if not _read_varint(cursor, end, out):
        return False
    return cursor[0] - start == 1 or (cursor[0] - 1)[0] != 0


cdef inline bint _read_tag(const uint8_t** cursor, const uint8_t* end,
                           uint64_t* out) noexcept nogil:
    """Reads a field's tag; False unless protobuf takes it: at most 5 bytes, a field
    number from 1 to 2**29 - 1."""
    cdef const uint8_t* start = cursor[0]
    if not _read_varint(cursor, end, out):
        return False
    return cursor[0] - start <= 5 and 1 <= (out[0] >> 3) <= 0x1FFFFFFF


cdef inline bint _skip_field(const uint8_t** cursor, const uint8_t* end,
                             uint64_t wire_type) noexcept nogil:
    """Skips an unknown field's value; False for groups and malformed values."""
    cdef uint64_t value
    if wire_type == 0:
        return _read_varint(cursor, end, &value)
    if wire_type == 1:
        if end - cursor[0] < 8:
            return False
        cursor[0] += 8
        return True
    if wire_type == 5:
        if end - cursor[0] < 4:
            return False
        cursor[0] += 4
        return True
    if wire_type == 2:
        if not _read_varint(cursor, end, &value) or value > <uint64_t>(end - cursor[0]):
            return False
        cursor[0] += value
        return True
    return False


cdef inline bint _is_int32(uint64_t value) noexcept nogil:
    """Whether an int32 field's varint is as protobuf writes it (sign-extended)."""
    return value <= 0x7FFFFFFFULL or value >= 0xFFFFFFFF80000000ULL


cdef struct _Slice:
    uint64_t key
    int64_t offset
    int64_t length
    int64_t index


cdef inline bint _open_column(const uint8_t** cursor, const uint8_t* end,
                              const uint8_t** column_end) noexcept nogil:
    """Reads a ``FlatTrajectory.columns`` tag and length as protobuf writes them (the
    cursor is before ``end``); False otherwise."""
    cdef uint64_t size
    if cursor[0][0] != 0x0A:  # columns = 1
        return False
    cursor[0] += 1
    if not _read_minimal_varint(cursor, end, &size) or size > <uint64_t>(end - cursor[0]):
        return False
    column_end[0] = cursor[0] + size
    return True


cdef inline int _next_slice(const uint8_t** cursor, const uint8_t* column_end,
                            _Slice* out, bint* squeeze) noexcept nogil:
    """Reads a column's next ``ChunkSlice`` into ``out``: 1; 0 at the column's end
    (``squeeze`` set when the column says so); -1 unless the bytes are exactly what
    protobuf writes."""
    cdef const uint8_t* p = cursor[0]
    cdef const uint8_t* slice_end
    cdef uint64_t size, value
    cdef uint8_t tag
    cdef int field, last_field = 0
    if p >= column_end:
        return 0
    tag = p[0]
    p += 1
    if tag == 0x10:  # squeeze = 2, written (as 1) only when true, and last
        if not _read_minimal_varint(&p, column_end, &value) or value != 1 or p != column_end:
            return -1
        squeeze[0] = True
        cursor[0] = p
        return 0
    if tag != 0x0A:  # chunk_slices = 1
        return -1
    if not _read_minimal_varint(&p, column_end, &size) or size > <uint64_t>(column_end - p):
        return -1
    slice_end = p + size
    out.key = 0
    out.offset = 0
    out.length = 0
    out.index = 0
    while p < slice_end:
        tag = p[0]
        p += 1
        field = tag >> 3
        # chunk_key = 1, offset = 2, length = 3, index = 4: varints, in order, zero
        # values left out.
        if (tag & 7) != 0 or field <= last_field or field > 4:
            return -1
        last_field = field
        if not _read_minimal_varint(&p, slice_end, &value) or value == 0:
            return -1
        if field == 1:
            out.key = value
        elif not _is_int32(value):
            return -1
        elif field == 2:
            out.offset = <int32_t>value
        elif field == 3:
            out.length = <int32_t>value
        else:
            out.index = <int32_t>value
    cursor[0] = p
    return 1


cdef bint _read_trajectory_keys(const uint8_t* p, const uint8_t* end,
                                vector[uint64_t]& keys) noexcept:
    """The distinct chunk keys of a ``FlatTrajectory``, in order of first reference.

    False unless the bytes are exactly what protobuf writes for the message they hold
    (so the item can keep them as they are).
    """
    cdef const uint8_t* column_end
    cdef _Slice piece
    cdef uint64_t key
    cdef int status
    cdef bint squeeze
    cdef unordered_set[uint64_t] seen
    cdef size_t i
    cdef bint found
    while p < end:
        if not _open_column(&p, end, &column_end):
            return False
        squeeze = False
        while True:
            status = _next_slice(&p, column_end, &piece, &squeeze)
            if status < 0:
                return False
            if status == 0:
                break
            key = piece.key
            if not seen.empty():
                if seen.insert(key).second:
                    keys.push_back(key)
                continue
            found = False
            for i in range(keys.size()):
                if keys[i] == key:
                    found = True
                    break
            if not found:
                keys.push_back(key)
                if keys.size() > 16:  # Long trajectories: a set from here on.
                    for i in range(keys.size()):
                        seen.insert(keys[i])
    return True


cdef class _TableCache:
    """The last table name seen (its bytes, str and item list)."""
    cdef bytes raw
    cdef object name
    cdef object items


# Results of _read_name.
cdef enum:
    _SAME_NAME = 0
    _NEW_NAME = 1
    _NOT_UTF8 = 2


cdef int _read_name(_TableCache cache, const uint8_t* data, size_t size) except -1:
    """Sets ``cache.name`` to the table name of these bytes (usually the last one's)."""
    if (cache.raw is not None and <size_t>PyBytes_GET_SIZE(cache.raw) == size
            and (size == 0 or not memcmp(PyBytes_AS_STRING(cache.raw), data, size))):
        return _SAME_NAME
    try:
        name = PyUnicode_DecodeUTF8(<const char*>data, size, NULL)
    except UnicodeDecodeError:
        return _NOT_UTF8
    cache.raw = PyBytes_FromStringAndSize(<const char*>data, size)
    cache.name = name
    return _NEW_NAME


cdef int _decode_fast(bytes payload, dict chunks, dict episodes, dict tables,
                      object new_item, _TableCache cache) except -1:
    """Appends the item of ``payload`` to its table's list: _TAKEN, _STOP or
    _FALLBACK."""
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(payload)
    cdef const uint8_t* end = p + PyBytes_GET_SIZE(payload)
    cdef const uint8_t* table_data = NULL
    cdef size_t table_size = 0
    cdef const uint8_t* trajectory_data = NULL
    cdef size_t trajectory_size = 0
    cdef const uint8_t* field_end
    cdef bint has_timestamp = False, has_trajectory = False
    cdef uint64_t tag, wire_type, field, value, size
    cdef uint64_t key = 0, priority_bits = 0
    cdef int64_t times_sampled = 0, seconds = 0, nanos = 0
    cdef long long inserted_at
    cdef double priority
    cdef int i
    cdef vector[uint64_t] keys
    while p < end:
        if not _read_tag(&p, end, &tag):
            return _FALLBACK
        field = tag >> 3
        wire_type = tag & 7
        if field == 1:
            if wire_type != 0 or not _read_varint(&p, end, &key):
                return _FALLBACK
        elif field == 2 or field == 7 or field == 8:
            if wire_type != 2 or not _read_varint(&p, end, &size) or size > <uint64_t>(end - p):
                return _FALLBACK
            if field == 2:
                if table_data != NULL:
                    return _FALLBACK  # Each one must be UTF-8: protobuf's job.
                table_data = p
                table_size = size
            elif field == 7:
                if has_timestamp:
                    return _FALLBACK  # Repeated message fields merge: protobuf's job.
                has_timestamp = True
                field_end = p + size
                while p < field_end:
                    if not _read_tag(&p, field_end, &tag):
                        return _FALLBACK
                    if (tag >> 3) == 1 or (tag >> 3) == 2:
                        if (tag & 7) != 0 or not _read_varint(&p, field_end, &value):
                            return _FALLBACK
                        if (tag >> 3) == 1:
                            seconds = <int64_t>value
                        else:
                            nanos = <int32_t>value
                    elif (tag >> 3) == 0 or not _skip_field(&p, field_end, tag & 7):
                        return _FALLBACK
                continue
            else:
                if has_trajectory:
                    return _FALLBACK
                has_trajectory = True
                trajectory_data = p
                trajectory_size = size
            p += size
        elif field == 5:
            if wire_type != 1 or end - p < 8:
                return _FALLBACK
            priority_bits = 0
            for i in range(8):
                priority_bits |= (<uint64_t>p[i]) << (8 * i)
            p += 8
        elif field == 6:
            if wire_type != 0 or not _read_varint(&p, end, &value):
                return _FALLBACK
            times_sampled = <int32_t>value
        elif field == 0 or field == 3 or field == 4 or not _skip_field(&p, end, wire_type):
            # Old-layout fields (3, 4) and anything malformed: protobuf decides.
            return _FALLBACK
    if trajectory_data != NULL and not _read_trajectory_keys(
            trajectory_data, trajectory_data + trajectory_size, keys):
        return _FALLBACK
    if mul_add_overflows(seconds, _NS, nanos, &inserted_at):
        return _FALLBACK

    # Table name: usually the previous item's.
    cdef int name_status = _read_name(cache, table_data, table_size)
    if name_status == _NOT_UTF8:
        return _FALLBACK
    if name_status == _NEW_NAME:
        cache.items = tables.get(cache.name)
    if cache.items is None:
        return _STOP

    cdef size_t count = keys.size()
    cdef tuple item_chunks = PyTuple_New(count)
    cdef tuple episode_ids = PyTuple_New(count)
    cdef PyObject* found
    cdef size_t k
    for k in range(count):
        key_object = PyLong_FromUnsignedLongLong(keys[k])
        found = PyDict_GetItem(chunks, key_object)
        if found == NULL:
            return _STOP
        Py_INCREF(<object>found)
        PyTuple_SET_ITEM(item_chunks, k, <object>found)
        found = PyDict_GetItem(episodes, key_object)
        if found == NULL:
            return _STOP
        Py_INCREF(<object>found)
        PyTuple_SET_ITEM(episode_ids, k, <object>found)
    memcpy(&priority, &priority_bits, 8)
    item = new_item(
        PyLong_FromUnsignedLongLong(key),
        priority,
        PyBytes_FromStringAndSize(<const char*>trajectory_data, trajectory_size)
        if trajectory_data != NULL else b"",
        item_chunks,
        episode_ids,
        PyLong_FromLongLong(times_sampled),
        PyLong_FromLongLong(inserted_at),
    )
    PyList_Append(cache.items, item)
    return _TAKEN


def decode_items(payloads, Py_ssize_t start, dict chunks, dict episodes, dict tables,
                 new_item) -> int:
    """Decodes stored ``PrioritizedItem`` records in order, from ``payloads[start]`` on,
    appending each item to ``tables[its table name]``.

    Stops at the first record it cannot take as it is: a malformed one, an item in the
    old layout (``deprecated_chunk_keys``), one of a table not in ``tables``, or one
    referencing a chunk key missing from ``chunks`` or ``episodes``. The caller
    handles (or reports) that record and carries on after it.

    Args:
      payloads: The records.
      start: The first one to decode.
      chunks: Chunk objects by chunk key; an item gets those it references, in order of
        first reference.
      episodes: Episode id by chunk key.
      tables: Where the items go, by table name.
      new_item: Builds an item, as :class:`reverb_py.table.Item`.

    Returns:
      The index of the first record not taken (``len(payloads)`` when all were).

    Raises:
      ValueError: ``start`` is not within ``payloads``.
    """
    cdef Py_ssize_t end = len(payloads)
    cdef Py_ssize_t index = start
    cdef int status
    cdef _TableCache cache = _TableCache()
    if not 0 <= start <= end:
        raise ValueError(f"start {start} is outside the records (0..{end}).")
    while index < end:
        payload = payloads[index]
        status = _FALLBACK
        if type(payload) is bytes:
            status = _decode_fast(payload, chunks, episodes, tables, new_item, cache)
        if status == _STOP:
            break
        if status == _FALLBACK:
            decoded = decode_item(payload, chunks, episodes, new_item)
            if decoded is None:
                break
            table_items = tables.get(decoded[0])
            if table_items is None:
                break
            table_items.append(decoded[1])
        index += 1
    return index


# ---------------------------------------------------------------------------- inserts


def split_insert_request(data):
    """An ``InsertStreamRequest``'s chunks, items and ``keep_chunk_keys`` (see the pure
    twin). Anything but well-formed bytes goes to the pure twin, which raises."""
    if type(data) is not bytes:
        return _pure_twin().split_insert_request(data)
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(data)
    cdef const uint8_t* end = p + PyBytes_GET_SIZE(data)
    cdef const uint8_t* field_end
    cdef uint64_t tag, field, wire_type, size, value
    cdef list chunks = []
    cdef list items = []
    cdef list keep = []
    while p < end:
        if not _read_varint(&p, end, &tag):
            return _pure_twin().split_insert_request(data)
        field = tag >> 3
        wire_type = tag & 7
        if field == 0:
            return _pure_twin().split_insert_request(data)
        if wire_type == 2:
            if not _read_varint(&p, end, &size) or size > <uint64_t>(end - p):
                return _pure_twin().split_insert_request(data)
            field_end = p + size
            if field == 1:
                PyList_Append(chunks, PyBytes_FromStringAndSize(<const char*>p, size))
            elif field == 2:
                PyList_Append(items, PyBytes_FromStringAndSize(<const char*>p, size))
            elif field == 3:
                while p < field_end:
                    if not _read_varint(&p, field_end, &value):
                        return _pure_twin().split_insert_request(data)
                    PyList_Append(keep, PyLong_FromUnsignedLongLong(value))
            p = field_end
        elif wire_type == 0:
            if not _read_varint(&p, end, &value):
                return _pure_twin().split_insert_request(data)
            if field == 3:
                PyList_Append(keep, PyLong_FromUnsignedLongLong(value))
        elif not _skip_field(&p, end, wire_type):
            return _pure_twin().split_insert_request(data)
    return chunks, items, keep


cdef object _FALLBACK_ITEM = object()  # _decode_insert_fast: ask the pure twin


cdef _TableCache _insert_names = _TableCache()  # the last inserted item's table name


cdef object _decode_insert_fast(bytes payload, dict held, object new_item):
    """``decode_insert_item`` for the layout Reverb and reverb_py write; _FALLBACK_ITEM
    for any other (the pure twin decides)."""
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(payload)
    cdef const uint8_t* end = p + PyBytes_GET_SIZE(payload)
    cdef const uint8_t* table_data = NULL
    cdef size_t table_size = 0
    cdef const uint8_t* trajectory_data = NULL
    cdef const uint8_t* trajectory_end = NULL
    cdef const uint8_t* column_end
    cdef uint64_t value, size
    cdef uint64_t key = 0, priority_bits = 0
    cdef uint8_t tag
    cdef int64_t times_sampled = 0, total
    cdef double priority
    cdef int i, status
    cdef Py_ssize_t slices
    cdef _Slice piece
    cdef bint squeeze, first_column = True
    cdef PyObject* found
    # The fields writers set, each tag one byte: key = 1, table = 2, priority = 5,
    # times_sampled = 6, flat_trajectory = 8. Any other field (inserted_at, the old
    # layout's, unknown ones) and anything malformed: protobuf decides.
    while p < end:
        tag = p[0]
        p += 1
        if tag == 0x08:
            if not _read_varint(&p, end, &key):
                return _FALLBACK_ITEM
        elif tag == 0x12 or tag == 0x42:
            if not _read_varint(&p, end, &size) or size > <uint64_t>(end - p):
                return _FALLBACK_ITEM
            if tag == 0x12:
                if table_data != NULL:
                    return _FALLBACK_ITEM  # Each one must be UTF-8: protobuf's job.
                table_data = p
                table_size = size
            else:
                if trajectory_data != NULL:
                    return _FALLBACK_ITEM  # Repeated message fields merge: protobuf's job.
                trajectory_data = p
                trajectory_end = p + size
            p += size
        elif tag == 0x29:
            if end - p < 8:
                return _FALLBACK_ITEM
            priority_bits = 0
            for i in range(8):
                priority_bits |= (<uint64_t>p[i]) << (8 * i)
            p += 8
        elif tag == 0x30:
            if not _read_varint(&p, end, &value):
                return _FALLBACK_ITEM
            times_sampled = <int32_t>value
        else:
            return _FALLBACK_ITEM
    if trajectory_data == NULL:
        return None  # no columns

    # The columns, in protobuf's own serialisation, each slice checked against its chunk.
    cdef list item_chunks = []
    cdef set seen = set()
    p = trajectory_data
    while p < trajectory_end:
        if not _open_column(&p, trajectory_end, &column_end):
            return _FALLBACK_ITEM
        squeeze = False
        total = 0
        slices = 0
        while True:
            status = _next_slice(&p, column_end, &piece, &squeeze)
            if status < 0:
                return _FALLBACK_ITEM
            if status == 0:
                break
            key_object = PyLong_FromUnsignedLongLong(piece.key)
            found = PyDict_GetItem(held, key_object)
            if found == NULL:
                return None
            chunk = <object>found
            if chunk.defect is not None:
                return None
            steps = chunk.steps
            if not (0 <= piece.index < len(steps) and piece.offset >= 0 and piece.length >= 0
                    and piece.offset + piece.length <= steps[piece.index]):
                return None
            if key_object not in seen:
                seen.add(key_object)
                item_chunks.append(chunk)
            total += piece.length
            slices += 1
        if first_column and slices == 0:
            return None  # the first column has no slice
        first_column = False
        if squeeze and total != 1:
            return None
    if first_column:
        return None  # no columns

    cdef _TableCache names = _insert_names
    if _read_name(names, table_data, table_size) == _NOT_UTF8:
        return _FALLBACK_ITEM
    memcpy(&priority, &priority_bits, 8)
    return names.name, new_item(
        PyLong_FromUnsignedLongLong(key),
        priority,
        PyBytes_FromStringAndSize(<const char*>trajectory_data, trajectory_end - trajectory_data),
        tuple(item_chunks),
        tuple([chunk.episode_id for chunk in item_chunks]),
        PyLong_FromLongLong(times_sampled),
        0,
    )


def decode_insert_item(payload, held, new_item):
    """An inserted ``PrioritizedItem`` as ``(table name, item)`` when the insert stream
    can take it as it is, or None (see the pure twin). The layout Reverb and reverb_py
    write is read straight from the bytes; any other goes to the pure twin."""
    if type(payload) is bytes and type(held) is dict:
        result = _decode_insert_fast(<bytes>payload, <dict>held, new_item)
        if result is not _FALLBACK_ITEM:
            return result
    return _pure_twin().decode_insert_item(payload, held, new_item)


# ---------------------------------------------------------------------------- samples


cdef bint _put_sample_info(string& out, bytes table_field, object record) except -1:
    """Appends ``encode_sample_info(table_field, record)``; False (nothing appended) for
    values of unusual types, which the pure twin encodes."""
    cdef uint64_t priority_bits, probability_bits
    cdef double priority, probability
    cdef string item_bytes
    item = record.item
    key = item.key
    priority_object = record.priority
    times_object = record.times_sampled
    inserted_object = item.inserted_at
    trajectory = item.trajectory
    probability_object = record.probability
    table_size = record.table_size
    rate_limited = record.rate_limited
    if trajectory is None:
        trajectory = b""
    if (type(key) is not int or type(priority_object) is not float
            or type(times_object) is not int or type(inserted_object) is not int
            or type(trajectory) is not bytes or type(probability_object) is not float
            or type(table_size) is not int or type(rate_limited) is not bool
            or not 0 <= key <= _KEY_MAX
            or not _INT64_MIN <= times_object < _INT64_END
            or not _INT64_MIN <= inserted_object < _INT64_END
            or not 0 <= table_size < _INT64_END):
        return False
    priority = priority_object
    probability = probability_object
    memcpy(&priority_bits, &priority, 8)
    memcpy(&probability_bits, &probability, 8)
    _put_stored_item(item_bytes, <uint64_t>key, PyBytes_AS_STRING(table_field),
                     <size_t>PyBytes_GET_SIZE(table_field), priority_bits,
                     PyBytes_AS_STRING(trajectory), <size_t>PyBytes_GET_SIZE(trajectory),
                     <int64_t>times_object, <int64_t>inserted_object)
    out.push_back(b"\x0a")
    _put_varint(out, item_bytes.size())
    out.append(item_bytes)
    if probability != 0.0:
        out.push_back(b"\x11")
        _put_le64(out, probability_bits)
    if table_size:
        out.push_back(b"\x18")
        _put_varint(out, <uint64_t>table_size)
    if rate_limited:
        out.append(b"\x20\x01", 2)
    return True


def encode_sample_info(bytes table_field, record) -> bytes:
    """A ``SampleInfo`` of a sampled item (see the pure twin)."""
    cdef string out
    if not _put_sample_info(out, table_field, record):
        return _pure_twin().encode_sample_info(table_field, record)
    return PyBytes_FromStringAndSize(out.data(), out.size())


def encode_sample_response(bytes table_field, records, Py_ssize_t start,
                           Py_ssize_t max_chunk_bytes):
    """A ``SampleStreamResponse`` of whole samples (see the pure twin).

    PERF(sample-response): the server's reply to a sample request, built in one buffer
    (the pure twin joins ~10 Python byte strings per sample). The info of a record with
    values of unusual types is the pure twin's.
    """
    cdef string out
    cdef string info
    cdef Py_ssize_t index = start, count = len(records)
    cdef Py_ssize_t size = 0, chunk_bytes, entry_size
    cdef list datas
    while index < count:
        record = records[index]
        datas = []
        chunk_bytes = 0
        for chunk in record.item.chunks:
            data = chunk.data
            if type(data) is not bytes:
                break
            datas.append(data)
            chunk_bytes += PyBytes_GET_SIZE(data)
        else:
            if size + chunk_bytes > max_chunk_bytes:
                break
            info.clear()
            if not _put_sample_info(info, table_field, record):
                odd = _pure_twin().encode_sample_info(table_field, record)
                info.append(PyBytes_AS_STRING(odd), <size_t>PyBytes_GET_SIZE(odd))
            entry_size = 1 + _varint_size(info.size()) + info.size() + 2
            for data in datas:
                entry_size += 1 + _varint_size(PyBytes_GET_SIZE(data)) + PyBytes_GET_SIZE(data)
            out.push_back(b"\x0a")
            _put_varint(out, <uint64_t>entry_size)
            out.push_back(b"\x0a")
            _put_varint(out, info.size())
            out.append(info)
            for data in datas:
                out.push_back(b"\x12")
                _put_varint(out, <uint64_t>PyBytes_GET_SIZE(data))
                out.append(PyBytes_AS_STRING(data), <size_t>PyBytes_GET_SIZE(data))
            out.append(b"\x18\x01", 2)
            size += chunk_bytes
            index += 1
            continue
        break
    if index == start:
        return _pure_twin().encode_sample_response(table_field, records, start, max_chunk_bytes)
    return PyBytes_FromStringAndSize(out.data(), out.size()), index


cdef inline Py_ssize_t _varint_size(uint64_t value) noexcept:
    cdef Py_ssize_t size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size
