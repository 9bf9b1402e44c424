"""StructuredWriter without a server: patterns, conditions, priorities, config checks.

The writer runs on a writer engine over the in-memory ``FakeTransport``; expected items
are what dm-reverb 0.14 inserts for the same configs and steps (``tests/interop`` checks
a few of them side by side against dm-reverb itself).
"""

from __future__ import annotations

import collections
import logging
from typing import Any

import numpy as np
import pytest

from reverb_py import errors
from reverb_py import structured_writer as sw
from reverb_py._codec import nest
from reverb_py._proto import patterns_pb2
from reverb_py._writer import structured_writer as engine_module
from reverb_py._writer.engine import ConstantChunkerOptions
from reverb_py.tensor_spec import TensorSpec
from tests.fake_transport import FakeAsyncTransport, FakeTransport, make_writer

C = sw.Condition
REF2 = sw.create_reference_step([None, None])

STEP_SPEC = {
    "a": np.zeros([], np.float32),
    "b": {"c": np.zeros([2, 2], np.int32), "d": [np.zeros([3], np.int64), np.zeros([6], np.int64)]},
}
REF_STEP = sw.create_reference_step(STEP_SPEC)


def make(
    configs: list[Any], *, transport: FakeTransport | None = None
) -> tuple[sw.StructuredWriter, FakeTransport]:
    parsed = engine_module.as_configs(configs)
    engine_module.validate_configs(parsed)
    keep = max([1, *engine_module.max_history_per_column(parsed)])
    writer, fake = make_writer(ConstantChunkerOptions(1, keep), transport=transport)
    return sw.StructuredWriter(engine_module.InternalStructuredWriter(writer, parsed), fake), fake


def items(fake: FakeTransport, structure: Any = None) -> list[Any]:
    """Every inserted item's columns (as lists), unflattened like ``structure``."""
    result = []
    for columns in fake.decoded():
        values = [column.tolist() for column in columns]
        result.append(values if structure is None else nest.unflatten_as(structure, values))
    return result


def priorities(fake: FakeTransport) -> list[float]:
    return [round(entry.item.priority, 4) for entry in fake.inserted]


def run(configs: list[Any], steps: list[Any], *, end: bool = True) -> FakeTransport:
    writer, fake = make(configs)
    for step in steps:
        writer.append(step)
    if end:
        writer.end_episode()
    else:
        writer.flush()
    return fake


# ------------------------------------------------------------------------------ patterns


def test_reference_step_nodes() -> None:
    ref = sw.create_reference_step({"a": None, "b": {"c": None, "d": None}})
    assert ref["a"][-1] == patterns_pb2.PatternNode(flat_source_index=0, stop=-1)
    assert ref["b"]["d"][-3:] == patterns_pb2.PatternNode(flat_source_index=2, start=-3)
    node = ref["b"]["c"][-5:-1:2]
    assert (node.flat_source_index, node.start, node.stop, node.step) == (1, -5, -1, 2)
    assert not ref["a"][-2:].HasField("stop")
    with pytest.raises(ValueError, match="Key must be int or slice"):
        ref["a"]["x"]  # type: ignore[index]


def test_reference_step_of_a_single_leaf() -> None:
    pattern = sw.pattern_from_transform(None, lambda step: step[-2])
    assert pattern == patterns_pb2.PatternNode(flat_source_index=0, stop=-2)


def test_create_config_and_unpack_pattern_round_trip() -> None:
    Step = collections.namedtuple("Step", ["obs", "reward"])
    spec = Step(obs=None, reward={"x": None, "y": None})
    pattern = sw.pattern_from_transform(
        spec, lambda ref: {"obs": ref.obs[-2:], "r": [ref.reward["y"][-1], ref.reward["x"][-1]]}
    )
    config = sw.create_config(pattern, "t", conditions=[C.step_index() >= 1])
    assert config.table == "t"
    assert config.priority == sw.constant_priority_fn(1.0)
    assert list(config.conditions) == [C.step_index() >= 1]
    assert list(config.flat) == nest.flatten(pattern)
    assert sw.unpack_pattern(config) == pattern
    parsed = sw.Config.FromString(config.SerializeToString())
    assert sw.unpack_pattern(parsed) == pattern


def test_unpack_pattern_without_structure_is_flat() -> None:
    config = sw.Config(flat=[REF2[0][-1], REF2[1][-1]], table="t")
    assert list(sw.unpack_pattern(config)) == [REF2[0][-1], REF2[1][-1]]


