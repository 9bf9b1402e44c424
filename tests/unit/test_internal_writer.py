"""InternalTrajectoryWriter: chunking, refs, items, flushing and the transport side."""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np
import pytest

from reverb_py import errors
from reverb_py._codec import chunk as _chunk
from reverb_py._codec import dtypes as _dtypes
from reverb_py._codec.signature import flatten_signature
from reverb_py._proto import schema_pb2
from reverb_py._writer.engine import (
    AutoTunedChunkerOptions,
    CellRef,
    ConstantChunkerOptions,
    InternalTrajectoryWriter,
    format_shape,
)
from reverb_py.tensor_spec import TensorSpec
from tests.fake_transport import FakeTransport, assert_arrays_equal, make_writer

CLOSED = "TrajectoryWriter::Close has been called."


def constant(length: int, keep: int) -> ConstantChunkerOptions:
    return ConstantChunkerOptions(max_chunk_length=length, num_keep_alive_refs=keep)


def refs_of(writer: InternalTrajectoryWriter, values: list[Any], column: int = 0) -> list[CellRef]:
    """Appends one step per value in `column` (others None) and returns the refs."""
    out = []
    for value in values:
        flat: list[Any] = [None] * column + [value]
        ref = writer.Append(flat)[column]
        assert ref is not None
        out.append(ref)
    return out


# ------------------------------------------------------------------------------ refs


def test_append_returns_refs_describing_the_values() -> None:
    writer, _ = make_writer()
    refs = writer.Append(
        [np.arange(6, dtype=np.float32).reshape(2, 3), 5, 2.5, True, "héllo", b"raw", None]
    )
    assert len(refs) == 7 and refs[6] is None
    matrix, integer, floating, boolean, text, raw = refs[:6]
    assert matrix is not None and matrix.shape == [2, 3] and matrix.dtype == np.float32
    assert integer is not None and integer.dtype == np.int64 and integer.shape == []
    assert floating is not None and floating.dtype == np.float64
    assert boolean is not None and boolean.dtype == np.bool_
    assert text is not None and text.dtype == np.dtype(object)
    assert text.numpy().item() == "héllo".encode()
    assert raw is not None and raw.numpy().item() == b"raw"
    assert not matrix.expired
    assert_arrays_equal(matrix.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))
    assert "CellRef(column=0, step=0" in repr(matrix)


def test_append_copies_the_input_and_numpy_returns_copies() -> None:
    writer, fake = make_writer()
    source = np.array([1.0, 2.0])
    (ref,) = writer.Append([source])
    assert ref is not None
    source[0] = 100.0
    ref.numpy()[1] = 200.0
    assert_arrays_equal(ref.numpy(), np.array([1.0, 2.0]))
    writer.CreateItem("t", 1.0, [[ref]], [True])
    writer.Flush()
    assert_arrays_equal(fake.decoded(0)[0], np.array([1.0, 2.0]))


@pytest.mark.parametrize("value", [object(), [[1, 2], [3]], np.array(["2020"], dtype="M8[D]")])
def test_values_that_are_not_tensors_raise_type_error(value: Any) -> None:
    writer, _ = make_writer()
    with pytest.raises(TypeError):
        writer.Append([value])
    assert writer.episode_steps == 0


def test_ref_data_is_unavailable_once_expired() -> None:
    writer, _ = make_writer(constant(1, 2))
    first, second, third = refs_of(writer, [1.0, 2.0, 3.0])
    assert first.expired and not second.expired and not third.expired
    for access in (lambda: first.shape, lambda: first.dtype, first.numpy):
        with pytest.raises(RuntimeError, match="expired"):
            access()
    with pytest.raises(ValueError, match=r"^Error in column 0: Column contains expired CellRef\.$"):
        writer.CreateItem("t", 1.0, [[first, second]], [False])


# ------------------------------------------------------------------------------ chunks


def test_chunks_have_the_constant_length_and_sequence_ranges() -> None:
    writer, fake = make_writer(constant(3, 3))
    refs = refs_of(writer, [float(i) for i in range(7)])
    writer.CreateItem("t", 1.0, [refs[4:7]], [False])
    assert fake.requests == []  # step 6 is still buffered
    writer.Flush()
    (request,) = fake.requests
    ranges = sorted(
        (chunk.sequence_range.start, chunk.sequence_range.end) for chunk in request.chunks
    )
    assert ranges == [(3, 5), (6, 6)]
    assert {chunk.sequence_range.episode_id for chunk in request.chunks} == {
        request.chunks[0].sequence_range.episode_id
    }
    assert not any(chunk.sequence_range.sparse for chunk in request.chunks)
    assert all(chunk.data_tensors_len == 1 for chunk in request.chunks)
    assert_arrays_equal(fake.decoded(0)[0], np.array([4.0, 5.0, 6.0]))


def test_item_is_sent_once_its_chunks_are_final() -> None:
    writer, fake = make_writer(constant(3, 3))
    (ref,) = refs_of(writer, [1])
    writer.CreateItem("t", 1.0, [[ref]], [True])
    assert fake.requests == [] and writer.num_pending_items() == 1
    assert writer.take_outgoing() is None
    refs_of(writer, [2, 3])
    assert len(fake.requests) == 1 and writer.num_pending_items() == 0
    assert_arrays_equal(fake.decoded(0)[0], np.array(1))


def test_sparse_chunk_when_a_column_skips_steps() -> None:
    writer, fake = make_writer(constant(3, 3))
    refs = []
    for step in range(5):
        step_refs = writer.Append([step, step * 10 if step % 2 == 0 else None])
        if step % 2 == 0:
            refs.append(step_refs[1])
    writer.CreateItem("t", 1.0, [refs], [False])
    writer.Flush()
    (chunk,) = list(fake.chunks_sent)
    assert (chunk.sequence_range.start, chunk.sequence_range.end) == (0, 4)
    assert chunk.sequence_range.sparse
    assert_arrays_equal(fake.decoded(0)[0], np.array([0, 20, 40]))


