"""Cells 1 and 2: a client of one implementation against a server of the other.

* cell 1: dm-reverb client -> reverb_py server
* cell 2: reverb_py client (blocking and asyncio) -> dm-reverb server

Every test runs the same scenario for each pair; the test id names the pair, and every
assertion message starts with ``[cell N] <client> -> <server>``. Also here:

* ``test_same_workload_same_server_info``: one workload through one client against both
  servers; every table's ``server_info`` must agree (cells 1+2 differentially);
* tests of the documented differences (docs/compatibility.md) seen over the wire, and a
  raw ``InsertStream`` protocol check.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

import numpy as np
import pytest

from . import _scenarios as S
from . import _tables
from ._checks import check_info, check_leaf_types, check_nest
from ._procs import wait_for
from ._sides import ClientSide, RpServerHandle, ServerHandle, annotated_call, reset_tables

PAIRS = [
    pytest.param(("cell 1", "dm_client", "rp_server"), id="cell1-dm_client-rp_server"),
    pytest.param(("cell 2", "rp_sync_client", "dm_server"), id="cell2-rp_sync_client-dm_server"),
    pytest.param(("cell 2", "rp_aio_client", "dm_server"), id="cell2-rp_aio_client-dm_server"),
]
# reverb_py.aio has no legacy Writer (dm-reverb has no asyncio API to match).
LEGACY_PAIRS = PAIRS[:2]


class Pair:
    def __init__(self, cell: str, client: ClientSide, server: ServerHandle) -> None:
        self.cell = cell
        self.client = client
        self.server = server
        self.address = server.address

    def where(self, call: str) -> str:
        return f"[{self.cell}] {self.client.label} -> {self.server.label}: {call}"

    def call(self, op: str, **args: Any) -> Any:
        return annotated_call(self.where(f"{op}()"), self.client, op, address=self.address, **args)

    def submit(self, op: str, **args: Any) -> concurrent.futures.Future[Any]:
        return self.client.submit(op, address=self.address, **args)


@pytest.fixture
def pair(request: pytest.FixtureRequest) -> Pair:
    cell, client_fixture, server_fixture = request.param
    client = request.getfixturevalue(client_fixture)
    server = request.getfixturevalue(server_fixture)
    reset_tables(server, S.TABLE_NAMES)
    return Pair(cell, client, server)


def only_key(pair: Pair, table: str) -> int | None:
    """The key of the only item of ``table`` when the server is reverb_py's (else None)."""
    if isinstance(pair.server, RpServerHandle):
        items = pair.server.items(table)
        assert len(items) == 1, f"{pair.where(table)}: server holds {items}"
        return items[0][0]
    return None


# --------------------------------------------------------------------- writing + data


@pytest.mark.parametrize("pair", PAIRS, indirect=True)
def test_trajectory_writer_all_dtypes(pair: Pair) -> None:
    """Every dtype, squeezed and sequence columns, sampled back bit for bit."""
    steps = S.all_dtype_steps()
    layout = S.all_dtype_layout(3)
    pair.call(
        "write_trajectory",
        steps=steps,
        items=[{"table": "fifo", "priority": 1.25, "layout": layout}],
    )
    samples = pair.call("sample", table="fifo", num_samples=2)
    expected = S.flatten(S.expected_trajectory(steps, layout))
    paths = S.flat_paths(layout)
    key = only_key(pair, "fifo")
    for index, sample in enumerate(samples):
        where = pair.where(f"sample('fifo') #{index} of a TrajectoryWriter item")
        S.assert_flat_equal(where, sample["data"], expected, paths)
        check_leaf_types(where, sample, paths)
        check_info(where, sample, table_size=1, priority=1.25, times_sampled=index + 1, key=key)
    assert samples[0]["info"]["key"] == samples[1]["info"]["key"]


