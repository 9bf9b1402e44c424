"""``TFClient.insert`` checks data against the table's signature, as dm-reverb's insert op
does: a mismatch fails the op with ``tf.errors.InvalidArgumentError``."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import reverb_py as reverb

tf = pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def server() -> Iterator[reverb.Server]:
    def table(name: str, signature: object) -> reverb.Table:
        return reverb.Table(
            name=name,
            sampler=reverb.selectors.Uniform(),
            remover=reverb.selectors.Fifo(),
            max_size=100,
            rate_limiter=reverb.rate_limiters.MinSize(1),
            signature=signature,
        )

    server = reverb.Server(
        [
            table("ids", tf.TensorSpec([], tf.int64)),
            table("frames", {"obs": tf.TensorSpec([None, 2], tf.float32)}),
            table("free", None),
        ],
        port=0,
    )
    try:
        yield server
    finally:
        server.stop()


def sizes(server: reverb.Server) -> dict[str, int]:
    return {table.name: table.info.current_size for table in server.tables}


def insert(client: reverb.TFClient, data: list[tf.Tensor], tables: list[str]) -> None:
    client.insert(data, tf.constant(tables), tf.constant([1.0] * len(tables), tf.float64))


def test_eager_insert_is_checked_against_the_signature(server: reverb.Server) -> None:
    client = reverb.TFClient(f"localhost:{server.port}")
    insert(client, [tf.constant(1, tf.int64)], ["ids", "free"])
    insert(client, [tf.constant([1.0, 2.0], tf.float32)], ["frames"])
    assert sizes(server) == {"ids": 1, "frames": 1, "free": 1}
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        insert(client, [tf.constant(1, tf.int32)], ["free", "ids"])
    assert (
        "Unable to CreateItem in table 'ids' because Append was called with a tensor "
        "signature inconsistent with the table signature. At timestep offset 0, flattened "
        "index 0, saw a tensor of dtype int32, shape [], but expected tensor '' of dtype "
        "int64 and shape compatible with []." in raised.value.message
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="was called with 2 tensors"):
        insert(client, [tf.constant(1, tf.int64), tf.constant(2, tf.int64)], ["ids"])
    with pytest.raises(tf.errors.InvalidArgumentError, match="shape compatible with \\[\\?,2\\]"):
        insert(client, [tf.constant([1.0, 2.0, 3.0], tf.float32)], ["frames"])
    with pytest.raises(tf.errors.InvalidArgumentError, match="Unable to find signatures"):
        insert(client, [tf.constant(1, tf.int64)], ["nope"])
    assert sizes(server) == {"ids": 1, "frames": 1, "free": 1}
    for table in server.tables:
        reverb.Client(f"localhost:{server.port}").reset(table.name)


def test_insert_in_a_tf_function_is_checked_too(server: reverb.Server) -> None:
    client = reverb.TFClient(f"localhost:{server.port}")

    @tf.function
    def insert_ids(ids: tf.Tensor) -> None:
        insert(client, [ids], ["ids"])

    insert_ids(tf.constant(7, tf.int64))
    assert sizes(server)["ids"] == 1
    with pytest.raises(tf.errors.InvalidArgumentError, match="inconsistent with the table"):
        insert_ids(tf.constant(7.0, tf.float64))
    assert sizes(server)["ids"] == 1
    [sample] = reverb.Client(f"localhost:{server.port}").sample("ids", 1, emit_timesteps=False)
    np.testing.assert_array_equal(sample.data[0], [7])
    reverb.Client(f"localhost:{server.port}").reset("ids")
