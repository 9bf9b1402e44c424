"""TrajectoryWriter (Reverb's Python layer) over the engine and a fake stream."""

from __future__ import annotations

import asyncio
import collections
import gc
import threading
from typing import Any
from unittest import mock

import numpy as np
import pytest

from reverb_py import errors
from reverb_py._writer.engine import (
    AutoTunedChunkerOptions,
    ConstantChunkerOptions,
    InternalTrajectoryWriter,
)
from reverb_py.trajectory_writer import (
    AsyncTrajectoryWriter,
    TrajectoryColumn,
    TrajectoryWriter,
    _ColumnHistory,
)
from tests.fake_transport import (
    FakeAsyncTransport,
    FakeTransport,
    assert_arrays_equal,
    make_writer,
)
from tests.helpers import until

CLOSED = "TrajectoryWriter::Close has been called."
Point = collections.namedtuple("Point", ["y", "x"])


def new_writer(
    options: Any = None, *, transport: FakeTransport | None = None, **kwargs: Any
) -> tuple[TrajectoryWriter, InternalTrajectoryWriter, FakeTransport]:
    internal, fake = make_writer(
        options or AutoTunedChunkerOptions(num_keep_alive_refs=10), transport=transport, **kwargs
    )
    return TrajectoryWriter(internal), internal, fake


def mock_internal(max_refs: int = 10) -> mock.MagicMock:
    internal = mock.MagicMock()
    internal.max_num_keep_alive_refs = max_refs
    internal.episode_steps = 0
    internal.Append.side_effect = lambda flat: [
        None if value is None else mock.Mock(expired=False) for value in flat
    ]
    internal.AppendPartial.side_effect = internal.Append.side_effect
    return internal


# ------------------------------------------------------------------------------ structure


def test_history_needs_an_append_first() -> None:
    writer, _, _ = new_writer()
    with pytest.raises(RuntimeError, match="before `append`"):
        writer.history  # noqa: B018


def test_history_mirrors_the_appended_structure() -> None:
    writer, _, _ = new_writer()
    writer.append({"obs": {"pos": 1.0, "vel": 2.0}, "act": [1, 2], "nt": Point(y=1, x=2)})
    history = writer.history
    assert set(history) == {"obs", "act", "nt"}
    assert isinstance(history["obs"]["pos"], _ColumnHistory)
    assert history["obs"]["pos"]._path == ("obs", "pos")
    assert history["act"][1]._path == ("act", 1)
    assert isinstance(history["nt"], Point) and history["nt"].x._path == ("nt", "x")
    assert len(history["act"][0]) == 1


def test_history_of_a_flat_dict_follows_the_structure() -> None:
    writer, _, _ = new_writer()
    writer.append({"a": 1.0, "b": 2.0})
    first = writer.history
    assert set(first) == {"a", "b"} and first["a"]._path == ("a",)
    first["a"] = None  # the caller's own dict: the next one is unaffected
    assert isinstance(writer.history["a"], _ColumnHistory)
    writer.append({"a": 3.0, "c": 4.0})  # a new leaf: still a flat dict
    assert set(writer.history) == {"a", "b", "c"}
    writer.append({"a": 5.0, "d": {"e": 6.0}})  # a nested leaf: no longer flat
    history = writer.history
    assert set(history) == {"a", "b", "c", "d"}
    assert history["d"]["e"]._path == ("d", "e")
    assert len(history["a"]) == 3


def test_a_bare_leaf_has_a_history_too() -> None:
    writer, _, fake = new_writer()
    writer.append(np.arange(3))
    writer.append(np.arange(3) + 1)
    assert isinstance(writer.history, _ColumnHistory)
    writer.create_item("t", 1.0, writer.history[:])
    writer.flush()
    assert_arrays_equal(fake.decoded(0)[0], np.array([[0, 1, 2], [1, 2, 3]]))


