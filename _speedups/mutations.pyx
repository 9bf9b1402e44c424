# cython: language_level=3, annotation_typing=False, auto_pickle=False, embedsignature=False
"""MutatePriorities hot paths: the request's wire format and a table's batch update
(compiled twin).

The pure-Python twin is ``reverb_py._pure.mutations``, the reference for behaviour and
types; this module has the same API and results and raises the same errors. The decoder
reads protobuf's wire format itself, with the rules of protobuf's own parser (upb): tags
and lengths of at most 5 bytes and 32 bits, values of at most 10 bytes (bits past 64
dropped), field number 0 refused, a known field number with another wire type skipped
as unknown, groups skipped to their matching end, at most 100 levels of nesting, and a
table name that must be valid UTF-8 each time it appears.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_Clear, PyDict_DelItem, PyDict_Next, PyDict_SetItem
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_FromDouble
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE, PyList_New, PyList_SET_ITEM
from cpython.long cimport PyLong_FromUnsignedLongLong
from cpython.number cimport PyNumber_Float
from cpython.object cimport PyObject, PyObject_SetAttr
from cpython.ref cimport Py_DECREF, Py_INCREF, Py_XDECREF
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy
from libcpp.vector cimport vector

from _common cimport as_key, is_key
from _key_index cimport KeyIndex, prefetch
from _varint cimport put_varint, varint_size

from reverb_py._speedups import records as _records
from reverb_py.errors import InvalidArgumentError

__all__ = [
    "ItemMap",
    "assign_priorities",
    "decode_mutate_request",
    "encode_mutate_request",
    "select_updates",
]

cdef str _MALFORMED = (
    "Malformed MutatePrioritiesRequest: corrupt wire format or a table name that is "
    "not UTF-8."
)
cdef str _PRIORITY = "priority"


cdef extern from "Python.h":
    # Declared without exception specs: the callers check PyErr_Occurred() themselves.
    unsigned long long _AsUnsignedLongLong "PyLong_AsUnsignedLongLong"(object) noexcept
    long long _AsLongLong "PyLong_AsLongLong"(object) noexcept
    PyObject* _DictGetItemWithError "PyDict_GetItemWithError"(object, object) except? NULL
    void* _PyErr_Occurred "PyErr_Occurred"() noexcept
    void _PyErr_Clear "PyErr_Clear"() noexcept


# --------------------------------------------------------------------------- encoding


cdef inline bint _as_key(object key, uint64_t* out) noexcept:
    """Stores an exact ``int`` in ``[0, 2**64)`` in ``out``; False for anything else."""
    cdef unsigned long long value
    if type(key) is not int:
        return False
    value = _AsUnsignedLongLong(key)
    if value == <unsigned long long>-1 and _PyErr_Occurred() != NULL:
        _PyErr_Clear()
        return False
    out[0] = value
    return True


cdef inline bint _as_double(object value, double* out) noexcept:
    """An exact ``float``, or an exact ``int`` in the int64 range (converted as numpy
    converts it); False for anything else."""
    cdef long long integer
    if type(value) is float:
        out[0] = PyFloat_AS_DOUBLE(value)
        return True
    if type(value) is not int:
        return False
    integer = _AsLongLong(value)
    if integer == -1 and _PyErr_Occurred() != NULL:
        _PyErr_Clear()
        return False
    out[0] = <double>integer
    return True


cdef inline void _put_double(uint8_t* out, double value) noexcept:
    cdef uint64_t bits
    cdef int i
    memcpy(&bits, &value, 8)
    for i in range(8):
        out[i] = <uint8_t>(bits >> (8 * i))



def _pure_encode(table, updates, deletes):
    """The pure twin's ``encode_mutate_request``, imported on first use (only unusual
    input goes there, so a compiled process does not import the pure twin)."""
    from reverb_py._pure import mutations

    return mutations.encode_mutate_request(table, updates, deletes)

def encode_mutate_request(table, updates, deletes):
    """A serialised ``MutatePrioritiesRequest``, or None when a key or priority is not a
    plain number (build the message instead, which raises the usual errors).

    Table = 1, updates = 2 repeated ``KeyWithPriority{key = 1, priority = 2}``, packed
    delete_keys = 3. Every update carries both of its fields (also a zero key or
    priority), which any protobuf parser reads like the canonical encoding.

    Args:
      table: the table's name.
      updates: new priorities by key.
      deletes: keys to delete.
    """
    # PERF(mutate-encode): plain dicts of ints and floats and lists or tuples of ints are
    # written here in one pass; anything else goes to the pure twin, which decides.
    if type(table) is not str or (updates is not None and type(updates) is not dict) or (
        deletes is not None and type(deletes) is not list and type(deletes) is not tuple
    ):
        return _pure_encode(table, updates, deletes)
    cdef bytes name = table.encode("utf-8") if table else b""
    cdef Py_ssize_t num_updates = len(updates) if updates else 0
    cdef Py_ssize_t num_deletes = len(deletes) if deletes else 0
    cdef vector[uint64_t] keys
    cdef vector[double] priorities
    cdef vector[uint64_t] delete_keys
    cdef Py_ssize_t pos = 0
    cdef PyObject* key_ptr
    cdef PyObject* value_ptr
    cdef uint64_t key
    cdef double priority
    cdef Py_ssize_t i
    cdef Py_ssize_t rows_size = 0
    keys.reserve(num_updates)
    priorities.reserve(num_updates)
    if num_updates:
        while PyDict_Next(updates, &pos, &key_ptr, &value_ptr):
            if not _as_key(<object>key_ptr, &key) or not _as_double(<object>value_ptr, &priority):
                return _pure_encode(table, updates, deletes)
            keys.push_back(key)
            priorities.push_back(priority)
            # 0x12, length, 0x08, the key's varint, 0x11, 8 bytes of double.
            rows_size += 12 + varint_size(key)
    cdef Py_ssize_t packed_size = 0
    if num_deletes:
        delete_keys.reserve(num_deletes)
        for item in deletes:
            if not _as_key(item, &key):
                return _pure_encode(table, updates, deletes)
            delete_keys.push_back(key)
            packed_size += varint_size(key)
    cdef Py_ssize_t name_size = len(name)
    cdef Py_ssize_t size = 0
    if name_size:
        size += 1 + varint_size(name_size) + name_size
    size += rows_size
    if num_deletes:
        size += 1 + varint_size(packed_size) + packed_size
    cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
    cdef uint8_t* start = <uint8_t*>PyBytes_AS_STRING(out)
    cdef uint8_t* p = start
    cdef Py_ssize_t width
    if name_size:
        p[0] = 0x0A
        p += 1
        p += put_varint(p, name_size)
        memcpy(p, PyBytes_AS_STRING(name), name_size)
        p += name_size
    for i in range(<Py_ssize_t>keys.size()):
        p[0] = 0x12
        p[2] = 0x08
        width = put_varint(p + 3, keys[i])
        p[1] = <uint8_t>(width + 10)
        p += 3 + width
        p[0] = 0x11
        _put_double(p + 1, priorities[i])
        p += 9
    if num_deletes:
        p[0] = 0x1A
        p += 1
        p += put_varint(p, packed_size)
        for i in range(<Py_ssize_t>delete_keys.size()):
            p += put_varint(p, delete_keys[i])
    return out


# --------------------------------------------------------------------------- decoding


cdef struct _Reader:
    const uint8_t* p
    const uint8_t* end


cdef inline bint _read_varint(_Reader* r, uint64_t* out) noexcept:
    """A value varint: at most 10 bytes, bits past 64 dropped. False when malformed."""
    cdef uint64_t result = 0
    cdef uint8_t byte
    cdef int shift = 0
    while r.p < r.end:
        byte = r.p[0]
        r.p += 1
        if shift < 64:
            result |= (<uint64_t>(byte & 0x7F)) << shift
        if not byte & 0x80:
            out[0] = result
            return True
        shift += 7
        if shift >= 70:
            return False
    return False


cdef inline bint _read_varint32(_Reader* r, uint32_t* out) noexcept:
    """A tag or a length: at most 5 bytes, the value below 2**32. False when malformed."""
    cdef uint64_t result = 0
    cdef uint8_t byte
    cdef int shift = 0
    while r.p < r.end:
        byte = r.p[0]
        r.p += 1
        result |= (<uint64_t>(byte & 0x7F)) << shift
        if not byte & 0x80:
            if result > 0xFFFFFFFF:
                return False
            out[0] = <uint32_t>result
            return True
        shift += 7
        if shift >= 35:
            return False
    return False


cdef inline bint _read_length(_Reader* r, const uint8_t** field_end) noexcept:
    """A length prefix; ``field_end`` is where the field ends. False when malformed."""
    cdef uint32_t size
    if not _read_varint32(r, &size):
        return False
    if size > 0x7FFFFFFF or <Py_ssize_t>size > r.end - r.p:
        return False
    field_end[0] = r.p + size
    return True


cdef bint _skip_field(_Reader* r, uint32_t tag, int depth) noexcept:
    """Skips the value of an unknown field whose tag was just read. False when malformed.

    ``depth`` is the nesting still allowed; a group uses one level.
    """
    cdef uint64_t ignored
    cdef const uint8_t* field_end
    cdef uint32_t inner
    cdef uint32_t wire_type = tag & 7
    if wire_type == 0:
        return _read_varint(r, &ignored)
    if wire_type == 1:
        if r.end - r.p < 8:
            return False
        r.p += 8
        return True
    if wire_type == 2:
        if not _read_length(r, &field_end):
            return False
        r.p = field_end
        return True
    if wire_type == 5:
        if r.end - r.p < 4:
            return False
        r.p += 4
        return True
    if wire_type == 3:
        depth -= 1
        if depth < 0:
            return False
        while True:
            # NOTE(group-field-zero): protobuf's parser accepts field number 0 inside a
            # skipped group (not elsewhere); so does this reader.
            if not _read_varint32(r, &inner):
                return False
            if inner & 7 == 4:
                return inner >> 3 == tag >> 3
            if not _skip_field(r, inner, depth):
                return False
    return False  # an end group without its start, or wire type 6 or 7


cdef bint _read_update(_Reader* r, int depth, uint64_t* key, double* priority) noexcept:
    """One ``KeyWithPriority`` (its bytes are all of ``r``). False when malformed."""
    cdef uint32_t tag
    cdef uint64_t bits
    cdef int i
    key[0] = 0
    priority[0] = 0.0
    while r.p < r.end:
        if not _read_varint32(r, &tag) or tag >> 3 == 0:
            return False
        if tag == 0x08:
            if not _read_varint(r, key):
                return False
        elif tag == 0x11:
            if r.end - r.p < 8:
                return False
            bits = 0
            for i in range(8):
                bits |= (<uint64_t>r.p[i]) << (8 * i)
            memcpy(priority, &bits, 8)
            r.p += 8
        elif not _skip_field(r, tag, depth):
            return False
    return True


cdef enum:
    # The nesting protobuf's parser allows; the request itself does not count.
    _DEPTH_LIMIT = 100


@cython.boundscheck(False)
@cython.wraparound(False)
def decode_mutate_request(data):
    """Reads a serialised ``MutatePrioritiesRequest``.

    Protobuf's rules apply: fields in any order, unknown fields skipped, a repeated
    table field keeps its last value, ``delete_keys`` packed or not (or both).

    Args:
      data: the request's bytes.

    Returns:
      ``(table, keys, priorities, deletes)``: the updates as two parallel lists.

    Raises:
      InvalidArgumentError: ``data`` is not a well-formed request.
    """
    if type(data) is not bytes:
        data = bytes(data)
    cdef _Reader r
    cdef _Reader sub
    r.p = <const uint8_t*>PyBytes_AS_STRING(data)
    r.end = r.p + PyBytes_GET_SIZE(data)
    cdef uint32_t tag
    cdef const uint8_t* field_end
    cdef uint64_t key
    cdef double priority
    cdef vector[uint64_t] keys
    cdef vector[double] priorities
    cdef vector[uint64_t] deletes
    cdef object table = ""
    # A request of 1,000 canonical updates is about 22,000 bytes.
    keys.reserve(PyBytes_GET_SIZE(data) // 22 + 1)
    priorities.reserve(PyBytes_GET_SIZE(data) // 22 + 1)
    while r.p < r.end:
        if not _read_varint32(&r, &tag) or tag >> 3 == 0:
            raise InvalidArgumentError(_MALFORMED)
        if tag == 0x12:
            if not _read_length(&r, &field_end):
                raise InvalidArgumentError(_MALFORMED)
            sub.p = r.p
            sub.end = field_end
            if not _read_update(&sub, _DEPTH_LIMIT - 1, &key, &priority):
                raise InvalidArgumentError(_MALFORMED)
            keys.push_back(key)
            priorities.push_back(priority)
            r.p = field_end
        elif tag == 0x0A:
            if not _read_length(&r, &field_end):
                raise InvalidArgumentError(_MALFORMED)
            try:
                table = PyUnicode_DecodeUTF8(<char*>r.p, field_end - r.p, "strict")
            except UnicodeDecodeError:
                raise InvalidArgumentError(_MALFORMED) from None
            r.p = field_end
        elif tag == 0x18:
            if not _read_varint(&r, &key):
                raise InvalidArgumentError(_MALFORMED)
            deletes.push_back(key)
        elif tag == 0x1A:
            if not _read_length(&r, &field_end):
                raise InvalidArgumentError(_MALFORMED)
            sub.p = r.p
            sub.end = field_end
            while sub.p < sub.end:
                if not _read_varint(&sub, &key):
                    raise InvalidArgumentError(_MALFORMED)
                deletes.push_back(key)
            r.p = field_end
        elif not _skip_field(&r, tag, _DEPTH_LIMIT):
            raise InvalidArgumentError(_MALFORMED)
    return table, _int_list(keys), _float_list(priorities), _int_list(deletes)


cdef list _int_list(vector[uint64_t]& values):
    cdef Py_ssize_t n = values.size()
    cdef list out = PyList_New(n)
    cdef Py_ssize_t i
    cdef object value
    for i in range(n):
        value = PyLong_FromUnsignedLongLong(values[i])
        Py_INCREF(value)
        PyList_SET_ITEM(out, i, value)
    return out


cdef list _float_list(vector[double]& values):
    cdef Py_ssize_t n = values.size()
    cdef list out = PyList_New(n)
    cdef Py_ssize_t i
    cdef object value
    for i in range(n):
        value = PyFloat_FromDouble(values[i])
        Py_INCREF(value)
        PyList_SET_ITEM(out, i, value)
    return out


# --------------------------------------------------------------------------- the table

cdef enum:
    # How many keys ahead select_updates asks for a key's index entry.
    _AHEAD = 8
    # Largest number of ints in [0, 2**64) that share one hash: 2**64 / (2**61 - 1).
    _HASH_CANDIDATES = 9

import sys as _sys

cdef uint64_t _HASH_MODULUS = _sys.hash_info.modulus


cdef extern from *:
    """
    #include <stdint.h>
    // An index value is an object's address as a non-negative int64 (any 32-bit or
    // user-space 64-bit address).
    static inline int64_t reverb_py_entry_of(PyObject* o) { return (int64_t)(uintptr_t)o; }
    static inline PyObject* reverb_py_held(int64_t value) { return (PyObject*)(uintptr_t)value; }
    """
    int64_t _entry_of "reverb_py_entry_of"(PyObject* o) noexcept
    PyObject* _held "reverb_py_held"(int64_t value) noexcept


cdef extern from "Python.h":
    ctypedef int (*_visitproc "visitproc")(PyObject*, void*) noexcept
    ctypedef int (*_traverseproc "traverseproc")(PyObject*, _visitproc, void*) noexcept
    ctypedef int (*_inquiry "inquiry")(PyObject*) noexcept
    ctypedef struct _GcType "PyTypeObject":
        _traverseproc tp_traverse
        _inquiry tp_clear


cdef object _NO_DEFAULT = object()


@cython.final
cdef class ItemMap(dict):
    """A table's items by key: a ``dict`` whose keys are ints in ``[0, 2**64)``.

    It is a ``dict`` in every way (order, views, lookups). Every method that adds a key
    refuses one that is not an integer in range, as ``check_key`` refuses it, and stores
    one of a subclass of ``int`` as a plain ``int``. The compiled twin also keeps an index
    of its own, key -> value in one flat C array holding a reference to each value, which
    :func:`select_updates` reads a batch of keys from: one cache line per key, fetched a
    few keys ahead. Change it through its own methods: ``dict``'s, called unbound
    (``dict.__setitem__(m, k, v)``), bypass the index. It cannot be subclassed.
    """

    cdef KeyIndex _index

    def __init__(self, other=(), /, **kwargs):
        self.update(other, **kwargs)

    def __dealloc__(self):
        # The dict still holds every value here: no value is freed by this.
        _release(&self._index)

    def __setitem__(self, key, value):
        cdef uint64_t k = as_key(key)
        if type(key) is not int:
            key = PyLong_FromUnsignedLongLong(k)
        cdef int64_t entry = _entry_of(<PyObject*>value)
        if entry < 0:
            raise SystemError("ItemMap: an object address above 2**63")
        cdef int64_t old = self._index.Find(k)
        # The index's reference is taken, and the index is right, before the dict lets
        # go of an old value (whose release may run any code, even code that uses this
        # map); the index lets go of its old value last.
        Py_INCREF(value)
        if old >= 0:
            self._index.Set(k, entry)
            try:
                PyDict_SetItem(self, key, value)
            except BaseException:
                self._index.Set(k, old)
                Py_DECREF(value)
                raise
            Py_XDECREF(_held(old))
            return
        try:
            self._index.Insert(k, entry)
        except BaseException:
            Py_DECREF(value)
            raise
        try:
            PyDict_SetItem(self, key, value)
        except BaseException:
            self._index.Erase(k)
            Py_DECREF(value)
            raise

    def __delitem__(self, key):
        if type(key) is int:
            PyDict_DelItem(self, key)
            self._forget(key)
            return
        cdef Py_hash_t wanted = hash(key)
        dict.__delitem__(self, key)
        self._forget_hash(wanted)

    cdef void _forget(self, object key) noexcept:
        """Drops ``key``'s entry of the index, once the dict no longer has it."""
        cdef uint64_t k = 0
        cdef int64_t value
        if is_key(key, &k):
            value = self._index.Erase(k)
            if value >= 0:
                Py_XDECREF(_held(value))

    cdef int _forget_hash(self, Py_hash_t wanted) except -1:
        """Drops the index's entries that the dict no longer has among the keys whose
        hash is ``wanted`` (where a key that is not a plain ``int`` has removed one)."""
        cdef uint64_t k
        cdef int64_t value
        cdef int j
        if wanted < 0:
            return 0
        k = <uint64_t>wanted
        for j in range(_HASH_CANDIDATES):
            if self._index.Find(k) >= 0 and not dict.__contains__(
                self, PyLong_FromUnsignedLongLong(k)
            ):
                value = self._index.Erase(k)
                Py_XDECREF(_held(value))
            if k > <uint64_t>-1 - _HASH_MODULUS:
                break
            k += _HASH_MODULUS
        if <Py_ssize_t>self._index.size() != len(self):
            # A key whose hash changed between calls, or a hash shared by more ints than
            # the candidates (32-bit builds): every entry the dict lacks is dropped.
            self._drop_missing()
        return 0

    cdef int _drop_missing(self) except -1:
        """Drops every index entry whose key the dict does not have."""
        cdef vector[uint64_t] missing
        cdef size_t i
        cdef int64_t value
        for i in range(self._index.capacity()):
            if self._index.ValueAt(i) >= 0 and not dict.__contains__(
                self, PyLong_FromUnsignedLongLong(self._index.KeyAt(i))
            ):
                missing.push_back(self._index.KeyAt(i))
        for i in range(missing.size()):
            value = self._index.Erase(missing[i])
            if value >= 0:
                Py_XDECREF(_held(value))
        return 0

    def pop(self, key, default=_NO_DEFAULT, /):
        cdef PyObject* found
        cdef Py_hash_t wanted
        if type(key) is int:
            found = _DictGetItemWithError(self, key) if self else NULL
            if found is not NULL:
                value = <object>found
                PyDict_DelItem(self, key)
                self._forget(key)
                return value
            if default is not _NO_DEFAULT:
                return default
            raise KeyError(key)
        if not self:  # (dict's pop of an empty dict hashes nothing)
            return dict.pop(self, key) if default is _NO_DEFAULT else default
        wanted = hash(key)
        if default is _NO_DEFAULT:
            value = dict.pop(self, key)
        else:
            value = dict.pop(self, key, default)
        self._forget_hash(wanted)
        return value

    def popitem(self):
        key, value = dict.popitem(self)
        self._forget(key)
        return key, value

    def setdefault(self, key, default=None, /):
        if key in self:
            return dict.__getitem__(self, key)
        self[key] = default
        return default

    def update(self, other=(), /, **kwargs):
        for key, value in dict(other, **kwargs).items():
            self[key] = value

    def __ior__(self, other):
        self.update(other)
        return self

    def clear(self):
        # The index is emptied first, while the dict still holds every value; the dict's
        # release of them (which may run any code) comes last.
        _release(&self._index)
        PyDict_Clear(self)

    def copy(self):
        return dict(self)

    def __reduce__(self):
        return ItemMap, (), None, None, iter(dict.items(self))