def test_asyncio_writers_sharing_a_stream_to_dm_reverb(rp_aio_client, dm_server) -> None:
    """reverb_py's asyncio writers of one client share an insert stream (their batches in
    one request, every writer's keep_chunk_keys in each): dm-reverb's server takes every
    item whole."""
    reset_tables(dm_server, S.TABLE_NAMES)
    where = "[cell 2] rp_aio_client -> dm_server"
    result = annotated_call(
        f"{where}: write_shared()",
        rp_aio_client,
        "write_shared",
        address=dm_server.address,
        writers=3,
        steps=30,
        table="uniform",
    )
    assert result == {"streams": 1, "alone": 0}, f"{where}: {result}"
    infos = annotated_call(
        f"{where}: server_info()", rp_aio_client, "server_info", address=dm_server.address
    )
    assert infos["uniform"]["current_size"] == 3 * 28, f"{where}: {infos['uniform']}"
    samples = annotated_call(
        f"{where}: sample()",
        rp_aio_client,
        "sample",
        address=dm_server.address,
        table="uniform",
        num_samples=200,
    )
    for sample in samples:
        values = [int(v) for v in np.asarray(sample["data"][0]).reshape(-1)]
        first = values[0]
        assert values == [first, first + 1, first + 2] and first % 1000 <= 27, (
            f"{where}: sampled {values}"
        )


@pytest.mark.parametrize("delta_encoded", [False, True], ids=["plain", "delta_encoded"])
@pytest.mark.parametrize("pair", LEGACY_PAIRS, indirect=True)
def test_legacy_writer_all_dtypes(pair: Pair, delta_encoded: bool) -> None:
    """Legacy Writer items spanning two chunks (chunk_length 2), with delta encoding."""
    steps = S.all_dtype_steps()
    pair.call(
        "write_legacy",
        steps=steps,
        items=[
            {"table": "uniform", "num_timesteps": 1, "priority": 3.0, "after_step": 1},
            {"table": "fifo", "num_timesteps": 3, "priority": 2.0},
        ],
        max_sequence_length=3,
        chunk_length=2,
        delta_encoded=delta_encoded,
    )
    columns = sorted(steps[0])
    for table, window, priority in (("fifo", steps[1:4], 2.0), ("uniform", steps[1:2], 3.0)):
        [sample] = pair.call("sample", table=table, num_samples=1)
        expected = [np.stack([np.asarray(step[c]) for step in window]) for c in columns]
        where = pair.where(f"sample({table!r}) of a legacy Writer item")
        S.assert_flat_equal(where, sample["data"], expected, columns)
        check_info(
            where,
            sample,
            table_size=1,
            priority=priority,
            times_sampled=1,
            key=only_key(pair, table),
        )


@pytest.mark.parametrize("pair", PAIRS, indirect=True)
def test_client_insert_all_dtypes(pair: Pair) -> None:
    """``Client.insert`` into two tables: a leading time axis of 1 on every column."""
    data = S.all_dtype_steps()[1]
    pair.call("insert", data=data, priorities={"fifo": 1.5, "uniform": 2.5})
    columns = sorted(data)
    expected = [np.asarray(data[c])[None] for c in columns]
    for table, priority in (("fifo", 1.5), ("uniform", 2.5)):
        [sample] = pair.call("sample", table=table, num_samples=1)
        where = pair.where(f"insert() then sample({table!r})")
        S.assert_flat_equal(where, sample["data"], expected, columns)
        check_info(
            where,
            sample,
            table_size=1,
            priority=priority,
            times_sampled=1,
            key=only_key(pair, table),
        )


@pytest.mark.parametrize("pair", PAIRS, indirect=True)
def test_emit_timesteps(pair: Pair) -> None:
    """``sample(emit_timesteps=True)``: one ReplaySample per step, numpy arrays."""
    steps = S.all_dtype_steps()
    columns = [*S.ALL_DTYPES, "scalar_f64", "scalar_string", "matrix_i16"]
    layout = S.sequence_layout(columns, 3)
    pair.call(
        "write_trajectory",
        steps=steps,
        items=[{"table": "fifo", "priority": 1.0, "layout": layout}],
    )
    [timesteps] = pair.call("sample", table="fifo", num_samples=1, emit_timesteps=True)
    where = pair.where("sample('fifo', emit_timesteps=True)")
    assert len(timesteps) == 3, f"{where}: {len(timesteps)} timesteps, expected 3"
    for index, step in enumerate(timesteps):
        leaf_types = dict(zip(sorted(columns), step["data_types"]))
        not_arrays = {c: t for c, t in leaf_types.items() if t != "numpy.ndarray"}
        assert not not_arrays, (
            f"{where} step {index}: dm-reverb yields np.asarray(column[i], column.dtype) "
            f"(0-d arrays for scalar steps); got non-arrays {not_arrays}"
        )
        expected = [np.asarray(steps[1 + index][c]) for c in sorted(columns)]
        S.assert_flat_equal(f"{where} step {index}", step["data"], expected, sorted(columns))
        check_info(where, step, table_size=1, priority=1.0, times_sampled=1)