def test_consecutive_refs_of_one_chunk_merge_into_one_slice() -> None:
    writer, fake = make_writer(constant(4, 8))
    refs = refs_of(writer, list(range(6)))
    writer.CreateItem(
        "t",
        1.0,
        [refs[0:4], refs[0:3:2], refs[2:6], [refs[1], refs[1]], [refs[5]]],
        [False, False, False, False, True],
    )
    writer.Flush()
    (entry,) = fake.inserted
    columns = entry.item.flat_trajectory.columns
    first_chunk = columns[0].chunk_slices[0].chunk_key

    def slices(index: int) -> list[tuple[bool, int, int, int]]:
        return [
            (s.chunk_key == first_chunk, s.offset, s.length, s.index)
            for s in columns[index].chunk_slices
        ]

    assert slices(0) == [(True, 0, 4, 0)]
    assert slices(1) == [(True, 0, 1, 0), (True, 2, 1, 0)]
    assert slices(2) == [(True, 2, 2, 0), (False, 0, 2, 0)]
    assert slices(3) == [(True, 1, 1, 0), (True, 1, 1, 0)]
    assert slices(4) == [(False, 1, 1, 0)]
    assert [c.squeeze for c in columns] == [False, False, False, False, True]
    decoded = fake.decoded(0)
    for got, want in zip(decoded, [[0, 1, 2, 3], [0, 2], [2, 3, 4, 5], [1, 1]]):
        assert_arrays_equal(got, np.array(want))
    assert_arrays_equal(decoded[4], np.array(5))


@pytest.mark.parametrize("dtype", _dtypes.supported_dtypes(), ids=str)
def test_every_dtype_round_trips(dtype: np.dtype[Any]) -> None:
    writer, fake = make_writer(constant(2, 4))
    if dtype == np.dtype(object):
        values = [np.array([b"a", b"bc"], dtype=object), np.array(["", "dé"], dtype=object)]
        expected = np.array([[b"a", b"bc"], [b"", "dé".encode()]], dtype=object)
    else:
        values = [np.arange(2).astype(dtype), np.array([1, 0]).astype(dtype)]
        expected = np.stack(values)
    refs = refs_of(writer, values)
    writer.CreateItem("t", 1.0, [refs], [False])
    writer.Flush()
    assert_arrays_equal(fake.decoded(0)[0], expected)


def test_numpy_string_arrays_become_bytes() -> None:
    writer, fake = make_writer()
    refs = refs_of(writer, [np.array(["ab", "c"]), np.array([b"x", b"yz"])])
    assert refs[0].dtype == np.dtype(object)
    writer.CreateItem("t", 1.0, [refs], [False])
    writer.Flush()
    assert_arrays_equal(fake.decoded(0)[0], np.array([[b"ab", b"c"], [b"x", b"yz"]], dtype=object))


def test_delta_encoded_chunks_round_trip() -> None:
    writer, fake = make_writer(constant(3, 3), delta_encoded=True)
    assert writer.delta_encoded
    values = [np.array([1, 5, 9], dtype=np.int32) * step for step in range(3)]
    refs = refs_of(writer, values)
    writer.CreateItem("t", 1.0, [refs], [False])
    writer.Flush()
    assert all(chunk.delta_encoded for chunk in fake.chunks_sent)
    assert_arrays_equal(fake.decoded(0)[0], np.stack(values))


@pytest.mark.parametrize("length", [1, 3])
@pytest.mark.parametrize("delta_encoded", [False, True])
@pytest.mark.parametrize(
    "values",
    [
        [np.float32(step) for step in range(3)],
        [np.arange(4, dtype=np.int64) * step for step in range(3)],
        [np.array([step % 2 == 0, True]) for step in range(3)],
        [np.arange(6, dtype=">i4").reshape(2, 3) + step for step in range(3)],
        [np.array([b"a" * step, b"z"], dtype=object) for step in range(3)],
    ],
    ids=["float-scalar", "int-vector", "bool", "big-endian", "strings"],
)
def test_chunks_are_the_codec_chunks_of_the_stacked_values(
    values: list[Any], length: int, delta_encoded: bool
) -> None:
    """Each chunk the engine builds (one step, or several) is what the codec writes for
    the column batched: plain numeric columns take a shorter path to the same bytes."""
    writer, fake = make_writer(constant(length, 3), delta_encoded=delta_encoded)
    refs = refs_of(writer, values)
    writer.CreateItem("t", 1.0, [refs], [False])
    writer.Flush()
    chunks = sorted(fake.chunks_sent, key=lambda chunk: chunk.sequence_range.start)
    assert len(chunks) == 3 // length
    for chunk in chunks:
        start, end = chunk.sequence_range.start, chunk.sequence_range.end
        batch = np.stack([np.asarray(value) for value in values[start : end + 1]])
        if batch.dtype.kind == "O":
            batch = batch.astype(object)
        expected = _chunk.encode_column_chunk(
            chunk.chunk_key,
            chunk.sequence_range.episode_id,
            start,
            end,
            batch,
            delta_encoded=delta_encoded,
        )
        assert chunk == schema_pb2.ChunkData.FromString(expected)


# ------------------------------------------------------------------------------ append errors


def test_dtype_and_shape_errors_name_the_column_index() -> None:
    writer, _ = make_writer()
    writer.Append([1.0, np.float32(2), np.zeros((1, 2))])
    with pytest.raises(
        ValueError,
        match=r"^Tensor of wrong dtype provided for column 1\. Got int64 but expected float\.$",
    ):
        writer.Append([1.0, 3, np.zeros((1, 2))])
    with pytest.raises(
        ValueError,
        match=r"^Tensor of incompatible shape provided for column 0\. Got \[2\] which is "
        r"incompatible with \[\]\.$",
    ):
        writer.Append([np.zeros(2)])
    with pytest.raises(
        ValueError, match=r"column 2\. Got \[2,1\] which is incompatible with \[1,2\]"
    ):
        writer.Append([None, None, np.zeros((2, 1))])
    assert writer.episode_steps == 1


def test_failed_append_changes_nothing() -> None:
    writer, _ = make_writer(constant(2, 2))
    writer.Append([1.0, 2])
    with pytest.raises(ValueError, match="column 1"):
        writer.Append([1.0, "wrong dtype", 3])
    assert writer.episode_steps == 1
    # Column 2 was not created by the failed call: its dtype is still free.
    refs = writer.Append([1.0, 2, "text"])
    assert refs[2] is not None and refs[2].dtype == np.dtype(object)
    assert writer.episode_steps == 2


