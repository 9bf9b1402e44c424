# cython: language_level=3, annotation_typing=False, auto_pickle=False
"""The records a table holds per item and a server per chunk (compiled twin).

The pure-Python twin is ``reverb_py._pure.records``, the reference for behaviour; this
module has the same constructors, attributes, ``repr``, pickling and errors. Its types
are not containers of the cyclic garbage collector, and :class:`LiveChunks` files
borrowed references that each chunk withdraws when it is freed (see
PERF(untracked-records) in the twin).
"""

cimport cython
from cython.operator cimport dereference as deref
from cpython.ref cimport Py_INCREF, Py_XDECREF, PyObject
from libc.stdint cimport uint64_t
from libcpp.unordered_map cimport unordered_map
from libcpp.utility cimport pair
from libcpp.vector cimport vector

from _common cimport check_key, is_key

__all__ = ["Chunk", "Item", "LiveChunks"]


@cython.no_gc
@cython.final
cdef class Item:
    """Item(key, priority, trajectory=None, chunks=(), episode_ids=(), times_sampled=0, inserted_at=0)
--

An item of a table (see ``reverb_py._pure.records.Item``)."""

    cdef public object key
    cdef public object priority
    cdef public object trajectory
    cdef public object chunks
    cdef public object episode_ids
    cdef public object times_sampled
    cdef public object inserted_at

    def __init__(
        self,
        key,
        priority,
        trajectory=None,
        chunks=(),
        episode_ids=(),
        times_sampled=0,
        inserted_at=0,
    ):
        self.key = key
        self.priority = priority
        self.trajectory = trajectory
        self.chunks = chunks
        self.episode_ids = episode_ids
        self.times_sampled = times_sampled
        self.inserted_at = inserted_at

    def __repr__(self):
        return (
            f"Item(key={self.key}, priority={self.priority!r}, "
            f"times_sampled={self.times_sampled}, chunks={len(self.chunks)})"
        )

    def __reduce__(self):
        return (
            Item,
            (
                self.key,
                self.priority,
                self.trajectory,
                self.chunks,
                self.episode_ids,
                self.times_sampled,
                self.inserted_at,
            ),
        )


cdef Py_ssize_t _priority_offset() except -1:
    # The word of an Item that holds a priority set to an object nothing else holds
    # (Cython gives no address of an object attribute, so the field is found by what it
    # holds).
    marker = object()
    cdef Item probe = Item(0, marker)
    cdef PyObject** words = <PyObject**><PyObject*>probe
    cdef Py_ssize_t i
    for i in range(<Py_ssize_t>(sizeof(PyObject) // sizeof(PyObject*)), Item.__basicsize__ // sizeof(PyObject*)):
        if words[i] == <PyObject*>marker:
            return i * <Py_ssize_t>sizeof(PyObject*)
    raise SystemError("records: Item keeps no priority field")


ITEM_PRIORITY_OFFSET = _priority_offset()
"""Where an :class:`Item` keeps its ``priority`` (a reference, as a ``__slots__`` member
keeps one): ``reverb_py._speedups.mutations.assign_priorities`` stores there."""


@cython.no_gc
@cython.final
cdef class Chunk:
    """Chunk(key, episode_id, data, steps=(), defect=None)
--

A chunk as the server keeps it (see ``reverb_py._pure.records.Chunk``)."""

    cdef readonly object key
    cdef public object episode_id
    cdef readonly object data
    cdef public object steps
    cdef public object defect
    # The LiveChunks this chunk is filed in (a reference to each), under _filed_key,
    # with _filed_bytes counted in their nbytes.
    cdef vector[PyObject*] _filed_in
    cdef uint64_t _filed_key
    cdef Py_ssize_t _filed_bytes
    cdef bint _made

    def __init__(self, key, episode_id, data, steps=(), defect=None):
        if self._made:
            raise TypeError("A Chunk is made once: its key and data cannot change.")
        self._made = True
        self.key = key
        self.episode_id = episode_id
        self.data = data
        self.steps = steps
        self.defect = defect

    def __dealloc__(self):
        cdef PyObject* live
        for live in self._filed_in:
            (<LiveChunks>live)._withdraw(self)
            Py_XDECREF(live)
        self._filed_in.clear()

    def __repr__(self):
        return f"Chunk(key={self.key}, episode_id={self.episode_id}, bytes={len(self.data)})"

    def __reduce__(self):
        return (Chunk, (self.key, self.episode_id, self.data, self.steps, self.defect))


@cython.final
cdef class LiveChunks:
    """LiveChunks()
--

Chunks by key, each only as long as something else holds it (see
``reverb_py._pure.records.LiveChunks``)."""

    # Borrowed references: a chunk takes itself out when it is freed.
    cdef unordered_map[uint64_t, PyObject*] _chunks
    cdef Py_ssize_t _nbytes

    def __init__(self):
        pass

    def add(self, chunk):
        cdef unordered_map[uint64_t, PyObject*].iterator it
        if type(chunk) is not Chunk:
            raise TypeError(f"LiveChunks holds Chunk objects, not {type(chunk).__name__}.")
        cdef Chunk filed = <Chunk>chunk
        cdef uint64_t key = check_key(filed.key)
        # len() may run code (a data object of its own): before the map is read.
        cdef Py_ssize_t nbytes = len(filed.data)
        it = self._chunks.find(key)
        if it != self._chunks.end():
            return <object>deref(it).second
        # A chunk's key and data never change (read-only, made once): what it was first
        # filed under holds for every LiveChunks.
        if filed._filed_in.empty():
            filed._filed_key = key
            filed._filed_bytes = nbytes
        # The chunk learns of the filing first, so that no entry it does not know of can
        # outlive it; either step may raise MemoryError, leaving nothing changed.
        cdef pair[uint64_t, PyObject*] entry
        entry.first = key
        entry.second = <PyObject*>filed
        filed._filed_in.push_back(<PyObject*>self)
        try:
            self._chunks.insert(entry)
        except BaseException:
            filed._filed_in.pop_back()
            raise
        Py_INCREF(self)
        self._nbytes += filed._filed_bytes
        return chunk

    def get(self, key):
        cdef unordered_map[uint64_t, PyObject*].iterator it
        cdef uint64_t k = 0
        if not is_key(key, &k):
            return None
        it = self._chunks.find(k)
        if it == self._chunks.end():
            return None
        return <object>deref(it).second

    def values(self):
        # Each chunk is held (a reference taken) before anything that could run code
        # (an allocation may start a collection, which may free chunks) happens.
        cdef list result = []
        cdef vector[PyObject*] held
        held.reserve(self._chunks.size())
        for entry in self._chunks:
            Py_INCREF(<object>entry.second)
            held.push_back(entry.second)
        cdef PyObject* chunk
        try:
            for chunk in held:
                result.append(<object>chunk)
        finally:
            for chunk in held:
                Py_XDECREF(chunk)
        return result

    def __len__(self):
        return self._chunks.size()

    @property
    def nbytes(self):
        return self._nbytes

    cdef void _withdraw(self, Chunk chunk) noexcept:
        cdef unordered_map[uint64_t, PyObject*].iterator it
        it = self._chunks.find(chunk._filed_key)
        if it != self._chunks.end() and deref(it).second == <PyObject*>chunk:
            self._chunks.erase(it)
            self._nbytes -= chunk._filed_bytes