# --------------------------------------------------------------------- SampleInfo


@pytest.mark.parametrize("pair", PAIRS, indirect=True)
def test_sample_info_max_times_sampled(pair: Pair) -> None:
    """``fifo3`` (max_times_sampled=3): table_size counts the item its 3rd sample deletes."""
    for index, priority in enumerate((1.0, 2.0)):
        pair.call("insert", data={"id": np.int64(index)}, priorities={"fifo3": priority})
    samples = pair.call("sample", table="fifo3", num_samples=4)
    where = pair.where("sample('fifo3', 4)")
    ids = [int(sample["data"][0][0]) for sample in samples]
    assert ids == [0, 0, 0, 1], f"{where}: sampled ids {ids}"
    for sample, (size, priority, times) in zip(
        samples, [(2, 1.0, 1), (2, 1.0, 2), (2, 1.0, 3), (1, 2.0, 1)]
    ):
        check_info(where, sample, table_size=size, priority=priority, times_sampled=times)
    info = pair.server.info("fifo3")
    assert info["current_size"] == 1, f"{where}: server info after: {info}"


@pytest.mark.parametrize("pair", PAIRS, indirect=True)
def test_sample_info_probabilities(pair: Pair) -> None:
    """Prioritized (exponent 0.8) and Uniform probabilities; times_sampled per key."""
    priorities = [1.0, 2.0, 3.0]
    for index, priority in enumerate(priorities):
        for table in ("prio", "uniform"):  # one table per insert: see test_client_insert_*
            pair.call("insert", data={"id": np.int64(index)}, priorities={table: priority})
    weights = [p**0.8 for p in priorities]
    for table, probability_of in (
        ("prio", lambda i: weights[i] / sum(weights)),
        ("uniform", lambda i: 1 / 3),
    ):
        samples = pair.call("sample", table=table, num_samples=30)
        where = pair.where(f"sample({table!r}, 30)")
        seen: dict[int, int] = {}
        keys: dict[int, int] = {}
        for sample in samples:
            item = int(sample["data"][0][0])
            seen[item] = seen.get(item, 0) + 1
            keys.setdefault(item, sample["info"]["key"])
            check_info(
                where,
                sample,
                table_size=3,
                priority=priorities[item],
                times_sampled=seen[item],
                probability=probability_of(item),
                key=keys[item],
            )
        if isinstance(pair.server, RpServerHandle):
            stored = {key: (priority, times) for key, priority, times in pair.server.items(table)}
            for item, key in keys.items():
                assert stored[key] == (priorities[item], seen[item]), (
                    f"{where}: server holds {stored[key]} for key {key}"
                )


@pytest.mark.parametrize("pair", PAIRS, indirect=True)
def test_heap_sampler_and_remover(pair: Pair) -> None:
    """MaxHeap sampler, MinHeap remover (max_size 3): an insert can evict itself."""
    for index, priority in enumerate([1.0, 5.0, 3.0, 0.5]):
        pair.call("insert", data={"id": np.int64(index)}, priorities={"heap": priority})
    samples = pair.call("sample", table="heap", num_samples=2)
    where = pair.where("sample('heap', 2)")
    assert [int(s["data"][0][0]) for s in samples] == [1, 1], f"{where}: {samples}"
    check_info(where, samples[1], table_size=3, priority=5.0, times_sampled=2)
    info = pair.server.info("heap")
    assert info["current_size"] == 3, f"{where}: {info}"
    assert info["rate_limiter_info"]["inserts"] == 4, f"{where}: {info}"


# --------------------------------------------------------------------- mutate / reset


@pytest.mark.parametrize("pair", PAIRS, indirect=True)
def test_mutate_priorities(pair: Pair) -> None:
    for index, priority in enumerate((1.0, 2.0, 3.0)):
        pair.call("insert", data={"id": np.int64(index)}, priorities={"fifo": priority})
    [first] = pair.call("sample", table="fifo")
    key = first["info"]["key"]
    pair.call("mutate_priorities", table="fifo", updates=[[key, 7.5], [12345, 1.0]], deletes=[999])
    [again] = pair.call("sample", table="fifo")
    where = pair.where("mutate_priorities(updates=...) then sample('fifo')")
    check_info(where, again, table_size=3, priority=7.5, times_sampled=2, key=key)
    pair.call("mutate_priorities", table="fifo", deletes=[key])
    [after] = pair.call("sample", table="fifo")
    where = pair.where("mutate_priorities(deletes=[key]) then sample('fifo')")
    assert int(after["data"][0][0]) == 1, f"{where}: {after}"
    check_info(where, after, table_size=2, priority=2.0, times_sampled=1)
    if isinstance(pair.server, RpServerHandle):
        assert [p for _, p, _ in pair.server.items("fifo")] == [2.0, 3.0]