def test_columns_are_numbered_in_order_of_first_appearance() -> None:
    internal = mock_internal()
    writer = TrajectoryWriter(internal)
    writer.append({"b": 1})
    writer.append({"a": 2, "b": 3})
    writer.append({"c": 4})
    assert [c.args[0] for c in internal.Append.call_args_list] == [[1], [3, 2], [None, None, 4]]
    assert writer._column_paths == [("b",), ("a",), ("c",)]
    writer.create_item("t", 1.0, {"x": writer.history["a"][-2], "y": writer.history["b"][-2]})
    (call,) = internal.CreateItem.call_args_list
    history = writer.history
    assert call.args[2] == [list(history["a"][-2]), list(history["b"][-2])]
    assert call.args[2][0] != call.args[2][1]


def test_late_columns_are_padded_with_none() -> None:
    writer, _, fake = new_writer()
    for step in range(3):
        writer.append({"a": step})
    writer.append({"a": 3, "b": "late"})
    history = writer.history
    assert len(history["a"]) == len(history["b"]) == 4
    with pytest.raises(ValueError, match="TrajectoryColumns cannot contain any None"):
        history["b"][0]
    with pytest.raises(ValueError, match="None"):
        history["b"][-2:]
    writer.create_item("t", 1.0, {"a": history["a"][-2:], "b": history["b"][-1]})
    writer.flush()
    assert fake.decoded(0)[0].tolist() == [2, 3]
    assert fake.decoded(0)[1].item() == b"late"


def test_structures_merge_lists_by_position() -> None:
    writer, _, _ = new_writer()
    writer.append([1])
    writer.append([1, 2.0, "x"])
    writer.append([3])
    assert len(writer.history) == 3
    assert [len(column) for column in writer.history] == [3, 3, 3]
    with pytest.raises(ValueError, match="incompatible"):
        writer.append({"a": 1})


def test_namedtuples_merge_by_field() -> None:
    writer, _, _ = new_writer()
    writer.append(Point(y={"a": 1}, x=None))
    writer.append(Point(y={"b": 2}, x=3))
    history = writer.history
    assert isinstance(history, Point)
    assert set(history.y) == {"a", "b"}
    assert len(history.x) == 2


def test_none_leaves_create_columns_without_values() -> None:
    writer, internal, _ = new_writer()
    writer.append({"a": 1, "b": None})
    writer.append({"a": 2, "b": 5.0})
    assert len(writer.history["b"]) == 2
    writer.create_item("t", 1.0, writer.history["b"][-1])
    writer.flush()


# ------------------------------------------------------------------------------ append


def test_append_errors_name_column_paths() -> None:
    writer, _, _ = new_writer()
    writer.append({"scalar": 1.0, "nest": {"sub": 1.0}})
    writer.append({"scalar": 2.0, "nest": {"sub": 2.0}})
    assert writer._column_paths == [("nest", "sub"), ("scalar",)]
    with pytest.raises(ValueError) as raised:
        writer.append({"scalar": 1.0, "nest": {"sub": 3}})
    assert str(raised.value) == (
        "Tensor of wrong dtype provided for column ('nest', 'sub'). Got int64 but expected double."
    )
    with pytest.raises(ValueError) as raised:
        writer.append({"scalar": np.zeros(2), "nest": {"sub": 3.0}})
    assert str(raised.value) == (
        "Tensor of incompatible shape provided for column ('scalar',). Got [2] which is "
        "incompatible with []."
    )
    assert isinstance(raised.value, errors.InvalidArgumentError)
    assert writer.episode_steps == 2 and len(writer.history["scalar"]) == 2