def test_partial_steps_fill_one_step() -> None:
    writer, fake = make_writer(constant(1, 4))
    a, _ = writer.AppendPartial([1, None])
    assert writer.episode_steps == 0
    with pytest.raises(
        ValueError, match=r"^Value for column 0 has already been set in the active step\.$"
    ):
        writer.AppendPartial([2, None])
    _, b = writer.Append([None, 2.5])
    assert writer.episode_steps == 1
    assert a is not None and b is not None
    writer.CreateItem("t", 1.0, [[a], [b]], [True, True])
    writer.Flush()
    ranges = {(c.sequence_range.start, c.sequence_range.end) for c in fake.chunks_sent}
    assert ranges == {(0, 0)}
    (c,) = writer.Append([3, None])[:1]
    assert c is not None
    writer.CreateItem("t", 1.0, [[c]], [True])
    writer.Flush()
    assert fake.chunks_sent[-1].sequence_range.start == 1


def test_shorter_flat_lists_leave_other_columns_empty() -> None:
    writer, fake = make_writer(constant(2, 4))
    writer.Append([1, 2])
    (ref,) = writer.Append([3])
    refs = writer.Append([4, 5])
    assert len(refs) == 2
    second = refs[1]
    assert ref is not None and second is not None
    writer.CreateItem("t", 1.0, [[ref], [second]], [True, True])
    writer.Flush()
    assert_arrays_equal(fake.decoded(0)[1], np.array(5))


# ------------------------------------------------------------------------------ items


def test_create_item_validation_errors() -> None:
    writer, _ = make_writer()
    other, _ = make_writer()
    floats = refs_of(writer, [1.0, 2.0])
    (integer,) = refs_of(writer, [1], column=1)
    (vector,) = refs_of(writer, [np.zeros(2)], column=2)
    (foreign,) = refs_of(other, [1.0])
    cases: list[tuple[Any, str]] = [
        (([], []), r"^trajectory must not be empty\.$"),
        (([[]], [False]), r"^Error in column 0: Column must contain at least one CellRef\.$"),
        (([floats], [True]), r"^Error in column 0: Column must contain exactly one CellRef"),
        (([floats], [False, True]), r"^Got 1 columns but 2 squeeze flags\.$"),
        (([floats, [floats[0], integer]], [False, False]), r"^Error in column 1: .*dtypes"),
        (([[floats[0], vector]], [False]), r"^Error in column 0: .*incompatible shapes"),
        (([[foreign]], [False]), r"^Error in column 0: .*another writer"),
    ]
    for (columns, squeeze), message in cases:
        with pytest.raises(ValueError, match=message):
            writer.CreateItem("t", 1.0, columns, squeeze)
    with pytest.raises(TypeError, match="expected CellRef"):
        writer.CreateItem("t", 1.0, [["not a ref"]], [False])
    assert writer.num_pending_items() == 0


@pytest.mark.parametrize(
    ("priority", "message"),
    [(float("nan"), r"^`priority` must not be nan\.$"), (-0.5, "must not be negative")],
)
def test_bad_priorities_are_refused(priority: float, message: str) -> None:
    writer, _ = make_writer()
    (ref,) = refs_of(writer, [1.0])
    with pytest.raises(ValueError, match=message):
        writer.CreateItem("t", priority, [[ref]], [True])
    with pytest.raises(TypeError):
        writer.CreateItem("t", "high", [[ref]], [True])  # type: ignore[arg-type]
    writer.CreateItem("t", 0.0, [[ref]], [True])
    assert writer.num_pending_items() == 0


def test_items_are_sent_in_creation_order() -> None:
    writer, fake = make_writer()
    writer.ConfigureChunker(1, constant(5, 5))
    a, b = writer.Append([1, 2])
    assert a is not None and b is not None
    writer.CreateItem("first", 1.0, [[b]], [True])  # column 1 is still buffered
    writer.CreateItem("second", 1.0, [[a]], [True])  # ready, but must not overtake
    assert fake.requests == [] and writer.num_pending_items() == 2
    writer.Flush()
    (request,) = fake.requests
    assert [item.table for item in request.items] == ["first", "second"]


def test_flush_that_must_wait_sends_every_queued_item() -> None:
    writer, fake = make_writer(constant(5, 5))
    a, b = writer.Append([1, 2])
    assert a is not None and b is not None
    writer.CreateItem("t", 1.0, [[a]], [True])
    writer.CreateItem("t", 2.0, [[b]], [True])
    # At most two pending already: nothing to wait for, the chunks stay open.
    writer.Flush(block_until_num_items=2)
    assert fake.inserted == [] and writer.num_pending_items() == 2
    # Over the bound: the chunks of every queued item are finalised, all of them go.
    writer.Flush(block_until_num_items=1)
    assert [entry.item.priority for entry in fake.inserted] == [1.0, 2.0]
    assert writer.num_pending_items() == 0
    c, d = writer.Append([3, 4])
    assert c is not None and d is not None
    writer.CreateItem("t", 3.0, [[c]], [True])
    writer.Flush(block_until_num_items=1)  # one pending: nothing to do
    assert len(fake.inserted) == 2
    writer.Flush()
    assert [entry.item.priority for entry in fake.inserted] == [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="block_until_num_items must be >= 0"):
        writer.Flush(-1)


def test_expired_ref_pinned_by_a_waiting_item_keeps_its_chunk() -> None:
    writer, fake = make_writer(constant(1, 1))
    writer.ConfigureChunker(1, constant(5, 5))
    a, b = writer.Append([10, 20])
    assert a is not None and b is not None
    writer.CreateItem("x", 1.0, [[a]], [True])  # sends a's chunk
    writer.CreateItem("y", 1.0, [[a], [b]], [True, True])  # waits for b's chunk
    for step in range(3):
        writer.Append([step, None])
    assert a.expired
    writer.Flush()
    assert [entry.item.table for entry in fake.inserted] == ["x", "y"]
    assert_arrays_equal(fake.decoded(1)[0], np.array(10))
    assert_arrays_equal(fake.decoded(1)[1], np.array(20))


