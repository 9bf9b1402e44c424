"""The records a table and a server hold (``Item``, ``Chunk``, ``LiveChunks``): the same
behaviour from both twins, and the compiled ones out of the cyclic garbage collector."""

from __future__ import annotations

import gc
import pickle
import random
import types
from collections.abc import Callable

import pytest

from reverb_py import errors
from tests.helpers import compiled_module


def test_the_twins_name_the_same_things() -> None:
    from reverb_py._pure import records as pure

    compiled = compiled_module("records")
    assert sorted(pure.__all__) == sorted(compiled.__all__) == ["Chunk", "Item", "LiveChunks"]


def test_item_defaults_attributes_repr_and_pickle(impl: types.SimpleNamespace) -> None:
    item = impl.Item(7, 0.5)
    assert (item.key, item.priority, item.trajectory, item.chunks) == (7, 0.5, None, ())
    assert (item.episode_ids, item.times_sampled, item.inserted_at) == ((), 0, 0)
    chunk = impl.Chunk(3, 1, b"abc", (1,))
    item = impl.Item(2**64 - 1, 2.0, b"traj", (chunk,), (1,), 4, 99)
    item.priority = 3.5
    item.times_sampled += 1
    item.key = 5
    assert repr(item) == "Item(key=5, priority=3.5, times_sampled=5, chunks=1)"
    copy = pickle.loads(pickle.dumps(item))
    assert type(copy) is impl.Item
    assert (copy.key, copy.priority, copy.trajectory, copy.episode_ids) == (5, 3.5, b"traj", (1,))
    assert (copy.times_sampled, copy.inserted_at) == (5, 99)
    assert [(c.key, c.data, c.steps) for c in copy.chunks] == [(3, b"abc", (1,))]
    with pytest.raises(AttributeError):
        item.other = 1  # type: ignore[attr-defined]


def test_chunk_key_and_data_are_read_only(impl: types.SimpleNamespace) -> None:
    chunk = impl.Chunk(3, 1, b"abcd")
    assert (chunk.steps, chunk.defect) == ((), None)
    chunk.steps = (4,)
    chunk.defect = "no tensors"
    chunk.episode_id = 9
    with pytest.raises(AttributeError):
        chunk.key = 4
    with pytest.raises(AttributeError):
        chunk.data = b""
    assert repr(chunk) == "Chunk(key=3, episode_id=9, bytes=4)"
    copy = pickle.loads(pickle.dumps(chunk))
    assert type(copy) is impl.Chunk
    assert (copy.key, copy.episode_id, copy.data, copy.steps, copy.defect) == (
        3,
        9,
        b"abcd",
        (4,),
        "no tensors",
    )


def test_a_chunk_is_made_once(impl: types.SimpleNamespace) -> None:
    live = impl.LiveChunks()
    chunk = impl.Chunk(1, 0, b"abc")
    live.add(chunk)
    with pytest.raises(TypeError, match="A Chunk is made once"):
        chunk.__init__(2, 0, b"x")
    assert (chunk.key, chunk.data) == (1, b"abc")
    del chunk
    gc.collect()
    assert (len(live), live.nbytes, live.get(1), live.get(2)) == (0, 0, None, None)
    with pytest.raises(TypeError):
        impl.LiveChunks(1)


class _Sized:
    """Chunk data whose ``len()`` runs code."""

    def __init__(self, size: int, on_len: Callable[[], None]) -> None:
        self.size = size
        self.on_len = on_len

    def __len__(self) -> int:
        on_len, self.on_len = self.on_len, lambda: None
        on_len()
        return self.size


def test_a_chunk_added_while_another_is_added_keeps_the_index_whole(
    impl: types.SimpleNamespace,
) -> None:
    live = impl.LiveChunks()
    held: dict[str, object] = {"inner": impl.Chunk(5, 0, b"ab")}
    held["outer"] = impl.Chunk(5, 0, _Sized(7, lambda: live.add(held["inner"])))
    # The key was taken while the outer chunk's size was read: the first chunk stays.
    assert live.add(held["outer"]) is held["inner"]
    assert (len(live), live.get(5)) == (1, held["inner"])
    held["again"] = impl.Chunk(6, 0, _Sized(3, lambda: live.add(held["again"])))
    assert live.add(held["again"]) is held["again"]
    assert len(live) == 2
    held.clear()
    gc.collect()
    assert (len(live), live.nbytes) == (0, 0)