def test_partial_steps() -> None:
    writer, _, fake = new_writer()
    writer.append({"x": 1}, partial_step=True)
    assert writer.episode_steps == 0
    with pytest.raises(ValueError) as raised:
        writer.append({"x": 4}, partial_step=True)
    assert str(raised.value) == (
        "Field ('x',) has already been set in the active step by previous (partial) append "
        "call and thus must be omitted or set to None but got: 4"
    )
    writer.append({"y": "late"}, partial_step=True)
    writer.append({"x": None, "z": 2.5})
    assert writer.episode_steps == 1
    assert [len(column) for column in writer.history.values()] == [1, 1, 1]
    writer.append({"x": 2, "y": "b", "z": 3.5})
    history = writer.history
    writer.create_item("t", 1.0, {"x": history["x"][:], "y": history["y"][:], "z": history["z"][:]})
    writer.flush()
    x, y, z = fake.decoded(0)
    assert x.tolist() == [1, 2] and y.tolist() == [b"late", b"b"] and z.tolist() == [2.5, 3.5]


def test_append_partial_and_append_reach_the_engine() -> None:
    internal = mock_internal()
    writer = TrajectoryWriter(internal)
    writer.append({"a": 1}, partial_step=True)
    writer.append({"b": 2})
    internal.AppendPartial.assert_called_once_with([1])
    internal.Append.assert_called_once_with([None, 2])


# ------------------------------------------------------------------------------ history


def history_of(values: list[Any], keep: int = 3) -> tuple[TrajectoryWriter, _ColumnHistory]:
    writer, _, _ = new_writer(ConstantChunkerOptions(max_chunk_length=1, num_keep_alive_refs=keep))
    for value in values:
        writer.append(value)
    return writer, writer.history


def test_history_indexing() -> None:
    _, history = history_of([0, 1, 2, 3, 4])
    assert len(history) == 5
    column = history[2]
    assert column.is_squeezed and column.numpy().item() == 2
    assert history[-1].numpy().item() == 4
    assert history[2:5].numpy().tolist() == [2, 3, 4]
    assert not history[2:5].is_squeezed
    assert history[[4, 2]].numpy().tolist() == [4, 2]
    assert history[np.int64(3)].numpy().item() == 3
    assert history[-3:].numpy().tolist() == [2, 3, 4]
    for key in (0, -5, slice(1, 4), slice(None, None, 2)):
        with pytest.raises(ValueError, match="None data references"):
            history[key]
    for bad in (lambda: history[6], lambda: history[-6]):
        with pytest.raises(IndexError):
            bad()
    for key in ("a", 1.5, (1,), True):
        with pytest.raises(TypeError, match="indices must be integers"):
            history[key]  # type: ignore[index]


def test_history_one_past_the_end_is_the_oldest_buffered_ref() -> None:
    _, history = history_of([0, 1, 2, 3, 4])
    assert history[len(history)].numpy().item() == 2  # Reverb's quirk (spec §8.19)
    _, short = history_of([7])
    assert short[1].numpy().item() == 7


def test_history_iterates_over_buffered_refs() -> None:
    _, history = history_of([0, 1, 2, 3])
    assert [ref.numpy().item() for ref in history] == [1, 2, 3]
    assert "_ColumnHistory" in repr(history)


def test_history_buffer_uses_the_largest_keep_alive() -> None:
    writer, _, _ = new_writer(ConstantChunkerOptions(max_chunk_length=1, num_keep_alive_refs=2))
    writer.configure(("b",), num_keep_alive_refs=4, max_chunk_length=1)
    writer.append({"a": 0})
    writer.append({"a": 1, "b": 1})
    for step in range(2, 6):
        writer.append({"a": step, "b": step})
    history = writer.history
    assert history["b"][2:].numpy().tolist() == [2, 3, 4, 5]
    with pytest.raises(ValueError, match="None"):
        history["a"][2:]  # the column was created with a buffer of 2
    assert history["a"][-2:].numpy().tolist() == [4, 5]


def test_expired_refs_cannot_be_read_or_used() -> None:
    writer, _, _ = new_writer(ConstantChunkerOptions(max_chunk_length=1, num_keep_alive_refs=2))
    writer.configure(("b",), num_keep_alive_refs=4, max_chunk_length=1)
    for step in range(4):
        writer.append({"a": step, "b": step})
    column = writer.history["a"][0:2]  # buffered by the history, expired in the engine
    with pytest.raises(RuntimeError, match="expired"):
        column.numpy()
    with pytest.raises(ValueError, match=r"^Error in column 0: Column contains expired CellRef\.$"):
        writer.create_item("t", 1.0, column)