def test_keep_chunk_keys_follow_live_refs() -> None:
    writer, fake = make_writer(constant(1, 2))
    chunk_keys = []
    for step in range(5):
        (ref,) = writer.Append([float(step)])
        assert ref is not None
        writer.CreateItem("t", 1.0, [[ref]], [True])
        chunk_keys.append(fake.requests[-1].chunk_keys[0])
    for step, request in enumerate(fake.requests):
        assert request.keep_chunk_keys == sorted(chunk_keys[max(0, step - 1) : step + 1])
    assert not fake.violations


def test_keep_chunk_keys_include_chunks_of_unsent_items() -> None:
    # Column 0 keeps one ref; column 1 holds large values.
    writer, fake = make_writer(constant(1, 1))
    a0, _ = writer.Append([1.0, None])
    assert a0 is not None
    writer.CreateItem("w", 1.0, [[a0]], [True])  # sends a0's chunk
    a0_chunk = fake.requests[0].chunk_keys[0]
    fake.paused = True
    (_, b1) = writer.Append([None, np.random.default_rng(1).random(4000)])
    assert b1 is not None
    writer.CreateItem("x", 1.0, [[b1]], [True])
    (_, b2) = writer.Append([None, np.random.default_rng(2).random(4000)])
    assert b2 is not None
    writer.CreateItem("y", 1.0, [[a0], [b2]], [True, True])
    writer.Append([2.0, None])  # a0 expires: only item y still needs its chunk
    assert a0.expired
    fake.paused = False
    fake.max_bytes = 40_000  # one large chunk per request
    fake.pump()
    x_request, y_request = fake.requests[1:]
    assert x_request.items[0].table == "x" and y_request.items[0].table == "y"
    assert a0_chunk in x_request.keep_chunk_keys  # for y, sent in the next request
    assert a0_chunk not in y_request.keep_chunk_keys  # nothing needs it any more
    assert a0_chunk not in y_request.chunk_keys
    assert fake.decoded(2)[0].item() == 1.0 and not fake.violations


# ------------------------------------------------------------------------------ signatures


def signed_writer() -> tuple[InternalTrajectoryWriter, FakeTransport]:
    signature = flatten_signature(
        {"obs": TensorSpec((None,), np.float32), "act": TensorSpec((), np.int64)}
    )
    return make_writer(
        signatures={"signed": signature, "free": None, "plain": [TensorSpec((3,), np.float32)]}
    )


def test_unknown_table_is_refused_when_validating() -> None:
    writer, _ = signed_writer()
    (ref,) = refs_of(writer, [1.0])
    with pytest.raises(
        ValueError,
        match=r"^Unable to create item in table 'nope' since the table could not be found\.$",
    ):
        writer.CreateItem("nope", 1.0, [[ref]], [True])
    writer.CreateItem("free", 1.0, [[ref]], [True])  # no signature: anything goes
    unvalidated, _ = make_writer()
    (other,) = refs_of(unvalidated, [1.0])
    unvalidated.CreateItem("nope", 1.0, [[other]], [True])


def test_items_are_checked_against_the_signature() -> None:
    writer, _ = signed_writer()
    act = refs_of(writer, [1, 2, 3])
    obs = refs_of(writer, [np.float32(0.5)] * 3, column=1)
    # Flattened signature order: act, obs.
    writer.CreateItem("signed", 1.0, [[act[0]], obs], [True, False])
    writer.CreateItem("plain", 1.0, [obs], [False])
    prefix = r"^Unable to create item in table 'signed' since the provided trajectory is "
    with pytest.raises(ValueError, match=prefix + r".*has 1 columns but the table signature has 2"):
        writer.CreateItem("signed", 1.0, [[act[0]]], [True])
    with pytest.raises(
        ValueError,
        match=r"dtype of column 1 \('obs'\) is int64 but the signature expects float\.$",
    ):
        writer.CreateItem("signed", 1.0, [[act[0]], act], [True, False])
    with pytest.raises(
        ValueError,
        match=r"shape of column 0 \('act'\) is \[3\] which is incompatible with the "
        r"signature shape \[\]\.$",
    ):
        writer.CreateItem("signed", 1.0, [act, obs], [False, False])
    with pytest.raises(
        ValueError,
        match=r"shape of column 0 is \[2\] which is incompatible with the signature "
        r"shape \[3\]\.$",
    ):
        writer.CreateItem("plain", 1.0, [obs[:2]], [False])
    with pytest.raises(ValueError, match=r"shape of column 1 \('obs'\) is \[\]"):
        writer.CreateItem("signed", 1.0, [[act[0]], [obs[0]]], [True, True])
    assert writer.num_pending_items() == 0


# ------------------------------------------------------------------------------ flush / episodes


def test_unconfirmed_items_count_towards_the_flush_bound() -> None:
    writer, fake = make_writer(constant(5, 5), transport=FakeTransport(auto_confirm=False))
    a, b = writer.Append([1, 2])
    assert a is not None and b is not None
    writer.CreateItem("t", 1.0, [[a]], [True])
    with pytest.raises(errors.DeadlineExceededError):
        writer.Flush(0, timeout_ms=1)  # sends the first item; it stays unconfirmed
    assert [request.item_keys for request in fake.requests] and len(fake.requests) == 1
    writer.CreateItem("t", 2.0, [[b]], [True])
    # One queued (its chunk still open) + one unconfirmed > 1: the queued one goes too.
    with pytest.raises(errors.DeadlineExceededError):
        writer.Flush(block_until_num_items=1, timeout_ms=1)
    assert len(fake.requests) == 2
    assert [item.priority for request in fake.requests for item in request.items] == [1.0, 2.0]
    fake.confirm_all()
    writer.Flush(block_until_num_items=0, timeout_ms=1)
    assert writer.num_pending_items() == 0


def flush_in_thread(
    writer: InternalTrajectoryWriter, block_until: int, timeout_ms: int | None = -1
) -> tuple[threading.Thread, list[BaseException | None]]:
    """Starts ``writer.Flush(...)`` in a daemon thread; the list gets its outcome (None
    or the error) when it returns."""
    outcome: list[BaseException | None] = []

    def flush() -> None:
        try:
            writer.Flush(block_until, timeout_ms)
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001
            outcome.append(error)

    thread = threading.Thread(target=flush, daemon=True)
    thread.start()
    return thread, outcome