cdef void _release(KeyIndex* index) noexcept:
    """Empties ``index``, then gives back its reference to every value (a value the dict
    no longer holds may run code when released: the index is empty by then)."""
    cdef vector[PyObject*] held
    cdef size_t i
    cdef int64_t value
    held.reserve(index.size())
    for i in range(index.capacity()):
        value = index.ValueAt(i)
        if value >= 0:
            held.push_back(_held(value))
    index.Clear()
    for i in range(held.size()):
        Py_XDECREF(held[i])


# The collector must see the index's references too, or a value that refers back to its
# map (an item holding its table) would keep the cycle alive for good: ItemMap's
# traverse visits the dict's references and then the index's, and its clear empties the
# index before the dict.
cdef _GcType* _ITEM_MAP_TYPE = <_GcType*>ItemMap
cdef _traverseproc _dict_traverse = _ITEM_MAP_TYPE.tp_traverse
cdef _inquiry _dict_clear = _ITEM_MAP_TYPE.tp_clear


cdef int _item_map_traverse(PyObject* o, _visitproc visit, void* arg) noexcept:
    cdef int result = _dict_traverse(o, visit, arg) if _dict_traverse is not NULL else 0
    if result:
        return result
    cdef KeyIndex* index = &(<ItemMap>o)._index
    cdef size_t i
    cdef int64_t value
    for i in range(index.capacity()):
        value = index.ValueAt(i)
        if value >= 0:
            result = visit(_held(value), arg)
            if result:
                return result
    return 0