# ------------------------------------------------------------------------------ TrajectoryColumn


def test_trajectory_column() -> None:
    writer, history = history_of([np.zeros(2), np.ones(2), np.full(2, 2.0)])
    refs = list(history)
    column = TrajectoryColumn(refs)
    assert len(column) == 3 and list(column) == refs and not column.is_squeezed
    assert column.shape == (3, 2) and column.dtype == np.float64
    assert_arrays_equal(column.numpy(), np.stack([np.zeros(2), np.ones(2), np.full(2, 2.0)]))
    squeezed = TrajectoryColumn(refs[1:2], squeeze=True)
    assert squeezed.shape == (2,) and squeezed.is_squeezed
    assert_arrays_equal(squeezed.numpy(), np.ones(2))
    assert column[0].is_squeezed and column[0].numpy().tolist() == [0.0, 0.0]
    assert len(column[1:]) == 2 and len(column[[0, 0, 2]]) == 3
    with pytest.raises(TypeError):
        column["x"]  # type: ignore[index]
    with pytest.raises(ValueError, match="exactly one data reference when squeeze set, got 3"):
        TrajectoryColumn(refs, squeeze=True)
    with pytest.raises(ValueError, match="None data references"):
        TrajectoryColumn([refs[0], None])
    empty = TrajectoryColumn([])
    with pytest.raises(ValueError):
        empty.shape  # noqa: B018
    with pytest.raises(ValueError):
        empty.numpy()
    assert "len=3" in repr(column)


# ------------------------------------------------------------------------------ items


def test_create_item_needs_trajectory_columns() -> None:
    writer, _, _ = new_writer()
    writer.append({"a": 1})
    with pytest.raises(TypeError, match="All leaves of `trajectory` must be `TrajectoryColumn`"):
        writer.create_item("t", 1.0, {"a": writer.history["a"]})
    with pytest.raises(ValueError, match=r"^trajectory must not be empty\.$"):
        writer.create_item("t", 1.0, {})


def test_create_item_passes_flattened_columns() -> None:
    internal = mock_internal()
    writer = TrajectoryWriter(internal)
    writer.append({"a": 1, "b": 2})
    history = writer.history
    writer.create_item("t", 0.5, {"z": history["a"][0], "y": history["b"][:]})
    internal.CreateItem.assert_called_once_with(
        "t", 0.5, [list(history["b"][:]), list(history["a"][0])], [False, True]
    )


def test_overlapping_sequences_round_trip_exactly() -> None:
    writer, _, fake = new_writer()
    steps = []
    for step in range(30):
        data = {
            "obs": np.arange(3, dtype=np.float32) + step,
            "act": step,
            "text": f"step {step}",
            "flag": step % 2 == 0,
        }
        steps.append(data)
        writer.append(data)
        if step >= 9:
            history = writer.history
            writer.create_item(
                "table",
                float(step),
                {
                    "obs": history["obs"][-10:],
                    "act": history["act"][-10:],
                    "last_text": history["text"][-1],
                    "flags": history["flag"][-10::3],
                },
            )
    writer.flush()
    assert len(fake.inserted) == 21 and not fake.violations
    for index, step in enumerate(range(9, 30)):
        window = steps[step - 9 : step + 1]
        act, flags, last_text, obs = fake.decoded(index)  # flattening order: sorted keys
        assert fake.inserted[index].item.priority == float(step)
        assert_arrays_equal(obs, np.stack([s["obs"] for s in window]))
        assert_arrays_equal(act, np.array([s["act"] for s in window], dtype=np.int64))
        assert_arrays_equal(last_text, np.array(f"step {step}".encode(), dtype=object))
        assert_arrays_equal(flags, np.array([s["flag"] for s in window[::3]]))


# ------------------------------------------------------------------------------ configure


