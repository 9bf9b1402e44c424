"""The legacy Writer (Client.writer) over the engine and a fake stream."""

from __future__ import annotations

import gc
import logging
import threading
from typing import Any

import numpy as np
import pytest

from reverb_py import errors
from reverb_py._codec.signature import flatten_signature
from reverb_py._writer.engine import ConstantChunkerOptions
from reverb_py._writer.legacy_writer import Writer
from reverb_py.tensor_spec import TensorSpec
from tests.fake_transport import FakeTransport, assert_arrays_equal, make_writer


def new_writer(
    max_sequence_length: int = 3,
    *,
    transport: FakeTransport | None = None,
    signatures: Any = None,
    **kwargs: Any,
) -> tuple[Writer, FakeTransport]:
    internal, fake = make_writer(
        ConstantChunkerOptions(1, 1), transport=transport, signatures=signatures
    )
    return Writer(internal, max_sequence_length, **kwargs), fake


def chunk_lengths(fake: FakeTransport) -> list[int]:
    return [c.sequence_range.end - c.sequence_range.start + 1 for c in fake.chunks_sent]


# ------------------------------------------------------------------------------ construction


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"max_sequence_length": 0}, r"max_sequence_length \(0\) must be a positive integer"),
        ({"max_sequence_length": 3, "chunk_length": 4}, r"chunk_length \(4\) must be"),
        ({"max_sequence_length": 3, "chunk_length": 0}, r"chunk_length \(0\) must be"),
        ({"max_sequence_length": 3, "max_in_flight_items": 0}, r"max_in_flight_items \(0\)"),
    ],
)
def test_constructor_validation(args: dict[str, Any], message: str) -> None:
    internal, _ = make_writer()
    with pytest.raises(ValueError, match=message):
        Writer(internal, **args)


def test_constructor_defaults() -> None:
    writer, _ = new_writer(30)
    assert writer.chunk_length == 10 and writer.max_in_flight_items == 25
    assert writer.max_sequence_length == 30 and not writer.delta_encoded
    writer, _ = new_writer(4, max_in_flight_items=None)
    assert writer.chunk_length == 4 and writer.max_in_flight_items == 1_000_000
    assert repr(writer).endswith(", closed: False")
    assert "max_sequence_length=4" in repr(writer)


def test_the_engine_must_be_new() -> None:
    internal, _ = make_writer()
    internal.Append([1])
    with pytest.raises(RuntimeError, match="before the first Append"):
        Writer(internal, 2)


# ------------------------------------------------------------------------------ data


def test_items_hold_the_last_steps() -> None:
    writer, fake = new_writer(3, chunk_length=2)
    steps = [{"obs": np.arange(2, dtype=np.float32) + i, "id": i} for i in range(5)]
    writer.append(steps[0])
    writer.create_item("t", 1, 1.0)
    assert fake.requests == []  # step 0 is not in a finished chunk yet
    writer.append(steps[1])
    assert len(fake.inserted) == 1
    writer.create_item("t", 2, 2.0)
    for step in steps[2:]:
        writer.append(step)
    writer.create_item("t", 3, 3.0)
    writer.flush()
    assert not fake.violations
    expected = [steps[0:1], steps[0:2], steps[2:5]]
    for index, window in enumerate(expected):
        item_id, obs = fake.decoded(index)  # flattening order: id, obs
        assert_arrays_equal(item_id, np.array([s["id"] for s in window], dtype=np.int64))
        assert_arrays_equal(obs, np.stack([s["obs"] for s in window]))
        assert not any(c.squeeze for c in fake.inserted[index].item.flat_trajectory.columns)
    assert set(chunk_lengths(fake)) <= {1, 2}


def test_chunks_have_chunk_length_steps() -> None:
    writer, fake = new_writer(6, chunk_length=3)
    for step in range(6):
        writer.append(step)
    writer.create_item("t", 6, 1.0)
    writer.flush()
    assert chunk_lengths(fake) == [3, 3]
    assert fake.decoded(0)[0].tolist() == list(range(6))


