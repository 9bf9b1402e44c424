"""Blocking and asyncio clients against a server over loopback."""

from __future__ import annotations

import asyncio
import pickle
import threading

import numpy as np
import pytest

import reverb_py as reverb
from reverb_py import errors


def tables():
    return [
        reverb.Table(
            name="my_table",
            sampler=reverb.selectors.Uniform(),
            remover=reverb.selectors.Fifo(),
            max_size=1000,
            rate_limiter=reverb.rate_limiters.MinSize(1),
        ),
        reverb.Table(
            name="prio",
            sampler=reverb.selectors.Prioritized(1.0),
            remover=reverb.selectors.Fifo(),
            max_size=1000,
            rate_limiter=reverb.rate_limiters.MinSize(1),
            signature={
                "obs": reverb.TensorSpec((None, 3), np.float32),
                "act": reverb.TensorSpec((None,), np.int64),
            },
        ),
        reverb.Table.queue("queue", 5),
    ]


def prio_step(value: float) -> dict[str, np.ndarray]:
    """A step that matches the signature of the ``prio`` table."""
    return {"obs": np.full(3, value, np.float32), "act": np.int64(value)}


@pytest.fixture(scope="module")
def server():
    server = reverb.Server(tables(), port=0)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def client(server):
    for table in ("my_table", "prio", "queue"):
        reverb.Client(f"localhost:{server.port}").reset(table)
    return reverb.Client(f"localhost:{server.port}")


def test_repr_and_pickle(client) -> None:
    assert repr(client) == f"Client, server_address={client.server_address}"
    clone = pickle.loads(pickle.dumps(client))
    assert clone.server_address == client.server_address
    assert "my_table" in clone.server_info()


def test_insert_into_several_tables_and_sample_all_dtypes(client, server) -> None:
    data = {
        "f32": np.arange(3, dtype=np.float32),
        "i8": np.int8(-5),
        "u64": np.uint64(2**64 - 1),
        "f16": np.float16(1.5),
        "c128": np.complex128(1 + 2j),
        "b": True,
        "s": b"bytes",
        "u": "text",
    }
    client.insert(data, priorities={"my_table": 1.0, "queue": 2.0})
    assert server.tables[0].info.current_size == 1
    assert server.tables[2].info.current_size == 1
    [sample] = list(client.sample("queue", 1, emit_timesteps=False))
    values = dict(zip(sorted(data), sample.data))
    for key, value in data.items():
        got = values[key]
        assert got.shape[0] == 1  # Client.insert stores a leading time axis of 1.
        if key in ("s", "u"):
            expected = value if isinstance(value, bytes) else value.encode()
            assert got[0] == expected
        else:
            np.testing.assert_array_equal(got[0], value)
            assert got.dtype == np.asarray(value).dtype
    assert sample.info.priority == 2.0 and sample.info.times_sampled == 1


def test_insert_requires_priorities(client) -> None:
    with pytest.raises(ValueError):
        client.insert([1], priorities={})


def test_sample_emits_timesteps(client) -> None:
    with client.trajectory_writer(num_keep_alive_refs=4) as writer:
        for step in range(4):
            writer.append({"x": np.float32(step), "y": np.arange(2) + step})
        writer.create_item(
            "my_table", 1.0, {"x": writer.history["x"][:], "y": writer.history["y"][:]}
        )
    [steps] = list(client.sample("my_table", 1))
    assert len(steps) == 4
    assert [float(step.data[0]) for step in steps] == [0.0, 1.0, 2.0, 3.0]
    # As Reverb: every per-step value is an array (0-d for a scalar column).
    assert all(isinstance(value, np.ndarray) for step in steps for value in step.data)
    assert steps[0].data[0].shape == () and steps[0].data[0].dtype == np.float32
    np.testing.assert_array_equal(steps[2].data[1], [2, 3])


