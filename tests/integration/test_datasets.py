"""The numpy datasets (``reverb_py.data``) against a real server over loopback."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import reverb_py as reverb
from reverb_py import data, errors
from reverb_py._client import datasets
from reverb_py._client.channel import shared_loop_thread

SEQUENCE = 4
STEPS = 200

SIGNATURE = {
    "obs": reverb.TensorSpec((SEQUENCE, 3), np.float32),
    "step": reverb.TensorSpec((SEQUENCE,), np.int64),
}
STEP_SIGNATURE = {
    "obs": reverb.TensorSpec((3,), np.float32),
    "step": reverb.TensorSpec((), np.int64),
}


def uniform(name: str, **kwargs: object) -> reverb.Table:
    return reverb.Table(
        name=name,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=10_000,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def server() -> Iterator[reverb.Server]:
    server = reverb.Server(
        [
            uniform("seq", signature=SIGNATURE),
            uniform("steps", signature=STEP_SIGNATURE),
            uniform("plain"),
            uniform("empty"),
            uniform("ragged"),
            reverb.Table.queue("queue", 100),
        ],
        port=0,
    )
    try:
        client = server.localhost_client()
        with client.trajectory_writer(SEQUENCE) as writer:
            for step in range(STEPS):
                writer.append({"obs": np.full(3, step, np.float32), "step": np.int64(step)})
                writer.create_item("steps", 1.0, _last(writer))
                if step + 1 >= SEQUENCE:
                    item = {
                        "obs": writer.history["obs"][-SEQUENCE:],
                        "step": writer.history["step"][-SEQUENCE:],
                    }
                    writer.create_item("seq", 1.0, item)
                    writer.create_item("plain", 1.0, item)
                if step + 1 >= 2 and step % 2:
                    ragged = {
                        "obs": writer.history["obs"][-(1 + step % 4 // 2) :],
                        "step": writer.history["step"][-1:],
                    }
                    writer.create_item("ragged", 1.0, ragged)
            writer.flush()
        yield server
    finally:
        server.stop()


def _last(writer: reverb.TrajectoryWriter) -> dict[str, object]:
    return {"obs": writer.history["obs"][-1], "step": writer.history["step"][-1]}


@pytest.fixture
def address(server: reverb.Server) -> str:
    return f"localhost:{server.port}"


def table(server: reverb.Server, name: str) -> reverb.Table:
    return next(t for t in server.tables if t.name == name)


def loop_tasks() -> int:
    async def count() -> int:

        return len(asyncio.all_tasks()) - 1

    return shared_loop_thread().run(count())


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Polls ``condition`` (each poll a round trip to the loop thread), bounded."""
    for _ in range(2000):
        if condition():
            return
        threading.Event().wait(0.005)
    raise AssertionError(f"still not {what}")


# ------------------------------------------------------------------ options


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_in_flight_samples_per_worker": 0}, r"max_in_flight_samples_per_worker \(0\)"),
        ({"num_workers_per_iterator": 0}, r"num_workers_per_iterator \(0\) must be a positive"),
        ({"max_samples_per_stream": -2}, r"max_samples_per_stream \(-2\)"),
        ({"rate_limiter_timeout_ms": -2}, r"rate_limiter_timeout_ms \(-2\) must be an integer"),
        ({"max_samples": 0}, r"max_samples \(0\) must be a positive integer or -1"),
        ({"batch_size": 0}, r"batch_size \(0\)"),
    ],
)
def test_options_are_checked_as_reverb_does(kwargs: dict[str, int], message: str) -> None:
    arguments: dict[str, object] = {"max_in_flight_samples_per_worker": 10, **kwargs}
    with pytest.raises(ValueError, match=message):
        data.TrajectoryIterator("localhost:1", "t", None, None, **arguments)  # type: ignore[arg-type]


def test_dtypes_and_shapes_must_share_a_structure() -> None:
    with pytest.raises(ValueError, match="same structure"):
        data.TrajectoryIterator("localhost:1", "t", {"a": np.float32}, {"b": ()}, 10)
    with pytest.raises(ValueError, match="both"):
        data.TrajectoryIterator("localhost:1", "t", {"a": np.float32}, None, 10)


