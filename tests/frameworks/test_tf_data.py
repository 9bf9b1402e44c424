"""reverb_py.TrajectoryDataset / TimestepDataset: real tf.data datasets over the core."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest

import reverb_py as reverb
from tests.frameworks._tables import SEQUENCE, dry_server, filled_server, within

tf = pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    server = filled_server()
    try:
        yield f"localhost:{server.port}"
    finally:
        server.stop()


@pytest.fixture
def small_tables() -> Iterator[str]:
    server = dry_server()
    try:
        yield f"localhost:{server.port}"
    finally:
        server.stop()


def check_sequences(obs: np.ndarray, steps: np.ndarray) -> None:
    np.testing.assert_array_equal(steps, steps[..., :1] + np.arange(SEQUENCE))
    np.testing.assert_array_equal(obs[..., 0], steps)


def test_a_trajectory_dataset_is_a_tf_dataset_with_reverbs_element_spec(address: str) -> None:
    dataset = reverb.TrajectoryDataset.from_table_signature(address, "seq", 16, max_samples=10)
    assert isinstance(dataset, tf.data.Dataset)
    spec = dataset.element_spec
    assert isinstance(spec, reverb.ReplaySample)
    assert spec.info.key == tf.TensorSpec([], tf.uint64)
    assert spec.info.times_sampled == tf.TensorSpec([], tf.int32)
    assert spec.data["obs"] == tf.TensorSpec([SEQUENCE, 2], tf.float32)
    samples = list(dataset)  # eager iteration
    assert len(samples) == 10
    check_sequences(samples[0].data["obs"].numpy(), samples[0].data["step"].numpy())


def test_batch_prefetch_and_numpy(address: str) -> None:
    dataset = reverb.TrajectoryDataset(
        address, "seq", {"obs": tf.float32, "step": tf.int64},
        {"obs": tf.TensorShape([SEQUENCE, 2]), "step": tf.TensorShape([SEQUENCE])}, 32,
        max_samples=70,
    )  # fmt: skip
    batches = list(dataset.batch(32, drop_remainder=True).prefetch(2).as_numpy_iterator())
    assert [batch.info.key.shape for batch in batches] == [(32,), (32,)]
    assert batches[0].info.key.dtype == np.uint64
    for batch in batches:
        check_sequences(batch.data["obs"], batch.data["step"])


def test_batch_of_the_dataset_hands_over_whole_batches(address: str) -> None:
    dataset = reverb.TrajectoryDataset.from_table_signature(address, "seq", 16, max_samples=20)
    batched = dataset.batch(8, drop_remainder=True)
    assert isinstance(batched, reverb.TrajectoryDataset)
    # The spec TensorFlow's own batch of the samples has.
    assert batched.element_spec == tf.data.Dataset.batch(dataset, 8, True).element_spec
    assert batched.element_spec.data["obs"] == tf.TensorSpec([8, SEQUENCE, 2], tf.float32)
    assert batched.element_spec.info.key == tf.TensorSpec([8], tf.uint64)
    batches = list(batched.prefetch(2).as_numpy_iterator())
    assert [batch.info.key.shape for batch in batches] == [(8,), (8,)]
    for batch in batches:
        check_sequences(batch.data["obs"], batch.data["step"])
    kept = dataset.batch(8)
    assert kept.element_spec.data["obs"].shape.as_list() == [None, SEQUENCE, 2]
    assert [len(batch.info.key) for batch in kept.as_numpy_iterator()] == [8, 8, 4]
    # Anything else is TensorFlow's batch: a tensor size, or batching batches.
    generic = dataset.batch(tf.constant(8, tf.int64))
    assert not isinstance(generic, reverb.TrajectoryDataset)
    assert [len(batch.info.key) for batch in generic.as_numpy_iterator()] == [8, 8, 4]
    twice = batched.batch(2)
    assert twice.element_spec.data["obs"].shape.as_list() == [None, 8, SEQUENCE, 2]
    assert [batch.data["obs"].shape for batch in twice.as_numpy_iterator()] == [(2, 8, SEQUENCE, 2)]


def test_batch_of_timesteps_spans_items(address: str) -> None:
    dataset = reverb.TimestepDataset(
        address, "plain", {"obs": tf.float32, "step": tf.int64}, {"obs": [2], "step": []}, 8,
        max_samples=5,
    )  # fmt: skip
    batched = dataset.batch(6, drop_remainder=True)
    assert isinstance(batched, reverb.TimestepDataset)
    assert batched.element_spec.data["step"] == tf.TensorSpec([6], tf.int64)
    batches = list(batched.as_numpy_iterator())
    assert len(batches) == 5 * SEQUENCE // 6
    steps = np.concatenate([batch.data["step"] for batch in batches])
    keys = np.concatenate([batch.info.key for batch in batches])
    for item in range(len(steps) // SEQUENCE):
        part = slice(item * SEQUENCE, (item + 1) * SEQUENCE)
        assert len(set(keys[part].tolist())) == 1
        np.testing.assert_array_equal(steps[part], steps[part][0] + np.arange(SEQUENCE))


def test_inside_interleave_as_acme_builds_it(address: str) -> None:
    def make(_: object) -> tf.data.Dataset:
        return reverb.TrajectoryDataset.from_table_signature(
            server_address=address, table="seq", max_in_flight_samples_per_worker=8, max_samples=12
        )

    dataset = tf.data.Dataset.range(2).interleave(
        make, cycle_length=2, num_parallel_calls=2, deterministic=False
    )
    batches = list(dataset.batch(8, drop_remainder=True).prefetch(1).as_numpy_iterator())
    assert len(batches) == 3
    for batch in batches:
        assert batch.data["obs"].shape == (8, SEQUENCE, 2)
        check_sequences(batch.data["obs"], batch.data["step"])


def test_lists_become_tuples(address: str) -> None:
    dataset = reverb.TrajectoryDataset(
        address, "seq", [tf.float32, tf.int64], [[SEQUENCE, 2], [SEQUENCE]], 4, max_samples=1
    )
    assert isinstance(dataset.element_spec.data, tuple)
    (sample,) = list(dataset.as_numpy_iterator())
    check_sequences(sample.data[0], sample.data[1])


def test_timesteps(address: str) -> None:
    dataset = reverb.TimestepDataset.from_table_signature(address, "steps", 16, max_samples=7)
    assert dataset.element_spec.data["obs"] == tf.TensorSpec([2], tf.float32)
    steps = list(dataset.as_numpy_iterator())
    assert len(steps) == 7
    assert steps[0].data["obs"].shape == (2,)


def test_timesteps_of_sequences_batched(address: str) -> None:
    dataset = reverb.TimestepDataset(
        address, "plain", {"obs": tf.float32, "step": tf.int64}, {"obs": [2], "step": []}, 8,
        max_samples=4,
    )  # fmt: skip
    (batch,) = list(dataset.batch(SEQUENCE * 4).as_numpy_iterator())
    steps = batch.data["step"].reshape(4, SEQUENCE)
    np.testing.assert_array_equal(steps, steps[:, :1] + np.arange(SEQUENCE))
    keys = batch.info.key.reshape(4, SEQUENCE)
    assert (keys == keys[:, :1]).all()


def test_rate_limiter_timeout_ends_the_dataset(address: str) -> None:
    dataset = reverb.TrajectoryDataset(
        address, "empty", (tf.float32,), (tf.TensorShape(None),), 4, rate_limiter_timeout_ms=20
    )
    assert list(dataset) == []


def test_samples_of_a_table_that_runs_dry_all_arrive(small_tables: str) -> None:
    # As TF-Agents' tests drain a table: 3 items, each sampled 10 times, no timeout.
    dataset = reverb.TrajectoryDataset(small_tables, "drain", (tf.int64,), ([],), 10)
    values = within(20, lambda: [int(s.data[0]) for s in dataset.take(30)])
    assert sorted(values) == [0] * 10 + [1] * 10 + [2] * 10
    assert reverb.Client(small_tables).server_info()["drain"].current_size == 0


def test_a_queue_hands_on_what_it_holds(small_tables: str) -> None:
    dataset = reverb.TrajectoryDataset(small_tables, "queue", (tf.int64,), ([],), 4)
    assert within(20, lambda: [int(s.data[0]) for s in dataset.take(3)]) == [0, 1, 2]
    # With a timeout the dataset then ends, as Reverb's does.
    client = reverb.Client(small_tables)
    client.insert([np.int64(7)], {"queue": 1.0})
    timed = reverb.TrajectoryDataset(
        small_tables, "queue", (tf.int64,), ([1],), 4, rate_limiter_timeout_ms=50
    )
    assert within(20, lambda: [s.data[0].numpy().tolist() for s in timed]) == [[7]]


def test_a_batch_of_samples_from_several_workers(small_tables: str) -> None:
    # Two workers ask for 2 samples at a time; the batch needs the samples of both.
    dataset = reverb.TrajectoryDataset(
        small_tables, "queue8", (tf.int64,), ([],), 2, num_workers_per_iterator=2
    )
    batches = within(20, lambda: list(dataset.batch(8).take(1).as_numpy_iterator()))
    assert sorted(batches[0].data[0].tolist()) == list(range(8))


def test_mismatched_specs_are_invalid_arguments(address: str) -> None:
    dataset = reverb.TrajectoryDataset(
        address, "seq", {"obs": tf.float64, "step": tf.int64}, {"obs": [SEQUENCE, 2], "step": [3]},
        4,
    )  # fmt: skip
    with pytest.raises(tf.errors.InvalidArgumentError, match="Requested incompatible tensor"):
        next(iter(dataset))
    with pytest.raises(ValueError, match="does not have a signature"):
        reverb.TrajectoryDataset.from_table_signature(address, "empty", 4)
    with pytest.raises(ValueError, match="max_in_flight_samples_per_worker"):
        reverb.TrajectoryDataset(address, "seq", (tf.float32,), ([1],), 0)


def test_without_tensorflow_the_names_say_what_to_use() -> None:
    code = (
        "import sys\n"
        "sys.modules['tensorflow'] = None\n"
        "import reverb_py\n"
        "try:\n"
        "    reverb_py.TrajectoryDataset\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert "needs TensorFlow" in out.stdout
    assert "reverb_py.data.TrajectoryIterator" in out.stdout


def test_tf_client_in_a_tf_function(address: str) -> None:
    client = reverb.TFClient(address)
    info = reverb.Client(address).server_info()["empty"]
    assert info.current_size == 0

    @tf.function
    def insert_then_sample() -> reverb.ReplaySample:
        client.insert(
            [tf.constant([1.5, 2.5], tf.float32)],
            tf.constant(["empty"]),
            tf.constant([2.0], tf.float64),
        )
        return client.sample("empty", [tf.float32])

    sample = insert_then_sample()
    assert sample.info.key.dtype == tf.uint64 and sample.info.key.shape == ()
    np.testing.assert_array_equal(sample.data[0].numpy(), [1.5, 2.5])
    assert float(sample.info.priority) == 2.0

    @tf.function
    def update(keys: tf.Tensor) -> None:
        client.update_priorities("empty", keys, tf.constant([7.0], tf.float64))

    update(tf.reshape(sample.info.key, [1]))
    again = client.sample("empty", [tf.float32])
    assert float(again.info.priority) == 7.0
    reverb.Client(address).reset("empty")
    with pytest.raises(ValueError, match="tables must be a string tensor of rank 1"):
        client.insert([tf.constant(1.0)], tf.constant("empty"), tf.constant([1.0], tf.float64))


#: TF-Agents' `as_dataset(sample_batch_size=3, num_parallel_calls=3)` draining a table
#: of 3 items each sampled 10 times, on a TensorFlow whose inter-op pool has one thread:
#: datasets that wait for samples that will never come must not keep the one holding
#: the last samples from running. The program then ends with its pipeline (and the
#: in-process server) alive.
_DRAIN = """
import numpy as np
import tensorflow as tf
tf.config.threading.set_inter_op_parallelism_threads(1)
import reverb_py as reverb

