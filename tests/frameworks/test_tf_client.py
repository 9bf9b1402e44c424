"""reverb_py.TFClient: what sample returns, as Reverb's op (the first time step)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import reverb_py as reverb

tf = pytest.importorskip("tensorflow")


@pytest.fixture
def address() -> Iterator[str]:
    tables = [
        reverb.Table(
            name,
            reverb.selectors.Fifo(),
            reverb.selectors.Fifo(),
            max_size=100,
            rate_limiter=reverb.rate_limiters.MinSize(1),
        )
        for name in ("variables", "trajectories", "other")
    ]
    tables += [
        reverb.Table(
            name,
            reverb.selectors.Fifo(),
            reverb.selectors.Fifo(),
            max_size=100,
            rate_limiter=reverb.rate_limiters.MinSize(1),
            signature=reverb.TensorSpec(shape, np.float32),
        )
        for name, shape in (("steps", (2,)), ("sequences", (3, 2)))
    ]
    server = reverb.Server(tables, port=0)
    try:
        yield f"localhost:{server.port}"
    finally:
        server.stop()


def test_a_structure_inserted_comes_back_in_its_shapes(address: str) -> None:
    # As TF-Agents' ReverbVariableContainer keeps variables: insert, sample, assign.
    client = reverb.TFClient(address)
    variables = {
        "bias": tf.Variable(3.5, dtype=tf.float32),
        "kernel": tf.Variable([[1, 2], [3, 4]], dtype=tf.int64),
    }
    flat = tf.nest.flatten(variables)
    dtypes = tf.nest.map_structure(lambda variable: variable.dtype, variables)

    @tf.function
    def push() -> None:
        client.insert(flat, tf.constant(["variables"]), tf.constant([1.0], tf.float64))

    push()
    sample = client.sample("variables", [dtypes])
    (data,) = sample.data
    assert data["bias"].shape == () and data["kernel"].shape == (2, 2)
    assert float(data["bias"]) == 3.5
    np.testing.assert_array_equal(data["kernel"].numpy(), [[1, 2], [3, 4]])
    fresh = tf.nest.map_structure(lambda v: tf.Variable(tf.zeros_like(v)), variables)
    tf.nest.map_structure(lambda variable, value: variable.assign(value), fresh, data)
    np.testing.assert_array_equal(fresh["kernel"].numpy(), [[1, 2], [3, 4]])
    # What insert wrote: one step, with its time axis (Reverb's legacy writer's item).
    (item,) = reverb.Client(address).sample("variables", 1, emit_timesteps=False)
    assert [column.shape for column in item.data] == [(1,), (1, 2, 2)]


def test_sample_returns_the_first_step_of_an_item(address: str) -> None:
    with reverb.Client(address).trajectory_writer(3) as writer:
        for step in range(3):
            writer.append({"obs": np.full(2, step, np.float32), "step": np.int64(step)})
        # Three steps; the same with a squeezed column (one value of shape [2]).
        writer.create_item(
            "trajectories", 1.0, [writer.history["obs"][:], writer.history["step"][:]]
        )
        writer.create_item(
            "trajectories", 1.0, [writer.history["obs"][-1], writer.history["step"][-1:]]
        )
        # Columns of different lengths: no time steps.
        writer.create_item("other", 1.0, [writer.history["obs"][:], writer.history["step"][-1]])
        writer.flush()
    client = reverb.TFClient(address)
    first = client.sample("trajectories", [tf.float32, tf.int64])
    assert [tensor.shape for tensor in first.data] == [(2,), ()]
    np.testing.assert_array_equal(first.data[0].numpy(), [0, 0])
    assert int(first.data[1]) == 0
    reverb.Client(address).mutate_priorities("trajectories", deletes=[int(first.info.key)])
    squeezed = client.sample("trajectories", [tf.float32, tf.int64])
    assert [tensor.shape for tensor in squeezed.data] == [(2,), ()]
    np.testing.assert_array_equal(squeezed.data[0].numpy(), [2, 2])
    assert int(squeezed.data[1]) == 2
    with pytest.raises(tf.errors.InvalidArgumentError, match="cannot be decomposed"):
        client.sample("other", [tf.float32, tf.int64])


def test_sample_refuses_other_dtypes_and_counts(address: str) -> None:
    client = reverb.TFClient(address)
    client.insert([tf.constant([1.5, 2.5])], tf.constant(["other"]), tf.constant([1.0], tf.float64))
    with pytest.raises(tf.errors.InvalidArgumentError, match="dtype float32 at flattened index 0"):
        client.sample("other", [tf.int32])
    with pytest.raises(tf.errors.InvalidArgumentError, match="Got 6 but wanted 7"):
        client.sample("other", [tf.float32, tf.float32])
    with pytest.raises(tf.errors.UnknownError, match="NotFoundError"):
        client.sample("missing", [tf.float32])
    sample = client.sample("other", [tf.float32])
    np.testing.assert_array_equal(sample.data[0].numpy(), [1.5, 2.5])


def test_the_step_is_checked_against_the_signature(address: str) -> None:
    # Reverb's op checks the step it returns against the table's signature: a table of
    # 3-step items whose signature has the time axis cannot be sampled this way.
    with reverb.Client(address).trajectory_writer(3) as writer:
        for step in range(3):
            writer.append(np.full(2, step, np.float32))
        writer.create_item("steps", 1.0, writer.history[-1])
        writer.create_item("sequences", 1.0, writer.history[:])
        writer.flush()
    client = reverb.TFClient(address)
    np.testing.assert_array_equal(client.sample("steps", tf.float32).data.numpy(), [2, 2])
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"Received incompatible tensor at flattened index 0 from table 'sequences'",
    ):
        client.sample("sequences", tf.float32)