def test_workers_follow_reverbs_rule() -> None:
    assert datasets.SamplerOptions(10).num_workers == 1
    assert datasets.SamplerOptions(10, 4).num_workers == 4
    assert datasets.SamplerOptions(10, 4, max_samples=25).num_workers == 2
    assert datasets.SamplerOptions(10, 4, max_samples=5).num_workers == 1
    assert datasets.SamplerOptions(10, 4).capacity == 40
    assert datasets.SamplerOptions(10).samples_per_stream == 10_000


# ------------------------------------------------------------------ shapes


def test_trajectories_from_the_table_signature(address: str) -> None:
    with data.TrajectoryIterator.from_table_signature(address, "seq", 16, max_samples=20) as it:
        samples = list(it)
    assert len(samples) == 20
    for sample in samples:
        assert isinstance(sample, reverb.ReplaySample)
        assert isinstance(sample.info.key, np.uint64)
        assert isinstance(sample.info.times_sampled, np.int32)
        assert sorted(sample.data) == ["obs", "step"]
        step = sample.data["step"]
        assert step.shape == (SEQUENCE,) and step.dtype == np.int64
        np.testing.assert_array_equal(step, np.arange(step[0], step[0] + SEQUENCE))
        np.testing.assert_array_equal(sample.data["obs"], np.repeat(step, 3).reshape(-1, 3))


def test_trajectories_without_specs_are_flat_lists(address: str) -> None:
    samples = list(data.TrajectoryIterator(address, "plain", None, None, 8, max_samples=3))
    assert len(samples) == 3
    obs, step = samples[0].data
    assert obs.shape == (SEQUENCE, 3) and step.shape == (SEQUENCE,)


def test_timesteps_one_per_step_in_order(address: str) -> None:
    it = data.TimestepIterator(
        address, "plain", {"obs": np.float32, "step": np.int64}, {"obs": (3,), "step": ()}, 4,
        max_samples=3,
    )  # fmt: skip
    steps = list(it)
    assert len(steps) == 3 * SEQUENCE
    for item in range(3):
        chunk = steps[item * SEQUENCE : (item + 1) * SEQUENCE]
        assert len({int(step.info.key) for step in chunk}) == 1
        values = [int(step.data["step"]) for step in chunk]
        assert values == list(range(values[0], values[0] + SEQUENCE))
        assert chunk[0].data["obs"].shape == (3,)


def test_timesteps_from_a_step_signature(address: str) -> None:
    steps = list(data.TimestepIterator.from_table_signature(address, "steps", 4, max_samples=5))
    assert len(steps) == 5
    assert steps[0].data["obs"].shape == (3,)
    assert steps[0].data["step"].shape == ()


def test_timesteps_refuse_items_of_unequal_columns(address: str) -> None:
    server_items = list(data.TrajectoryIterator(address, "plain", None, None, 4, max_samples=1))
    assert server_items  # the table serves
    with pytest.raises(errors.InvalidArgumentError, match="cannot be decomposed into timesteps"):
        list(data.TimestepIterator(address, "ragged", None, None, 4, max_samples=50))


# ------------------------------------------------------------------ batches


def test_trajectory_batches_are_stacked(address: str) -> None:
    it = data.TrajectoryIterator.from_table_signature(
        address, "seq", 32, max_samples=70, batch_size=32
    )
    batches = list(it)
    assert [len(batch.info.key) for batch in batches] == [32, 32, 6]
    for batch in batches:
        size = len(batch.info.key)
        assert batch.info.key.dtype == np.uint64
        assert batch.info.probability.dtype == np.float64
        assert batch.info.table_size.dtype == np.int64
        assert batch.info.priority.dtype == np.float64
        assert batch.info.times_sampled.dtype == np.int32
        assert batch.data["obs"].shape == (size, SEQUENCE, 3)
        assert batch.data["step"].shape == (size, SEQUENCE)
        starts = batch.data["step"][:, :1]
        np.testing.assert_array_equal(batch.data["step"], starts + np.arange(SEQUENCE))
        np.testing.assert_array_equal(batch.data["obs"][..., 0], batch.data["step"])