def test_live_chunks_keep_the_first_chunk_of_a_key(impl: types.SimpleNamespace) -> None:
    live = impl.LiveChunks()
    first, again, other = impl.Chunk(5, 0, b"abc"), impl.Chunk(5, 0, b"abc"), impl.Chunk(6, 0, b"x")
    assert live.add(first) is first
    assert live.add(again) is first
    assert live.add(first) is first
    assert live.add(other) is other
    assert len(live) == 2
    assert live.nbytes == 4
    assert live.get(5) is first
    assert live.get(7) is None
    assert live.get("5") is None
    assert sorted(chunk.key for chunk in live.values()) == [5, 6]


def test_a_freed_chunk_leaves_every_live_chunks_it_is_in(impl: types.SimpleNamespace) -> None:
    one, two = impl.LiveChunks(), impl.LiveChunks()
    chunk = impl.Chunk(5, 0, b"abc")
    one.add(chunk)
    two.add(chunk)
    held = (impl.Item(1, 1.0, chunks=(chunk,)),)
    del chunk
    gc.collect()
    assert len(one) == len(two) == 1
    del held
    gc.collect()
    assert (len(one), one.nbytes, one.get(5)) == (0, 0, None)
    assert (len(two), two.nbytes, one.values()) == (0, 0, [])
    newer = impl.Chunk(5, 0, b"other bytes")
    assert one.add(newer) is newer  # The key is free again.


def test_a_chunk_outlives_its_live_chunks(impl: types.SimpleNamespace) -> None:
    live = impl.LiveChunks()
    chunk = impl.Chunk(5, 0, b"abc")
    live.add(chunk)
    del live
    gc.collect()
    assert chunk.data == b"abc"
    del chunk
    gc.collect()


def test_live_chunks_refuse_what_is_not_a_chunk_with_a_key(impl: types.SimpleNamespace) -> None:
    live = impl.LiveChunks()
    with pytest.raises(TypeError, match="LiveChunks holds Chunk objects, not bytes"):
        live.add(b"abc")
    with pytest.raises(TypeError, match="Key must be an integer, got str"):
        live.add(impl.Chunk("5", 0, b""))
    with pytest.raises(errors.InvalidArgumentError, match=r"\[0, 2\*\*64\), got -1"):
        live.add(impl.Chunk(-1, 0, b""))
    with pytest.raises(errors.InvalidArgumentError, match=r"got 18446744073709551616"):
        live.add(impl.Chunk(2**64, 0, b""))
    with pytest.raises(TypeError):
        live.add(impl.Chunk(3, 0, object()))  # data without a length
    assert len(live) == 0


def test_live_chunks_follow_chunks_made_and_freed_at_random(impl: types.SimpleNamespace) -> None:
    rng = random.Random(11)
    lives = [impl.LiveChunks(), impl.LiveChunks()]
    held: list[object] = []  # Only these chunks are alive.

    def make() -> None:
        chunk = impl.Chunk(rng.randrange(64), 0, bytes(rng.randrange(8)))
        for live in lives:
            if rng.random() < 0.7:
                live.add(chunk)
        held.append(chunk)

    def check(live: object) -> None:
        values = live.values()  # type: ignore[attr-defined]
        # Every filed chunk is one still held, one per key, found by its key.
        assert all(any(chunk is h for h in held) for chunk in values)
        assert len({chunk.key for chunk in values}) == len(values) == len(live)  # type: ignore[arg-type]
        assert live.nbytes == sum(len(chunk.data) for chunk in values)  # type: ignore[attr-defined]
        assert all(live.get(chunk.key) is chunk for chunk in values)  # type: ignore[attr-defined]

    filed = 0
    for _ in range(3000):
        if rng.random() < 0.55 or not held:
            make()
        else:
            held.pop(rng.randrange(len(held)))
        if rng.random() < 0.05:
            gc.collect()
        for live in lives:
            check(live)
            filed = max(filed, len(live))
    assert filed > 10
    held.clear()
    gc.collect()
    assert [len(live) for live in lives] == [0, 0]
    assert [live.nbytes for live in lives] == [0, 0]


def test_the_compiled_records_are_not_tracked_by_the_collector(
    impl: types.SimpleNamespace,
) -> None:
    chunk = impl.Chunk(5, 0, b"abc", (1,))
    item = impl.Item(1, 1.0, b"trajectory", (chunk, chunk), (0, 0))
    live = impl.LiveChunks()
    live.add(chunk)
    gc.collect()
    # A tuple holding only objects the collector does not track leaves it at a collection.
    tracked = [gc.is_tracked(obj) for obj in (item, chunk, item.chunks)]
    if impl.kind == "cy":
        assert tracked == [False, False, False]
    else:
        assert tracked == [True, True, True]