@pytest.mark.parametrize("op", ["sample", "mutate_priorities", "reset"])
@pytest.mark.parametrize("pair", PAIRS, indirect=True)
def test_unknown_table(pair: Pair, op: str) -> None:
    """NOT_FOUND ``Priority table nope was not found`` arrives as a RuntimeError."""
    args: dict[str, Any] = {"table": "nope"}
    if op == "mutate_priorities":
        args["updates"] = [[1, 1.0]]
    mro, message = pair.client.call_error(op, address=pair.address, **args)
    where = pair.where(f"{op}(table='nope')")
    assert "RuntimeError" in mro, f"{where}: raised {mro[0]}: {message}"
    assert "Priority table nope was not found" in message, f"{where}: message {message!r}"


@pytest.mark.parametrize("pair", PAIRS, indirect=True)
def test_reset(pair: Pair) -> None:
    for index in range(3):
        pair.call("insert", data={"id": np.int64(index)}, priorities={"ratio": 1.0})
    pair.call("sample", table="ratio", num_samples=2)
    before = pair.server.info("ratio")
    where = pair.where("reset('ratio')")
    assert (
        before["current_size"],
        before["rate_limiter_info"]["inserts"],
        before["rate_limiter_info"]["samples"],
    ) == (3, 3, 2), f"{where}: before {before}"
    pair.call("reset", table="ratio")
    after = pair.server.info("ratio")
    counters = {
        "current_size": after["current_size"],
        "num_episodes": after["num_episodes"],
        "num_deleted_episodes": after["num_deleted_episodes"],
        "num_unique_samples": after["num_unique_samples"],
        "inserts": after["rate_limiter_info"]["inserts"],
        "samples": after["rate_limiter_info"]["samples"],
    }
    assert set(counters.values()) == {0}, f"{where}: after reset {counters}"


# --------------------------------------------------------------------- server_info


def expected_options(selector: list) -> dict:
    kind, *args = selector
    if kind == "prioritized":
        return {
            "distribution": "prioritized",
            "is_deterministic": False,
            "priority_exponent": args[0],
        }
    if kind in ("min_heap", "max_heap"):
        return {"distribution": "heap", "is_deterministic": True, "min_heap": kind == "min_heap"}
    return {"distribution": kind, "is_deterministic": kind != "uniform", "flag": True}


def expected_limiter(desc: dict) -> dict:
    big = np.finfo(np.float64).max
    if "queue" in desc or "stack" in desc:
        size = desc.get("queue", desc.get("stack"))
        return {
            "samples_per_insert": 1.0,
            "min_diff": 0.0,
            "max_diff": float(size),
            "min_size_to_sample": 1,
        }
    kind, *args = desc["rate_limiter"]
    if kind == "min_size":
        return {
            "samples_per_insert": 1.0,
            "min_diff": -big,
            "max_diff": big,
            "min_size_to_sample": args[0],
        }
    if kind == "ratio":
        spi, min_size, error_buffer = args
        offset = spi * min_size
        return {
            "samples_per_insert": spi,
            "min_diff": offset - error_buffer,
            "max_diff": offset + error_buffer,
            "min_size_to_sample": min_size,
        }
    spi, min_size, min_diff, max_diff = args
    return {
        "samples_per_insert": spi,
        "min_diff": min_diff,
        "max_diff": max_diff,
        "min_size_to_sample": min_size,
    }


def expected_table_info(desc: dict) -> dict:
    if "queue" in desc or "stack" in desc:
        kind = "fifo" if "queue" in desc else "lifo"
        sampler = remover = expected_options([kind])
        max_size, max_times_sampled = desc.get("queue", desc.get("stack")), 1
    else:
        sampler, remover = expected_options(desc["sampler"]), expected_options(desc["remover"])
        max_size, max_times_sampled = desc["max_size"], desc.get("max_times_sampled", 0)
    return {
        "max_size": max_size,
        "max_times_sampled": max_times_sampled,
        "sampler_options": sampler,
        "remover_options": remover,
        "rate_limiter": expected_limiter(desc),
        "signature": desc.get("signature"),
    }


