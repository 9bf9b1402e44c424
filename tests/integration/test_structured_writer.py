"""StructuredWriter against a loopback server: Acme's configs end to end, both clients.

The configs are built as Acme's ``create_n_step_transition_config`` and
``create_sequence_config`` build them, episodes are written as Acme's
``StructuredAdder`` writes them (``tests/interop/_acme.py``), and every sampled item is
compared with the transition or sequence Acme's adders stand for.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import reverb_py as reverb
from reverb_py import errors
from reverb_py import structured_writer as sw
from tests.interop import _acme

TABLE = "acme"


def queue(name: str, signature: Any = None, max_size: int = 10_000) -> reverb.Table:
    """A FIFO table that hands out each item once (sampled in insertion order)."""
    return reverb.Table(
        name=name,
        sampler=reverb.selectors.Fifo(),
        remover=reverb.selectors.Fifo(),
        max_size=max_size,
        max_times_sampled=1,
        rate_limiter=reverb.rate_limiters.Queue(max_size),
        signature=signature,
    )


@pytest.fixture
def server_for() -> Iterator[Any]:
    servers: list[reverb.Server] = []

    def start(configs: list[sw.Config]) -> reverb.Server:
        signature = sw.infer_signature(configs, _acme.STEP_SPEC)
        server = reverb.Server([queue(TABLE, signature)])
        servers.append(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


def sampled(client: reverb.Client, table: str = TABLE) -> list[list[np.ndarray]]:
    size = client.server_info()[table].current_size
    if size == 0:
        return []
    return [sample.data for sample in client.sample(table, size, emit_timesteps=False)]


def assert_items_equal(got: list[list[np.ndarray]], want: list[_acme.Step]) -> None:
    assert len(got) == len(want), f"{len(got)} items, want {len(want)}"
    for index, (columns, item) in enumerate(zip(got, want)):
        expected = _acme.flat_item(item)
        assert len(columns) == len(expected)
        for column, value in zip(columns, expected):
            assert column.dtype == value.dtype, (index, column.dtype, value.dtype)
            np.testing.assert_array_equal(column, value, err_msg=f"item {index}")


N_STEP_CASES = [1, 2, 3, 5]
SEQUENCE_CASES = [(3, 1), (3, 2), (4, 3), (2, 2), (5, 2)]
EPISODES = [1, 2, 4, 7]


@pytest.mark.parametrize("n_step", N_STEP_CASES)
def test_n_step_transition_configs(server_for: Any, n_step: int) -> None:
    configs = _acme.build_configs(sw, "n_step", TABLE, n_step=n_step)
    server = server_for(configs)
    client = server.localhost_client()
    writer = client.structured_writer(configs)
    for episode, length in enumerate(EPISODES):
        _acme.write_episode(writer, episode, length)
    writer.close()
    assert_items_equal(sampled(client), _acme.expected_n_step_items(n_step, EPISODES))


@pytest.mark.parametrize(("sequence_length", "period"), SEQUENCE_CASES)
def test_sequence_configs(server_for: Any, sequence_length: int, period: int) -> None:
    configs = _acme.build_configs(
        sw, "sequence", TABLE, sequence_length=sequence_length, period=period
    )
    server = server_for(configs)
    client = server.localhost_client()
    with client.structured_writer(configs) as writer:
        for episode, length in enumerate(EPISODES + [9]):
            _acme.write_episode(writer, episode, length)
    assert_items_equal(
        sampled(client), _acme.expected_sequence_items(sequence_length, period, EPISODES + [9])
    )


async def test_async_client_with_acme_configs(server_for: Any, loop_errors: Any) -> None:
    n_step_configs = _acme.build_configs(sw, "n_step", TABLE, n_step=3)
    server = server_for(n_step_configs)
    async with reverb.aio.Client(f"localhost:{server.port}") as client:
        writer = await client.structured_writer(n_step_configs)
        for episode, length in enumerate(EPISODES):
            await _acme.write_episode_async(writer, episode, length)
        await writer.close()
    assert_items_equal(sampled(server.localhost_client()), _acme.expected_n_step_items(3, EPISODES))


def test_configs_for_several_tables_share_one_writer() -> None:
    n_step = _acme.build_configs(sw, "n_step", "transitions", n_step=2)
    sequences = _acme.build_configs(sw, "sequence", "sequences", sequence_length=3, period=2)
    tables = [
        queue("transitions", sw.infer_signature(n_step, _acme.STEP_SPEC)),
        queue("sequences", sw.infer_signature(sequences, _acme.STEP_SPEC)),
    ]
    with reverb.Server(tables) as server:
        client = server.localhost_client()
        writer = client.structured_writer(n_step + sequences)
        for episode, length in enumerate(EPISODES):
            _acme.write_episode(writer, episode, length)
        writer.close()
        assert_items_equal(sampled(client, "transitions"), _acme.expected_n_step_items(2, EPISODES))
        assert_items_equal(
            sampled(client, "sequences"), _acme.expected_sequence_items(3, 2, EPISODES)
        )


def test_priorities_reach_the_table() -> None:
    ref = sw.create_reference_step({"x": None, "td": None})
    configs = [
        sw.create_config({"x": ref["x"][-1]}, "prio", priority=sw.constant_priority_fn(3.0)),
        sw.create_config(
            {"td": ref["td"][-2:]},
            "prio",
            priority=sw.td_error(0.5, {"x": None, "td": None}, lambda step: step["td"]),
        ),
    ]
    table = reverb.Table(
        name="prio",
        sampler=reverb.selectors.Fifo(),
        remover=reverb.selectors.Fifo(),
        max_size=100,
        max_times_sampled=1,
        rate_limiter=reverb.rate_limiters.MinSize(1),
    )
    with reverb.Server([table]) as server:
        client = server.localhost_client()
        writer = client.structured_writer(configs)
        writer.append({"x": np.int32(1), "td": np.float32(-2.0)})
        writer.append({"x": np.int32(2), "td": np.float32(4.0)})
        writer.end_episode()
        writer.close()
        samples = list(client.sample("prio", 3, emit_timesteps=False))
    # 0.5 * max(|-2|, |4|) + 0.5 * mean(|-2|, |4|) = 3.5.
    assert [sample.info.priority for sample in samples] == [3.0, 3.0, 3.5]


def test_partial_steps_and_end_of_episode_items() -> None:
    ref = sw.create_reference_step({"obs": None, "act": None})
    configs = [
        sw.create_config({"obs": ref["obs"][-2:], "act": ref["act"][-2]}, "t"),
        sw.create_config(
            {"obs": ref["obs"][-1], "act": ref["act"][-1]}, "t", [sw.Condition.is_end_episode()]
        ),
    ]
    with reverb.Server([queue("t")]) as server:
        client = server.localhost_client()
        writer = client.structured_writer(configs)
        writer.append({"obs": np.float32(0), "act": None}, partial_step=True)
        assert writer.step_is_open
        writer.append({"obs": None, "act": np.int64(10)})
        writer.append({"obs": np.float32(1), "act": None}, partial_step=True)
        writer.append({"obs": None, "act": np.int64(11)})
        writer.end_episode()
        assert not writer.step_is_open
        writer.close()
        got = [[column.tolist() for column in columns] for columns in sampled(client, "t")]
    # Flattened order: act, obs.
    assert got == [[10, [0.0, 1.0]], [11, 1.0]]


def test_flush_and_end_episode_time_out_when_the_table_is_full() -> None:
    ref = sw.create_reference_step([None])
    configs = [sw.create_config([ref[0][-1]], "small")]
    with reverb.Server([queue("small", max_size=1)]) as server:
        client = server.localhost_client()
        writer = client.structured_writer(configs)
        writer.append([np.int64(1)])
        writer.flush(timeout_ms=10_000)
        writer.append([np.int64(2)])
        with pytest.raises(errors.DeadlineExceededError, match="Flush call did not complete"):
            writer.flush(timeout_ms=50)
        with pytest.raises(errors.DeadlineExceededError, match="End episode call did not"):
            writer.end_episode(timeout_ms=50)
        assert [columns[0].tolist() for columns in sampled(client, "small")] == [1]
        writer.end_episode(timeout_ms=10_000)
        writer.close()
        assert [columns[0].tolist() for columns in sampled(client, "small")] == [2]


def test_invalid_configs_are_refused_before_connecting() -> None:
    ref = sw.create_reference_step([None])
    # No server listens here: the config check must come first.
    client = reverb.Client("localhost:1")
    with pytest.raises(ValueError, match="At least one config must be provided."):
        client.structured_writer([])
    with pytest.raises(ValueError, match="position 1: `table` must not be empty."):
        client.structured_writer(
            [sw.create_config([ref[0][-1]], "t"), sw.create_config([ref[0][-1]], "")]
        )
    with pytest.raises(ValueError, match="position 0: `start` must be < 0 but got 0."):
        client.structured_writer(
            [sw.Config(flat=[{"start": 0}], table="t", priority=sw.constant_priority_fn(1))]
        )


def test_items_for_an_unknown_table_fail_the_flush() -> None:
    ref = sw.create_reference_step([None])
    with reverb.Server([queue("t")]) as server:
        client = server.localhost_client()
        writer = client.structured_writer([sw.create_config([ref[0][-1]], "missing")])
        writer.append([np.int64(1)])
        with pytest.raises(errors.ReverbError, match="missing"):
            writer.flush(timeout_ms=10_000)
        writer.close()