def create_one_step_item(writer: InternalTrajectoryWriter, priority: float) -> None:
    (ref,) = refs_of(writer, [priority])
    writer.CreateItem("t", priority, [[ref]], [True])


def priorities_sent(fake: FakeTransport) -> list[list[float]]:
    return [[item.priority for item in request.items] for request in fake.requests]


def test_new_items_wait_while_more_are_in_flight() -> None:
    writer, fake = make_writer(constant(1, 8), transport=FakeTransport(auto_confirm=False))
    writer.Flush(block_until_num_items=8)  # up to 8 items may stay on their way

    def create(priority: float) -> None:
        create_one_step_item(writer, priority)

    def sent() -> list[list[float]]:
        return priorities_sent(fake)

    create(1.0)  # nothing in flight: sent at once
    create(2.0)  # one queued, one in flight: sent
    assert sent() == [[1.0], [2.0]]
    create(3.0)  # one queued, two in flight: waits
    assert sent() == [[1.0], [2.0]] and writer.num_pending_items() == 3
    create(4.0)  # two queued, two in flight: both go, in one request
    assert sent() == [[1.0], [2.0], [3.0, 4.0]]
    create(5.0)
    fake.confirm(fake.requests[0].item_keys)  # three in flight, one queued: still waits
    assert len(fake.requests) == 3
    fake.confirm(fake.requests[1].item_keys + fake.requests[2].item_keys)
    # The confirmation emptied the window: the waiting item is taken.
    assert sent()[-1] == [5.0]
    fake.confirm_all()
    assert writer.num_pending_items() == 0
    assert [entry.item.priority for entry in fake.inserted] == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_flush_releases_held_items_as_confirmations_arrive() -> None:
    writer, fake = make_writer(constant(1, 8), transport=FakeTransport(auto_confirm=False))
    writer.Flush(block_until_num_items=2)
    fake.waiting.clear()
    for priority in (1.0, 2.0, 3.0):
        create_one_step_item(writer, priority)
    assert len(fake.requests) == 2  # the third item waits behind two in flight
    thread, outcome = flush_in_thread(writer, 2)
    assert fake.waiting.wait(10)
    assert len(fake.requests) == 2 and outcome == []
    fake.confirm_all()  # releases the third item, which is sent: the flush returns
    thread.join(10)
    assert len(fake.requests) == 3 and outcome == [None]
    fake.confirm_all()
    assert writer.num_pending_items() == 0


def test_a_writer_that_does_not_flush_holds_no_item_back() -> None:
    """As Reverb's writer: each item goes as soon as its chunks are final, whatever is
    in flight (a blocking writer's confirmations are taken only while it waits)."""
    writer, fake = make_writer(constant(1, 8), transport=FakeTransport(auto_confirm=False))
    for priority in (1.0, 2.0, 3.0, 4.0, 5.0):
        create_one_step_item(writer, priority)
    assert priorities_sent(fake) == [[1.0], [2.0], [3.0], [4.0], [5.0]]


def test_items_wait_only_while_the_last_flushs_bound_is_in_flight() -> None:
    writer, fake = make_writer(constant(1, 8), transport=FakeTransport(auto_confirm=False))
    writer.Flush(block_until_num_items=2)
    for priority in (1.0, 2.0, 3.0, 4.0):
        create_one_step_item(writer, priority)
    # The third waited behind two in flight (no more than the flush's 2) for the fourth.
    assert priorities_sent(fake) == [[1.0], [2.0], [3.0, 4.0]]
    create_one_step_item(writer, 5.0)  # four in flight: more than 2, it goes at once
    assert priorities_sent(fake)[-1] == [5.0]
    with pytest.raises(errors.DeadlineExceededError):
        writer.Flush(0, timeout_ms=1)  # everything: from now on no item waits
    fake.confirm_all()
    for priority in (6.0, 7.0, 8.0):
        create_one_step_item(writer, priority)
    assert priorities_sent(fake)[-3:] == [[6.0], [7.0], [8.0]]


def test_flush_timeout_raises_deadline_exceeded() -> None:
    writer, fake = make_writer(transport=FakeTransport(auto_confirm=False))
    (ref,) = refs_of(writer, [1.0])
    writer.CreateItem("t", 1.0, [[ref]], [True])
    with pytest.raises(errors.DeadlineExceededError) as raised:
        writer.Flush(0, timeout_ms=5)
    assert str(raised.value) == (
        "Flush call did not complete within provided timeout of 0:00:00.005000"
    )
    assert isinstance(raised.value, TimeoutError) and isinstance(raised.value, RuntimeError)
    assert fake.wait_calls == [(0, 0.005)]
    assert writer.num_pending_items() == 1  # still in flight
    fake.confirm_all()
    writer.Flush(0, timeout_ms=5)
    assert writer.num_pending_items() == 0


@pytest.mark.parametrize("timeout_ms", [None, -1, 0])
def test_flush_without_positive_timeout_waits_forever(timeout_ms: int | None) -> None:
    writer, fake = make_writer(transport=FakeTransport(auto_confirm=False))
    (ref,) = refs_of(writer, [1.0])
    writer.CreateItem("t", 1.0, [[ref]], [True])
    thread, outcome = flush_in_thread(writer, 0, timeout_ms)
    assert fake.waiting.wait(10)
    assert outcome == []
    fake.confirm_all()
    thread.join(10)
    assert outcome == [None]
    assert fake.wait_calls == [(0, None)]


def test_end_episode_timeout_resets_nothing() -> None:
    writer, fake = make_writer(constant(2, 4), transport=FakeTransport(auto_confirm=False))
    refs = refs_of(writer, [1.0, 2.0, 3.0])
    writer.CreateItem("t", 1.0, [refs[:2]], [False])
    with pytest.raises(errors.DeadlineExceededError) as raised:
        writer.EndEpisode(True, 0)
    assert str(raised.value) == (
        "End episode call did not complete within provided timeout of 0:00:00"
    )
    assert fake.wait_calls == [(0, 0.0)]
    assert writer.episode_steps == 3
    assert not any(ref.expired for ref in refs)
    episode = fake.chunks_sent[0].sequence_range.episode_id
    fake.confirm_all()
    writer.CreateItem("t", 1.0, [[refs[2]]], [True])
    writer.PrepareFlush()
    fake.confirm_all()
    assert fake.chunks_sent[-1].sequence_range.episode_id == episode
    assert fake.chunks_sent[-1].sequence_range.start == 2