def test_signature_validation_and_unpacking(client, server) -> None:
    info = client.server_info()
    assert info["prio"].signature["obs"] == reverb.TensorSpec((None, 3), np.float32)
    writer = client.trajectory_writer(2)
    writer.append({"obs": np.zeros(3, np.float32), "act": np.int64(1)})
    with pytest.raises(ValueError):
        writer.create_item(
            "prio", 1.0, {"obs": writer.history["act"][:], "act": writer.history["obs"][:]}
        )
    with pytest.raises(ValueError, match="could not be found"):
        writer.create_item("nope", 1.0, {"obs": writer.history["obs"][:]})
    writer.create_item(
        "prio", 1.0, {"obs": writer.history["obs"][:], "act": writer.history["act"][:]}
    )
    writer.flush()
    writer.close()
    [sample] = list(client.sample("prio", 1, emit_timesteps=False, unpack_as_table_signature=True))
    assert set(sample.data) == {"obs", "act"}
    assert sample.data["obs"].shape == (1, 3)


def test_mutate_priorities_and_reset(client, server) -> None:
    client.insert(prio_step(1), priorities={"prio": 1.0})
    client.insert(prio_step(2), priorities={"prio": 1.0})
    keys = [item.key for item in server.tables[1].items()]
    client.mutate_priorities("prio", updates={keys[0]: 5.0, 12345: 1.0}, deletes=[keys[1]])
    assert len(server.tables[1]) == 1 and server.tables[1].get(keys[0]).priority == 5.0
    client.reset("prio")
    assert len(server.tables[1]) == 0


def test_errors_map_to_reverb_types(client) -> None:
    with pytest.raises(RuntimeError, match="Priority table nope was not found"):
        client.reset("nope")
    with pytest.raises(errors.NotFoundError):
        next(client.sample("nope", 1))
    with pytest.raises(errors.DeadlineExceededError):
        next(client.sample("queue", 1, rate_limiter_timeout_ms=10))


def test_server_info_timeout_on_unreachable_server() -> None:
    client = reverb.Client("localhost:1")
    with pytest.raises(reverb.DeadlineExceededError, match="ServerInfo call did not complete"):
        client.server_info(timeout=0.2)


def test_sample_is_lazy(client, server) -> None:
    client.insert([1], priorities={"queue": 1.0})
    samples = client.sample("queue", 1)
    assert server.tables[2].info.current_size == 1  # Nothing requested yet.
    next(samples)
    assert server.tables[2].info.current_size == 0


def test_many_writer_threads(client, server) -> None:
    errors_seen: list[BaseException] = []

    def actor(index: int) -> None:
        try:
            with client.trajectory_writer(2) as writer:
                for step in range(20):
                    writer.append({"v": np.int64(index * 100 + step)})
                    writer.create_item("my_table", 1.0, {"v": writer.history["v"][-1]})
                writer.flush()
        except BaseException as error:  # noqa: BLE001
            errors_seen.append(error)

    threads = [threading.Thread(target=actor, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors_seen
    assert server.tables[0].info.current_size == 160


# ---------------------------------------------------------------- asyncio client


async def test_async_actors_share_one_client(server) -> None:
    client = reverb.aio.Client(f"localhost:{server.port}")
    await client.reset("my_table")

    async def actor(index: int) -> None:
        writer = await client.trajectory_writer(2)
        for step in range(10):
            writer.append({"v": np.int64(index * 100 + step)})
            writer.create_item("my_table", 1.0, {"v": writer.history["v"][-1]})
        await writer.flush()
        await writer.close()

    await asyncio.gather(*(actor(i) for i in range(16)))
    infos = await client.server_info()
    assert infos["my_table"].current_size == 160
    seen = set()
    async for sample in client.sample("my_table", 50, emit_timesteps=False):
        seen.add(int(sample.data[0]))
    assert seen <= {i * 100 + s for i in range(16) for s in range(10)}
    await client.insert({"a": 1}, priorities={"queue": 1.0})
    await client.mutate_priorities("my_table", deletes=[1])
    await client.close()


async def test_async_sample_waits_without_blocking_the_loop(server) -> None:
    client = reverb.aio.Client(f"localhost:{server.port}")
    await client.reset("queue")

    async def first_sample():
        async for sample in client.sample("queue", 1, emit_timesteps=False):
            return sample

    waiting = asyncio.ensure_future(first_sample())
    ticks = 0
    while server.tables[2].num_pending_samples == 0:
        ticks += 1
        await asyncio.sleep(0.001)
        assert ticks < 5000
    await client.insert([7], priorities={"queue": 1.0})
    sample = await waiting
    assert int(sample.data[0][0]) == 7
    await client.close()


def test_blocking_sampler_gets_a_clean_error_when_the_server_stops() -> None:
    server = reverb.Server([reverb.Table.queue("q", 1)])
    client = server.localhost_client()
    outcome: list[BaseException] = []

    def sampler() -> None:
        try:
            next(client.sample("q", 1))
        except BaseException as error:  # noqa: BLE001
            outcome.append(error)

    thread = threading.Thread(target=sampler)
    thread.start()
    table = server.tables[0]
    for _ in range(6000):
        if table.num_pending_samples:
            break
        thread.join(timeout=0.005)
    assert table.num_pending_samples == 1
    server.stop()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], reverb.ReverbError)
    assert isinstance(outcome[0], RuntimeError)


