"""Cell 6: reverb_py's numpy datasets (``reverb_py.data``) reading from a dm-reverb server.

The data is written by dm-reverb's own client (in the worker process); the iterators run
in this process, against the shared dm-reverb server.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from reverb_py import data

from . import _scenarios as S
from ._checks import check_nest
from ._sides import annotated_call, reset_tables

CELL = "[cell 6] reverb_py dataset -> dm-reverb server"


@pytest.fixture
def server(dm_server: Any) -> Any:
    reset_tables(dm_server, S.TABLE_NAMES)
    return dm_server


def write(client: Any, server: Any, op: str, **args: Any) -> Any:
    return annotated_call(f"{CELL}: dm-reverb {op}()", client, op, address=server.address, **args)


@pytest.mark.parametrize("workers", [1, 2])
def test_trajectories_from_table_signature(dm_client: Any, server: Any, workers: int) -> None:
    steps = S.sig_steps()
    write(
        dm_client,
        server,
        "write_trajectory",
        steps=steps,
        items=[{"table": "sig", "priority": 1.0, "layout": S.SIG_LAYOUT}],
    )
    expected = S.expected_trajectory(steps, S.SIG_LAYOUT)
    where = f"{CELL}: TrajectoryIterator.from_table_signature('sig', workers={workers})"
    with data.TrajectoryIterator.from_table_signature(
        server.address, "sig", 2, num_workers_per_iterator=workers, max_samples=6
    ) as samples:
        got = list(samples)
    assert len(got) == 6, f"{where}: {len(got)} samples"
    for sample in got:
        check_nest(where, sample.data, expected, list_type=tuple)  # lists -> tuples
        assert sample.info.key.dtype == np.uint64 and sample.info.table_size == 1, where
    assert len({int(sample.info.key) for sample in got}) == 1, where


def test_trajectory_batches(dm_client: Any, server: Any) -> None:
    for offset in (0, 100, 200):
        write(
            dm_client,
            server,
            "write_trajectory",
            steps=S.sig_steps(offset=offset),
            items=[{"table": "sig", "priority": 1.0, "layout": S.SIG_LAYOUT}],
        )
    where = f"{CELL}: TrajectoryIterator(batch_size=4)"
    batches = list(
        data.TrajectoryIterator.from_table_signature(
            server.address, "sig", 4, max_samples=10, batch_size=4
        )
    )
    assert [len(batch.info.key) for batch in batches] == [4, 4, 2], where
    obs = batches[0].data["obs"]
    assert obs.shape == (4, 3, 3) and obs.dtype == np.float32, f"{where}: {obs.shape}"
    assert batches[0].data["text"][0].dtype == object, where


def test_a_long_read_asks_ahead_on_its_stream(dm_client: Any, server: Any) -> None:
    """Thousands of samples with 64 in flight: the stream asks for more while its last
    request is being answered, which dm-reverb's server answers in order."""
    keys = set()
    for offset in (0, 100, 200):
        write(
            dm_client,
            server,
            "write_trajectory",
            steps=S.sig_steps(offset=offset),
            items=[{"table": "sig", "priority": 1.0, "layout": S.SIG_LAYOUT}],
        )
    where = f"{CELL}: TrajectoryIterator(64 in flight, 3000 samples, batch_size=32)"
    with data.TrajectoryIterator.from_table_signature(
        server.address, "sig", 64, max_samples=3000, batch_size=32
    ) as batches:
        sizes = []
        for batch in batches:
            sizes.append(len(batch.info.key))
            keys.update(int(key) for key in batch.info.key)
            assert batch.data["obs"].shape[1:] == (3, 3), where
    assert sizes == [32] * 93 + [24], f"{where}: {sizes}"
    assert len(keys) == 3, where


def test_timesteps_from_table_signature(dm_client: Any, server: Any) -> None:
    steps = S.step_sig_steps(num_steps=3)
    write(
        dm_client,
        server,
        "write_legacy",
        steps=steps,
        max_sequence_length=3,
        items=[{"table": "steps_sig", "num_timesteps": 3, "priority": 1.0}],
    )
    where = f"{CELL}: TimestepIterator.from_table_signature('steps_sig')"
    got = list(
        data.TimestepIterator.from_table_signature(server.address, "steps_sig", 1, max_samples=2)
    )
    assert len(got) == 6, f"{where}: {len(got)} timesteps"
    for index, sample in enumerate(got):
        step = steps[index % 3]
        columns = sorted(step)
        S.assert_flat_equal(
            f"{where} timestep {index}",
            [sample.data[column] for column in columns],
            [np.asarray(step[column]) for column in columns],
            columns,
        )


def test_rate_limiter_timeout_ends_the_iteration(server: Any) -> None:
    samples = data.TrajectoryIterator(
        server.address, "sig", None, None, 2, rate_limiter_timeout_ms=50
    )
    assert list(samples) == [], f"{CELL}: an empty dm-reverb table with a 50 ms timeout"


def test_max_samples_takes_exactly_that_many(dm_client: Any, server: Any) -> None:
    write(
        dm_client,
        server,
        "write_trajectory",
        steps=S.sig_steps(),
        items=[{"table": "sig", "priority": 1.0, "layout": S.SIG_LAYOUT}],
    )
    got = list(data.TrajectoryIterator(server.address, "sig", None, None, 1, max_samples=3))
    assert len(got) == 3
    info = server.info("sig")
    assert info["num_unique_samples"] == 1, f"{CELL}: {info}"
    assert int(got[-1].info.times_sampled) == 3, f"{CELL}: {got[-1].info}"
