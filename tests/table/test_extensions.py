"""Table extensions: each hook called where Reverb calls its C++ extensions, errors in
hooks isolated, the insert-on-sample extension, checkpoints with extensions."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import reverb_py
from reverb_py import rate_limiters, selectors
from reverb_py.table import Item, Table, TableExtensionBase
from reverb_py.table_extensions import InsertOnSampleExtension
from tests.helpers import until


class Recorder(TableExtensionBase):
    """Records every hook call with what the table looked like at that moment."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def on_insert(self, table: Table, item: Item) -> None:
        self.calls.append(("insert", item.key, item.key in table, len(table)))

    def on_update(self, table: Table, item: Item) -> None:
        self.calls.append(("update", item.key, item.priority))

    def on_sample(self, table: Table, item: Item) -> None:
        self.calls.append(("sample", item.key, item.times_sampled, item.key in table))

    def on_delete(self, table: Table, item: Item) -> None:
        self.calls.append(("delete", item.key, item.key in table))

    def on_reset(self, table: Table) -> None:
        self.calls.append(("reset", len(table)))


def make_table(extensions, max_size=10, max_times_sampled=0, name="t", limiter=None) -> Table:
    return Table(
        name=name,
        sampler=selectors.Fifo(),
        remover=selectors.Fifo(),
        max_size=max_size,
        rate_limiter=limiter or rate_limiters.MinSize(1),
        max_times_sampled=max_times_sampled,
        extensions=extensions,
        seed=0,
    )


async def test_each_hook_is_called_where_reverb_calls_it() -> None:
    recorder = Recorder()
    table = make_table([recorder], max_size=2, max_times_sampled=2)
    await table.insert(Item(1, 1.0))
    await table.insert(Item(2, 1.0))
    assert recorder.calls == [("insert", 1, True, 1), ("insert", 2, True, 2)]
    recorder.calls.clear()

    # Over max_size: on_insert first (the new item is in), then the eviction's delete.
    await table.insert(Item(3, 1.0))
    assert recorder.calls == [("insert", 3, True, 3), ("delete", 1, False)]
    recorder.calls.clear()

    # An insert under a held key is an update; so is mutate_priorities.
    await table.insert(Item(2, 5.0))
    table.mutate(updates={3: 7.0, 99: 1.0})
    assert recorder.calls == [("update", 2, 5.0), ("update", 3, 7.0)]
    recorder.calls.clear()

    # A sample counts itself before the hook; reaching max_times_sampled deletes after.
    [first] = await table.sample(1)
    [second] = await table.sample(1)
    assert first.key == second.key == 2
    assert recorder.calls == [("sample", 2, 1, True), ("sample", 2, 2, True), ("delete", 2, False)]
    recorder.calls.clear()

    table.mutate(deletes=[3, 42])
    assert recorder.calls == [("delete", 3, False)]
    recorder.calls.clear()

    await table.insert(Item(4, 1.0))
    recorder.calls.clear()
    table.reset()
    assert recorder.calls == [("reset", 1)]  # before the items go; no delete per item


async def test_restoring_a_checkpoint_calls_no_hook_and_keeps_the_extensions() -> None:
    recorder = Recorder()
    table = make_table([recorder])
    for key in (1, 2):
        await table.insert(Item(key, 1.0))
    snapshot = table.snapshot()
    restored = make_table([recorder])
    recorder.calls.clear()
    restored.restore(snapshot)
    assert recorder.calls == [] and len(restored) == 2
    await restored.sample(1)
    assert recorder.calls == [("sample", 1, 1, True)]
    assert restored.replace().extensions == (recorder,)


class Failing(TableExtensionBase):
    def __init__(self) -> None:
        self.calls = 0

    def _fail(self, *args: object) -> None:
        self.calls += 1
        raise RuntimeError("hook failed on purpose")

    on_insert = on_update = on_sample = on_delete = on_reset = _fail


async def test_an_error_in_a_hook_is_logged_and_the_table_keeps_serving(caplog) -> None:
    failing, recorder = Failing(), Recorder()
    table = make_table([failing, recorder], max_size=1, max_times_sampled=1)
    with caplog.at_level(logging.ERROR, logger="reverb_py"):
        await table.insert(Item(1, 1.0))
        await table.insert(Item(1, 2.0))
        await table.insert(Item(2, 1.0))  # evicts 1
        [sample] = await table.sample(1)
        await table.insert(Item(3, 1.0))
        table.mutate(updates={3: 4.0})
        table.reset()
    assert sample.key == 2 and len(table) == 0
    # insert, update, insert + delete, sample + delete, insert, update, reset
    assert failing.calls == 9
    # The extension after the failing one still ran every time.
    assert [call[0] for call in recorder.calls] == [
        "insert",
        "update",
        "insert",
        "delete",
        "sample",
        "delete",
        "insert",
        "update",
        "reset",
    ]
    messages = [record for record in caplog.records if "extension hook" in record.getMessage()]
    assert len(messages) == 9
    assert "Failing._fail" in messages[0].getMessage() and messages[0].exc_info is not None