# ------------------------------------------------------------------------------ conditions


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        (C.step_index() == 3, sw.ConditionProto(step_index=True, eq=3)),
        (C.step_index() != 3, sw.ConditionProto(step_index=True, eq=3, inverse=True)),
        (C.step_index() >= 3, sw.ConditionProto(step_index=True, ge=3)),
        (C.step_index() > 3, sw.ConditionProto(step_index=True, ge=4)),
        (C.step_index() <= 3, sw.ConditionProto(step_index=True, ge=4, inverse=True)),
        (C.step_index() < 3, sw.ConditionProto(step_index=True, ge=3, inverse=True)),
        (
            C.steps_since_applied() % 4 == 1,
            sw.ConditionProto(steps_since_applied=True, mod_eq={"mod": 4, "eq": 1}),
        ),
        (
            C.step_index() % 2 != 0,
            sw.ConditionProto(step_index=True, mod_eq={"mod": 2, "eq": 0}, inverse=True),
        ),
        (C.is_end_episode(), sw.ConditionProto(is_end_episode=True, eq=1)),
        (
            C.data({"a": None, "b": None})["b"] == 1,
            sw.ConditionProto(flat_source_index=1, eq=1),
        ),
    ],
)
def test_condition_builders(condition: Any, expected: Any) -> None:
    assert condition == expected


@pytest.mark.parametrize(
    ("condition", "num_steps", "want_steps"),
    [
        (C.step_index() <= 2, 10, [0, 1, 2]),
        (C.step_index() >= 5, 10, [5, 6, 7, 8, 9]),
        (C.step_index() == 3, 10, [3]),
        (C.step_index() != 3, 10, [0, 1, 2, 4, 5, 6, 7, 8, 9]),
        (C.step_index() > 7, 10, [8, 9]),
        (C.step_index() < 2, 10, [0, 1]),
        (C.step_index() % 3 == 0, 10, [0, 3, 6, 9]),
        (C.step_index() % 3 != 0, 10, [1, 2, 4, 5, 7, 8]),
        (C.steps_since_applied() >= 4, 10, [3, 7]),
        (C.steps_since_applied() >= 3, 10, [2, 5, 8]),
        (C.is_end_episode(), 5, [4]),
    ],
)
def test_single_condition(condition: Any, num_steps: int, want_steps: list[int]) -> None:
    config = sw.create_config(sw.pattern_from_transform(None, lambda x: x[-1]), "t", [condition])
    fake = run([config], list(range(num_steps)))
    assert items(fake) == [[step] for step in want_steps]


def test_buffer_length_counts_the_longest_kept_column() -> None:
    # Column 0 keeps 2 steps (x[-2]), column 1 one: the buffer holds 2 steps at most.
    bl_eq_2 = sw.ConditionProto(buffer_length=True, eq=2)
    config = sw.create_config([REF2[0][-2], REF2[1][-1]], "t", [bl_eq_2])
    fake = run([config], [[i, -i] for i in range(4)])
    assert items(fake) == [[0, -1], [1, -2], [2, -3]]
    never = sw.create_config([REF2[0][-1]], "t", [sw.ConditionProto(buffer_length=True, ge=3)])
    assert items(run([never], [[i, 0] for i in range(5)])) == []


def test_several_conditions_must_all_hold() -> None:
    config = sw.create_config([REF2[0][-1]], "t", [C.step_index() > 1, C.step_index() < 4])
    assert items(run([config], [[i, 0] for i in range(6)])) == [[2], [3]]


def test_round_robin_into_tables() -> None:
    pattern = sw.pattern_from_transform(None, lambda x: x[-1])
    configs = [sw.create_config(pattern, f"t{i}", [C.step_index() % 3 == i]) for i in range(3)]
    fake = run(configs, list(range(6)))
    tables = [entry.item.table for entry in fake.inserted]
    assert tables == ["t0", "t1", "t2", "t0", "t1", "t2"]
    assert items(fake) == [[0], [1], [2], [3], [4], [5]]


