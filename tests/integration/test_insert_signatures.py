"""``Client.insert`` and the legacy ``Writer`` check data against the table's signature
on the client, as dm-reverb's do (its legacy ``Writer::CreateItem``)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import reverb_py as reverb
from reverb_py import errors

SIGNATURE = {"obs": reverb.TensorSpec((3,), np.float32), "act": reverb.TensorSpec((), np.int64)}
EXPECTED = (
    "0: Tensor<name: 'act', dtype: int64, shape: []>, "
    "1: Tensor<name: 'obs', dtype: float, shape: [3]>"
)


def _table(name: str, signature: Any) -> reverb.Table:
    return reverb.Table(
        name=name,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=100,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=signature,
    )


@pytest.fixture(scope="module")
def server() -> Iterator[reverb.Server]:
    server = reverb.Server(
        [
            _table("steps", SIGNATURE),
            # Signed with the time dimension: items of 1 step match as well.
            _table("trajectories", {"x": reverb.TensorSpec((None, 2), np.float64)}),
            _table(
                "nested", (reverb.TensorSpec((), np.int32), [reverb.TensorSpec((2,), np.bool_)])
            ),
            _table("free", None),
        ],
        port=0,
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def client(server: reverb.Server) -> reverb.Client:
    client = reverb.Client(f"localhost:{server.port}")
    for table in server.tables:
        client.reset(table.name)
    return client


def sizes(server: reverb.Server) -> dict[str, int]:
    return {table.name: table.info.current_size for table in server.tables}


def good_step() -> dict[str, Any]:
    return {"obs": np.zeros(3, np.float32), "act": np.int64(1)}


def test_matching_data_is_inserted_and_other_data_refused(
    client: reverb.Client, server: reverb.Server
) -> None:
    client.insert(good_step(), {"steps": 1.0, "free": 1.0})
    client.insert({"obs": np.ones(3, np.float32), "act": 2}, {"steps": 1.0})  # int: int64
    client.insert({"x": np.zeros(2)}, {"trajectories": 1.0})  # [1] + step shape
    client.insert({"x": np.zeros((1, 2))}, {"trajectories": 1.0})  # step shape
    # Only the flattened leaves count, not the nest they come in.
    client.insert([np.int32(1), np.array([True, False])], {"nested": 1.0})
    client.insert({"anything": "goes"}, {"free": 1.0})
    assert sizes(server) == {"steps": 2, "trajectories": 2, "nested": 1, "free": 2}
    # The same leaves, but one of another dtype.
    with pytest.raises(errors.InvalidArgumentError, match="inconsistent with the table signature"):
        client.insert([np.int64(1), np.array([True, False])], {"nested": 1.0})
    assert sizes(server)["nested"] == 1


def test_another_dtype_is_refused(client: reverb.Client, server: reverb.Server) -> None:
    with pytest.raises(errors.InvalidArgumentError) as raised:
        # `free` comes first and takes anything: still nothing is inserted.
        client.insert(
            {"obs": np.zeros(3, np.float32), "act": np.int32(1)}, {"free": 1.0, "steps": 1.0}
        )
    assert isinstance(raised.value, ValueError)
    assert str(raised.value) == (
        "Unable to CreateItem in table 'steps' because Append was called with a tensor "
        "signature inconsistent with the table signature. At timestep offset 0, flattened "
        "index 0, saw a tensor of dtype int32, shape [], but expected tensor 'act' of dtype "
        f"int64 and shape compatible with [].  (Flattened) table signature: {EXPECTED}, data "
        "signature: 0: Tensor<name: '', dtype: int32, shape: []>, 1: Tensor<name: '', dtype: "
        "float, shape: [3]>."
    )
    assert sizes(server) == {"steps": 0, "trajectories": 0, "nested": 0, "free": 0}


def test_another_number_of_leaves_is_refused(client: reverb.Client, server: reverb.Server) -> None:
    with pytest.raises(errors.InvalidArgumentError) as raised:
        client.insert({"obs": np.zeros(3, np.float32)}, {"steps": 1.0})
    assert str(raised.value) == (
        "Unable to CreateItem in table 'steps' because Append was called with a tensor "
        "signature inconsistent with table signature.  Append for timestep offset 0 was "
        "called with 1 tensors, but table requires 2 tensors per entry.  Table signature: "
        f"{EXPECTED}, data signature: 0: Tensor<name: '', dtype: float, shape: [3]>."
    )
    with pytest.raises(errors.InvalidArgumentError, match="was called with 3 tensors"):
        client.insert({**good_step(), "extra": 1.0}, {"steps": 1.0})
    assert sizes(server)["steps"] == 0


@pytest.mark.parametrize(
    ("table", "data", "index", "seen"),
    [
        ("steps", {"obs": np.zeros(4, np.float32), "act": np.int64(1)}, 1, "float, shape [4]"),
        (
            "steps",
            {"obs": np.zeros((1, 3), np.float32), "act": np.int64(1)},
            1,
            "float, shape [1,3]",
        ),
        ("trajectories", {"x": np.zeros(3)}, 0, "double, shape [3]"),
        ("trajectories", {"x": np.zeros((1, 3))}, 0, "double, shape [1,3]"),
        ("nested", [np.int32(1), np.array([True, False, True])], 1, "bool, shape [3]"),
    ],
)
def test_an_incompatible_shape_is_refused(
    client: reverb.Client, server: reverb.Server, table: str, data: Any, index: int, seen: str
) -> None:
    message = (
        f"^Unable to CreateItem in table '{table}' because Append was called with a tensor "
        f"signature inconsistent with the table signature. At timestep offset 0, flattened "
        f"index {index}, saw a tensor of dtype {re.escape(seen)}, but expected"
    )
    with pytest.raises(errors.InvalidArgumentError, match=message):
        client.insert(data, {table: 1.0})
    assert sizes(server)[table] == 0


def test_a_table_the_server_lacks_is_refused(client: reverb.Client) -> None:
    with pytest.raises(errors.InvalidArgumentError) as raised:
        client.insert(good_step(), {"nope": 1.0})
    assert str(raised.value) == (
        "Unable to find signatures for table 'nope' in signature cache.  Available tables: "
        "['free', 'nested', 'steps', 'trajectories']."
    )


def test_the_asyncio_client_checks_alike(server: reverb.Server) -> None:
    async def run() -> tuple[str, str]:
        async with reverb.aio.Client(f"localhost:{server.port}") as client:
            await client.insert(good_step(), {"steps": 1.0})
            with pytest.raises(errors.InvalidArgumentError) as wrong_dtype:
                await client.insert({"obs": np.zeros(3), "act": np.int64(1)}, {"steps": 1.0})
            with pytest.raises(errors.InvalidArgumentError) as unknown:
                await client.insert(good_step(), {"nope": 1.0})
            return str(wrong_dtype.value), str(unknown.value)

    reverb.Client(f"localhost:{server.port}").reset("steps")
    wrong_dtype, unknown = asyncio.run(run())
    assert "flattened index 1, saw a tensor of dtype double, shape [3], but expected tensor " in (
        wrong_dtype
    )
    assert unknown.startswith("Unable to find signatures for table 'nope' in signature cache.")
    assert sizes(server)["steps"] == 1


def test_the_legacy_writer_refuses_with_reverbs_message(
    client: reverb.Client, server: reverb.Server
) -> None:
    with client.writer(max_sequence_length=2) as writer:
        writer.append({"obs": np.zeros(3, np.float32), "act": np.int32(1)})
        writer.append({"obs": np.zeros(3, np.float32), "act": np.int32(2)})
        with pytest.raises(errors.InvalidArgumentError) as raised:
            writer.create_item("steps", 2, 1.0)
        assert str(raised.value).startswith(
            "Unable to CreateItem in table 'steps' because Append was called with a tensor "
            "signature inconsistent with the table signature. At timestep offset 0, flattened "
            "index 0, saw a tensor of dtype int32, shape [], but expected tensor 'act' of dtype "
            "int64 and shape compatible with []."
        )
        with pytest.raises(errors.InvalidArgumentError, match="^Unable to find signatures"):
            writer.create_item("nope", 1, 1.0)
        writer.create_item("free", 2, 1.0)
    with client.writer(max_sequence_length=2) as writer:
        writer.append({"x": np.zeros(2)})
        writer.append({"x": np.ones(2)})
        writer.create_item("trajectories", 2, 1.0)  # [2] + step shape
        with pytest.raises(errors.InvalidArgumentError, match="was called with 1 tensors"):
            writer.create_item("steps", 1, 1.0)
    assert sizes(server) == {"steps": 0, "trajectories": 1, "nested": 0, "free": 1}
