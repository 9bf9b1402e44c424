"""Every RPC fuzzed: random bytes, truncated and corrupted messages, wrong wire types, and
valid messages with wrong values. Each case must get a proper status in time, and the
bystander must still be served (see conftest.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reverb_py._client.channel import MUTATE_STREAM_PATH
from reverb_py._codec.chunk import encode_chunk
from reverb_py._proto import reverb_service_pb2 as pb
from reverb_py._proto import schema_pb2
from tests.robustness.conftest import TABLES, Attacker, Bystander, assert_proper
from tests.unit.test_protos import varint as _varint

pytestmark = [
    pytest.mark.fuzz,
    # Hypothesis warns about strategies whose draws a shrunk case no longer reaches.
    pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning"),
]
settings.load_profile("robustness")

UNARY = {
    "ServerInfo": pb.ServerInfoRequest(),
    "Reset": pb.ResetRequest(table="uniform"),
    "MutatePriorities": pb.MutatePrioritiesRequest(
        table="prio", updates=[schema_pb2.KeyWithPriority(key=1, priority=0.5)], delete_keys=[2]
    ),
    "Checkpoint": pb.CheckpointRequest(),
}

# ---------------------------------------------------------------- byte-level strategies


@st.composite
def wire_fields(draw: st.DrawFn) -> bytes:
    """Fields with random numbers, wire types (including the invalid 6 and 7 and the
    group markers) and payloads: well-framed or not."""
    out = bytearray()
    for _ in range(draw(st.integers(0, 6))):
        number = draw(st.integers(1, 12) | st.integers(1, 2**29 - 1))
        wire_type = draw(st.integers(0, 7))
        out += _varint(number << 3 | wire_type)
        if wire_type == 0:
            out += _varint(draw(st.integers(0, 2**64 - 1)))
        elif wire_type == 1:
            out += draw(st.binary(min_size=0, max_size=8))
        elif wire_type == 2:
            payload = draw(st.binary(max_size=40))
            length = draw(st.sampled_from([len(payload), len(payload) + 5, 2**31, 2**63]))
            out += _varint(length) + payload
        elif wire_type == 5:
            out += draw(st.binary(min_size=0, max_size=4))
    return bytes(out)


def corrupted(valid: bytes) -> st.SearchStrategy[bytes]:
    """``valid`` truncated, with bytes flipped, or with junk appended."""
    truncated = st.integers(0, max(0, len(valid) - 1)).map(lambda n: valid[:n])

    @st.composite
    def flipped(draw: st.DrawFn) -> bytes:
        data = bytearray(valid)
        for _ in range(draw(st.integers(1, 4))):
            if not data:
                break
            index = draw(st.integers(0, len(data) - 1))
            data[index] ^= draw(st.integers(1, 255))
        return bytes(data)

    appended = st.binary(min_size=1, max_size=16).map(lambda junk: valid + junk)
    return st.one_of(truncated, flipped(), appended)


def hostile_bytes(valid: bytes) -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=256), wire_fields(), corrupted(valid))


# ---------------------------------------------------------------- unary RPCs


@pytest.mark.parametrize("method", sorted(UNARY))
def test_unary_rpcs_survive_hostile_bytes(
    method: str, attacker: Attacker, bystander: Bystander
) -> None:
    valid = UNARY[method].SerializeToString()

    @given(hostile_bytes(valid))
    def case(data: bytes) -> None:
        assert_proper(attacker.unary(method, data), f"{method} {data!r}")
        bystander.check()

    case()


finite_or_not = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, -1.0, 0.0, 1e308]),
)


@given(
    table=st.sampled_from([*TABLES, "", "missing", "\x00", "é" * 3]),
    updates=st.lists(
        st.tuples(st.integers(0, 2**64 - 1) | st.integers(0, 5), finite_or_not), max_size=8
    ),
    deletes=st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 5), max_size=8),
)
def test_mutate_priorities_with_wrong_values(
    attacker: Attacker, bystander: Bystander, table: str, updates, deletes
) -> None:
    request = pb.MutatePrioritiesRequest(
        table=table,
        updates=[schema_pb2.KeyWithPriority(key=k, priority=p) for k, p in updates],
        delete_keys=deletes,
    )
    assert_proper(attacker.unary("MutatePriorities", request.SerializeToString()), str(request))
    code, _ = attacker.stream(MUTATE_STREAM_PATH, [request.SerializeToString()] * 2)
    assert_proper(code, f"stream: {request}")
    bystander.check()


@given(st.lists(hostile_bytes(UNARY["MutatePriorities"].SerializeToString()), max_size=3))
def test_mutate_priorities_stream_survives_hostile_bytes(
    attacker: Attacker, bystander: Bystander, requests: list[bytes]
) -> None:
    code, _ = attacker.stream(MUTATE_STREAM_PATH, requests)
    assert_proper(code, repr(requests))
    bystander.check()


# ---------------------------------------------------------------- streams

GOOD_COLUMN = np.arange(12, dtype=np.float32).reshape(4, 3)


def good_chunk(key: int, start: int = 0) -> bytes:
    return encode_chunk(key, 7, start, start + 3, [GOOD_COLUMN])


@st.composite
def chunk_bytes(draw: st.DrawFn, key: int) -> bytes:
    """A chunk: a good one, one with a bad range, no tensors or a tensor whose dtype,
    shape and data do not fit together, or corrupted bytes."""
    kind = draw(st.sampled_from(["good", "inverted", "empty", "corrupt", "raw", "mismatched"]))
    if kind == "good":
        return good_chunk(key, draw(st.integers(0, 10)))
    if kind == "mismatched":  # well-formed, but its tensor's fields do not fit together
        message = schema_pb2.ChunkData.FromString(good_chunk(key))
        tensor = message.data.tensors[0]
        field = draw(st.sampled_from(["dim", "dtype", "content", "rank"]))
        if field == "dim":
            dims = tensor.tensor_shape.dim
            dims[draw(st.integers(0, 1))].size = draw(
                st.integers(-2, 200) | st.integers(-(2**63), 2**63 - 1)
            )
        elif field == "dtype":
            tensor.dtype = draw(st.integers(-1, 30) | st.sampled_from([101, 2**31 - 1]))
        elif field == "content":
            tensor.tensor_content = draw(st.binary(max_size=12))
        else:
            tensor.tensor_shape.unknown_rank = True
        return message.SerializeToString()
    message = schema_pb2.ChunkData(chunk_key=key)
    message.sequence_range.episode_id = 7
    if kind == "inverted":
        message.sequence_range.start = draw(st.integers(1, 2**31 - 1))
        message.sequence_range.end = draw(st.integers(-(2**31), 0))
        return message.SerializeToString()
    if kind == "empty":
        return message.SerializeToString()
    if kind == "corrupt":
        return draw(corrupted(good_chunk(key)))
    return draw(st.binary(max_size=64))


@st.composite
def items(draw: st.DrawFn, chunk_keys: list[int]) -> bytes:
    """A PrioritizedItem whose slices may not fit its chunks."""
    message = schema_pb2.PrioritizedItem(
        key=draw(st.integers(0, 2**64 - 1) | st.integers(1, 50)),
        table=draw(st.sampled_from([*TABLES, "missing"])),
        priority=draw(finite_or_not),
        times_sampled=draw(st.integers(-(2**31), 2**31 - 1) | st.just(0)),
    )
    for _ in range(draw(st.integers(0, 3))):
        column = message.flat_trajectory.columns.add()
        column.squeeze = draw(st.booleans())
        for _ in range(draw(st.integers(0, 3))):
            column.chunk_slices.add(
                chunk_key=draw(st.sampled_from(chunk_keys) | st.integers(0, 2**64 - 1)),
                offset=draw(st.integers(-3, 6) | st.integers(-(2**31), 2**31 - 1)),
                length=draw(st.integers(-2, 6) | st.integers(-(2**31), 2**31 - 1)),
                index=draw(st.integers(-1, 2) | st.integers(-(2**31), 2**31 - 1)),
            )
    data = message.SerializeToString()
    return draw(st.just(data) | corrupted(data)) if draw(st.integers(0, 9)) == 0 else data


@st.composite
def insert_requests(draw: st.DrawFn) -> list[bytes]:
    keys = draw(st.lists(st.integers(1, 40), min_size=1, max_size=4, unique=True))
    requests = []
    for _ in range(draw(st.integers(1, 4))):
        # Built field by field: chunks (1) and items (2) as bytes, kept keys (3).
        sent = draw(st.lists(st.sampled_from(keys), max_size=3, unique=True))
        data = b"".join(
            b"\x0a" + _varint(len(chunk)) + chunk
            for chunk in (draw(chunk_bytes(key)) for key in sent)
        )
        data += b"".join(
            b"\x12" + _varint(len(item)) + item for item in draw(st.lists(items(keys), max_size=3))
        )
        kept = draw(st.lists(st.sampled_from(keys) | st.integers(0, 2**64 - 1), max_size=4))
        data += b"".join(b"\x18" + _varint(key) for key in kept)
        requests.append(data)
    return requests


@given(insert_requests())
def test_insert_stream_with_wrong_values(
    attacker: Attacker, bystander: Bystander, requests: list[bytes]
) -> None:
    code, _ = attacker.stream("InsertStream", requests)
    assert_proper(code, repr(requests))
    bystander.check()


def _valid_insert_request() -> bytes:
    item = schema_pb2.PrioritizedItem(key=1, table="uniform", priority=1.0)
    item.flat_trajectory.columns.add().chunk_slices.add(chunk_key=1, offset=0, length=4, index=0)
    chunk = good_chunk(1)
    return (
        b"\x0a"
        + _varint(len(chunk))
        + chunk
        + pb.InsertStreamRequest(items=[item], keep_chunk_keys=[1]).SerializeToString()
    )


@given(st.lists(hostile_bytes(_valid_insert_request()), min_size=1, max_size=3))
def test_insert_stream_survives_hostile_bytes(
    attacker: Attacker, bystander: Bystander, requests: list[bytes]
) -> None:
    code, _ = attacker.stream("InsertStream", requests)
    assert_proper(code, repr(requests))
    bystander.check()


@given(
    table=st.sampled_from([*TABLES, "", "missing"]),
    num_samples=st.integers(-(2**63), 2**63 - 1) | st.integers(-2, 40),
    # A timeout longer than the call's deadline on an empty table rightly waits past it.
    timeout_ms=st.integers(-(2**63), 0) | st.integers(-1, 200),
    fill=st.integers(0, 3),
)
def test_sample_stream_with_wrong_values(
    attacker: Attacker, bystander: Bystander, table: str, num_samples, timeout_ms, fill
) -> None:
    for n in range(fill):
        bystander.client.insert(np.float32(n), dict.fromkeys(TABLES, 1.0))
    request = pb.SampleStreamRequest(table=table, num_samples=num_samples)
    if timeout_ms or not fill or (table == "queue" and num_samples > fill):
        # An empty table with no timeout waits for inserts, as in Reverb: bounded here. A
        # queue is emptied by the samples themselves (then the call would wait for its
        # deadline, and end with that deadline's status, the client's or the server's).
        request.rate_limiter_timeout.milliseconds = timeout_ms if timeout_ms > 0 else 100
    code, _ = attacker.stream("SampleStream", [request.SerializeToString()], max_replies=20)
    assert_proper(code, str(request))
    bystander.check()


@given(
    st.lists(
        hostile_bytes(pb.SampleStreamRequest(table="uniform", num_samples=1).SerializeToString()),
        min_size=1,
        max_size=3,
    )
)
def test_sample_stream_survives_hostile_bytes(
    attacker: Attacker, bystander: Bystander, requests: list[bytes]
) -> None:
    bystander.client.insert(np.float32(1), {"uniform": 1.0})
    code, _ = attacker.stream("SampleStream", requests, max_replies=20)
    assert_proper(code, repr(requests))
    bystander.check()


@given(
    st.lists(
        hostile_bytes(
            pb.InitializeConnectionRequest(pid=1, table_name="uniform").SerializeToString()
        ),
        max_size=3,
    )
)
def test_initialize_connection_survives_hostile_bytes(
    attacker: Attacker, bystander: Bystander, requests: list[bytes]
) -> None:
    code, _ = attacker.stream("InitializeConnection", requests)
    assert_proper(code, repr(requests))
    bystander.check()