cdef int _item_map_clear(PyObject* o) noexcept:
    _release(&(<ItemMap>o)._index)
    return _dict_clear(o) if _dict_clear is not NULL else 0


if _ITEM_MAP_TYPE.tp_traverse is not _item_map_traverse:
    _ITEM_MAP_TYPE.tp_traverse = _item_map_traverse
    _ITEM_MAP_TYPE.tp_clear = _item_map_clear


cdef list _find_items(ItemMap items, list keys, Py_ssize_t n, bint* all_found):
    """``[items.get(key) for key in keys]``, plain ``int`` keys read from the index."""
    cdef vector[uint64_t] c_keys
    cdef vector[PyObject*] found_items
    cdef list found
    c_keys.resize(n)
    found_items.resize(n)
    cdef KeyIndex* index = &items._index
    cdef Py_ssize_t i
    cdef int64_t value
    cdef PyObject* item
    for i in range(n):
        if not _as_key(<object>PyList_GET_ITEM(keys, i), &c_keys[i]):
            # Anything but plain ints: as the dict finds them (bool, int subclasses, or
            # its TypeError when unhashable), holding each found item at once (a key's
            # __eq__ may run any code, even code that changes the map).
            found = list(map(items.get, keys))
            all_found[0] = None not in found
            return found
    # Allocated before the first lookup: an allocation may run the garbage collector,
    # whose finalizers may change the map. From the first lookup to the last reference
    # taken below no Python code runs.
    found = PyList_New(n)
    for i in range(min(n, _AHEAD)):
        index.Prefetch(c_keys[i])
    for i in range(n):
        if i + _AHEAD < n:
            index.Prefetch(c_keys[i + _AHEAD])
        value = index.Find(c_keys[i])
        item = _held(value) if value >= 0 else NULL
        if item is not NULL:
            prefetch(item)
        found_items[i] = item
    for i in range(n):
        item = found_items[i]
        if item is NULL:
            all_found[0] = False
            Py_INCREF(None)
            PyList_SET_ITEM(found, i, None)
        else:
            Py_INCREF(<object>item)
            PyList_SET_ITEM(found, i, <object>item)
    return found