def test_end_episode_clear_buffers_starts_a_new_episode() -> None:
    writer, fake = make_writer(constant(2, 4))
    refs = refs_of(writer, [1.0, 2.0, 3.0])
    writer.CreateItem("t", 1.0, [refs[:1]], [False])
    writer.EndEpisode(True, None)
    assert fake.wait_calls[-1] == (0, None)
    assert writer.episode_steps == 0
    assert all(ref.expired for ref in refs)
    with pytest.raises(ValueError, match="expired"):
        writer.CreateItem("t", 1.0, [[refs[2]]], [True])
    (new,) = refs_of(writer, [4.0])
    writer.CreateItem("t", 1.0, [[new]], [True])
    writer.Flush()
    first, last = fake.chunks_sent[0], fake.chunks_sent[-1]
    assert last.sequence_range.start == 0
    assert last.sequence_range.episode_id != first.sequence_range.episode_id
    assert_arrays_equal(fake.decoded(1)[0], np.array(4.0))


def test_end_episode_without_clearing_keeps_refs_usable() -> None:
    writer, fake = make_writer(constant(3, 6))
    old = refs_of(writer, [1.0, 2.0])
    writer.EndEpisode(False, None)
    assert writer.episode_steps == 0 and not any(ref.expired for ref in old)
    new = refs_of(writer, [3.0])
    writer.CreateItem("t", 1.0, [old + new], [False])
    writer.Flush()
    assert_arrays_equal(fake.decoded(0)[0], np.array([1.0, 2.0, 3.0]))
    episodes = {c.sequence_range.episode_id for c in fake.chunks_sent}
    assert len(episodes) == 2
    starts = sorted(c.sequence_range.start for c in fake.chunks_sent)
    assert starts == [0, 0]


def test_end_episode_closes_an_open_partial_step() -> None:
    writer, _ = make_writer()
    writer.AppendPartial([1])
    writer.EndEpisode(True, None)
    writer.AppendPartial([2])  # the same column again: a new step, so allowed
    assert writer.episode_steps == 0


def test_finish_end_episode_refuses_pending_items() -> None:
    writer, _ = make_writer(transport=FakeTransport(auto_confirm=False))
    (ref,) = refs_of(writer, [1.0])
    writer.CreateItem("t", 1.0, [[ref]], [True])
    writer.PrepareEndEpisode()
    with pytest.raises(RuntimeError, match="1 items are pending"):
        writer.FinishEndEpisode(True)


# ------------------------------------------------------------------------------ close / fail


def test_close_drops_items_and_every_later_call_raises() -> None:
    writer, fake = make_writer(constant(3, 3))
    (ref,) = refs_of(writer, [1.0])
    writer.CreateItem("t", 1.0, [[ref]], [True])
    writer.Close()
    writer.Close()  # idempotent
    assert fake.closed and writer.closed
    assert writer.num_pending_items() == 0 and writer.take_outgoing() is None
    calls = [
        lambda: writer.Append([1.0]),
        lambda: writer.AppendPartial([1.0]),
        lambda: writer.CreateItem("t", 1.0, [[ref]], [True]),
        lambda: writer.Flush(),
        lambda: writer.EndEpisode(True, None),
        lambda: writer.ConfigureChunker(0, constant(1, 1)),
        lambda: writer.wait_until_pending_at_most(0, None),
    ]
    for call in calls:
        with pytest.raises(errors.UsageError) as raised:
            call()
        assert str(raised.value) == CLOSED
        assert isinstance(raised.value, RuntimeError)
    assert fake.requests == []


def test_close_wakes_a_blocked_flush() -> None:
    writer, fake = make_writer(transport=FakeTransport(auto_confirm=False))
    (ref,) = refs_of(writer, [1.0])
    writer.CreateItem("t", 1.0, [[ref]], [True])
    thread, outcome = flush_in_thread(writer, 0)
    assert fake.waiting.wait(10)
    writer.Close()
    thread.join(10)
    assert len(outcome) == 1 and str(outcome[0]) == CLOSED


def test_stream_failure_is_raised_by_every_later_call() -> None:
    writer, fake = make_writer(transport=FakeTransport(auto_confirm=False))
    (ref,) = refs_of(writer, [1.0])
    writer.CreateItem("t", 1.0, [[ref]], [True])
    thread, outcome = flush_in_thread(writer, 0)
    assert fake.waiting.wait(10)
    fake.fail(errors.InvalidArgumentError("bad item"))
    thread.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], ValueError)
    fake.fail(errors.InternalError("second error is ignored"))
    assert isinstance(writer.error, errors.InvalidArgumentError)
    for _ in range(2):
        with pytest.raises(ValueError, match="^bad item$") as raised:
            writer.Append([1.0])
        assert raised.value is not writer.error
    with pytest.raises(ValueError, match="bad item"):
        writer.Flush()
    assert writer.take_outgoing() is None
    writer.Close()  # closing a failed writer works
    with pytest.raises(RuntimeError, match=CLOSED):
        writer.Append([1.0])


def test_runtime_stream_failure() -> None:
    writer, fake = make_writer()
    fake.fail(errors.FailedPreconditionError("stream broke"))
    with pytest.raises(RuntimeError, match="stream broke"):
        writer.CreateItem("t", 1.0, [], [])


# ------------------------------------------------------------------------------ transport side


def test_resend_all_after_reconnect() -> None:
    writer, fake = make_writer(constant(2, 4), transport=FakeTransport(auto_confirm=False))
    refs = refs_of(writer, [1.0, 2.0, 3.0, 4.0])
    writer.CreateItem("t", 1.0, [refs[:2]], [False])
    writer.CreateItem("t", 2.0, [refs[2:]], [False])
    assert len(fake.requests) == 2 and writer.num_pending_items() == 2
    fake.confirm([fake.unconfirmed[0]])
    fake.reconnect()
    resent = [r for r in fake.requests if r.stream == 1]
    assert len(resent) == 1
    assert [item.priority for item in resent[0].items] == [2.0]
    assert resent[0].chunk_keys == fake.requests[1].chunk_keys  # chunks sent again
    writer.confirm([12345])  # unknown keys are ignored
    assert writer.num_pending_items() == 1
    fake.confirm_all()
    assert writer.num_pending_items() == 0
    assert_arrays_equal(fake.decoded(2)[0], np.array([3.0, 4.0]))
    assert not fake.violations