def test_checkpoint_round_trip_through_the_server(tmp_path) -> None:
    checkpointer = reverb.checkpointers.DefaultCheckpointer(str(tmp_path))
    server = reverb.Server(tables(), checkpointer=checkpointer)
    try:
        client = server.localhost_client()
        step = {"obs": np.arange(3, dtype=np.float32), "act": np.int64(7)}
        client.insert(step, priorities={"prio": 2.0, "queue": 1.0})
        path = client.checkpoint()
        assert path.startswith(str(tmp_path)) and (tmp_path / path.split("/")[-1] / "DONE").exists()
    finally:
        server.stop()
    restored = reverb.Server(
        tables(), checkpointer=reverb.checkpointers.DefaultCheckpointer(str(tmp_path))
    )
    try:
        client = restored.localhost_client()
        info = client.server_info()
        assert info["prio"].current_size == 1 and info["queue"].current_size == 1
        [sample] = list(client.sample("prio", 1, emit_timesteps=False))
        act, obs = sample.data  # flattened: sorted keys
        np.testing.assert_array_equal(obs, [np.arange(3, dtype=np.float32)])
        np.testing.assert_array_equal(act, [7])
        assert sample.info.priority == 2.0
    finally:
        restored.stop()


def test_checkpoint_naming_an_unknown_table_fails_server_start(tmp_path) -> None:
    checkpointer = reverb.checkpointers.DefaultCheckpointer(str(tmp_path))
    with reverb.Server([reverb.Table.queue("other", 1)], checkpointer=checkpointer) as server:
        server.checkpoint()
    with pytest.raises(ValueError, match="holds table 'other'"):
        reverb.Server([reverb.Table.queue("q", 1)], checkpointer=checkpointer)


def test_inserts_and_samples_proceed_while_a_checkpoint_is_written(tmp_path) -> None:
    started, release = threading.Event(), threading.Event()

    class PausingCheckpointer(reverb.checkpointers.DefaultCheckpointer):
        def save(self, snapshots, progress=None):
            def hold(*_progress):
                started.set()
                assert release.wait(60)

            return super().save(snapshots, progress=hold)

    server = reverb.Server(tables(), checkpointer=PausingCheckpointer(str(tmp_path)))
    try:
        client = server.localhost_client()
        client.insert([1], priorities={"my_table": 1.0})
        result: list[str] = []
        saver = threading.Thread(target=lambda: result.append(client.checkpoint()))
        saver.start()
        assert started.wait(60)  # The save is now paused half-way, off the event loop.
        client.insert([2], priorities={"my_table": 1.0})
        assert len(list(client.sample("my_table", 5))) == 5
        assert server.tables[0].info.current_size == 2
        release.set()
        saver.join(timeout=60)
        assert result and (tmp_path / result[0].split("/")[-1] / "DONE").exists()
    finally:
        release.set()
        server.stop()
    # The checkpoint holds the state at the moment it was taken: one item.
    restored = reverb.Server(
        tables(), checkpointer=reverb.checkpointers.DefaultCheckpointer(str(tmp_path))
    )
    try:
        assert restored.tables[0].info.current_size == 1
    finally:
        restored.stop()