@pytest.mark.parametrize(
    ("keep", "length", "message"),
    [
        (0, None, "num_keep_alive_refs must be >= 1, got 0"),
        (2, 0, r"max_chunk_length \(when set\) must be >= 1 and <= num_keep_alive_refs \(2\)"),
        (2, 3, "got 3"),
    ],
)
def test_configure_validation(keep: int, length: int | None, message: str) -> None:
    writer, _, _ = new_writer()
    with pytest.raises(ValueError, match=message):
        writer.configure(("a",), num_keep_alive_refs=keep, max_chunk_length=length)


def test_configure_existing_and_future_columns() -> None:
    internal = mock_internal()
    writer = TrajectoryWriter(internal)
    writer.append({"a": 1})
    writer.configure(("a",), num_keep_alive_refs=5, max_chunk_length=2)
    internal.ConfigureChunker.assert_called_once_with(0, ConstantChunkerOptions(2, 5))
    writer.configure(("b",), num_keep_alive_refs=3, max_chunk_length=None)
    assert internal.ConfigureChunker.call_count == 1
    writer.append({"a": 2, "b": 3})
    internal.ConfigureChunker.assert_called_with(1, AutoTunedChunkerOptions(3))
    assert internal.ConfigureChunker.call_count == 2
    writer.append({"a": 3, "b": 4})
    assert internal.ConfigureChunker.call_count == 2


def test_configure_changes_chunking_on_the_wire() -> None:
    writer, _, fake = new_writer(ConstantChunkerOptions(max_chunk_length=1, num_keep_alive_refs=4))
    writer.configure(("b",), num_keep_alive_refs=4, max_chunk_length=4)
    for step in range(4):
        writer.append({"a": step, "b": step})
    writer.create_item("t", 1.0, {"a": writer.history["a"][:], "b": writer.history["b"][:]})
    writer.flush()
    lengths = sorted(c.sequence_range.end - c.sequence_range.start + 1 for c in fake.chunks_sent)
    assert lengths == [1, 1, 1, 1, 4]


def test_configure_a_column_with_buffered_data_fails() -> None:
    writer, _, _ = new_writer(ConstantChunkerOptions(max_chunk_length=3, num_keep_alive_refs=3))
    writer.append({"a": 1})
    with pytest.raises(RuntimeError, match="Flush must be called before ApplyConfig"):
        writer.configure(("a",), num_keep_alive_refs=2, max_chunk_length=1)


# ------------------------------------------------------------------------------ flush / episodes


def test_flush_arguments_and_timeouts() -> None:
    writer, _, fake = new_writer(transport=FakeTransport(auto_confirm=False))
    with pytest.raises(ValueError, match="block_until_num_items must be >= 0"):
        writer.flush(-1)
    writer.append({"a": 1})
    writer.create_item("t", 1.0, writer.history["a"][-1])
    with pytest.raises(errors.DeadlineExceededError) as raised:
        writer.flush(timeout_ms=1)
    assert str(raised.value) == (
        "Flush call did not complete within provided timeout of 0:00:00.001000"
    )
    writer.flush(block_until_num_items=1, timeout_ms=1)
    fake.confirm_all()
    writer.flush(timeout_ms=1)


def test_flush_maps_native_timeout_messages() -> None:
    internal = mock_internal()
    writer = TrajectoryWriter(internal)
    writer.flush()
    internal.Flush.assert_called_with(0, -1)
    internal.Flush.side_effect = RuntimeError("Timeout exceeded")
    with pytest.raises(errors.DeadlineExceededError, match="0:00:00.100000"):
        writer.flush(2, timeout_ms=100)
    internal.Flush.assert_called_with(2, 100)
    with pytest.raises(RuntimeError, match="^Timeout exceeded$"):
        writer.flush()  # no timeout given: not mapped
    internal.Flush.side_effect = RuntimeError("stream died")
    with pytest.raises(RuntimeError, match="stream died"):
        writer.flush(timeout_ms=5)
    internal.EndEpisode.side_effect = RuntimeError("Timeout exceeded")
    with pytest.raises(errors.DeadlineExceededError, match="End episode call.*0:00:00.010000"):
        writer.end_episode(timeout_ms=10)