def select_updates(items, keys, priorities, excluded):
    """The updates that apply: keys that name an item of ``items`` and are not excluded.

    Every key is looked up first; then, in order, each found key that is not in
    ``excluded`` is kept with its priority converted by ``float()`` and its item. The
    priorities of the other keys are never looked at. ``keys`` and ``priorities`` are
    read as they are when the call begins (a copy of each: code run by a key's
    ``__eq__`` or a priority's ``__float__`` cannot change what is read).

    Args:
      items: the table's items by key.
      keys: the keys to update.
      priorities: as many new priorities.
      excluded: keys to leave out (the ones being deleted); may be empty.

    Returns:
      ``(keys, priorities, items)``: three parallel lists.

    Raises:
      InvalidArgumentError: ``keys`` and ``priorities`` differ in length.
      TypeError, ValueError: a key is unhashable, or ``float()`` refuses a priority.
    """
    if len(keys) != len(priorities):
        raise InvalidArgumentError(
            "keys and priorities must have the same length, "
            f"got {len(keys)} and {len(priorities)}."
        )
    cdef list key_list = list(keys)
    cdef list priority_list = list(priorities)
    cdef Py_ssize_t n = PyList_GET_SIZE(key_list)
    if PyList_GET_SIZE(priority_list) != n:  # a sequence whose len() and items disagree
        raise InvalidArgumentError(
            "keys and priorities must have the same length, "
            f"got {n} and {PyList_GET_SIZE(priority_list)}."
        )
    cdef list found
    cdef Py_ssize_t i
    cdef PyObject* item
    cdef bint all_found = True
    cdef object key
    if type(items) is ItemMap:
        found = _find_items(<ItemMap>items, key_list, n, &all_found)
    elif type(items) is dict:
        found = PyList_New(n)
        for i in range(n):
            item = _DictGetItemWithError(items, <object>PyList_GET_ITEM(key_list, i))
            if item is NULL:
                all_found = False
                Py_INCREF(None)
                PyList_SET_ITEM(found, i, None)
            else:
                Py_INCREF(<object>item)
                PyList_SET_ITEM(found, i, <object>item)
    else:
        found = list(map(items.get, key_list))
        all_found = None not in found
    if all_found and not excluded:
        return key_list, _floats(priority_list), found
    cdef list kept_keys = []
    cdef list kept_priorities = []
    cdef list targets = []
    cdef object target
    cdef object priority
    for i in range(n):
        target = <object>PyList_GET_ITEM(found, i)
        if target is None:
            continue
        key = <object>PyList_GET_ITEM(key_list, i)
        if key in excluded:
            continue
        priority = <object>PyList_GET_ITEM(priority_list, i)
        kept_keys.append(key)
        kept_priorities.append(priority if type(priority) is float else PyNumber_Float(priority))
        targets.append(target)
    return kept_keys, kept_priorities, targets