@pytest.mark.parametrize("pair", PAIRS, indirect=True)
def test_server_info(pair: Pair) -> None:
    """Options, limiter config, counters and signatures decoded into the client's specs."""
    for table in ("ratio", "uniform"):
        pair.call("insert", data={"id": np.int64(1)}, priorities={table: 1.0})
    infos = pair.call("server_info", timeout=30)
    where = pair.where("server_info()")
    assert sorted(infos) == sorted(S.TABLE_NAMES), f"{where}: tables {sorted(infos)}"
    problems = []
    for desc in S.SHARED_TABLES:
        info = infos[desc["name"]]
        expected = expected_table_info(desc)
        got = {
            "max_size": info["max_size"],
            "max_times_sampled": info["max_times_sampled"],
            "sampler_options": info["sampler_options"],
            "remover_options": info["remover_options"],
            "rate_limiter": {
                k: v
                for k, v in info["rate_limiter_info"].items()
                if k not in ("inserts", "samples")
            },
            "signature": _tables.strip_types(info["signature"]),
        }
        for field, value in expected.items():
            if got[field] != value:
                problems.append(f"  {desc['name']}.{field}: got {got[field]!r}, expected {value!r}")
        spec_types = _tables.spec_types(info["signature"])
        wanted = (
            {"tensorflow.TensorSpec", "tensorflow.BoundedTensorSpec"}
            if pair.client.key == "dm"
            else {"reverb_py.TensorSpec", "reverb_py.BoundedTensorSpec"}
        )
        if not spec_types <= wanted:
            problems.append(
                f"  {desc['name']}.signature decoded as {spec_types}, expected within {wanted}"
            )
    ratio = infos["ratio"]
    counters = (
        ratio["current_size"],
        ratio["num_episodes"],
        ratio["rate_limiter_info"]["inserts"],
        ratio["rate_limiter_info"]["samples"],
    )
    if counters != (1, 1, 1, 0):
        problems.append(f"  ratio counters (size, episodes, inserts, samples) = {counters}")
    assert not problems, f"{where}:\n" + "\n".join(problems)


@pytest.mark.parametrize("pair", PAIRS, indirect=True)
def test_unpack_as_table_signature(pair: Pair) -> None:
    """A TrajectoryWriter item validated against the ``sig`` signature, sampled back as
    the signature's nest (dict, tuple, list, namedtuple)."""
    steps = S.sig_steps()
    pair.call(
        "write_trajectory",
        steps=steps,
        items=[{"table": "sig", "priority": 1.0, "layout": S.SIG_LAYOUT}],
    )
    [sample] = pair.call("sample", table="sig", unpack_as_table_signature=True)
    where = pair.where("sample('sig', unpack_as_table_signature=True)")
    expected = S.expected_trajectory(steps, S.SIG_LAYOUT)
    check_nest(where, sample["data"], expected)


@pytest.mark.parametrize("pair", PAIRS, indirect=True)
def test_writer_validates_against_server_signature(pair: Pair) -> None:
    """TrajectoryWriter(validate_items=True) checks items against the signature and
    table list the *other* implementation's server reported."""
    steps = S.sig_steps()
    bad_layout = dict(S.SIG_LAYOUT, act="obs[-3:]")  # float32 [3,3] where int64 [T] is due
    mro, message = pair.client.call_error(
        "write_trajectory",
        address=pair.address,
        steps=steps,
        items=[{"table": "sig", "priority": 1.0, "layout": bad_layout}],
    )
    where = pair.where("create_item('sig') with a column that breaks the signature")
    assert "ValueError" in mro, f"{where}: raised {mro[0]}: {message}"
    assert "signature" in message, f"{where}: message {message!r}"
    mro, message = pair.client.call_error(
        "write_trajectory",
        address=pair.address,
        steps=steps,
        items=[{"table": "nope", "priority": 1.0, "layout": {"x": "obs[-1]"}}],
    )
    where = pair.where("create_item('nope')")
    assert "ValueError" in mro, f"{where}: raised {mro[0]}: {message}"
    assert "Unable to create item in table 'nope' since the table could not be found" in (
        message
    ), f"{where}: message {message!r}"
    assert pair.server.info("sig")["current_size"] == 0


# --------------------------------------------------------------------- rate limiting


