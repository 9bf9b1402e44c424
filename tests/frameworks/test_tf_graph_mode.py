"""Reverb's datasets and TFClient ops in ``tf.compat.v1`` graphs run by a session."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import reverb_py as reverb

tf = pytest.importorskip("tensorflow")
v1 = tf.compat.v1


@pytest.fixture
def server() -> Iterator[reverb.Server]:
    tables = [reverb.Table.queue(name, 100) for name in ("steps", "empty")]
    tables.append(
        reverb.Table(
            "dist",
            reverb.selectors.Uniform(),
            reverb.selectors.Fifo(),
            max_size=100,
            rate_limiter=reverb.rate_limiters.MinSize(1),
        )
    )
    server = reverb.Server(tables, port=0)
    _TABLES[server.port] = {table.name: table for table in tables}
    try:
        yield server
    finally:
        server.stop()
        del _TABLES[server.port]


_TABLES: dict[int, dict[str, reverb.Table]] = {}


def _address(server: reverb.Server) -> str:
    return f"localhost:{server.port}"


def _fill(server: reverb.Server, table: str, count: int) -> None:
    client = reverb.Client(_address(server))
    with client.trajectory_writer(num_keep_alive_refs=2) as writer:
        for step in range(count):
            writer.append([np.full([2], step, np.float32), np.int64(step)])
            writer.create_item(table, 1.0, [writer.history[0][-1:], writer.history[1][-1:]])
        writer.flush()


def _wait_until_pending(server: reverb.Server, table: str) -> None:
    """Until a sample request waits on ``table``'s rate limiter."""
    deadline = time.monotonic() + 30
    while _TABLES[server.port][table].num_pending_samples == 0:
        assert time.monotonic() < deadline, "no sample request reached the table"
        time.sleep(0.01)


@pytest.mark.parametrize("kind", ["trajectory", "timestep"])
def test_an_initializable_iterator_reads_the_address_and_table_fed_to_it(
    server: reverb.Server, kind: str
) -> None:
    _fill(server, "steps", 5)
    with tf.Graph().as_default():
        address = v1.placeholder(tf.string, [])
        table = v1.placeholder(tf.string, [])
        shapes = ([1, 2], [1]) if kind == "trajectory" else ([2], [])
        cls = reverb.TrajectoryDataset if kind == "trajectory" else reverb.TimestepDataset
        dataset = cls(address, table, (tf.float32, tf.int64), shapes, 10)
        iterator = dataset.make_initializable_iterator()
        sample = iterator.get_next()
        with v1.Session() as session:
            session.run(iterator.initializer, feed_dict={address: _address(server), table: "steps"})
            got = [session.run(sample) for _ in range(5)]
    steps = [int(np.asarray(data[1]).reshape(-1)[0]) for _, data in got]
    assert steps == [0, 1, 2, 3, 4]
    assert all(isinstance(info.key, np.uint64) for info, _ in got)


def test_a_one_shot_iterator_ends_after_max_samples(server: reverb.Server) -> None:
    _fill(server, "steps", 6)
    with tf.Graph().as_default():
        dataset = reverb.TimestepDataset(
            _address(server), "steps", (tf.float32, tf.int64), ([2], []), 2, max_samples=4
        )
        sample = dataset.make_one_shot_iterator().get_next()
        with v1.Session() as session:
            steps = [int(session.run(sample).data[1]) for _ in range(4)]
            with pytest.raises(tf.errors.OutOfRangeError):
                session.run(sample)
    assert steps == [0, 1, 2, 3]