def test_flush_with_zero_timeout_blocks_until_confirmed() -> None:
    writer, _, fake = new_writer(transport=FakeTransport(auto_confirm=False))
    writer.append({"a": 1})
    writer.create_item("t", 1.0, writer.history["a"][-1])
    done = threading.Event()
    thread = threading.Thread(target=lambda: (writer.flush(timeout_ms=0), done.set()))
    thread.start()
    assert fake.waiting.wait(10)
    assert not done.is_set()
    fake.confirm_all()
    thread.join(10)
    assert done.is_set()


def test_end_episode_clears_history() -> None:
    writer, _, fake = new_writer()
    for step in range(3):
        writer.append({"a": step})
    writer.create_item("t", 1.0, writer.history["a"][:])
    writer.end_episode()
    assert writer.episode_steps == 0 and len(writer.history["a"]) == 0
    assert len(fake.inserted) == 1
    writer.append({"a": 9})
    assert len(writer.history["a"]) == 1


def test_end_episode_without_clearing_keeps_history() -> None:
    writer, _, fake = new_writer()
    for step in range(3):
        writer.append({"a": step})
    writer.end_episode(clear_buffers=False)
    assert writer.episode_steps == 0 and len(writer.history["a"]) == 3
    writer.append({"a": 3})
    writer.create_item("t", 1.0, writer.history["a"][-4:])
    writer.flush()
    assert fake.decoded(0)[0].tolist() == [0, 1, 2, 3]


def test_end_episode_timeout_keeps_the_episode() -> None:
    writer, _, fake = new_writer(transport=FakeTransport(auto_confirm=False))
    for step in range(3):
        writer.append({"a": step})
    writer.create_item("t", 1.0, writer.history["a"][:])
    with pytest.raises(errors.DeadlineExceededError) as raised:
        writer.end_episode(timeout_ms=0)
    assert str(raised.value) == (
        "End episode call did not complete within provided timeout of 0:00:00"
    )
    assert writer.episode_steps == 3 and len(writer.history["a"]) == 3
    fake.confirm_all()
    writer.end_episode(timeout_ms=0)
    assert writer.episode_steps == 0 and len(writer.history["a"]) == 0


# ------------------------------------------------------------------------------ lifecycle


def test_context_manager_flushes_but_does_not_close() -> None:
    writer, internal, fake = new_writer()
    with writer as entered:
        assert entered is writer
        writer.append({"a": 1})
        writer.create_item("t", 1.0, writer.history["a"][-1])
    assert len(fake.inserted) == 1 and not fake.closed
    writer.append({"a": 2})


def test_context_manager_skips_flush_on_reverb_errors() -> None:
    internal = mock_internal()
    with pytest.raises(errors.DeadlineExceededError):
        with TrajectoryWriter(internal):
            raise errors.DeadlineExceededError("x")
    internal.Flush.assert_not_called()
    with pytest.raises(KeyError):
        with TrajectoryWriter(internal):
            raise KeyError("x")
    internal.Flush.assert_called_once()


def test_close_makes_every_later_call_fail() -> None:
    writer, internal, fake = new_writer(transport=FakeTransport(auto_confirm=False))
    writer.append({"a": 1})
    fake.paused = True
    writer.create_item("t", 1.0, writer.history["a"][-1])
    writer.close()
    writer.close()
    assert fake.closed and fake.requests == [] and internal.num_pending_items() == 0
    history = writer.history
    for call in (
        lambda: writer.append({"a": 2}),
        lambda: writer.create_item("t", 1.0, history["a"][-1]),
        writer.flush,
        writer.end_episode,
        lambda: writer.configure(("a",), num_keep_alive_refs=1, max_chunk_length=1),
    ):
        with pytest.raises(RuntimeError) as raised:
            call()
        assert str(raised.value) == CLOSED