@pytest.mark.parametrize("pair", PAIRS, indirect=True)
def test_rate_limiter_timeout(pair: Pair) -> None:
    """Sampling an empty queue with a rate-limiter timeout ends within the bound."""
    where = pair.where("sample('queue') with rate_limiter_timeout_ms=200 on an empty queue")
    start = time.monotonic()
    if pair.client.key == "dm":
        # dm-reverb exposes the timeout on its datasets only; a timeout ends the dataset.
        samples = pair.call(
            "dataset_sample_with_types",
            table="queue",
            dtypes=["int64"],
            shapes=[[1]],
            num_samples=1,
            rate_limiter_timeout_ms=200,
        )
        assert samples == [], f"{where}: got {samples}"
    else:
        mro, message = pair.client.call_error(
            "sample", address=pair.address, table="queue", rate_limiter_timeout_ms=200
        )
        assert "DeadlineExceededError" in mro, f"{where}: raised {mro[0]}: {message}"
        # docs/compatibility.md: reverb_py's Client.sample asks a zero timeout as 1 ms.
        mro, message = pair.client.call_error(
            "sample", address=pair.address, table="queue", rate_limiter_timeout_ms=0
        )
        assert "DeadlineExceededError" in mro, (
            f"{pair.where('sample(rate_limiter_timeout_ms=0)')}: raised {mro[0]}: {message}"
        )
    elapsed = time.monotonic() - start
    assert elapsed < 30, f"{where}: took {elapsed:.1f} s"


def wait_until(condition: Any, what: str, timeout: float = 20.0) -> None:
    """Polls ``condition()`` until it holds; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(0.01)


def assert_still_blocked(future: concurrent.futures.Future[Any], where: str) -> None:
    """A negative check: the call has not completed (bounded wait, not synchronisation)."""
    done, _ = concurrent.futures.wait([future], timeout=0.5)
    assert not done, f"{where}: completed while it should block: {future.result()!r}"


@pytest.mark.parametrize("pair", PAIRS, indirect=True)
def test_full_queue_blocks_insert_until_sample(pair: Pair) -> None:
    for index in range(2):
        pair.call("insert", data={"id": np.int64(index)}, priorities={"queue": 1.0})
    blocked = pair.submit("insert", data={"id": np.int64(2)}, priorities={"queue": 1.0})
    where = pair.where("insert() into a full Queue(2)")
    if isinstance(pair.server, RpServerHandle):
        table = pair.server.tables["queue"]
        wait_until(lambda: table.num_pending_inserts == 1, f"{where}: the insert pending")
    assert_still_blocked(blocked, where)
    [first] = pair.call("sample", table="queue")
    wait_for(blocked, 30, f"{where}: the blocked insert after a sample")
    rest = pair.call("sample", table="queue", num_samples=2)
    ids = [int(s["data"][0][0]) for s in [first, *rest]]
    assert ids == [0, 1, 2], f"{where}: queue order {ids}"
    info = pair.server.info("queue")
    assert info["current_size"] == 0, f"{where}: {info}"


@pytest.mark.parametrize("pair", PAIRS, indirect=True)
def test_empty_queue_blocks_sample_until_insert(pair: Pair) -> None:
    blocked = pair.submit("sample", table="queue")
    where = pair.where("sample() from an empty Queue(2)")
    if isinstance(pair.server, RpServerHandle):
        table = pair.server.tables["queue"]
        wait_until(lambda: table.num_pending_samples == 1, f"{where}: the sample pending")
    assert_still_blocked(blocked, where)
    pair.call("insert", data={"id": np.int64(7)}, priorities={"queue": 1.0})
    [sample] = wait_for(blocked, 30, f"{where}: the blocked sample after an insert")
    assert int(sample["data"][0][0]) == 7, f"{where}: {sample}"
    check_info(where, sample, table_size=1, priority=1.0, times_sampled=1)


# --------------------------------------------------------------------- differential


def run_scenario(client: ClientSide, address: str) -> None:
    """One fixed, deterministic workload touching every shared table."""

    def call(op: str, **args: Any) -> Any:
        return annotated_call(
            f"[cells 1+2] {client.label} -> {address}: {op}()", client, op, address=address, **args
        )

    def insert(table: str, *priorities: float) -> None:
        for index, priority in enumerate(priorities):
            call("insert", data={"id": np.int64(index)}, priorities={table: priority})

    insert("uniform", 1.0)
    call("sample", table="uniform", num_samples=2)
    insert("prio", 0.0, 0.0, 5.0)  # zero priorities are never sampled
    [sampled] = call("sample", table="prio", num_samples=3)[-1:]
    call("mutate_priorities", table="prio", updates=[[sampled["info"]["key"], 2.0]])
    steps = S.all_dtype_steps()
    for after_step in (1, 3):  # one item per writer: see test_trajectory_writer_many_items_*
        call(
            "write_trajectory",
            steps=steps,
            items=[
                {
                    "table": "fifo",
                    "priority": 1.0,
                    "layout": {"x": "int8[-2:]"},
                    "after_step": after_step,
                }
            ],
        )
    [oldest] = call("sample", table="fifo")
    call("mutate_priorities", table="fifo", deletes=[oldest["info"]["key"]])
    insert("fifo3", 1.0, 2.0)
    call("sample", table="fifo3", num_samples=4)
    insert("heap", 1.0, 5.0, 3.0, 0.5)
    insert("lifo", 1.0, 1.0, 1.0)
    call("sample", table="lifo", num_samples=2)
    insert("ratio", 1.0, 1.0, 1.0)
    call("sample", table="ratio", num_samples=2)
    insert("queue", 1.0, 1.0)
    call("sample", table="queue")
    insert("stack", 1.0, 1.0, 1.0)
    call("sample", table="stack", num_samples=2)
    call(
        "write_trajectory",
        steps=S.sig_steps(),
        items=[{"table": "sig", "priority": 1.0, "layout": S.SIG_LAYOUT}],
    )


@pytest.mark.parametrize("client_fixture", ["dm_client", "rp_sync_client", "rp_aio_client"])
def test_same_workload_same_server_info(
    request: pytest.FixtureRequest, client_fixture: str, rp_server: Any, dm_server: Any
) -> None:
    """Cells 1+2 differentially: one workload through one client against both servers,
    then every table's server_info must agree field by field."""
    client = request.getfixturevalue(client_fixture)
    infos = {}
    for server in (rp_server, dm_server):
        reset_tables(server, S.TABLE_NAMES)
        run_scenario(client, server.address)
        infos[server.label] = client.call("server_info", address=server.address)
    rp_infos, dm_infos = infos["reverb_py server"], infos["dm-reverb server"]
    problems = []
    for table in S.TABLE_NAMES:
        for field in rp_infos[table]:
            if rp_infos[table][field] != dm_infos[table][field]:
                problems.append(
                    f"  {table}.{field}: reverb_py server {rp_infos[table][field]!r}"
                    f" != dm-reverb server {dm_infos[table][field]!r}"
                )
    assert not problems, (
        f"[cells 1+2] {client.label}: server_info after the same workload differs:\n"
        + "\n".join(problems)
    )