def test_drop_remainder_drops_the_last_partial_batch(address: str) -> None:
    it = data.TrajectoryIterator.from_table_signature(
        address, "seq", 32, max_samples=70, batch_size=32, drop_remainder=True
    )
    assert [len(batch.info.key) for batch in it] == [32, 32]


def test_timestep_batches_span_items(address: str) -> None:
    it = data.TimestepIterator(
        address, "plain", {"obs": np.float32, "step": np.int64}, {"obs": (3,), "step": ()}, 8,
        max_samples=5, batch_size=6,
    )  # fmt: skip
    batches = list(it)
    assert [len(batch.info.key) for batch in batches] == [6, 6, 6, 2]
    keys = np.concatenate([batch.info.key for batch in batches])
    steps = np.concatenate([batch.data["step"] for batch in batches])
    assert batches[0].data["obs"].shape == (6, 3)
    for item in range(5):
        part = slice(item * SEQUENCE, (item + 1) * SEQUENCE)
        assert len(set(keys[part].tolist())) == 1
        np.testing.assert_array_equal(steps[part], steps[part][0] + np.arange(SEQUENCE))
    dropped = data.TimestepIterator(
        address, "plain", None, None, 8, max_samples=5, batch_size=6, drop_remainder=True
    )
    assert [len(batch.info.key) for batch in dropped] == [6, 6, 6]


def _check_sequences(batch: reverb.ReplaySample) -> None:
    starts = batch.data["step"][:, :1]
    np.testing.assert_array_equal(batch.data["step"], starts + np.arange(SEQUENCE))
    np.testing.assert_array_equal(batch.data["obs"][..., 0], batch.data["step"])


@pytest.mark.parametrize("per_stream", [128, 100])
def test_batches_stay_whole_across_reopened_streams(address: str, per_stream: int) -> None:
    it = data.TrajectoryIterator.from_table_signature(
        address, "seq", 48, max_samples_per_stream=per_stream, max_samples=640, batch_size=64
    )
    batches = list(it)
    assert [len(batch.info.key) for batch in batches] == [64] * 10
    for batch in batches:
        _check_sequences(batch)
        # 64-byte aligned arrays (JAX's CPU devices use them in place), whether a batch
        # is a block of the compiled batch path or pieces put together.
        for leaf in batch.data.values():
            assert leaf.ctypes.data % datasets.ALIGNMENT == 0


def test_a_batch_of_pieces_is_their_samples_in_order() -> None:
    def info(key: int) -> reverb.SampleInfo:
        return reverb.SampleInfo(key, 0.5, 10, 1.0, 2)

    def block(keys: list[int]) -> datasets.Block:
        fields = [np.array([info(key)[index] for key in keys], dtype) for index, dtype in
                  enumerate(reverb.SampleInfo.dtypes())]  # fmt: skip
        column = np.array([[key, key] for key in keys], np.float32)
        return datasets.Block(reverb.SampleInfo(*fields), [column], len(keys))

    single = (info(3), [np.array([3, 3], np.float32)], (False,))
    checker = datasets._Checker("t", [(np.dtype(np.float32), (2,))])
    pieces: list[datasets.Piece] = [block([1, 2]), single, block([4])]
    batch = datasets._combined("t", checker, pieces, lambda values: values)
    assert batch.info.key.dtype == np.uint64
    assert batch.info.key.tolist() == [1, 2, 3, 4]
    assert batch.info.times_sampled.dtype == np.int32
    np.testing.assert_array_equal(batch.data[0], [[1, 1], [2, 2], [3, 3], [4, 4]])
    whole = block([7, 8])
    assert (
        datasets._combined("t", checker, [whole], lambda values: values).data[0]
        is (whole.columns[0])
    )
    head, tail = block([1, 2, 3]).split(1)
    assert head.rows == 1 and tail.rows == 2 and tail.info.key.tolist() == [2, 3]