def test_stream_errors_are_raised_by_later_calls() -> None:
    writer, internal, fake = new_writer()
    writer.append({"a": 1})
    fake.fail(errors.InvalidArgumentError("Signature mismatch on the server"))
    for call in (lambda: writer.append({"a": 2}), writer.flush, writer.end_episode):
        with pytest.raises(ValueError, match="Signature mismatch"):
            call()


def test_del_closes_the_engine() -> None:
    writer, internal, fake = new_writer()
    writer.append({"a": 1})
    del writer
    gc.collect()
    assert fake.closed and internal.closed


def test_episode_steps_comes_from_the_engine() -> None:
    internal = mock_internal()
    internal.episode_steps = 7
    assert TrajectoryWriter(internal).episode_steps == 7


# ------------------------------------------------------------------------------ asyncio


def new_async_writer(
    **kwargs: Any,
) -> tuple[AsyncTrajectoryWriter, InternalTrajectoryWriter, FakeAsyncTransport]:
    fake = FakeAsyncTransport(**kwargs)
    internal, _ = make_writer(AutoTunedChunkerOptions(10), transport=fake)
    return AsyncTrajectoryWriter(internal, fake), internal, fake


async def test_async_flush_awaits_confirmation() -> None:
    writer, internal, fake = new_async_writer(auto_confirm=False)
    writer.append({"a": 1, "b": "x"})
    writer.create_item("t", 1.0, {"a": writer.history["a"][-1]})
    flush = asyncio.ensure_future(writer.flush())
    await until(lambda: bool(fake.async_wait_calls))
    assert not flush.done() and len(fake.requests) == 1
    fake.confirm_all()
    await flush
    assert internal.num_pending_items() == 0


async def test_async_flush_timeout() -> None:
    writer, internal, fake = new_async_writer(auto_confirm=False)
    writer.append({"a": 1})
    writer.create_item("t", 1.0, writer.history["a"][-1])
    with pytest.raises(errors.DeadlineExceededError, match="0:00:00.001000"):
        await writer.flush(timeout_ms=1)
    with pytest.raises(ValueError):
        await writer.flush(-1)
    fake.confirm_all()
    await writer.flush(timeout_ms=1)


async def test_async_end_episode() -> None:
    writer, internal, fake = new_async_writer(auto_confirm=False)
    for step in range(3):
        writer.append({"a": step})
    writer.create_item("t", 1.0, writer.history["a"][:])
    with pytest.raises(errors.DeadlineExceededError, match="End episode call"):
        await writer.end_episode(timeout_ms=0)
    assert writer.episode_steps == 3 and len(writer.history["a"]) == 3
    end = asyncio.ensure_future(writer.end_episode())
    await until(lambda: len(fake.async_wait_calls) == 2)
    fake.confirm_all()
    await end
    assert writer.episode_steps == 0 and len(writer.history["a"]) == 0
    assert fake.decoded(0)[0].tolist() == [0, 1, 2]


async def test_async_context_manager_and_close() -> None:
    writer, internal, fake = new_async_writer()
    async with writer:
        writer.append({"a": 1})
        writer.create_item("t", 1.0, writer.history["a"][-1])
    assert len(fake.inserted) == 1 and not fake.closed
    await writer.close()
    assert fake.closed
    with pytest.raises(RuntimeError, match=CLOSED):
        writer.append({"a": 1})
    with pytest.raises(RuntimeError, match=CLOSED):
        await writer.flush()


async def test_async_stream_failure_wakes_the_flush() -> None:
    writer, internal, fake = new_async_writer(auto_confirm=False)
    writer.append({"a": 1})
    writer.create_item("t", 1.0, writer.history["a"][-1])
    flush = asyncio.ensure_future(writer.flush())
    await until(lambda: bool(fake.async_wait_calls))
    fake.fail(errors.UnavailableError("gone"))
    with pytest.raises(RuntimeError, match="gone"):
        await flush