@pytest.mark.parametrize("pair", PAIRS, indirect=True)
def test_trajectory_writer_many_items_one_flush(pair: Pair) -> None:
    """300 overlapping two-step items streamed without flushing in between (the writer
    packs many chunks and items per message and must keep ``keep_chunk_keys`` right)."""
    steps = [{"x": np.float32(i)} for i in range(300)]
    items = [
        {"table": "uniform", "priority": 1.0, "layout": {"x": "x[-2:]"}, "after_step": i}
        for i in range(1, 300)
    ]
    pair.call("write_trajectory", steps=steps, items=items, num_keep_alive_refs=2)
    where = pair.where("TrajectoryWriter: 299 items, then flush()")
    info = pair.server.info("uniform")
    assert info["current_size"] == 299, f"{where}: {info}"
    for sample in pair.call("sample", table="uniform", num_samples=20):
        first, second = sample["data"][0].tolist()
        assert second == first + 1, f"{where}: sampled {sample['data']}"


@pytest.mark.parametrize("pair", PAIRS, indirect=True)
def test_large_items_span_several_messages(pair: Pair) -> None:
    """Items of ~3 MiB (several chunks), sampled two per request: the server splits a
    sample's chunks over several entries/responses beyond ~2 MiB, the client joins them."""
    rng = np.random.default_rng(5)
    steps = [
        {
            "big": rng.standard_normal(300_000).astype(np.float32),
            "tag": S.scalar_bytes(b"x" * 100_000 + b"%d" % i),
            "i": np.int64(i),
        }
        for i in range(4)
    ]
    layout = {"big": "big[-3:]", "tag": "tag[-3:]", "i": "i[-1]"}
    pair.call(
        "write_trajectory",
        steps=steps,
        num_keep_alive_refs=3,
        items=[
            {"table": "fifo", "priority": 1.0, "layout": layout, "after_step": -2},
            {"table": "fifo", "priority": 2.0, "layout": layout},
        ],
    )
    samples = pair.call("sample", table="fifo", num_samples=2)
    where = pair.where("sample('fifo', 2) of ~3.6 MB items")
    for sample in samples:  # Fifo, no max_times_sampled: the oldest item twice
        expected = S.flatten(S.expected_trajectory(steps[:3], layout))
        S.assert_flat_equal(where, sample["data"], expected, S.flat_paths(layout))
    pair.call("mutate_priorities", table="fifo", deletes=[samples[0]["info"]["key"]])
    [last] = pair.call("sample", table="fifo")
    S.assert_flat_equal(
        where, last["data"], S.flatten(S.expected_trajectory(steps, layout)), S.flat_paths(layout)
    )
    check_info(where, last, table_size=1, priority=2.0, times_sampled=1)