def test_batches_stacked_by_the_sampler_work_in_a_graph(server: reverb.Server) -> None:
    _fill(server, "steps", 6)
    with tf.Graph().as_default():
        dataset = reverb.TrajectoryDataset(
            _address(server), "steps", (tf.float32, tf.int64), ([1, 2], [1]), 6, max_samples=6
        ).batch(3, drop_remainder=True)
        assert dataset.element_spec.data[0].shape.as_list() == [3, 1, 2]
        sample = dataset.make_one_shot_iterator().get_next()
        with v1.Session() as session:
            batches = [session.run(sample).data[1].reshape(-1).tolist() for _ in range(2)]
            with pytest.raises(tf.errors.OutOfRangeError):
                session.run(sample)
    assert batches == [[0, 1, 2], [3, 4, 5]]


@pytest.mark.parametrize("batched", [False, True])
def test_closing_the_session_cancels_a_pending_get_next(
    server: reverb.Server, batched: bool
) -> None:
    with tf.Graph().as_default():
        dataset = reverb.TrajectoryDataset(
            _address(server), "empty", (tf.float32, tf.int64), ([1, 2], [1]), 10
        )
        if batched:
            dataset = dataset.batch(4)
        iterator = dataset.make_initializable_iterator()
        sample = iterator.get_next()
        session = v1.Session()
        session.run(iterator.initializer)
        closer = threading.Thread(
            target=lambda: (_wait_until_pending(server, "empty"), session.close())
        )
        closer.start()
        try:
            with pytest.raises(tf.errors.CancelledError):
                session.run(sample)
        finally:
            closer.join()


def test_tf_client_ops_in_a_graph(server: reverb.Server) -> None:
    client = reverb.Client(_address(server))
    with tf.Graph().as_default():
        tf_client = reverb.TFClient(_address(server))
        insert = tf_client.insert(
            [tf.constant([1, 2, 3], tf.int8)],
            tf.constant(["dist"]),
            tf.constant([1.0], tf.float64),
        )
        sample = tf_client.sample("dist", [tf.int8])
        key = v1.placeholder(tf.uint64, [None])
        update = tf_client.update_priorities("dist", key, tf.constant([3.0], tf.float64))
        mismatched = tf_client.update_priorities(
            "dist", tf.constant([1, 2], tf.uint64), tf.constant([1.0], tf.float64)
        )
        with v1.Session() as session:
            assert session.run(insert) is None
            got = session.run(sample)
            np.testing.assert_array_equal(got.data[0], np.array([1, 2, 3], np.int8))
            assert got.info.probability == 1.0
            assert session.run(update, feed_dict={key: [got.info.key]}) is None
            with pytest.raises(tf.errors.InvalidArgumentError, match="same number"):
                session.run(mismatched)
    info = client.sample("dist").__next__()[0].info
    assert info.priority == 3.0


def test_update_priorities_of_different_lengths_fails_eagerly(server: reverb.Server) -> None:
    tf_client = reverb.TFClient(_address(server))
    with pytest.raises(tf.errors.InvalidArgumentError, match="2 keys and 1 priorities"):
        tf_client.update_priorities(
            "dist", tf.constant([1, 2], tf.uint64), tf.constant([1.0], tf.float64)
        )


def test_a_symbolic_table_in_a_tf_function_dataset(server: reverb.Server) -> None:
    # As a distribution strategy builds a dataset per replica: the table is a tensor.
    _fill(server, "dist", 1)

    def make(index: Any) -> Any:
        return reverb.TimestepDataset(
            _address(server), tf.constant("dist"), (tf.float32, tf.int64), ([2], []), 1
        ).take(1)

    dataset = tf.data.Dataset.range(3).flat_map(make)
    assert [int(sample.data[1]) for sample in dataset] == [0, 0, 0]


def test_a_non_string_address_is_refused(server: reverb.Server) -> None:
    with pytest.raises(TypeError, match="server_address"):
        reverb.TrajectoryDataset(tf.constant(1), "steps", (tf.float32,), ([2],), 10)
    with pytest.raises(ValueError, match="table must be a scalar"):
        reverb.TrajectoryDataset(
            _address(server), tf.constant(["a", "b"]), (tf.float32,), ([2],), 10
        )