table = reverb.Table("t", reverb.selectors.Uniform(), reverb.selectors.Fifo(), 3,
                     reverb.rate_limiters.MinSize(1), max_times_sampled=10)
server = reverb.Server([table], port=0)
address = f"localhost:{server.port}"
with reverb.Client(address).trajectory_writer(1) as writer:
    for value in range(3):
        writer.append(np.int64(value))
        writer.create_item("t", 1.0, writer.history[-1:])

pipeline = tf.data.Dataset.range(3).interleave(
    lambda _: reverb.TrajectoryDataset(address, "t", tf.int64, [1], 1, 1),
    cycle_length=3, num_parallel_calls=3, deterministic=False,
).batch(3, drop_remainder=True)
counts = [0, 0, 0]
batches = iter(pipeline)
for _ in range(10):
    for value in next(batches).data.numpy().ravel():
        counts[value] += 1
print("counts", counts)
"""


def test_datasets_waiting_for_good_do_not_hold_back_the_last_samples() -> None:
    result = _run_program(_DRAIN)
    assert result.returncode == 0, result.stderr
    assert "counts [10, 10, 10]" in result.stdout
    assert "Traceback" not in result.stderr


def _run_program(code: str, limit: float = 120) -> subprocess.CompletedProcess[str]:
    """Runs ``code`` in a new interpreter; fails the test if it has not ended by itself
    within ``limit`` seconds."""
    try:
        return subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=limit
        )
    except subprocess.TimeoutExpired as expired:
        raise AssertionError(
            f"the program did not end within {limit} s: {expired.stdout!r} {expired.stderr!r}"
        ) from None