def test_one_chunk_serves_items_of_several_tables() -> None:
    writer, fake = new_writer(1)
    writer.append({"a": 1.5, "b": "text"})
    writer.create_item("x", 1, 1.0)
    writer.create_item("y", 1, 2.0)
    writer.close()
    assert [entry.item.table for entry in fake.inserted] == ["x", "y"]
    assert len(fake.chunks_sent) == 2  # one per field, shared by both items
    assert fake.decoded(1)[0].tolist() == [1.5] and fake.decoded(1)[1].tolist() == [b"text"]


def test_delta_encoded_writer() -> None:
    writer, fake = new_writer(4, chunk_length=4, delta_encoded=True)
    assert writer.delta_encoded
    values = [np.array([3, 1, 4], dtype=np.int64) * step for step in range(4)]
    for value in values:
        writer.append(value)
    writer.create_item("t", 4, 1.0)
    writer.flush()
    (chunk,) = fake.chunks_sent
    assert chunk.delta_encoded
    assert_arrays_equal(fake.decoded(0)[0], np.stack(values))


def test_number_of_tensors_must_stay_constant() -> None:
    writer, _ = new_writer()
    writer.append({"a": 1, "b": 2})
    with pytest.raises(ValueError) as raised:
        writer.append({"a": 1})
    assert str(raised.value) == (
        "Number of tensors per timestep was inconsistent. Previously it was 2, but is now 1."
    )
    with pytest.raises(TypeError, match="None"):
        writer.append({"a": 1, "b": None})
    with pytest.raises(ValueError, match="wrong dtype provided for column 1"):
        writer.append({"a": 1, "b": 2.0})


def test_append_sequence_is_like_many_appends() -> None:
    writer, fake = new_writer(4, chunk_length=2)
    writer.append_sequence({"obs": np.arange(6).reshape(3, 2), "text": np.array(["a", "b", "c"])})
    writer.append({"obs": np.array([6, 7]), "text": "d"})
    writer.create_item("t", 4, 1.0)
    writer.flush()
    obs, text = fake.decoded(0)
    assert_arrays_equal(obs, np.arange(8).reshape(4, 2))
    assert text.tolist() == [b"a", b"b", b"c", b"d"]


@pytest.mark.parametrize(
    ("sequence", "message"),
    [
        ({"a": np.zeros(2), "b": 1}, "leaf 1 is a scalar"),
        ({"a": np.zeros(2), "b": np.zeros(3)}, r"same leading \(time\) dimension, got \[2, 3\]"),
        ({"a": np.zeros((0, 2))}, "at least 1"),
    ],
)
def test_append_sequence_errors(sequence: Any, message: str) -> None:
    writer, _ = new_writer()
    with pytest.raises(ValueError, match=message):
        writer.append_sequence(sequence)


# ------------------------------------------------------------------------------ create_item errors


def test_create_item_argument_errors() -> None:
    writer, _ = new_writer(3)
    writer.append(1.0)
    writer.append(2.0)
    cases = [
        (0, 1.0, r"num_timesteps \(0\) must be a positive integer"),
        (4, 1.0, r"num_timesteps \(4\) must be <= max_sequence_length \(3\)"),
        (3, 1.0, r"num_timesteps \(3\) must be <= the number of steps appended by this writer"),
        (1, float("nan"), "must not be nan"),
        (1, -1.0, "must not be negative"),
    ]
    for num_timesteps, priority, message in cases:
        with pytest.raises(ValueError, match=message):
            writer.create_item("t", num_timesteps, priority)