def test_extensions_must_be_extension_objects() -> None:
    with pytest.raises(TypeError, match="TableExtensionBase"):
        make_table([object()])


def test_build_internal_extensions_is_the_extension_itself() -> None:
    recorder = Recorder()
    assert list(recorder.build_internal_extensions("t")) == [recorder]
    assert reverb_py.pybind.TableExtension is TableExtensionBase


# ------------------------------------------------------------------ insert on sample


async def test_insert_on_sample_copies_an_item_the_first_time_it_is_sampled() -> None:
    target = make_table([], name="target")
    chunk = object()
    source = make_table([InsertOnSampleExtension(target)], name="source")
    await source.insert(Item(7, 0.5, b"trajectory", (chunk,), (3,)))
    await source.sample(1)
    await source.sample(1)
    [copy] = target.items()
    assert (copy.key, copy.priority, copy.trajectory, copy.times_sampled) == (
        7,
        0.5,
        b"trajectory",
        0,
    )
    assert copy.chunks[0] is chunk and copy.episode_ids == (3,)
    assert source.get(7).times_sampled == 2  # the source's item is its own
    [sampled] = await target.sample(1)
    assert sampled.key == 7 and sampled.times_sampled == 1


async def test_insert_on_sample_waits_for_the_target_rate_limiter(caplog) -> None:
    target = make_table([], name="target", limiter=rate_limiters.Queue(1), max_times_sampled=1)
    source = make_table([InsertOnSampleExtension(target, timeout=None)], name="source")
    await target.insert(Item(100, 1.0))  # the queue is full now
    await source.insert(Item(1, 1.0))
    await source.sample(1)
    assert [item.key for item in target.items()] == [100]
    await target.sample(1)  # makes room: the waiting copy goes in
    assert [item.key for item in target.items()] == [1]


async def test_insert_on_sample_gives_up_after_its_timeout(caplog) -> None:
    target = make_table([], name="target", limiter=rate_limiters.Queue(1), max_times_sampled=1)
    source = make_table([InsertOnSampleExtension(target, timeout=0.0)], name="source")
    await target.insert(Item(100, 1.0))
    await source.insert(Item(1, 1.0))
    with caplog.at_level(logging.WARNING, logger="reverb_py"):
        await source.sample(1)
        assert target.num_pending_inserts == 1
        await until(lambda: target.num_pending_inserts == 0)
    [warning] = [
        record.getMessage() for record in caplog.records if "timed out" in record.getMessage()
    ]
    assert "item 1 from table 'source' to table 'target'" in warning
    await target.sample(1)
    assert len(target) == 0  # the copy never went in


async def test_insert_on_sample_refused_copies_are_logged(caplog) -> None:
    target = make_table([], name="target")
    target.close()
    source = make_table([InsertOnSampleExtension(target)], name="source")
    await source.insert(Item(1, 1.0))
    with caplog.at_level(logging.WARNING, logger="reverb_py"):
        [sample] = await source.sample(1)
    assert sample.key == 1
    assert any("cannot copy item 1" in record.getMessage() for record in caplog.records)


def test_insert_on_sample_arguments() -> None:
    with pytest.raises(TypeError):
        InsertOnSampleExtension("target")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        InsertOnSampleExtension(make_table([]), timeout=-1)


def test_insert_on_sample_through_a_server_and_its_checkpoints(tmp_path) -> None:
    """Items written by a client are copied into the target when first sampled; a
    checkpoint of both tables loads into a server with the same extensions, which keep
    working."""

    def tables() -> list[Table]:
        target = Table.queue("target", 10)
        source = Table(
            "source",
            selectors.Fifo(),
            selectors.Fifo(),
            10,
            rate_limiters.MinSize(1),
            max_times_sampled=2,
            extensions=[InsertOnSampleExtension(target)],
        )
        return [source, target]

    checkpointer = reverb_py.checkpointers.DefaultCheckpointer(str(tmp_path))
    server = reverb_py.Server(tables(), port=0, checkpointer=checkpointer)
    try:
        client = server.localhost_client()
        for step in range(2):
            client.insert(np.full(3, step, np.int32), {"source": 1.0})
        first = next(iter(client.sample("source", num_samples=1)))
        [copy] = list(client.sample("target", num_samples=1))
        np.testing.assert_array_equal(copy[0].data[0], first[0].data[0])
        client.checkpoint()
    finally:
        server.stop()
    checkpointer = reverb_py.checkpointers.DefaultCheckpointer(str(tmp_path))
    server = reverb_py.Server(tables(), port=0, checkpointer=checkpointer)
    try:
        client = server.localhost_client()
        info = client.server_info()
        assert info["source"].current_size == 2 and info["target"].current_size == 0
        samples = [next(iter(client.sample("source", num_samples=1))) for _ in range(2)]
        assert [sample[0].info.times_sampled for sample in samples] == [2, 1]
        [copy] = list(client.sample("target", num_samples=1))
        np.testing.assert_array_equal(copy[0].data[0], np.full(3, 1, np.int32))
    finally:
        server.stop()