def _mutate_outcome(call) -> tuple[type, str] | None:
    try:
        call()
    except Exception as error:  # noqa: BLE001 - the outcome is what is compared
        return type(error), str(error)
    return None


@pytest.mark.parametrize(
    ("table", "updates", "deletes"),
    [
        ("nope", {1: 1.0}, None),  # unknown table
        ("prio", {"KEY": -1.0}, None),  # refused priority ("KEY" is a present key)
        ("prio", {"a": 1.0}, None),  # not a key: the message refuses it
        ("prio", {1: "x"}, None),
        ("prio", {-1: 1.0}, None),
        ("prio", None, [2**64]),
        ("prio", {12345: 1.0}, [54321]),  # unknown keys: fine
    ],
)
def test_blocking_and_asyncio_mutate_fail_alike(server, table, updates, deletes) -> None:
    address = f"localhost:{server.port}"
    client = reverb.Client(address)
    client.reset("prio")
    client.insert(prio_step(1), priorities={"prio": 1.0})
    [key] = [item.key for item in server.tables[1].items()]
    if updates and "KEY" in updates:
        updates = {key: updates["KEY"]}
    blocking = _mutate_outcome(lambda: client.mutate_priorities(table, updates, deletes))

    async def run() -> None:
        async_client = reverb.aio.Client(address)
        try:
            await async_client.mutate_priorities(table, updates, deletes)
        finally:
            await async_client.close()

    asynchronous = _mutate_outcome(lambda: asyncio.run(run()))
    assert blocking == asynchronous
    if table == "nope":
        assert blocking == (errors.NotFoundError, "Priority table nope was not found")
    if updates and key in updates:
        assert blocking is not None and blocking[0] is errors.InvalidArgumentError
        assert server.tables[1].get(key).priority == 1.0


def test_blocking_mutate_from_many_threads(client, server) -> None:
    for step in range(8):
        client.insert(prio_step(step), priorities={"prio": 1.0})
    keys = [item.key for item in server.tables[1].items()]
    failures: list[BaseException] = []

    def work(index: int) -> None:
        try:
            for round_ in range(20):
                client.mutate_priorities("prio", updates={keys[index]: float(round_ + 1)})
        except BaseException as error:  # noqa: BLE001 - reported below
            failures.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert [server.tables[1].get(key).priority for key in keys] == [20.0] * 8


def test_blocking_sample_reads_ahead_a_bounded_window(client, monkeypatch) -> None:
    from reverb_py import client as client_module

    pulled: list[int] = []
    window_full = threading.Event()

    async def endless(*args, **kwargs):
        n = 0
        while True:
            n += 1
            pulled.append(n)
            if n == client_module._SAMPLE_WINDOW:
                window_full.set()
            yield n

    monkeypatch.setattr(client._client, "sample", endless)
    samples = client.sample("my_table", num_samples=10**9)
    assert next(samples) == 1
    assert window_full.wait(30)

    async def barrier() -> None:
        for _ in range(100):
            await asyncio.sleep(0)

    # The pump is parked until the consumer takes more: the loop runs on, nothing is read.
    client._loop_thread.run(barrier(), timeout=30)
    assert len(pulled) == client_module._SAMPLE_WINDOW
    for _ in range(client_module._SAMPLE_CREDIT):
        next(samples)
    client._loop_thread.run(barrier(), timeout=30)
    assert len(pulled) == client_module._SAMPLE_WINDOW + client_module._SAMPLE_CREDIT
    samples.close()
