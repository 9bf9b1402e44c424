# Key and priority conversion and validation shared by the compiled structures: the
# compiled counterpart of reverb_py/_pure/_common.py, with the same checks, exception
# types and messages. Header only: inline functions, compiled into each module that
# cimports them (there is no `_common` module at run time). The errors come from
# reverb_py.errors, imported where they are raised.

from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.long cimport PyLong_AsDouble
from cpython.number cimport PyNumber_Float, PyNumber_Index
from libc.stdint cimport uint64_t


cdef extern from "Python.h":
    # Declared without an exception spec: _c_key checks PyErr_Occurred() itself.
    unsigned long _PyLong_AsUnsignedLong "PyLong_AsUnsignedLong"(object) noexcept
    unsigned long long _PyLong_AsUnsignedLongLong "PyLong_AsUnsignedLongLong"(object) noexcept
    void* _PyErr_Occurred "PyErr_Occurred"() noexcept
    void _PyErr_Clear "PyErr_Clear"() noexcept


# ---------------------------------------------------------------------------- keys

cdef inline bint _c_key(object key, uint64_t* out) noexcept:
    """Stores the ``int`` ``key`` in ``out`` when it is in ``[0, 2**64)``, else False.

    ``key`` must be an ``int`` (or a subclass); no error is left set.
    """
    cdef unsigned long long value
    if sizeof(unsigned long) >= sizeof(uint64_t):
        # Where it is 64 bits wide, PyLong_AsUnsignedLong reads the digits directly, while
        # PyLong_AsUnsignedLongLong goes through a byte array.
        value = _PyLong_AsUnsignedLong(key)
    else:
        value = _PyLong_AsUnsignedLongLong(key)
    if value == <unsigned long long>-1 and _PyErr_Occurred() != NULL:
        _PyErr_Clear()
        return False
    out[0] = <uint64_t>value
    return True


cdef inline uint64_t check_key(object key) except? 0:
    """Returns ``key`` as a C key; raises like the pure ``check_key``.

    Raises:
      TypeError: ``key`` is not an integer.
      InvalidArgumentError: ``key`` is out of range.
    """
    cdef uint64_t value = 0
    if not isinstance(key, int):
        raise TypeError(f"Key must be an integer, got {type(key).__name__}.")
    if not _c_key(key, &value):
        from reverb_py.errors import InvalidArgumentError

        raise InvalidArgumentError(
            f"Key must be an integer in [0, 2**64), got {PyNumber_Index(key)!r}."
        )
    return value


cdef inline uint64_t as_key(object key) except? 0:
    """:func:`check_key` with a fast path for a plain ``int`` in range."""
    cdef uint64_t value
    if type(key) is int and _c_key(key, &value):
        return value
    return check_key(key)


cdef inline bint is_key(object key, uint64_t* out) noexcept:
    """Stores ``key`` in ``out`` when it is an integer in ``[0, 2**64)``, else False."""
    return isinstance(key, int) and _c_key(key, out)


cdef inline int raise_not_found(uint64_t key) except -1:
    from reverb_py.errors import NotFoundError

    raise NotFoundError(f"Key {key} not found.")


# ----------------------------------------------------------------------- priorities

cdef inline double to_float(object value, str what) except? -1.0:
    """Converts ``value`` as ``float()`` does, refusing strings (the pure ``to_float``).

    The C compiler may keep this out of line: hot callers test ``type(value) is float``
    themselves and call it only for anything else.

    Raises:
      TypeError: ``value`` is not a number (the message names it ``what``).
    """
    if type(value) is float:
        return PyFloat_AS_DOUBLE(value)
    if type(value) is int:
        return PyLong_AsDouble(value)
    if isinstance(value, (str, bytes, bytearray)):
        raise TypeError(f"{what} must be a real number, got {type(value).__name__}.")
    return PyFloat_AS_DOUBLE(PyNumber_Float(value))


cdef inline double check_priority(uint64_t key, object priority) except? -1.0:
    """Returns ``priority`` as a double that is not NaN (the pure ``check_priority``).

    Raises:
      TypeError: ``priority`` is not a number.
      InvalidArgumentError: ``priority`` is NaN.
    """
    cdef double value
    if type(priority) is float:
        value = PyFloat_AS_DOUBLE(priority)
    else:
        value = to_float(priority, "Priority")
    if value != value:
        from reverb_py.errors import InvalidArgumentError

        raise InvalidArgumentError(f"Priority must not be NaN (key={key}, priority={value!r}).")
    return value


# ----------------------------------------------------------------------- update_many

cdef inline int check_same_length(object keys, object priorities) except -1:
    """The first check of ``update_many``.

    Raises:
      InvalidArgumentError: ``keys`` and ``priorities`` differ in length.
    """
    if len(keys) != len(priorities):
        from reverb_py.errors import InvalidArgumentError

        raise InvalidArgumentError(
            "keys and priorities must have the same length, "
            f"got {len(keys)} and {len(priorities)}."
        )
    return 0