def test_a_sampler_splits_its_blocks_for_smaller_batches(address: str) -> None:
    options = datasets.SamplerOptions(16, max_samples=40)
    sampler = datasets.Sampler(address, "seq", options, batch=16)
    try:
        batches = list(datasets.trajectories(sampler, batch_size=5))
    finally:
        sampler.close()
    assert [len(batch.info.key) for batch in batches] == [5] * 8
    for batch in batches:
        _check_sequences(
            reverb.ReplaySample(batch.info, {"obs": batch.data[0], "step": batch.data[1]})
        )


def test_batches_of_items_of_different_shapes_fail_clearly(address: str) -> None:
    with pytest.raises(errors.InvalidArgumentError, match="different shapes"):
        for _ in data.TrajectoryIterator(address, "ragged", None, None, 16, batch_size=16):
            pass


# ------------------------------------------------------------------ max_samples, streams


def test_max_samples_takes_no_more_from_the_table(server: reverb.Server, address: str) -> None:
    client = server.localhost_client()
    client.reset("queue")
    for value in range(10):
        client.insert(np.int64(value), {"queue": 1.0})
    it = data.TrajectoryIterator(address, "queue", None, None, 2, max_samples=4)
    assert [int(sample.data[0][0]) for sample in it] == [0, 1, 2, 3]
    assert table(server, "queue").info.current_size == 6
    client.reset("queue")


