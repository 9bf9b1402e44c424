"""Cell 3: a writer of one implementation and a sampler of the other on one server.

Every combination of (dm-reverb writer, reverb_py sampler) and (reverb_py writer,
dm-reverb sampler), with the blocking and the asyncio reverb_py client, on a reverb_py
server and on a dm-reverb server. The data written must come back bit for bit, through
either client's decoder.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from . import _scenarios as S
from ._checks import check_info, check_leaf_types, check_nest
from ._sides import ClientSide, ServerHandle, annotated_call, reset_tables

COMBOS = [
    (writer, sampler, server)
    for server in ("rp_server", "dm_server")
    for writer, sampler in (
        ("dm_client", "rp_sync_client"),
        ("dm_client", "rp_aio_client"),
        ("rp_sync_client", "dm_client"),
        ("rp_aio_client", "dm_client"),
    )
]


class Mixed:
    def __init__(self, writer: ClientSide, sampler: ClientSide, server: ServerHandle) -> None:
        self.writer, self.sampler, self.server = writer, sampler, server

    def where(self, call: str) -> str:
        return (
            f"[cell 3] {self.writer.label} writes, {self.sampler.label} samples, "
            f"on a {self.server.label}: {call}"
        )

    def write(self, op: str, **args: Any) -> Any:
        return annotated_call(
            self.where(f"writer {op}()"), self.writer, op, address=self.server.address, **args
        )

    def sample(self, **args: Any) -> Any:
        return annotated_call(
            self.where(f"sampler sample({args.get('table')!r})"),
            self.sampler,
            "sample",
            address=self.server.address,
            **args,
        )


ALL = [pytest.param(c, id="-".join(c)) for c in COMBOS]
# reverb_py.aio has no legacy Writer (dm-reverb has no asyncio API to match).
LEGACY = [pytest.param(c, id="-".join(c)) for c in COMBOS if c[0] != "rp_aio_client"]


@pytest.fixture
def mixed(request: pytest.FixtureRequest) -> Mixed:
    writer, sampler, server = (request.getfixturevalue(name) for name in request.param)
    reset_tables(server, S.TABLE_NAMES)
    return Mixed(writer, sampler, server)


@pytest.mark.parametrize("mixed", ALL, indirect=True)
def test_trajectory_writer_items(mixed: Mixed) -> None:
    steps = S.all_dtype_steps(seed=11)
    layout = S.all_dtype_layout(2)
    mixed.write(
        "write_trajectory",
        steps=steps,
        items=[{"table": "fifo", "priority": 0.5, "layout": layout}],
    )
    [sample] = mixed.sample(table="fifo")
    where = mixed.where("sample('fifo') of an all-dtypes TrajectoryWriter item")
    S.assert_flat_equal(
        where, sample["data"], S.flatten(S.expected_trajectory(steps, layout)), S.flat_paths(layout)
    )
    check_leaf_types(where, sample, S.flat_paths(layout))
    check_info(where, sample, table_size=1, priority=0.5, times_sampled=1)
    # The writer's own client decodes the same item identically.
    [again] = annotated_call(
        where, mixed.writer, "sample", address=mixed.server.address, table="fifo"
    )
    S.assert_flat_equal(
        where + " (writer's client)", again["data"], sample["data"], S.flat_paths(layout)
    )


@pytest.mark.parametrize("mixed", ALL, indirect=True)
def test_signature_nest(mixed: Mixed) -> None:
    steps = S.sig_steps(offset=3)
    mixed.write(
        "write_trajectory",
        steps=steps,
        items=[{"table": "sig", "priority": 1.0, "layout": S.SIG_LAYOUT}],
    )
    [sample] = mixed.sample(table="sig", unpack_as_table_signature=True)
    where = mixed.where("sample('sig', unpack_as_table_signature=True)")
    check_nest(where, sample["data"], S.expected_trajectory(steps, S.SIG_LAYOUT))


@pytest.mark.parametrize("mixed", LEGACY, indirect=True)
def test_legacy_writer_items(mixed: Mixed) -> None:
    steps = S.all_dtype_steps(seed=12, num_steps=5)
    mixed.write(
        "write_legacy",
        steps=steps,
        max_sequence_length=4,
        chunk_length=3,
        delta_encoded=True,
        items=[{"table": "fifo", "num_timesteps": 4, "priority": 1.0}],
    )
    [sample] = mixed.sample(table="fifo")
    columns = sorted(steps[0])
    expected = [np.stack([np.asarray(step[c]) for step in steps[1:]]) for c in columns]
    where = mixed.where("sample('fifo') of a delta-encoded legacy Writer item")
    S.assert_flat_equal(where, sample["data"], expected, columns)


@pytest.mark.parametrize("mixed", ALL, indirect=True)
def test_client_insert_and_queue(mixed: Mixed) -> None:
    data = S.all_dtype_steps(seed=13)[2]
    mixed.write("insert", data=data, priorities={"queue": 1.0})
    [sample] = mixed.sample(table="queue")
    where = mixed.where("sample('queue') of a Client.insert item")
    columns = sorted(data)
    S.assert_flat_equal(
        where, sample["data"], [np.asarray(data[c])[None] for c in columns], columns
    )
    check_info(where, sample, table_size=1, priority=1.0, times_sampled=1)
    info = mixed.server.info("queue")
    assert info["current_size"] == 0, f"{where}: queue after the sample: {info}"
