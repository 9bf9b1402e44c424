"""Cell 4: dm-reverb's TensorFlow datasets reading from a reverb_py server.

``reverb.TrajectoryDataset`` / ``reverb.TimestepDataset`` (``from_table_signature``) run
in the dm-reverb worker; the data is written by the blocking reverb_py client.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

import numpy as np
import pytest

from . import _scenarios as S
from ._checks import check_nest
from ._procs import wait_for
from ._sides import annotated_call, reset_tables

CELL = "[cell 4] dm-reverb TF dataset -> reverb_py server"
INFO_DTYPES = {
    "key": "uint64",
    "probability": "float64",
    "table_size": "int64",
    "priority": "float64",
    "times_sampled": "int32",
}


@pytest.fixture
def server(rp_server: Any) -> Any:
    reset_tables(rp_server, S.TABLE_NAMES)
    return rp_server


def dataset(dm_client: Any, server: Any, **args: Any) -> list:
    call = f"{args.get('kind', 'trajectory')} dataset_sample({args})"
    return annotated_call(
        f"{CELL}: {call}", dm_client, "dataset_sample", address=server.address, **args
    )


def write(client: Any, server: Any, op: str, **args: Any) -> Any:
    return annotated_call(f"{CELL}: reverb_py {op}()", client, op, address=server.address, **args)


@pytest.mark.parametrize("workers", [1, 2])
def test_trajectory_dataset_from_table_signature(
    dm_client: Any, rp_sync_client: Any, server: Any, workers: int
) -> None:
    offsets = (0, 100)
    expected = {}
    for offset in offsets:
        steps = S.sig_steps(offset=offset)
        write(
            rp_sync_client,
            server,
            "write_trajectory",
            steps=steps,
            items=[{"table": "sig", "priority": 1.0 + offset, "layout": S.SIG_LAYOUT}],
        )
        trajectory = S.expected_trajectory(steps, S.SIG_LAYOUT)
        expected[int(trajectory["act"][0])] = (trajectory, 1.0 + offset)
    samples = dataset(
        dm_client,
        server,
        table="sig",
        num_samples=8,
        max_in_flight_samples_per_worker=2,
        num_workers_per_iterator=workers,
    )
    where = f"{CELL}: TrajectoryDataset.from_table_signature('sig', workers={workers})"
    assert len(samples) == 8, f"{where}: {len(samples)} samples"
    keys = {}
    for sample in samples:
        info = sample["info"]
        assert sample["info_dtypes"] == INFO_DTYPES, f"{where}: {sample['info_dtypes']}"
        trajectory, priority = expected[int(sample["data"]["act"][0])]
        check_nest(where, sample["data"], trajectory, list_type=tuple)  # TF: lists -> tuples
        assert info["table_size"] == 2 and info["priority"] == priority, f"{where}: {info}"
        assert S.close(info["probability"], 0.5), f"{where}: {info}"
        keys.setdefault(priority, info["key"])
        assert keys[priority] == info["key"], f"{where}: two keys for one item: {info}"
    items = server.items("sig")
    # Each sampled item is the server's item of its priority. (Whether 8 uniform samples
    # of 2 items hold both is chance: 1 in 128 they do not.)
    held = {priority: key for key, priority, _ in items}
    assert len(held) == 2 and all(held[priority] == key for priority, key in keys.items()), (
        f"{where}: sampled keys {keys}, server holds {items}"
    )
    assert sum(times for _, _, times in items) >= 8, f"{where}: times_sampled {items}"


def test_timestep_dataset_from_table_signature(
    dm_client: Any, rp_sync_client: Any, server: Any
) -> None:
    steps = S.step_sig_steps(num_steps=3)
    write(
        rp_sync_client,
        server,
        "write_legacy",
        steps=steps,
        max_sequence_length=3,
        items=[{"table": "steps_sig", "num_timesteps": 3, "priority": 1.0}],
    )
    samples = dataset(
        dm_client,
        server,
        table="steps_sig",
        kind="timestep",
        num_samples=6,
        max_in_flight_samples_per_worker=1,
    )
    where = f"{CELL}: TimestepDataset.from_table_signature('steps_sig')"
    assert len(samples) == 6, f"{where}: {len(samples)} timesteps"
    for index, sample in enumerate(samples):
        step = steps[index % 3]
        got = sample["data"]
        columns = sorted(step)
        S.assert_flat_equal(
            f"{where} timestep {index}",
            [got[c] for c in columns],
            [np.asarray(step[c]) for c in columns],
            columns,
        )
        assert sample["info"]["times_sampled"] == 1 + index // 3, f"{where}: {sample['info']}"


def test_dataset_ends_on_rate_limiter_timeout(dm_client: Any, server: Any) -> None:
    samples = dataset(dm_client, server, table="sig", num_samples=3, rate_limiter_timeout_ms=100)
    assert samples == [], f"{CELL}: an empty table with rate_limiter_timeout_ms=100: {samples}"


def test_zero_rate_limiter_timeout_means_wait(
    dm_client: Any, rp_sync_client: Any, server: Any
) -> None:
    """REVERB_SPEC 8.7: over gRPC ``rate_limiter_timeout_ms=0`` reaches the server as 0 ms,
    which means "no timeout": the dataset waits for data instead of ending."""
    pending = dm_client.submit(
        "dataset_sample",
        address=server.address,
        table="sig",
        num_samples=1,
        rate_limiter_timeout_ms=0,
    )
    table = server.tables["sig"]
    deadline = time.monotonic() + 30
    while table.num_pending_samples == 0:
        assert time.monotonic() < deadline, f"{CELL}: the dataset never asked for a sample"
        time.sleep(0.01)
    done, _ = concurrent.futures.wait([pending], timeout=0.5)
    assert not done, f"{CELL}: rate_limiter_timeout_ms=0 ended at once: {pending.result()}"
    write(
        rp_sync_client,
        server,
        "write_trajectory",
        steps=S.sig_steps(),
        items=[{"table": "sig", "priority": 1.0, "layout": S.SIG_LAYOUT}],
    )
    samples = wait_for(
        pending, 60, f"{CELL}: the waiting dataset after an insert", dm_client.worker
    )
    assert len(samples) == 1, f"{CELL}: {samples}"


def test_dataset_max_samples(dm_client: Any, rp_sync_client: Any, server: Any) -> None:
    write(
        rp_sync_client,
        server,
        "write_trajectory",
        steps=S.sig_steps(),
        items=[{"table": "sig", "priority": 1.0, "layout": S.SIG_LAYOUT}],
    )
    samples = dataset(
        dm_client,
        server,
        table="sig",
        num_samples=10,
        max_samples=3,
        max_in_flight_samples_per_worker=1,
    )
    assert len(samples) == 3, f"{CELL}: max_samples=3 gave {len(samples)} samples"
    [(_, _, times)] = server.items("sig")
    assert times == 3, f"{CELL}: max_samples=3 took {times} samples from the server"