def test_resend_keeps_creation_order_ahead_of_queued_items() -> None:
    writer, fake = make_writer(transport=FakeTransport(auto_confirm=False))
    for priority in (1.0, 2.0):
        (ref,) = refs_of(writer, [priority])
        writer.CreateItem("t", priority, [[ref]], [True])
    fake.paused = True
    (ref,) = refs_of(writer, [3.0])
    writer.CreateItem("t", 3.0, [[ref]], [True])
    fake.paused = False
    fake.reconnect()
    assert [item.priority for item in fake.requests[-1].items] == [1.0, 2.0, 3.0]
    assert len(fake.requests[-1].chunks) == 3


def test_take_outgoing_respects_max_bytes() -> None:
    writer, fake = make_writer(transport=FakeTransport(max_bytes=20_000))
    fake.paused = True
    for value in range(3):
        (ref,) = refs_of(writer, [np.random.default_rng(value).random(2000)])
        writer.CreateItem("t", 1.0, [[ref]], [True])
    fake.paused = False
    fake.pump()
    assert [len(r.items) for r in fake.requests] == [1, 1, 1]  # each chunk is ~16 KB
    fake.max_bytes = 100_000
    fake.paused = True
    for value in range(3):
        (ref,) = refs_of(writer, [np.zeros(2000)])
        writer.CreateItem("t", 1.0, [[ref]], [True])
    fake.paused = False
    fake.pump()
    assert [len(r.items) for r in fake.requests[3:]] == [3]


def test_pending_listeners_are_called() -> None:
    writer, fake = make_writer(transport=FakeTransport(auto_confirm=False))
    calls: list[int] = []

    def listener() -> None:
        calls.append(writer.num_pending_items())

    writer.add_pending_listener(listener)
    (ref,) = refs_of(writer, [1.0])
    writer.CreateItem("t", 1.0, [[ref]], [True])
    fake.confirm_all()
    assert calls == [0]
    writer.fail(errors.InternalError("x"))
    assert calls == [0, 0]
    writer.remove_pending_listener(listener)
    writer.remove_pending_listener(listener)
    writer.Close()
    assert calls == [0, 0]


def test_wait_until_pending_at_most() -> None:
    writer, fake = make_writer(transport=FakeTransport(auto_confirm=False))
    assert writer.wait_until_pending_at_most(0, 0)
    (ref,) = refs_of(writer, [1.0])
    writer.CreateItem("t", 1.0, [[ref]], [True])
    assert not writer.wait_until_pending_at_most(0, 0)
    assert not writer.wait_until_pending_at_most(0, 0.001)
    assert writer.wait_until_pending_at_most(1, None)


def test_concurrent_transport_thread() -> None:
    """A transport that sends and confirms on its own thread while the user writes."""

    class ThreadedTransport:
        def __init__(self) -> None:
            self.writer: InternalTrajectoryWriter | None = None
            self.condition = threading.Condition()
            self.notified = False
            self.stop = False
            self.received: list[Any] = []
            self.thread = threading.Thread(target=self.run)

        def notify(self) -> None:
            with self.condition:
                self.notified = True
                self.condition.notify()

        def wait_confirmed(self, max_pending: int, timeout: float | None) -> bool:
            assert self.writer is not None
            return self.writer.wait_until_pending_at_most(max_pending, timeout)

        def close(self) -> None:
            with self.condition:
                self.stop = True
                self.condition.notify()

        def run(self) -> None:
            assert self.writer is not None
            while True:
                with self.condition:
                    while not self.notified and not self.stop:
                        self.condition.wait()
                    if self.stop:
                        return
                    self.notified = False
                while (batch := self.writer.take_outgoing(4096)) is not None:
                    self.received.append(batch)
                    self.writer.confirm(batch.item_keys)

    transport = ThreadedTransport()
    writer = InternalTrajectoryWriter(transport, constant(3, 6))
    transport.writer = writer
    transport.thread.start()
    history: list[CellRef] = []
    for step in range(300):
        (ref,) = writer.Append([np.full(4, step, dtype=np.int32)])
        assert ref is not None
        history.append(ref)
        if step >= 2:
            writer.CreateItem("t", float(step), [history[-3:]], [False])
    writer.Flush()
    writer.Close()
    transport.thread.join(10)
    items = [item for batch in transport.received for item in batch.items]
    assert [item.priority for item in items] == [float(step) for step in range(2, 300)]
    assert writer.num_pending_items() == 0


# ------------------------------------------------------------------------------ options