@pytest.mark.parametrize(
    ("condition", "steps", "want"),
    [
        # Condition on a column no pattern reads.
        (
            lambda d: d["b"] > 10,
            [
                {"a": 1, "b": 11},
                {"a": 2, "b": 10},
                {"a": 3, "b": 11},
                {"a": 4, "b": 9},
                {"a": 5, "b": 12},
            ],
            [[2], [4]],
        ),
        (
            lambda d: d["b"] == 1,
            [{"a": 1, "b": True}, {"a": 2, "b": False}, {"a": 4, "b": True}],
            [[2]],
        ),
        (lambda d: d["b"] != 4, [{"a": i, "b": np.int64(i)} for i in range(1, 6)], [[1], [2], [4]]),
        (lambda d: d["b"] >= 2, [{"a": i, "b": np.uint8(i)} for i in range(4)], [[1], [2]]),
        # C's remainder: -1 % 2 == -1, -3 % 2 == -1.
        (
            lambda d: d["b"] % 2 == 1,
            [{"a": 1, "b": -1}, {"a": 2, "b": -3}, {"a": 3, "b": 3}],
            [[2]],
        ),
        # No value in the newest step: the condition fails.
        (
            lambda d: d["b"] == 1,
            [{"a": 1, "b": None}, {"a": 2, "b": 1}, {"a": 3, "b": 1}],
            [[1], [2]],
        ),
    ],
)
def test_data_condition(condition: Any, steps: list[Any], want: list[Any]) -> None:
    step_spec = {"a": None, "b": None}
    config = sw.create_config(
        sw.pattern_from_transform(step_spec, lambda x: [x["a"][-2]]),
        "t",
        [condition(C.data(step_spec))],
    )
    fake = run([config], steps, end=False)
    assert items(fake) == want


def test_data_condition_on_a_wrapped_int64() -> None:
    step_spec = {"a": None, "b": None}
    config = sw.create_config([REF2[0][-1]], "t", [C.data(step_spec)["b"] == 1])
    fake = run([config], [[0, np.int64(2**32 + 1)], [1, np.int64(2)]], end=False)
    assert items(fake) == [[0]]


def test_data_condition_on_a_bad_column_logs_and_fails(caplog: pytest.LogCaptureFixture) -> None:
    config = sw.create_config([REF2[0][-1]], "t", [C.data([None, None])[1] == 1])
    with caplog.at_level(logging.ERROR, logger="reverb_py.structured_writer"):
        fake = run([config], [[0, np.ones([2], np.int32)]], end=False)
        fake2 = run([config], [[0, 1.0]], end=False)
    assert items(fake) == [] and items(fake2) == []
    assert "does not contain scalar tensors" in caplog.text
    assert "has invalid data type DT_DOUBLE" in caplog.text


# ------------------------------------------------------------------------------ slices


def step_of(index: int) -> Any:
    return nest.map_structure(lambda x: np.full_like(x, index), STEP_SPEC)


@pytest.mark.parametrize(
    ("pattern", "num_steps", "want"),
    [
        (
            {"x": REF_STEP["a"][-3], "y": REF_STEP["b"]["c"][-2:], "z": REF_STEP["b"]["d"][0][-1]},
            5,
            [
                {"x": float(i - 2), "y": [[[i - 1] * 2] * 2, [[i] * 2] * 2], "z": [i] * 3}
                for i in (2, 3, 4)
            ],
        ),
        (
            {"older": REF_STEP["a"][-3:-1], "last_a": REF_STEP["a"][-1]},
            5,
            [{"older": [i - 2.0, i - 1.0], "last_a": float(i)} for i in (2, 3, 4)],
        ),
        (
            {"every_second_a": REF_STEP["a"][-5::2]},
            10,
            [{"every_second_a": [i - 4.0, i - 2.0, float(i)]} for i in range(4, 10)],
        ),
        ({"a": REF_STEP["a"][-4:-1:2]}, 6, [{"a": [i - 3.0, i - 1.0]} for i in range(3, 6)]),
        ({"a": REF_STEP["a"][-4::3]}, 6, [{"a": [i - 3.0, float(i)]} for i in range(3, 6)]),
    ],
)
def test_trajectory_patterns(pattern: Any, num_steps: int, want: list[Any]) -> None:
    config = sw.create_config(pattern, "t")
    fake = run([config], [step_of(i) for i in range(num_steps)])
    assert items(fake, sw.unpack_pattern(config)) == want


def test_squeezed_and_sliced_columns_and_dtypes() -> None:
    config = sw.create_config({"x": REF_STEP["a"][-1], "y": REF_STEP["b"]["d"][1][-2:]}, "t")
    fake = run([config], [step_of(i) for i in range(3)])
    columns = fake.decoded(0)
    assert [(column.dtype, column.shape) for column in columns] == [
        (np.dtype(np.float32), ()),
        (np.dtype(np.int64), (2, 6)),
    ]