# --------------------------------------------------------------------- documented differences


@pytest.mark.parametrize("pair", PAIRS[:1], indirect=True)
def test_negative_priority_refused_over_the_wire(pair: Pair) -> None:
    """docs/compatibility.md: a negative priority into a Prioritized table is refused with
    INVALID_ARGUMENT and the table keeps serving (Reverb's own server would lose the
    table, so this runs against the reverb_py server only). dm-reverb's clients see the
    refusal as ValueError."""
    pair.call("insert", data={"id": np.int64(0)}, priorities={"prio": 1.0})
    [sample] = pair.call("sample", table="prio")
    key = sample["info"]["key"]
    mro, message = pair.client.call_error(
        "mutate_priorities", address=pair.address, table="prio", updates=[[key, -1.0]]
    )
    where = pair.where("mutate_priorities('prio', {key: -1.0})")
    assert "ValueError" in mro, f"{where}: raised {mro[0]}: {message}"
    mro, message = pair.client.call_error(
        "write_trajectory",
        address=pair.address,
        steps=[{"x": np.float32(1)}],
        items=[{"table": "prio", "priority": -2.0, "layout": {"x": "x[-1:]"}}],
    )
    where = pair.where("TrajectoryWriter.create_item('prio', priority=-2.0) + flush()")
    assert "ValueError" in mro, f"{where}: raised {mro[0]}: {message}"
    [again] = pair.call("sample", table="prio")
    check_info(
        pair.where("sample('prio') afterwards"),
        again,
        table_size=1,
        priority=1.0,
        times_sampled=2,
        key=key,
    )


@pytest.mark.parametrize("server_fixture", ["rp_server", "dm_server"])
def test_keep_chunk_keys_listing_a_chunk_twice(
    request: pytest.FixtureRequest, server_fixture: str
) -> None:
    """Both servers refuse a ``keep_chunk_keys`` list with a duplicate
    (FAILED_PRECONDITION: a key listed twice counts twice). Raw InsertStream."""
    import grpc

    from reverb_py._proto import reverb_service_pb2, schema_pb2
    from tests.codec_oracles import build_chunk

    server = request.getfixturevalue(server_fixture)
    reset_tables(server, ["fifo"])
    chunk = build_chunk(11, 5, 0, 0, [np.array([1.5], np.float32)])
    column = schema_pb2.FlatTrajectory.Column(
        chunk_slices=[schema_pb2.FlatTrajectory.ChunkSlice(chunk_key=11, offset=0, length=1)]
    )
    item = schema_pb2.PrioritizedItem(
        key=77,
        table="fifo",
        priority=1.0,
        flat_trajectory=schema_pb2.FlatTrajectory(columns=[column]),
    )
    request_message = reverb_service_pb2.InsertStreamRequest(
        chunks=[chunk], items=[item], keep_chunk_keys=[11, 11]
    )
    with grpc.insecure_channel(server.address) as channel:
        stream = channel.stream_stream(
            "/deepmind.reverb.ReverbService/InsertStream",
            request_serializer=reverb_service_pb2.InsertStreamRequest.SerializeToString,
            response_deserializer=reverb_service_pb2.InsertStreamResponse.FromString,
        )
        try:
            confirmed = [
                key
                for response in stream(iter([request_message]), timeout=30)
                for key in response.keys
            ]
            outcome = ("OK", confirmed)
        except grpc.RpcError as error:
            outcome = (error.code().name, error.details())
    where = f"[protocol] raw InsertStream with keep_chunk_keys=[11, 11] to a {server.label}"
    assert outcome[0] == "FAILED_PRECONDITION", f"{where}: {outcome}"
