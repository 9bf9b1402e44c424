# Protobuf varints and fields shared by the compiled modules (header only: inline
# functions compiled into each module that cimports them; there is no `_varint` module
# at run time). The pure twins use reverb_py._pure.wire.encode_varint and
# reverb_py._codec.read_varint / message_fields, whose values, errors and messages the
# readers here reproduce. The errors come from reverb_py.errors, imported where raised.

from libc.stdint cimport uint8_t, uint64_t


cdef inline Py_ssize_t put_varint(unsigned char* out, uint64_t value) noexcept nogil:
    """Writes ``value`` as a varint at ``out`` (room for 10 bytes); returns its size."""
    cdef Py_ssize_t n = 0
    while value >= 0x80:
        out[n] = <unsigned char>((value & 0x7F) | 0x80)
        value >>= 7
        n += 1
    out[n] = <unsigned char>value
    return n + 1


cdef inline Py_ssize_t varint_size(uint64_t value) noexcept nogil:
    """The number of bytes of ``value`` as a varint (1 to 10)."""
    cdef Py_ssize_t n = 1
    while value >= 0x80:
        value >>= 7
        n += 1
    return n


cdef inline int malformed(str message) except -1:
    """Raises ``InvalidArgumentError(message)``."""
    from reverb_py.errors import InvalidArgumentError

    raise InvalidArgumentError(message)


cdef inline Py_ssize_t codec_varint(const uint8_t* data, Py_ssize_t pos, Py_ssize_t end,
                                    uint64_t* out) except -1:
    """``reverb_py._codec.read_varint``: the same values, errors and messages."""
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef uint8_t byte
    while True:
        if pos >= end:
            return malformed("Truncated message: a varint runs past the end.")
        byte = data[pos]
        pos += 1
        result |= (<uint64_t>(byte & 0x7F)) << shift
        if not byte & 0x80:
            out[0] = result
            return pos
        shift += 7
        if shift > 63:
            return malformed("Malformed message: a varint is too long.")


cdef inline Py_ssize_t codec_field(const uint8_t* data, Py_ssize_t pos, Py_ssize_t end,
                                   uint64_t* number, int* wire_type, uint64_t* value,
                                   Py_ssize_t* start) except -1:
    """One step of ``reverb_py._codec.message_fields``: the field at ``pos``; for a
    length-delimited one ``start`` and ``value`` give its bytes (from, size)."""
    cdef uint64_t tag
    pos = codec_varint(data, pos, end, &tag)
    number[0] = tag >> 3
    wire_type[0] = tag & 7
    if number[0] == 0:
        return malformed("Malformed message: field number 0.")
    if wire_type[0] == 0:
        return codec_varint(data, pos, end, value)
    if wire_type[0] == 2:
        pos = codec_varint(data, pos, end, value)
        if value[0] > <uint64_t>(end - pos):
            return malformed("Truncated message: a field runs past the end.")
        start[0] = pos
        return pos + <Py_ssize_t>value[0]
    if wire_type[0] == 1 or wire_type[0] == 5:
        pos += 8 if wire_type[0] == 1 else 4
        if pos > end:
            return malformed("Truncated message: a field runs past the end.")
        return pos
    return malformed(f"Malformed message: wire type {wire_type[0]}.")