def test_a_pattern_of_a_column_past_the_step_makes_no_item() -> None:
    config = sw.create_config([sw.create_reference_step([None] * 5)[4][-1]], "t")
    assert items(run([config], [[1, 2]])) == []


def test_a_slice_through_a_missing_value_is_skipped() -> None:
    config = sw.create_config([REF2[0][-2:]], "t")
    assert items(run([config], [[1, 0], [None, 0], [3, 0], [4, 0]])) == [[[3, 4]]]


def test_a_step_without_any_kept_value_is_not_counted_by_configs() -> None:
    config = sw.create_config([REF2[0][-1]], "t", [C.steps_since_applied() >= 2])
    steps = [[None, 0], [1, 0], [None, 0], [2, 0], [3, 0], [4, 0]]
    assert items(run([config], steps)) == [[2], [4]]


def test_unused_columns_are_not_written() -> None:
    config = sw.create_config([REF2[1][-1]], "t")
    writer, fake = make([config])
    # Column 0 is read by no config: even a value of another dtype is ignored.
    writer.append(["text", 1])
    writer.append([2.5, 2])
    writer.end_episode()
    assert items(fake) == [[1], [2]]
    assert {len(chunk.data.tensors) for chunk in fake.chunks_sent} == {1}
    assert len(fake.chunks_sent) == 2


# ------------------------------------------------------------------------------ steps


def test_step_is_open() -> None:
    config = sw.create_config([r[-1] for r in sw.create_reference_step([None, None, None])], "t")
    writer, fake = make([config])
    assert not writer.step_is_open
    writer.append([1, 1, 1])
    assert not writer.step_is_open
    writer.append([None, 2, None], partial_step=True)
    assert writer.step_is_open
    writer.append([None, None, 2], partial_step=True)
    assert writer.step_is_open
    writer.append([2, None, None])
    assert not writer.step_is_open
    writer.append([None, 3, None], partial_step=True)
    writer.end_episode()
    assert not writer.step_is_open
    assert items(fake) == [[1, 1, 1], [2, 2, 2]]


def test_partial_steps_make_items_once_the_slices_are_complete() -> None:
    config = sw.create_config([REF2[0][-2:], REF2[1][-2]], "t")
    writer, fake = make([config])
    writer.append([1, None], partial_step=True)
    writer.append([None, 2])
    # Made at this partial append: everything it reads is there.
    writer.append([3, None], partial_step=True)
    assert len(fake.inserted) == 1
    writer.append([None, 4])
    writer.append([5, None], partial_step=True)
    writer.flush()
    assert items(fake) == [[[1, 3], 2], [[3, 5], 4]]


def test_partial_step_waits_for_the_missing_column() -> None:
    config = sw.create_config([REF2[0][-1], REF2[1][-1]], "t")
    writer, fake = make([config])
    writer.append([1, None], partial_step=True)
    writer.append([None, 2])
    writer.append([3, None], partial_step=True)
    writer.append([None, 4])
    writer.flush()
    assert items(fake) == [[1, 2], [3, 4]]


def test_a_value_given_twice_in_one_step_is_refused() -> None:
    config = sw.create_config([REF2[0][-1]], "t")
    writer, _ = make([config])
    writer.append([1, None], partial_step=True)
    with pytest.raises(RuntimeError, match="A value for column 0 was provided by multiple"):
        writer.append([1, 2])
    writer.append([None, 2])
    assert not writer.step_is_open


def test_append_checks_length_dtype_and_shape() -> None:
    config = sw.create_config([REF2[0][-1]], "t")
    writer, fake = make([config])
    writer.append([1, 2])
    with pytest.raises(ValueError, match="got 3 but wanted 2"):
        writer.append([1, 2, 3])
    with pytest.raises(
        ValueError,
        match=r"Tensor of wrong dtype provided for column 0 \(path=\(0,\)\)\. Got double but "
        "expected int64",
    ):
        writer.append([1.5, 2])
    nested, _ = make([sw.create_config(REF_STEP["b"]["c"][-1], "t")])
    nested.append(step_of(0))
    bad = step_of(1)
    bad["b"]["c"] = np.zeros([3], np.int32)
    with pytest.raises(ValueError, match=r"column 1 \(path=\('b', 'c'\)\)\. Got \[3\]"):
        nested.append(bad)
    writer.end_episode()
    assert items(fake) == [[1]]