def test_streams_are_reopened_after_max_samples_per_stream(
    address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    budgets: list[int] = []
    original = datasets.Sampler._stream

    async def counting(self: datasets.Sampler, channel: object, budget: int) -> None:
        budgets.append(budget)
        await original(self, channel, budget)  # type: ignore[arg-type]

    monkeypatch.setattr(datasets.Sampler, "_stream", counting)
    it = data.TrajectoryIterator(
        address, "plain", None, None, 3, max_samples_per_stream=7, max_samples=30
    )
    assert len(list(it)) == 30
    assert budgets == [7, 7, 7, 7, 2]


def test_several_workers_share_max_samples(address: str) -> None:
    it = data.TrajectoryIterator(
        address, "plain", None, None, 5, num_workers_per_iterator=3, max_samples=47
    )
    assert len(list(it)) == 47


# ------------------------------------------------------------------ rate limiter timeout


def test_rate_limiter_timeout_on_an_empty_table_ends_the_iteration(address: str) -> None:
    it = data.TrajectoryIterator(address, "empty", None, None, 4, rate_limiter_timeout_ms=20)
    assert list(it) == []


def test_rate_limiter_timeout_ends_after_what_the_table_had(
    server: reverb.Server, address: str
) -> None:
    client = server.localhost_client()
    client.reset("queue")
    for value in range(3):
        client.insert(np.int64(value), {"queue": 1.0})
    it = data.TrajectoryIterator(address, "queue", None, None, 10, rate_limiter_timeout_ms=50)
    assert [int(sample.data[0][0]) for sample in it] == [0, 1, 2]


# ------------------------------------------------------------------ signatures


def test_from_table_signature_errors(address: str) -> None:
    with pytest.raises(ValueError, match="does not contain any table named nope. Found: "):
        data.TrajectoryIterator.from_table_signature(address, "nope", 10)
    with pytest.raises(ValueError, match="Table plain at .* does not have a signature"):
        data.TimestepIterator.from_table_signature(address, "plain", 10)


def test_requested_specs_are_checked_against_the_signature(address: str) -> None:
    it = data.TrajectoryIterator(address, "seq", (np.float32,), ((SEQUENCE, 3),), 10)
    with pytest.raises(
        errors.InvalidArgumentError,
        match=r"Inconsistent number of tensors requested from table 'seq'.  Requested 1 "
        r"tensors, but table signature shows 2 tensors.  Table signature: 0: Tensor<name: "
        r"'obs', dtype: float, shape: \[4,3\]>, 1: Tensor<name: 'step', dtype: int64, "
        r"shape: \[4\]>",
    ):
        next(it)
    it = data.TrajectoryIterator(
        address, "seq", {"obs": np.float64, "step": np.int64}, {"obs": (None, 3), "step": None}, 10
    )
    with pytest.raises(
        errors.InvalidArgumentError,
        match=r"Requested incompatible tensor at flattened index 0 from table 'seq'.  "
        r"Requested \(dtype, shape\): \(double, \[\?,3\]\).  Signature \(dtype, shape\): "
        r"\(float, \[4,3\]\)",
    ):
        next(it)


def test_samples_are_checked_against_the_requested_specs(address: str) -> None:
    it = data.TrajectoryIterator(
        address, "plain", {"obs": np.float32, "step": np.int32}, {"obs": None, "step": None}, 4
    )
    with pytest.raises(
        errors.InvalidArgumentError,
        match=r"Received incompatible tensor at flattened index 1 from table 'plain'.  "
        r"Specification has \(dtype, shape\): \(int32, <unknown>\).  Tensor has "
        r"\(dtype, shape\): \(int64, \[4\]\)",
    ):
        next(it)
    it = data.TrajectoryIterator(address, "plain", (np.float32,), ((SEQUENCE, 3),), 4)
    with pytest.raises(
        errors.InvalidArgumentError, match="Inconsistent number of tensors received"
    ):
        next(it)


# ------------------------------------------------------------------ shutdown


def test_close_mid_iteration_leaves_no_stream_or_thread(address: str) -> None:
    threads = threading.active_count()
    tasks = loop_tasks()
    it = data.TrajectoryIterator(address, "plain", None, None, 8, num_workers_per_iterator=2)
    next(it)
    assert loop_tasks() > tasks
    it.close()
    # gRPC may still be finishing its own bookkeeping of the closed channel.
    wait_for(lambda: loop_tasks() <= tasks, "closed")
    assert threading.active_count() <= threads
    with pytest.raises(StopIteration):
        next(it)
    it.close()


def test_garbage_collection_closes_the_streams(address: str) -> None:
    tasks = loop_tasks()
    it = data.TrajectoryIterator(address, "plain", None, None, 8, batch_size=4)
    next(it)
    assert loop_tasks() > tasks
    del it
    gc.collect()
    wait_for(lambda: loop_tasks() <= tasks, "closed")


def test_close_releases_a_consumer_waiting_on_the_server(
    server: reverb.Server, address: str
) -> None:
    tasks = loop_tasks()
    empty = table(server, "empty")
    it = data.TrajectoryIterator(address, "empty", None, None, 4)
    outcome: list[object] = []

    def consume() -> None:
        outcome.extend(it)

    thread = threading.Thread(target=consume)
    thread.start()
    wait_for(lambda: empty.num_pending_samples == 1, "waiting on the server")
    it.close()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert outcome == []
    wait_for(lambda: empty.num_pending_samples == 0, "cancelled on the server")
    wait_for(lambda: loop_tasks() <= tasks, "closed")


def test_a_server_stopped_mid_iteration_raises_in_the_consumer() -> None:
    server = reverb.Server([reverb.Table.queue("q", 100)], port=0)
    try:
        client = server.localhost_client()
        for value in range(5):
            client.insert(np.int64(value), {"q": 1.0})
        it = data.TrajectoryIterator(f"localhost:{server.port}", "q", None, None, 2)
        assert [int(next(it).data[0][0]) for _ in range(5)] == [0, 1, 2, 3, 4]
        wait_for(lambda: server.tables[0].num_pending_samples == 1, "waiting on the server")
    finally:
        server.stop()
    with pytest.raises(errors.ReverbError, match="Sampling table 'q' at localhost:"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)


def test_an_unknown_table_raises(address: str) -> None:
    with pytest.raises(errors.NotFoundError):
        next(data.TrajectoryIterator(address, "nope", None, None, 4))


def test_an_unreachable_server_raises() -> None:
    with pytest.raises(errors.UnavailableError):
        next(data.TrajectoryIterator("localhost:1", "t", None, None, 4))
