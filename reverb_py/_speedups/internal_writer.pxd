# Declarations for the compiled engine (reverb_py._speedups.internal_writer), which
# Cython builds from internal_writer.py as it is. The pure module ignores this file.
# The classes become extension types with typed fields, and the per-item methods read
# those fields from C.

import cython


cdef class _Chunk:
    cdef public object data
    cdef public object key
    cdef public object key_field
    cdef public Py_ssize_t live_refs
    cdef public Py_ssize_t nbytes
    cdef public object sent_generation
    cdef public Py_ssize_t steps


cdef class _AutoTuner:
    cdef public list _chunks
    cdef public list _item_bytes
    cdef public list _item_lengths
    cdef public Py_ssize_t _max
    cdef public double _moved_cost
    cdef public double _moved_length
    cdef public double _weight
    cdef public Py_ssize_t length

    @cython.locals(
        chunk=_Chunk, entry=tuple, known=list, total_bytes=Py_ssize_t, total_length=Py_ssize_t
    )
    cpdef on_item(self, list chunks, Py_ssize_t steps)

    @cython.locals(
        known=list,
        lengths=list,
        length_sum=double,
        items_bytes=double,
        chunks_bytes=double,
        average=double,
        cost=double,
        new_length=Py_ssize_t,
    )
    cpdef _score(self)


cdef class CellRef:
    cdef public _Chunk _chunk
    cdef public Py_ssize_t _column
    cdef public object _dtype
    cdef public object _episode_id
    cdef public Py_ssize_t _offset
    cdef public Py_ssize_t _pins
    cdef public object _shape
    cdef public Py_ssize_t _step
    cdef public object _value
    cdef public object _writer
    cdef public bint expired


cdef class _Column:
    cdef public list buffer
    cdef public object dtype
    cdef public Py_ssize_t index
    cdef public Py_ssize_t keep_alive
    cdef public Py_ssize_t last_step
    cdef public object live
    cdef public object live_chunks
    cdef public Py_ssize_t max_chunk_length
    cdef public object shape
    cdef public _AutoTuner tuner


cdef class _Item:
    cdef public list chunks
    cdef public object data
    cdef public object key
    cdef public object priority
    cdef public object refs
    cdef public object squeeze
    cdef public object table


@cython.locals(column=object, ref=CellRef)
cpdef bint _all_final(list refs) except -1


@cython.locals(column=object, ref=CellRef)
cpdef _pin(list refs)


cdef class InternalTrajectoryWriter:
    cdef public object _transport
    cdef public object _default_options
    cdef public object _overrides
    cdef public object _signatures
    cdef public bint _delta_encoded
    cdef public object _lock
    cdef public object _condition
    cdef public Py_ssize_t _num_waiters
    cdef public list _columns
    cdef public object _episode_id
    cdef public Py_ssize_t _episode_steps
    cdef public bint _step_open
    cdef public bint _appended
    cdef public object _queue
    cdef public list _unready
    cdef public dict _in_flight
    cdef public object _generation
    cdef public object _error
    cdef public bint _closed
    cdef public list _listeners
    cdef public bint _warned_pending
    cdef public Py_ssize_t _hold_limit

    @cython.locals(
        columns=list,
        column=_Column,
        ref=CellRef,
        refs=list,
        buffer=list,
        tuner=_AutoTuner,
        step=Py_ssize_t,
        step_open=bint,
        finalised=bint,
        sendable=bint,
    )
    cpdef list _append(self, object flat, bint partial)

    @cython.locals(first=CellRef, other=CellRef, index=Py_ssize_t)
    cpdef _validate_item_locked(
        self, object table, list columns, list squeeze, bint validate_signature
    )

    @cython.locals(chunk=_Chunk)
    cpdef _expire_locked(self, _Column column, CellRef ref)

    @cython.locals(
        buffer=list,
        ref=CellRef,
        chunk=_Chunk,
        offset=Py_ssize_t,
        first=Py_ssize_t,
        last=Py_ssize_t,
    )
    cpdef _finalise_locked(self, _Column column)

    @cython.locals(
        first=CellRef,
        ref=CellRef,
        chunk=_Chunk,
        last_chunk=_Chunk,
        tuner=_AutoTuner,
        data_columns=list,
        columns=list,
        chunks=dict,
        column_chunks=dict,
        slices=list,
        mixed=bint,
        tuned=list,
    )
    cpdef _build_item_locked(self, _Item item)

    @cython.locals(tuner=_AutoTuner)
    cpdef _tune_locked(self, list tuned)

    cpdef bint _sendable_locked(self) except -1

    @cython.locals(item=_Item, ref=CellRef, waiting=list)
    cpdef bint _resolve_locked(self) except -1
