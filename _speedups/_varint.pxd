# Protobuf varint writing shared by the compiled modules (header only: inline functions
# compiled into each module that cimports them; there is no `_varint` module at run
# time). The pure twins use reverb_py._pure.wire.encode_varint.

from libc.stdint cimport uint64_t


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