cdef list _floats(list values):
    """``list(map(float, values))`` of a list no other code can reach; exact floats are
    kept as they are."""
    cdef Py_ssize_t n = PyList_GET_SIZE(values)
    cdef list out = PyList_New(n)
    cdef Py_ssize_t i
    cdef object value
    for i in range(n):
        value = <object>PyList_GET_ITEM(values, i)
        if type(value) is not float:
            value = PyNumber_Float(value)
        Py_INCREF(value)
        PyList_SET_ITEM(out, i, value)
    return out


cdef extern from "structmember.h":
    pass


cdef extern from "Python.h":
    # A member descriptor (a __slots__ entry) and where it keeps its value.
    ctypedef struct _MemberDef "PyMemberDef":
        int type
        Py_ssize_t offset
        int flags
    ctypedef struct _MemberDescr "PyMemberDescrObject":
        _MemberDef* d_member
    ctypedef struct _TypeObject "PyTypeObject":
        void* tp_setattro
    void* _GenericSetAttr "PyObject_GenericSetAttr"
    _TypeObject _MemberDescrType "PyMemberDescr_Type"
    PyObject* _TypeLookup "_PyType_Lookup"(_TypeObject* type, PyObject* name) noexcept
    _TypeObject* _Type "Py_TYPE"(PyObject* o) noexcept
    _TypeObject* _DescrType "PyDescr_TYPE"(PyObject* descr) noexcept
    int _IsSubtype "PyType_IsSubtype"(_TypeObject* a, _TypeObject* b) noexcept