# ------------------------------------------------------------------------------ episodes


def test_end_episode_clears_the_history() -> None:
    config = sw.create_config([REF2[0][-3:]], "t")
    writer, fake = make([config])
    for step in range(2):
        writer.append([step, 0])
    writer.end_episode()
    for step in range(2, 5):
        writer.append([step, 0])
    writer.end_episode()
    assert items(fake) == [[[2, 3, 4]]]


def test_end_episode_without_clearing_keeps_steps_across_episodes() -> None:
    config = sw.create_config([REF2[0][-3:]], "t", [C.step_index() <= 1])
    writer, fake = make([config])
    for step in range(3):
        writer.append([step, 0])
    writer.end_episode(clear_buffers=False)
    for step in range(3, 6):
        writer.append([step, 0])
    writer.end_episode(clear_buffers=False)
    # The step index restarts in the new episode; the slices reach into the old one.
    assert items(fake) == [[[1, 2, 3]], [[2, 3, 4]]]


def test_end_of_episode_configs_apply_once() -> None:
    last = sw.create_config([REF2[0][-2:]], "end", [C.is_end_episode()])
    every = sw.create_config([REF2[0][-1]], "every")
    writer, fake = make([every, last])
    for step in range(3):
        writer.append([step, 0])
    writer.end_episode()
    writer.end_episode()  # A new, empty episode: nothing to apply.
    assert [entry.item.table for entry in fake.inserted] == ["every"] * 3 + ["end"]
    assert items(fake)[-1] == [[1, 2]]


def test_end_of_episode_config_with_an_open_step_reads_what_is_there() -> None:
    configs = [
        sw.create_config([REF2[1][-1]], "b", [C.is_end_episode()]),
        sw.create_config([REF2[0][-1]], "a", [C.is_end_episode()]),
    ]
    writer, fake = make(configs)
    writer.append([1, None], partial_step=True)
    writer.append([None, 2])
    writer.append([3, None], partial_step=True)
    writer.end_episode()
    assert [(entry.item.table, values) for entry, values in zip(fake.inserted, items(fake))] == [
        ("a", [3])
    ]


def test_end_episode_timeout_keeps_the_episode_and_does_not_duplicate_items() -> None:
    config = sw.create_config([REF2[0][-1]], "t", [C.is_end_episode()])
    writer, fake = make([config], transport=FakeTransport(auto_confirm=False))
    writer.append([1, 0])
    writer.append([2, 0])
    with pytest.raises(errors.DeadlineExceededError, match="End episode call did not complete"):
        writer.end_episode(timeout_ms=1)
    assert fake.unconfirmed and len(fake.inserted) == 1
    fake.confirm_all()
    writer.end_episode(timeout_ms=1000)
    assert items(fake) == [[2]]


def test_flush_timeout_and_argument_check() -> None:
    config = sw.create_config([REF2[0][-1]], "t")
    writer, fake = make([config], transport=FakeTransport(auto_confirm=False))
    writer.append([1, 0])
    with pytest.raises(ValueError, match="block_until_num_items must be >= 0"):
        writer.flush(-1)
    with pytest.raises(errors.DeadlineExceededError, match="Flush call did not complete"):
        writer.flush(timeout_ms=1)
    # As in Reverb (unlike TrajectoryWriter.flush), 0 means "do not wait".
    with pytest.raises(errors.DeadlineExceededError, match="timeout of 0:00:00"):
        writer.flush(timeout_ms=0)
    writer.flush(block_until_num_items=1, timeout_ms=0)
    fake.confirm_all()
    writer.flush(timeout_ms=1000)
    assert items(fake) == [[1]]


def test_context_manager_flushes_and_close_stops() -> None:
    config = sw.create_config([REF2[0][-1]], "t")
    writer, fake = make([config])
    with writer:
        writer.append([1, 0])
    assert fake.writer.num_pending_items() == 0 and items(fake) == [[1]]
    writer.close()
    writer.close()
    assert fake.closed
    with pytest.raises(RuntimeError, match="Close has been called"):
        writer.append([2, 0])


