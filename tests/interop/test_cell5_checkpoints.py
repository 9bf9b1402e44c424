"""Cell 5: checkpoints written by one implementation, loaded by the other.

* dm-reverb -> reverb_py: a dm-reverb server (``DefaultCheckpointer``) is filled by the
  dm-reverb client and checkpointed; a reverb_py server loads that directory.
* reverb_py -> dm-reverb: the same with the roles swapped.

The loading server is built with *different* constructor settings for the same table
names: as in Reverb, a restored table takes sampler, remover, sizes, rate limiter (config
and counters) and signature from the checkpoint. What is compared:

* the state at save time as the saving server reports it (``server_info``) against the
  loaded state (``server_info`` of the loading server);
* the checkpoint's own records, read with TensorFlow's TFRecord reader and dm-reverb's
  protos in the dm-reverb worker (items with priority and times_sampled, rate-limiter
  counters including ``delete_count``), against what the loading server holds (for
  dm-reverb: read back from a checkpoint the loaded dm-reverb server writes again);
* every item's data: each table is drained (sample one, delete it) and every sample must
  carry the data written for it, its priority, and its times_sampled + 1.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import reverb_py

from . import _scenarios as S
from ._sides import ClientSide, RpServerHandle, annotated_call

MIN_SIZE_1 = S.MIN_SIZE_1

#: The tables that are checkpointed.
SAVED_TABLES = [
    {
        "name": "ck_prio",
        "sampler": ["prioritized", 1.0],
        "remover": ["fifo"],
        "max_size": 100,
        "rate_limiter": ["generic", 2.0, 1, -100.0, 100.0],
        "signature": S.SIGNATURE,
    },
    {
        "name": "ck_fifo",
        "sampler": ["fifo"],
        "remover": ["fifo"],
        "max_size": 4,
        "max_times_sampled": 3,
        "rate_limiter": MIN_SIZE_1,
    },
    {"name": "ck_queue", "queue": 10},
    {
        "name": "ck_heap",
        "sampler": ["max_heap"],
        "remover": ["fifo"],
        "max_size": 50,
        "rate_limiter": ["ratio", 1.0, 1, 100.0],
    },
]
#: Same names, other settings: the checkpoint's settings must win.
LOADING_TABLES = [
    {
        "name": name,
        "sampler": ["uniform"],
        "remover": ["lifo"],
        "max_size": 7,
        "rate_limiter": ["min_size", 2],
    }
    for name in ("ck_prio", "ck_fifo", "ck_queue", "ck_heap")
]
#: A table only the loading server has: it must stay as constructed.
EXTRA_TABLE = {
    "name": "not_in_checkpoint",
    "sampler": ["fifo"],
    "remover": ["fifo"],
    "max_size": 3,
    "rate_limiter": MIN_SIZE_1,
}

PRIO_OFFSETS = [0, 10, 20, 30, 40]
FIFO_STEPS = 6


def fifo_steps() -> list[dict]:
    steps = S.all_dtype_steps(num_steps=FIFO_STEPS, seed=21)
    for index, step in enumerate(steps):
        step["id"] = np.int64(index)
    return steps


FIFO_LAYOUT = {"id": "id[-2:]", **S.all_dtype_layout(2)}


def heap_steps() -> list[dict]:
    return [
        {
            "id": np.int64(i),
            "v": np.array([i, -i, 3 * i], dtype=np.int32),
            "w": np.array([[i, 2], [3, i]], dtype=np.uint64),
        }
        for i in range(4)
    ]


def queue_data(index: int) -> dict:
    return {
        "id": np.int64(index),
        "s": S.scalar_bytes(b"q%d" % index),
        "c": np.array([index + 1j, -index], dtype=np.complex64),
    }


def expected_by_id() -> dict[str, dict[int, list]]:
    """The flat data each item must hold, by table and item id."""
    prio = {}
    for offset in PRIO_OFFSETS:
        steps = S.sig_steps(offset=offset)
        flat = S.flatten(S.expected_trajectory(steps, S.SIG_LAYOUT))
        prio[int(steps[1]["act"])] = flat
    steps = fifo_steps()
    fifo = {
        i: S.flatten(S.expected_trajectory(steps[: i + 1], FIFO_LAYOUT))
        for i in range(1, FIFO_STEPS)
    }
    steps = heap_steps()
    heap = {
        i: [np.stack([np.asarray(s[c]) for s in steps[i - 1 : i + 1]]) for c in sorted(steps[0])]
        for i in range(1, 4)
    }
    queue = {
        i: [np.asarray(queue_data(i)[c])[None] for c in sorted(queue_data(i))] for i in range(4)
    }
    return {"ck_prio": prio, "ck_fifo": fifo, "ck_heap": heap, "ck_queue": queue}


def item_id(table: str, data: list) -> int:
    """Which written item a sample is (see :func:`expected_by_id`)."""
    if table == "ck_prio":
        return int(data[0][0])  # "act" sorts first; act[0] is the item's first step
    if table == "ck_fifo":
        index = S.flat_paths(FIFO_LAYOUT).index(("id",))
        return int(data[index][-1])
    columns = sorted(queue_data(0) if table == "ck_queue" else heap_steps()[0])
    return int(data[columns.index("id")][-1])


def populate(client: ClientSide, address: str, where: str) -> None:
    """Fills the SAVED_TABLES with inserts, samples, evictions, updates and deletes."""

    def call(op: str, **args: Any) -> Any:
        return annotated_call(f"{where}: {op}()", client, op, address=address, **args)

    for index, offset in enumerate(PRIO_OFFSETS):
        call(
            "write_trajectory",
            steps=S.sig_steps(offset=offset),
            items=[{"table": "ck_prio", "priority": 1.0 + index, "layout": S.SIG_LAYOUT}],
        )
    sampled = [s["info"]["key"] for s in call("sample", table="ck_prio", num_samples=6)]
    distinct = list(dict.fromkeys(sampled))
    call("mutate_priorities", table="ck_prio", updates=[[distinct[0], 9.5]], deletes=distinct[1:2])
    call(
        "write_trajectory",
        steps=fifo_steps(),
        items=[
            {"table": "ck_fifo", "priority": float(i), "layout": FIFO_LAYOUT, "after_step": i}
            for i in range(1, FIFO_STEPS)
        ],
    )  # max_size 4: the first item is evicted
    call("sample", table="ck_fifo", num_samples=4)  # 3 x the oldest (then deleted), 1 x next
    for index in range(4):
        call("insert", data=queue_data(index), priorities={"ck_queue": 1.0})
    call("sample", table="ck_queue")
    call(
        "write_legacy",
        steps=heap_steps(),
        max_sequence_length=2,
        chunk_length=2,
        delta_encoded=True,
        items=[
            {"table": "ck_heap", "num_timesteps": 2, "priority": float(p), "after_step": i}
            for i, p in ((1, 5.0), (2, 7.0), (3, 6.0))
        ],
    )
    call("sample", table="ck_heap", num_samples=2)


def comparable_info(info: dict) -> dict:
    """What must survive a checkpoint (everything but the signature's spec classes)."""
    from . import _tables

    out = dict(info)
    out["signature"] = _tables.strip_types(info["signature"])
    return out


def compare_infos(where: str, saved: dict, loaded: dict) -> None:
    problems = []
    for table in (t["name"] for t in SAVED_TABLES):
        before, after = comparable_info(saved[table]), comparable_info(loaded[table])
        for field in before:
            if before[field] != after[field]:
                problems.append(
                    f"  {table}.{field}: saved {before[field]!r}, loaded {after[field]!r}"
                )
    assert not problems, f"{where}: server_info after loading differs:\n" + "\n".join(problems)


def checkpoint_items(parsed: dict) -> dict[str, list[tuple[int, float, int]]]:
    """``(key, priority, times_sampled)`` per table, in checkpoint (insertion) order."""
    items: dict[str, list[tuple[int, float, int]]] = {}
    for item in parsed["items"]:
        items.setdefault(item["table"], []).append(
            (item["key"], item["priority"], item["times_sampled"])
        )
    return items


def checkpoint_counters(parsed: dict) -> dict[str, tuple[int, int, int]]:
    return {
        table["table_name"]: (
            table["rate_limiter"]["insert_count"],
            table["rate_limiter"]["sample_count"],
            table["rate_limiter"]["delete_count"],
        )
        for table in parsed["tables"]
    }


def drain_and_check(
    client: ClientSide, address: str, where: str, items: dict[str, list[tuple[int, float, int]]]
) -> None:
    """Samples every item once (deleting it afterwards) and checks key, priority,
    times_sampled and data against the checkpointed items."""
    expected = expected_by_id()
    for table, table_items in items.items():
        remaining = {key: (priority, times) for key, priority, times in table_items}
        for _ in range(len(table_items)):
            [sample] = annotated_call(
                f"{where}: sample({table!r})", client, "sample", address=address, table=table
            )
            info = sample["info"]
            key = info["key"]
            assert key in remaining, f"{where}: {table}: sampled unknown/again key {key}"
            priority, times = remaining.pop(key)
            assert (info["priority"], info["times_sampled"]) == (priority, times + 1), (
                f"{where}: {table} key {key}: sampled priority/times_sampled "
                f"{info['priority']}/{info['times_sampled']}, checkpoint has {priority}/{times}"
            )
            ident = item_id(table, sample["data"])
            assert ident in expected[table], f"{where}: {table}: unknown item id {ident}"
            S.assert_flat_equal(
                f"{where}: {table} item {ident} (key {key})", sample["data"], expected[table][ident]
            )
            annotated_call(
                f"{where}: mutate_priorities({table!r})",
                client,
                "mutate_priorities",
                address=address,
                table=table,
                deletes=[key],
            )


def test_dm_reverb_checkpoint_loads_into_reverb_py(
    tmp_path: Path, make_dm_server: Any, dm_client: ClientSide, rp_sync_client: ClientSide
) -> None:
    where = "[cell 5] dm-reverb checkpoint -> reverb_py server"
    root = str(tmp_path / "dm_checkpoints")
    saver = make_dm_server(SAVED_TABLES, checkpoint_dir=root)
    saver.require_ready()
    populate(dm_client, saver.address, f"{where} (filling the dm-reverb server)")
    saved = dm_client.call("server_info", address=saver.address)
    # The Checkpoint RPC from a reverb_py client to the dm-reverb server.
    path = rp_sync_client.call("checkpoint", address=saver.address)
    assert os.path.dirname(path) == root, f"{where}: checkpoint path {path}"
    parsed = dm_client.call("parse_checkpoint", root=root)

    tables = S.build_rp_tables([*LOADING_TABLES, EXTRA_TABLE])
    try:
        server = reverb_py.Server(
            tables, port=0, checkpointer=reverb_py.checkpointers.DefaultCheckpointer(root)
        )
    except Exception as error:  # noqa: BLE001 - reported with context.
        pytest.fail(
            f"{where}: reverb_py.Server failed to load {path}: {type(error).__name__}: {error}"
        )
    try:
        handle = RpServerHandle(server)
        loaded = dm_client.call("server_info", address=handle.address)
        compare_infos(where, saved, loaded)
        extra = loaded["not_in_checkpoint"]
        assert (extra["max_size"], extra["current_size"]) == (3, 0), f"{where}: {extra}"

        counters = checkpoint_counters(parsed)
        items = checkpoint_items(parsed)
        for table in (t["name"] for t in SAVED_TABLES):
            got = handle.on_loop(handle.tables[table].rate_limiter_counters)
            assert got == counters[table], (
                f"{where}: {table} rate limiter (inserts, samples, deletes): loaded "
                f"{got}, checkpoint {counters[table]}"
            )
            got_items = handle.items(table)
            assert got_items == items.get(table, []), (
                f"{where}: {table} items (key, priority, times_sampled) in order: loaded "
                f"{got_items}, checkpoint {items.get(table, [])}"
            )
        drain_and_check(rp_sync_client, handle.address, where, items)
    finally:
        server.stop()


def test_reverb_py_checkpoint_loads_into_dm_reverb(
    tmp_path: Path, make_dm_server: Any, dm_client: ClientSide, rp_sync_client: ClientSide
) -> None:
    where = "[cell 5] reverb_py checkpoint -> dm-reverb server"
    root = str(tmp_path / "rp_checkpoints")
    server = reverb_py.Server(
        S.build_rp_tables(SAVED_TABLES),
        port=0,
        checkpointer=reverb_py.checkpointers.DefaultCheckpointer(root),
    )
    try:
        handle = RpServerHandle(server)
        populate(rp_sync_client, handle.address, f"{where} (filling the reverb_py server)")
        saved = rp_sync_client.call("server_info", address=handle.address)
        # The Checkpoint RPC from a dm-reverb client to the reverb_py server.
        path = dm_client.call("checkpoint", address=handle.address)
        items = {t["name"]: handle.items(t["name"]) for t in SAVED_TABLES}
        counters = {
            t["name"]: handle.on_loop(handle.tables[t["name"]].rate_limiter_counters)
            for t in SAVED_TABLES
        }
    finally:
        server.stop()
    assert os.path.dirname(path) == root, f"{where}: checkpoint path {path}"

    # The files themselves, read with TensorFlow's TFRecord reader and dm-reverb's protos.
    parsed = dm_client.call("parse_checkpoint", root=root)
    assert parsed["files"] == ["DONE", "chunks.tfrecord", "items.tfrecord", "tables.tfrecord"], (
        f"{where}: files in {parsed['directory']}: {parsed['files']}"
    )
    assert checkpoint_items(parsed) == {k: v for k, v in items.items() if v}, (
        f"{where}: items.tfrecord (TF reader) differs from the reverb_py tables"
    )
    assert checkpoint_counters(parsed) == counters, (
        f"{where}: tables.tfrecord counters {checkpoint_counters(parsed)}, tables {counters}"
    )

    loader = make_dm_server([*LOADING_TABLES, EXTRA_TABLE], checkpoint_dir=root)
    if loader.port is None:
        pytest.fail(
            f"{where}: the dm-reverb server failed to load {path}: "
            f"{loader.startup_error}\nlog tail:\n{loader.log_tail()}"
        )
    loaded = dm_client.call("server_info", address=loader.address)
    compare_infos(where, saved, loaded)
    extra = loaded["not_in_checkpoint"]
    assert (extra["max_size"], extra["current_size"]) == (3, 0), f"{where}: {extra}"

    # What the dm-reverb server now holds, read back from a checkpoint it writes itself.
    dm_client.call("checkpoint", address=loader.address)
    reparsed = dm_client.call("parse_checkpoint", root=root)
    assert checkpoint_counters(reparsed) == {**counters, "not_in_checkpoint": (0, 0, 0)}, (
        f"{where}: rate limiter (inserts, samples, deletes) held by dm-reverb after loading: "
        f"{checkpoint_counters(reparsed)}, saved {counters}"
    )
    assert checkpoint_items(reparsed) == {k: v for k, v in items.items() if v}, (
        f"{where}: items held by dm-reverb after loading differ from the saved ones"
    )
    drain_and_check(dm_client, loader.address, where, items)