cdef enum:
    _T_OBJECT = 6      # structmember.h's T_OBJECT, T_OBJECT_EX and READONLY
    _T_OBJECT_EX = 16
    _READONLY = 1


# The table's compiled records and where they keep their priority, read once at import.
cdef object _RECORD_ITEM_TYPE = _records.Item
cdef _TypeObject* _RECORD_ITEM = <_TypeObject*><PyObject*>_RECORD_ITEM_TYPE
cdef Py_ssize_t _RECORD_PRIORITY_OFFSET = _records.ITEM_PRIORITY_OFFSET


cdef Py_ssize_t _slot_offset(_TypeObject* type, str name) noexcept:
    """Where objects of ``type`` keep attribute ``name``: the offset of its writable
    __slots__ member when setting the attribute does no more than store the value there
    (the type's ``__setattr__`` is object's, and the member is one of ``type``'s own or
    its bases', as the member's setter requires), else -1 (a property, a ``__dict__``
    entry, a ``__setattr__`` of its own, a member borrowed from another class)."""
    if type.tp_setattro is not &_GenericSetAttr:
        return -1
    cdef PyObject* descr = _TypeLookup(type, <PyObject*>name)
    cdef _MemberDef* member
    if descr is NULL or _Type(descr) is not &_MemberDescrType:
        return -1
    if not _IsSubtype(type, _DescrType(descr)):
        return -1
    member = (<_MemberDescr*>descr).d_member
    if member.type != _T_OBJECT and member.type != _T_OBJECT_EX or member.flags & _READONLY:
        return -1
    return member.offset