async def test_async_writer() -> None:
    config = sw.create_config([REF2[0][-2:]], "t", [C.step_index() % 2 == 1])
    parsed = engine_module.as_configs([config])
    fake = FakeAsyncTransport(auto_confirm=False)
    internal, _ = make_writer(ConstantChunkerOptions(1, 2), transport=fake)
    writer = sw.AsyncStructuredWriter(
        engine_module.InternalStructuredWriter(internal, parsed), fake
    )
    for step in range(4):
        writer.append([step, 0])
    with pytest.raises(errors.DeadlineExceededError, match="Flush call"):
        await writer.flush(timeout_ms=1)
    with pytest.raises(errors.DeadlineExceededError, match="End episode call"):
        await writer.end_episode(timeout_ms=1)
    fake.confirm_all()
    async with writer:
        writer.append([4, 0])
    await writer.end_episode()
    assert items(fake) == [[[0, 1]], [[2, 3]]]
    await writer.close()


# ------------------------------------------------------------------------------ priorities


def test_constant_priority() -> None:
    config = sw.create_config([REF2[0][-1]], "t", priority=sw.constant_priority_fn(2.5))
    assert priorities(run([config], [[1, 0]])) == [2.5]


@pytest.mark.parametrize(
    ("pattern", "steps", "want"),
    [
        # 0.9 * max|td| + 0.1 * mean|td| over the item's td column.
        ([REF2[0][-1], REF2[1][-3:]], [[1, 1.0], [2, -2.0], [3, 4.0], [4, 0.5]], [3.8333, 3.8167]),
        ([REF2[0][-1], REF2[1][-1]], [[1, 1.0], [2, -2.0]], [1.0, 2.0]),
        (
            [REF2[0][-1], REF2[1][-4::2]],
            [[i, v] for i, v in enumerate([1.0, -2.0, 4.0, 0.5, 7.0])],
            [3.85, 1.925],
        ),
        ([REF2[0][-1], REF2[1][-2:]], [[1, 1], [2, -2], [3, 4]], [1.95, 3.9]),
        ([REF2[0][-1], REF2[1][-2:]], [[1, np.float32(1.5)], [2, np.float32(-2.5)]], [2.45]),
        # int32, and one-element tensors count as scalars.
        ([REF2[1][-2:]], [[0, np.int32(1)], [0, np.int32(-3)]], [2.9]),
        ([REF2[1][-2:]], [[0, np.array([1.0])], [0, np.array([-3.0])]], [2.9]),
        # The td column is not in the item: priority 0.
        ([REF2[0][-3:]], [[1, 1.0], [2, -2.0], [3, 3.0]], [0.0]),
        # The td column twice: the last node counts.
        ([REF2[1][-2:], REF2[1][-1]], [[0, 1.0], [0, 2.0], [0, 5.0]], [2.0, 5.0]),
    ],
)
def test_td_error_priority(pattern: Any, steps: list[Any], want: list[float]) -> None:
    td = sw.td_error(0.9, [None, None], lambda step: step[1])
    assert td == patterns_pb2.Priority(
        td_error=patterns_pb2.Priority.TDError(max_priority_weight=0.9, flat_source_index=1)
    )
    config = sw.create_config(pattern, "t", priority=td)
    assert priorities(run([config], steps, end=False)) == want


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (np.array([1.0, 2.0]), "TD Error expects a scalar tensor"),
        (True, "TD Error expects a double/float/int tensor and it is 10"),
        (np.float16(1), "TD Error expects a double/float/int tensor and it is 19"),
        (np.uint8(1), "TD Error expects a double/float/int tensor and it is 4"),
    ],
)
def test_td_error_refuses_bad_columns(value: Any, message: str) -> None:
    td = sw.td_error(0.5, [None, None], lambda step: step[1])
    writer, _ = make([sw.create_config([REF2[1][-1]], "t", priority=td)])
    with pytest.raises(ValueError, match=message):
        writer.append([0, value])


# ------------------------------------------------------------------------------ validation


def _config(**changes: Any) -> sw.Config:
    config = sw.create_config([REF2[0][-1]], "t")
    for name, value in changes.items():
        if name == "node":
            config.flat[0].Clear()
            config.flat[0].MergeFrom(value)
        elif name == "condition":
            config.conditions.append(value)
        elif name == "priority":
            config.priority.CopyFrom(value)
        else:
            setattr(config, name, value)
    return config