def signed_writer(**kwargs: Any) -> tuple[Writer, FakeTransport]:
    signatures = {
        "steps": flatten_signature(
            {"obs": TensorSpec((2,), np.float32), "id": TensorSpec((), np.int64)}
        ),
        "sequences": flatten_signature(
            {"obs": TensorSpec((None, 2), np.float32), "id": TensorSpec((3,), np.int64)}
        ),
        "free": None,
    }
    return new_writer(3, signatures=signatures, **kwargs)


def test_signature_checks() -> None:
    writer, fake = signed_writer()
    for step in range(3):
        writer.append({"obs": np.zeros(2, dtype=np.float32), "id": step})
    writer.create_item("steps", 2, 1.0)  # per-step shapes
    writer.create_item("sequences", 3, 1.0)  # [T] + step shapes
    writer.create_item("free", 1, 1.0)
    with pytest.raises(ValueError) as raised:
        writer.create_item("missing", 1, 1.0)
    assert str(raised.value) == (
        "Unable to find signatures for table 'missing' in signature cache.  Available "
        "tables: ['free', 'sequences', 'steps']."
    )
    with pytest.raises(ValueError) as raised:
        writer.create_item("sequences", 2, 1.0)
    assert str(raised.value) == (
        "Unable to CreateItem in table 'sequences' because Append was called with a tensor "
        "signature inconsistent with the table signature. At timestep offset 0, flattened "
        "index 0, saw a tensor of dtype int64, shape [], but expected tensor 'id' of dtype "
        "int64 and shape compatible with [3].  (Flattened) table signature: 0: Tensor<name: "
        "'id', dtype: int64, shape: [3]>, 1: Tensor<name: 'obs', dtype: float, shape: [?,2]>, "
        "data signature: 0: Tensor<name: '', dtype: int64, shape: []>, 1: Tensor<name: '', "
        "dtype: float, shape: [2]>."
    )
    writer.flush()
    assert len(fake.inserted) == 3


def test_signature_count_and_dtype_mismatches() -> None:
    writer, _ = signed_writer()
    writer.append({"obs": np.zeros(2, dtype=np.float32), "id": np.int32(1)})
    with pytest.raises(
        ValueError,
        match=r"^Unable to CreateItem in table 'steps' because Append was called with a "
        r"tensor signature inconsistent with the table signature\. At timestep offset 0, "
        r"flattened index 0, saw a tensor of dtype int32, shape \[\], but expected tensor "
        r"'id' of dtype int64 and shape compatible with \[\]\.",
    ):
        writer.create_item("steps", 1, 1.0)
    other, _ = signed_writer()
    other.append({"obs": np.zeros(2, dtype=np.float32)})
    with pytest.raises(ValueError) as raised:
        other.create_item("steps", 1, 1.0)
    assert str(raised.value) == (
        "Unable to CreateItem in table 'steps' because Append was called with a tensor "
        "signature inconsistent with table signature.  Append for timestep offset 0 was "
        "called with 1 tensors, but table requires 2 tensors per entry.  Table signature: "
        "0: Tensor<name: 'id', dtype: int64, shape: []>, 1: Tensor<name: 'obs', dtype: "
        "float, shape: [2]>, data signature: 0: Tensor<name: '', dtype: float, shape: [2]>."
    )


# ------------------------------------------------------------------------------ flow control


def test_create_item_blocks_beyond_max_in_flight_items() -> None:
    writer, fake = new_writer(1, transport=FakeTransport(auto_confirm=False), max_in_flight_items=2)
    created: list[int] = []

    def produce() -> None:
        for step in range(3):
            writer.append(float(step))
            writer.create_item("t", 1, 1.0)
            created.append(step)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    assert fake.waiting.wait(10)
    assert fake.wait_calls == [(2, None)]
    # As Reverb's Writer: the third is sent, then the writer waits for a confirmation.
    assert len(fake.inserted) == 3
    assert created == [0, 1]  # blocked inside the third create_item
    fake.confirm(fake.unconfirmed[:1])
    thread.join(10)
    assert created == [0, 1, 2]
    fake.confirm_all()
    writer.close()