def assign_priorities(targets, priorities):
    """Sets ``targets[i].priority = priorities[i]`` (up to the shorter length).

    The targets and priorities are read as they are when the call begins (code run by a
    setter cannot change what is read).
    """
    if type(targets) is not list or type(priorities) is not list:
        for item, priority in zip(targets, priorities):
            item.priority = priority
        return
    cdef tuple target_tuple = tuple(<list>targets)
    cdef tuple priority_tuple = tuple(<list>priorities)
    cdef Py_ssize_t n = min(len(target_tuple), len(priority_tuple))
    cdef Py_ssize_t i
    cdef PyObject* target
    cdef _TypeObject* slotted = NULL
    cdef Py_ssize_t offset = -1
    cdef PyObject** slot
    cdef PyObject* value
    cdef vector[PyObject*] old_values
    if n:
        # Targets of one type with the priority in a plain slot (the table's items): the
        # value is stored there as the slot's descriptor stores it, the old values asked
        # for a few targets ahead. They are released at the end: no code runs in between.
        target = <PyObject*>target_tuple[0]
        if _Type(target) is _RECORD_ITEM:
            # The table's records (``reverb_py._speedups.records.Item``): an object field.
            offset = _RECORD_PRIORITY_OFFSET
        else:
            offset = _slot_offset(_Type(target), _PRIORITY)
        if offset >= 0:
            slotted = _Type(target)
    if slotted is NULL:
        for i in range(n):
            PyObject_SetAttr(target_tuple[i], _PRIORITY, priority_tuple[i])
        return
    old_values.reserve(n)
    try:
        for i in range(n):
            target = <PyObject*>target_tuple[i]
            if _Type(target) is not slotted:
                break
            if i + _AHEAD < n and _Type(<PyObject*>target_tuple[i + _AHEAD]) is slotted:
                prefetch((<PyObject**>(<char*>(<PyObject*>target_tuple[i + _AHEAD]) + offset))[0])
            value = <PyObject*>priority_tuple[i]
            slot = <PyObject**>(<char*>target + offset)
            old_values.push_back(slot[0])
            Py_INCREF(<object>value)
            slot[0] = value
    finally:
        for i in range(<Py_ssize_t>old_values.size()):
            Py_XDECREF(old_values[i])
    # From the first target of another type on: as the attribute's setter sets it.
    for i in range(<Py_ssize_t>old_values.size(), n):
        PyObject_SetAttr(target_tuple[i], _PRIORITY, priority_tuple[i])