def test_chunker_options_compare_by_value() -> None:
    assert constant(2, 3) == constant(2, 3) != constant(2, 4)
    assert AutoTunedChunkerOptions(5) == AutoTunedChunkerOptions(5, throughput_weight=2.0)
    assert AutoTunedChunkerOptions(5) != AutoTunedChunkerOptions(6)
    assert AutoTunedChunkerOptions(5) != constant(5, 5)
    assert hash(AutoTunedChunkerOptions(5)) == hash(AutoTunedChunkerOptions(5, 3.0))
    assert "num_keep_alive_refs=5" in repr(AutoTunedChunkerOptions(5))


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (constant(0, 1), ValueError, "max_chunk_length must be > 0"),
        (
            constant(3, 2),
            ValueError,
            r"num_keep_alive_refs \(2\) must be >= max_chunk_length \(3\)",
        ),
        (AutoTunedChunkerOptions(0), ValueError, "num_keep_alive_refs must be > 0"),
        (AutoTunedChunkerOptions(2, -1.0), ValueError, "throughput_weight"),
        (constant(2**31, 2**31), ValueError, "max_chunk_length must be <= 2147483647"),
        (constant(1, 2**63), ValueError, "num_keep_alive_refs must be <= 2147483647"),
        (AutoTunedChunkerOptions(2**63), ValueError, "num_keep_alive_refs must be <= 2147483647"),
        ("constant", TypeError, "chunker_options must be"),
    ],
)
def test_invalid_chunker_options(options: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        InternalTrajectoryWriter(FakeTransport(), options)
    writer, _ = make_writer()
    with pytest.raises(error, match=message):
        writer.ConfigureChunker(0, options)


def test_configure_chunker() -> None:
    writer, fake = make_writer(constant(2, 2))
    assert writer.max_num_keep_alive_refs == 2
    writer.ConfigureChunker(1, constant(3, 7))  # a column that does not exist yet
    assert writer.max_num_keep_alive_refs == 7
    with pytest.raises(ValueError, match="column_index must be >= 0"):
        writer.ConfigureChunker(-1, constant(1, 1))
    (first,) = refs_of(writer, [1.0])
    with pytest.raises(RuntimeError, match=r"^Flush must be called before ApplyConfig\.$"):
        writer.ConfigureChunker(0, constant(1, 1))
    refs = refs_of(writer, [1.0, 2.0, 3.0], column=1)
    writer.CreateItem("t", 1.0, [[first], refs], [True, False])
    writer.Flush()
    lengths = sorted(c.sequence_range.end - c.sequence_range.start + 1 for c in fake.chunks_sent)
    assert lengths == [1, 3]  # column 0 flushed after 1 step, column 1 chunked by 3
    keep = refs_of(writer, [4.0, 5.0, 6.0], column=1)
    writer.ConfigureChunker(1, constant(1, 1))  # fewer live refs: the older ones expire
    assert [ref.expired for ref in keep] == [True, True, False]
    assert all(ref.expired for ref in refs)


def test_configure_defaults_only_before_the_first_append() -> None:
    writer, fake = make_writer(constant(1, 1))
    writer.configure_defaults(constant(2, 2), delta_encoded=True)
    assert writer.delta_encoded and writer.max_num_keep_alive_refs == 2
    refs_of(writer, [1])
    with pytest.raises(RuntimeError, match="before the first Append"):
        writer.configure_defaults(constant(1, 1))


def test_auto_tuned_chunks_stay_within_bounds() -> None:
    writer, fake = make_writer(AutoTunedChunkerOptions(num_keep_alive_refs=8))
    history: list[CellRef] = []
    for step in range(200):
        history.extend(refs_of(writer, [np.full(16, step, dtype=np.int64)]))
        if step >= 3:
            writer.CreateItem("t", 1.0, [history[-4:]], [False])
    writer.Flush()
    lengths = [c.sequence_range.end - c.sequence_range.start + 1 for c in fake.chunks_sent]
    assert all(1 <= length <= 8 for length in lengths)
    assert max(lengths) > 1  # the tuner moved away from its start
    for index, step in enumerate(range(3, 200)):
        assert_arrays_equal(
            fake.decoded(index)[0], np.stack([np.full(16, s) for s in range(step - 3, step + 1)])
        )


def chunk_lengths(fake: FakeTransport) -> list[int]:
    return [c.sequence_range.end - c.sequence_range.start + 1 for c in fake.chunks_sent]


def test_auto_tuned_first_items_are_sent_as_they_are_created() -> None:
    """As Reverb's auto-tuned chunker, which starts at length 1 and moves only after 10
    items: TF-Agents' observer (keep 3, an item of the last 2 steps per step, no flush)
    gets each item into the table one step after the other."""
    writer, fake = make_writer(AutoTunedChunkerOptions(num_keep_alive_refs=3))
    history: list[CellRef] = []
    for step in range(11):
        history.extend(refs_of(writer, [float(step)]))
        if step >= 1:
            writer.CreateItem("t", 1.0, [history[-2:]], [False])
        assert len(fake.inserted) == step, step
    assert chunk_lengths(fake) == [1] * 11


def test_auto_tuned_length_moves_after_ten_items_and_five_chunks() -> None:
    writer, fake = make_writer(AutoTunedChunkerOptions(num_keep_alive_refs=5))
    for step in range(16):
        writer.CreateItem("t", 1.0, [refs_of(writer, [float(step)])], [False])
    writer.Flush()
    # The 10th item (and 10th chunk) is the first score: +2.
    assert chunk_lengths(fake) == [1] * 10 + [3, 3]


def test_auto_tuned_counts_an_item_once_per_column() -> None:
    """An item whose two columns take steps of one appended column counts once for that
    column's tuner (Reverb groups an item's references by chunker)."""
    writer, fake = make_writer(AutoTunedChunkerOptions(num_keep_alive_refs=5))
    history: list[CellRef] = []
    for step in range(13):
        history.extend(refs_of(writer, [float(step)]))
        if step >= 1:
            writer.CreateItem("t", 1.0, [history[-2:-1], history[-1:]], [True, True])
    writer.Flush()
    assert chunk_lengths(fake) == [1] * 11 + [2]  # the 2 steps after the 10th item


def test_auto_tuned_counts_a_column_of_steps_of_two_appended_columns_for_both() -> None:
    writer, fake = make_writer(AutoTunedChunkerOptions(num_keep_alive_refs=5))
    for step in range(12):
        x, y = writer.Append([float(step), -float(step)])
        assert x is not None and y is not None
        writer.CreateItem("t", 1.0, [[x, y]], [False])
    writer.Flush()
    # Both tuners moved after the 10th item: the last 2 steps are one chunk per column.
    assert sorted(chunk_lengths(fake)) == [1] * 20 + [2, 2]
    assert_arrays_equal(fake.decoded(11)[0], np.array([11.0, -11.0]))


def test_many_waiting_items_log_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    writer, _ = make_writer(constant(100, 100))
    with caplog.at_level(logging.WARNING, logger="reverb_py._internal_writer"):
        for _ in range(60):
            refs = refs_of(writer, [1.0])
            writer.CreateItem("t", 1.0, [refs], [False])
    assert [r.message for r in caplog.records if "forget to call Flush" in r.message] != []
    assert len([r for r in caplog.records if "forget" in r.message]) == 1


def test_format_shape() -> None:
    assert format_shape(()) == "[]"
    assert format_shape((1, 2)) == "[1,2]"
    assert format_shape((None, 3)) == "[?,3]"
    assert format_shape(None) == "<unknown>"