def test_waiting_for_max_in_flight_items_holds_no_later_item_back() -> None:
    writer, fake = new_writer(1, transport=FakeTransport(auto_confirm=False), max_in_flight_items=2)

    def step(value: float) -> None:
        writer.append(value)
        writer.create_item("t", 1, 1.0)

    step(1.0)
    step(2.0)
    thread = threading.Thread(target=step, args=(3.0,), daemon=True)
    thread.start()
    assert fake.waiting.wait(10)  # three pending: the writer waits for one confirmation
    fake.confirm(fake.unconfirmed[:1])
    thread.join(10)
    assert not thread.is_alive()
    fake.waiting.clear()
    thread = threading.Thread(target=step, args=(4.0,), daemon=True)
    thread.start()
    assert fake.waiting.wait(10)
    assert len(fake.inserted) == 4  # sent before the writer waited again
    fake.confirm_all()
    thread.join(10)
    assert not thread.is_alive()
    writer.close()


def test_flush_waits_for_every_confirmation() -> None:
    writer, fake = new_writer(2, chunk_length=2, transport=FakeTransport(auto_confirm=False))
    writer.append(1)
    writer.create_item("t", 1, 1.0)
    done = threading.Event()
    thread = threading.Thread(target=lambda: (writer.flush(), done.set()))
    thread.start()
    assert fake.waiting.wait(10)
    assert len(fake.inserted) == 1 and not done.is_set()  # the partial chunk was finalised
    fake.confirm_all()
    thread.join(10)
    assert done.is_set()


# ------------------------------------------------------------------------------ lifecycle


def test_close_flushes_and_closes() -> None:
    writer, fake = new_writer(2, chunk_length=2)
    writer.append(1)
    writer.create_item("t", 1, 1.0)
    writer.close(retry_on_unavailable=False)
    assert len(fake.inserted) == 1 and fake.closed and writer.closed
    assert repr(writer).endswith(", closed: True")
    with pytest.raises(ValueError, match="already closed"):
        writer.close()
    for call in (lambda: writer.append(1), writer.flush, lambda: writer.create_item("t", 1, 1)):
        with pytest.raises(RuntimeError, match="closed"):
            call()
    with pytest.raises(ValueError, match="^Cannot reuse already closed Writer$"):
        with writer:
            pass


def test_close_after_a_stream_failure_still_closes() -> None:
    writer, fake = new_writer(1)
    fake.fail(errors.InternalError("boom"))
    with pytest.raises(RuntimeError, match="boom"):
        writer.close()
    assert writer.closed and fake.closed


def test_context_manager_flushes_and_closes() -> None:
    writer, fake = new_writer(2, chunk_length=2)
    with writer as entered:
        assert entered is writer
        writer.append(1)
        writer.create_item("t", 1, 1.0)
    assert len(fake.inserted) == 1 and writer.closed and fake.closed


def test_context_manager_closes_when_the_body_raises(caplog: pytest.LogCaptureFixture) -> None:
    writer, fake = new_writer(1)
    with pytest.raises(KeyError):
        with writer:
            writer.append(1)
            writer.create_item("t", 1, 1.0)
            raise KeyError("body")
    assert writer.closed and len(fake.inserted) == 1
    other, other_fake = new_writer(1)
    with caplog.at_level(logging.ERROR):
        with pytest.raises(KeyError):
            with other:
                other_fake.fail(errors.InternalError("stream"))
                raise KeyError("body")
    assert other.closed and "Error while closing" in caplog.text


def test_del_without_close_warns_and_closes(caplog: pytest.LogCaptureFixture) -> None:
    writer, fake = new_writer(1)
    writer.append(1)
    with caplog.at_level(logging.WARNING, logger="reverb_py._legacy_writer"):
        del writer
        gc.collect()
    assert fake.closed
    assert "deleted without calling .close" in caplog.text