N = patterns_pb2.PatternNode
K = sw.ConditionProto


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (_config(table=""), "`table` must not be empty."),
        (sw.Config(table="t", priority=sw.constant_priority_fn(1)), "`flat` must not be empty."),
        (_config(node=N()), "At least one of `start` and `stop` must be specified."),
        (_config(node=N(start=0)), "`start` must be < 0 but got 0."),
        (_config(node=N(stop=1)), "`stop` must be <= 0 but got 1."),
        (_config(node=N(stop=0)), "`stop` must be < 0 when `start` isn't set but got 0."),
        (_config(node=N(stop=-1, step=2)), "`step` must only be set when `start` is set."),
        (_config(node=N(start=-3, stop=-3)), "`stop` (-3) must be > `start` (-3) when both"),
        (_config(node=N(start=-3, step=0)), "`step` must be > 0 but got 0."),
        (
            _config(node=N(flat_source_index=-1, stop=-1)),
            "`flat_source_index` must be >= 0 but got -1.",
        ),
        (_config(condition=K(eq=1)), "Conditions must specify a value for `left`."),
        (_config(condition=K(step_index=True)), "Conditions must specify a value for `cmp`."),
        (
            _config(condition=K(step_index=True, mod_eq={"mod": 0})),
            "`mod_eq.mod` must be > 0 but got 0.",
        ),
        (
            _config(condition=K(step_index=True, mod_eq={"mod": 2, "eq": -1})),
            "`mod_eq.eq` must be >= 0 but got -1.",
        ),
        (
            _config(condition=K(is_end_episode=True, eq=2)),
            "must use `eq=1` when using `is_end_episode`",
        ),
        (
            _config(condition=K(is_end_episode=True, ge=1)),
            "must use `eq=1` when using `is_end_episode`",
        ),
        (
            _config(condition=K(is_end_episode=True, eq=1, inverse=True)),
            "must use `eq=1` when using `is_end_episode`",
        ),
        (
            _config(condition=K(flat_source_index=-2, eq=1)),
            "flat_source_index must be >= 0 but got -2.",
        ),
        # Refused at once by reverb_py (Reverb fails or misbehaves when items are made).
        (_config(priority=patterns_pb2.Priority()), "`priority` must be set"),
        (_config(priority=sw.constant_priority_fn(float("nan"))), "`priority` must not be nan."),
        (_config(priority=sw.constant_priority_fn(-1.0)), "`priority` must be >= 0 but got -1.0"),
        (
            _config(priority=sw.td_error(-0.5, [None], lambda step: step[0])),
            "`td_error.max_priority_weight` must be >= 0",
        ),
    ],
)
def test_invalid_configs(config: sw.Config, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        engine_module.validate_configs([_config(), config])
    assert str(raised.value).startswith("Invalid configuration at position 1: ")
    assert message in str(raised.value)


def test_no_configs() -> None:
    with pytest.raises(ValueError, match="At least one config must be provided."):
        engine_module.validate_configs([])


def test_as_configs_accepts_bytes_and_foreign_messages() -> None:
    config = sw.create_config({"x": REF2[0][-2:]}, "t", [C.step_index() >= 1])

    class Foreign:
        def SerializeToString(self) -> bytes:  # noqa: N802 - protobuf's name.
            return config.SerializeToString()

    parsed = engine_module.as_configs([config, config.SerializeToString(), Foreign()])
    assert parsed[0] is config
    assert parsed[1] == config and parsed[2] == config
    with pytest.raises(TypeError, match="position 0"):
        engine_module.as_configs([42])
    with pytest.raises(ValueError, match="Unable to deserialize"):
        engine_module.as_configs([b"\xff\xff"])


def test_max_history_per_column() -> None:
    configs = [
        sw.create_config([REF_STEP["a"][-3:], REF_STEP["b"]["d"][0][-2]], "t"),
        sw.create_config([REF_STEP["a"][-5::2]], "t", [C.data(STEP_SPEC)["b"]["c"] == 1]),
    ]
    assert engine_module.max_history_per_column(configs) == [5, 1, 2]


# ------------------------------------------------------------------------------ signatures


@pytest.mark.parametrize(
    ("patterns", "step_spec", "want"),
    [
        (
            [{"older": REF_STEP["a"][-3:-1], "last_a": REF_STEP["a"][-1]}],
            {"a": np.zeros([3, 3], np.float32)},
            {
                "older": TensorSpec([2, 3, 3], np.float32, "older"),
                "last_a": TensorSpec([3, 3], np.float32, "last_a"),
            },
        ),
        (
            [
                {
                    "a_with_step": REF_STEP["a"][-6::2],
                    "a_slice": REF_STEP["a"][-4:],
                    "x": {"y": REF_STEP["b"]["c"][-2]},
                }
            ],
            {
                "a": np.zeros([3, 3], np.float32),
                "b": {"c": np.zeros([], np.int32), "d": np.zeros([5], np.int8)},
            },
            {
                "a_with_step": TensorSpec([3, 3, 3], np.float32, "a_with_step"),
                "a_slice": TensorSpec([4, 3, 3], np.float32, "a_slice"),
                "x": {"y": TensorSpec([], np.int32, "x/y")},
            },
        ),
        (
            [
                {"x": REF_STEP["a"][-3:-1], "y": REF_STEP["a"][-1], "z": REF_STEP["b"]["c"][-4:]},
                {"x": REF_STEP["a"][-2:], "y": REF_STEP["a"][-2], "z": REF_STEP["b"]["c"][-8::2]},
            ],
            {"a": np.zeros([3, 3], np.float32), "b": {"c": np.zeros([2, 2], np.int8)}},
            {
                "x": TensorSpec([2, 3, 3], np.float32, "x"),
                "y": TensorSpec([3, 3], np.float32, "y"),
                "z": TensorSpec([4, 2, 2], np.int8, "z"),
            },
        ),
        (
            [{"x": REF_STEP["a"][-3:-1]}, {"x": REF_STEP["a"][-2:]}, {"x": REF_STEP["a"][-3:]}],
            {"a": np.zeros([3, 3], np.float32)},
            {"x": TensorSpec([None, 3, 3], np.float32, "x")},
        ),
        # The number of steps of a slice with a step is rounded up (Reverb rounds down).
        (
            [{"x": REF_STEP["a"][-4::3]}],
            {"a": TensorSpec([], np.int64)},
            {"x": TensorSpec([2], np.int64, "x")},
        ),
    ],
)
def test_infer_signature(patterns: list[Any], step_spec: Any, want: Any) -> None:
    configs = [sw.create_config(pattern, "table") for pattern in patterns]
    assert sw.infer_signature(configs, step_spec) == want


def test_infer_signature_merges_vectors_of_different_lengths() -> None:
    # Reverb's rule: rank-1 shapes that differ merge into an unknown dimension.
    configs = [
        sw.create_config({"x": REF_STEP["b"]["d"][0][-1]}, "t"),
        sw.create_config({"x": REF_STEP["b"]["d"][1][-1]}, "t"),
    ]
    assert sw.infer_signature(configs, STEP_SPEC) == {"x": TensorSpec([None], np.int64, "x")}


def test_infer_signature_errors() -> None:
    pattern = {"x": REF_STEP["a"][-3:]}
    with pytest.raises(ValueError, match="At least one config must be provided."):
        sw.infer_signature([], STEP_SPEC)
    with pytest.raises(
        ValueError,
        match="All configs must target the same table but provided configs included a, b, c.",
    ):
        sw.infer_signature([sw.create_config(pattern, table) for table in "cab"], STEP_SPEC)
    with pytest.raises(ValueError, match="exactly the same pattern_structure"):
        sw.infer_signature(
            [sw.create_config(pattern, "t"), sw.create_config({"y": REF_STEP["a"][-3:]}, "t")],
            STEP_SPEC,
        )
    with pytest.raises(ValueError, match="multiple dtypes at"):
        sw.infer_signature(
            [sw.create_config(pattern, "t"), sw.create_config({"x": REF_STEP["b"]["c"][-3:]}, "t")],
            STEP_SPEC,
        )
    with pytest.raises(ValueError, match="incompatible shapes at"):
        sw.infer_signature(
            [
                sw.create_config({"x": REF_STEP["b"]["d"][0][-2:]}, "t"),
                sw.create_config({"x": REF_STEP["b"]["d"][1][-2:]}, "t"),
            ],
            STEP_SPEC,
        )
    with pytest.raises(ValueError, match="incompatible shapes at"):
        sw.infer_signature(
            [
                sw.create_config({"x": REF_STEP["b"]["d"][0][-2:]}, "t"),
                sw.create_config({"x": REF_STEP["b"]["d"][0][-1]}, "t"),
            ],
            STEP_SPEC,
        )
