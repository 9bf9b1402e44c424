"""The compiled batch path gives the per-sample path's samples, and the server's compiled
sample responses are the pure twin's bytes.

``_speedups.sample_wire.BatchFiller`` writes plain samples straight into batch arrays;
through ``reverb_py._client.datasets._fill`` (the sampler's own glue) a stream of
responses must give, sample by sample and in order, what ``SampleAssembler`` gives, with
anything the filler does not take left to the assembler. ``unsnappy`` must agree with
cramjam on valid and corrupted input. ``checkpoint_records.encode_sample_response`` and
``encode_sample_info`` must give the pure twin's bytes.
"""

from __future__ import annotations

import random
import types
from typing import Any

import cramjam
import numpy as np
import pytest

from reverb_py import errors
from reverb_py._client import datasets
from reverb_py._client.sampling import SampleAssembler
from reverb_py._codec.chunk import encode_chunk
from reverb_py._proto import reverb_service_pb2, schema_pb2
from reverb_py._pure import checkpoint_records as pure_records
from reverb_py._pure import sample_wire as pure
from reverb_py.replay_sample import SampleInfo
from reverb_py.table import Item, SampledItem
from tests.helpers import compiled_module
from tests.parity.test_sample_wire import NUMERIC


@pytest.fixture
def fast():
    return compiled_module("sample_wire")


# ------------------------------------------------------------------ unsnappy


def test_unsnappy_decompresses_as_cramjam(fast) -> None:
    rng = np.random.default_rng(4)
    for size in [0, 1, 2, 7, 60, 61, 300, 4095, 4096, 70_000]:
        for kind in ("random", "runs", "pattern"):
            if kind == "random":
                raw = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
            elif kind == "runs":
                raw = np.repeat(rng.integers(0, 4, size // 50 + 1, dtype=np.uint8), 50)[:size]
                raw = raw.tobytes()
            else:
                raw = (b"abcab" * (size // 5 + 1))[:size]
            packed = bytes(cramjam.snappy.compress_raw(raw))
            assert fast.unsnappy(packed, size) == raw
            assert fast.unsnappy(packed, size + 1) is None  # the header says otherwise
    assert pure.unsnappy(b"\x00", 0) is None


def test_corrupted_snappy_is_refused_as_cramjam_refuses_it(fast) -> None:
    rng = random.Random(17)
    sources = [
        b"".join(bytes([rng.randrange(4)]) * rng.randint(1, 80) for _ in range(60)),
        bytes(rng.randrange(256) for _ in range(500)),
        b"0123456789" * 40,
    ]
    refused = accepted = 0
    for _ in range(4000):
        raw = rng.choice(sources)
        data = bytearray(cramjam.snappy.compress_raw(raw))
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if rng.random() < 0.3:
            data = data[: rng.randrange(len(data))]
        try:
            expected: bytes | None = bytes(cramjam.snappy.decompress_raw(bytes(data)))
        except Exception:
            expected = None
        length = len(expected) if expected is not None else len(raw)
        got = fast.unsnappy(bytes(data), length)
        assert got == expected
        refused += got is None
        accepted += got is not None
    assert refused > 100 and accepted > 100


# ------------------------------------------------------------------ batches


def _column(rng: np.random.Generator, dtype: Any, steps: int, inner: tuple[int, ...]):
    return (rng.standard_normal((steps, *inner)) * 100).astype(dtype)


class _Stream:
    """Random responses of samples in runs of one layout (dtype and step shape per
    column), with now and then a sample the filler must leave to the assembler."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.key = 0
        self.new_layout()

    def new_layout(self) -> None:
        rng = self.rng
        self.layout = [
            (
                NUMERIC[int(rng.integers(len(NUMERIC)))],
                tuple(int(size) for size in rng.integers(0, 4, int(rng.integers(0, 3)))),
                bool(rng.integers(3) == 0),  # squeezed (one step)
            )
            for _ in range(int(rng.integers(1, 4)))
        ]
        self.steps = int(self.rng.integers(1, 4))

    def sample(self, entry: Any, plain: bool = False) -> None:
        rng = self.rng
        self.key += 1
        info = entry.info
        info.probability = float(rng.random())
        info.table_size = int(rng.integers(0, 1000))
        info.rate_limited = bool(rng.integers(2))
        info.item.key = self.key
        info.item.table = "t"
        info.item.priority = float(rng.standard_normal())
        info.item.times_sampled = int(rng.integers(0, 50))
        oddity = -1 if plain else int(rng.integers(12))
        for index, (dtype, inner, squeeze) in enumerate(self.layout):
            steps = 1 if squeeze else self.steps
            column = info.item.flat_trajectory.columns.add(squeeze=squeeze)
            extra = int(rng.integers(0, 3))  # steps of the chunk the item does not use
            if oddity == 0 and index == 0:  # strings: not plain
                chunk_values = np.array([b"x"] * extra + [b"s"] * steps, dtype=object)
            else:
                chunk_values = _column(rng, dtype, extra + steps, inner)
            chunk_key = 1_000 * self.key + index
            raw = encode_chunk(
                chunk_key, 1, 0, len(chunk_values) - 1, [chunk_values],
                delta_encoded=oddity == 1 and chunk_values.dtype.kind in "iu",
            )  # fmt: skip
            entry.data.add().MergeFromString(raw)
            if not squeeze and steps > 1 and rng.integers(2):
                column.chunk_slices.add(chunk_key=chunk_key, offset=extra, length=1)
                column.chunk_slices.add(chunk_key=chunk_key, offset=extra + 1, length=steps - 1)
            else:
                column.chunk_slices.add(chunk_key=chunk_key, offset=extra, length=steps)
        entry.end_of_sequence = True

    def responses(self, count: int) -> list[bytes]:
        out = []
        for _ in range(count):
            response = reverb_service_pb2.SampleStreamResponse()
            for _ in range(int(self.rng.integers(1, 9))):
                if self.rng.integers(6) == 0:
                    self.new_layout()
                entry = response.entries.add()
                self.sample(entry)
                if self.rng.integers(15) == 0:
                    # The sample's end in the next response: the assembler's.
                    entry.end_of_sequence = False
                    out.append(response.SerializeToString())
                    response = reverb_service_pb2.SampleStreamResponse()
                    response.entries.add(end_of_sequence=True)
            out.append(response.SerializeToString())
        return out


def _samples(pieces: list[datasets.Piece]) -> list[tuple[tuple[Any, ...], list[np.ndarray]]]:
    """Pieces as one (info values, columns) per sample."""
    flat = []
    for piece in pieces:
        if isinstance(piece, datasets.Block):
            for row in range(piece.rows):
                info = tuple(field[row].item() for field in piece.info)
                flat.append((info, [column[row] for column in piece.columns]))
        else:
            flat.append((tuple(piece[0]), piece[1]))
    return flat


@pytest.mark.parametrize("seed", range(6))
def test_batches_hold_the_per_sample_paths_samples_in_order(fast, monkeypatch, seed) -> None:
    monkeypatch.setattr(datasets._impl, "sample_wire", fast)
    stream = _Stream(seed)
    responses = stream.responses(25)
    reference = SampleAssembler()
    expected = [sample for data in responses for sample in reference.add_bytes(data)]
    capacity = int(stream.rng.integers(1, 9))
    first = int(stream.rng.integers(1, capacity + 1))
    filler = datasets._new_filler(capacity, first)
    assembler = SampleAssembler()
    pieces: list[datasets.Piece] = []
    counted = 0
    for data in responses:
        got, count = datasets._fill(filler, assembler, data)
        pieces.extend(got)
        counted += count
    datasets._append(pieces, filler.flush())
    blocks = [piece for piece in pieces if isinstance(piece, datasets.Block)]
    assert blocks, "no sample took the batch path"
    assert all(block.rows <= capacity for block in blocks)
    assert blocks[0].rows <= first
    got_samples = _samples(pieces)
    assert counted == len(got_samples) == len(expected)
    for (info, columns), (info_b, columns_b, _) in zip(got_samples, expected):
        assert info == tuple(info_b)
        assert len(columns) == len(columns_b)
        for a, b in zip(columns, columns_b):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)
    for block in blocks:
        for column in block.columns:
            assert column.flags.writeable
            assert column.nbytes == 0 or column.ctypes.data % 64 == 0


def test_blocks_are_whole_batches_of_one_layout(fast) -> None:
    stream = _Stream(40)
    stream.layout = [(np.float32, (3,), False), (np.int64, (), True)]
    response = reverb_service_pb2.SampleStreamResponse()
    for _ in range(10):
        stream.sample(response.entries.add(), plain=True)
    data = response.SerializeToString()
    filler = fast.BatchFiller(4, SampleInfo, errors.InvalidArgumentError, 3)
    batches, consumed = filler.add(data)
    assert consumed == len(data)
    assert [rows for _, _, rows in batches] == [3, 4]  # the first completes a batch
    info, columns, rows = batches[1]
    assert isinstance(info, SampleInfo) and info.key.dtype == np.uint64
    assert columns[0].shape == (4, stream.steps, 3) and columns[1].shape == (4,)
    assert filler.rows == 3
    info, columns, rows = filler.flush()
    assert rows == 3 and columns[0].shape == (3, stream.steps, 3)
    assert filler.flush() is None
    with pytest.raises(ValueError):
        fast.BatchFiller(0, SampleInfo, errors.InvalidArgumentError)


def test_corrupted_responses_never_crash_and_never_differ(fast) -> None:
    """Whatever the filler takes of corrupted bytes is what the per-sample path reads
    from the same entries; data that does not decompress is an InvalidArgumentError."""
    stream = _Stream(9)
    stream.layout = [(np.float32, (2,), False), (np.uint8, (40, 3), False)]
    response = reverb_service_pb2.SampleStreamResponse()
    for _ in range(3):
        stream.sample(response.entries.add(), plain=True)
    base = response.SerializeToString()
    rng = random.Random(23)
    taken = raised = 0
    for _ in range(3000):
        data = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if rng.random() < 0.2:
            data = data[: rng.randrange(len(data))]
        raw = bytes(data)
        filler = fast.BatchFiller(8, SampleInfo, errors.InvalidArgumentError)
        try:
            batches, consumed = filler.add(raw)
        except errors.InvalidArgumentError as error:
            assert "does not decompress" in str(error)
            raised += 1
            with pytest.raises(errors.InvalidArgumentError):
                SampleAssembler().add_bytes(raw)
            continue
        last = filler.flush()
        pieces = [datasets.Block(*batch) for batch in batches]
        if last is not None:
            pieces.append(datasets.Block(*last))
        if not consumed:
            continue
        taken += 1
        expected = SampleAssembler().add_bytes(raw[:consumed])
        got = _samples(pieces)
        assert len(got) == len(expected)
        for (info, columns), (info_b, columns_b, _) in zip(got, expected):
            assert info == tuple(info_b)
            for a, b in zip(columns, columns_b):
                assert a.dtype == b.dtype and a.shape == b.shape
                np.testing.assert_array_equal(a, b)
    assert taken > 100 and raised > 10


def test_the_pure_twin_takes_nothing() -> None:
    filler = pure.BatchFiller(4, SampleInfo, errors.InvalidArgumentError, 2)
    assert filler.add(b"\x0a\x00") == ([], 0)
    assert filler.rows == 0 and filler.flush() is None


# ------------------------------------------------------------------ server responses


@pytest.fixture
def fast_records():
    return compiled_module("checkpoint_records")


def _record(rng: np.random.Generator, chunk_sizes: list[int], odd: bool = False) -> SampledItem:
    chunks = [
        types.SimpleNamespace(
            data=encode_chunk(index + 1, 1, 0, 0, [rng.integers(0, 256, (1, size), np.uint8)])
        )
        for index, size in enumerate(chunk_sizes)
    ]
    trajectory = schema_pb2.FlatTrajectory()
    trajectory.columns.add().chunk_slices.add(chunk_key=5, length=1)
    key: Any = int(rng.integers(0, 2**63)) * 2 + int(rng.integers(2))
    priority: Any = float(rng.standard_normal()) if rng.integers(4) else 0.0
    if odd:
        key, priority = np.uint64(key), np.float32(priority)  # the pure twin's types
    item = Item(
        key,
        priority,
        trajectory.SerializeToString() if rng.integers(4) else None,
        chunks,
        times_sampled=int(rng.integers(0, 2**31)),
        inserted_at=int(rng.integers(0, 2**62)),
    )
    return SampledItem(
        item,
        float(rng.random()) if rng.integers(4) else 0.0,
        int(rng.integers(0, 2**40)) if rng.integers(4) else 0,
        priority,
        item.times_sampled,
        bool(rng.integers(2)),
    )


def test_sample_responses_are_the_pure_twins_bytes(fast_records) -> None:
    rng = np.random.default_rng(12)
    table_field = b"\x12\x06t\xc3\xa5ble"
    for _ in range(200):
        records = [
            _record(rng, [int(size) for size in rng.integers(0, 300, int(rng.integers(0, 4)))],
                    odd=rng.integers(8) == 0)
            for _ in range(int(rng.integers(1, 8)))
        ]  # fmt: skip
        limit = int(rng.integers(0, 1500))
        start = int(rng.integers(0, len(records)))
        got = fast_records.encode_sample_response(table_field, records, start, limit)
        assert got == pure_records.encode_sample_response(table_field, records, start, limit)
        data, end = got
        if data is None:
            assert end == start
            assert sum(len(c.data) for c in records[start].item.chunks) > limit
            continue
        response = reverb_service_pb2.SampleStreamResponse.FromString(data)
        assert len(response.entries) == end - start
        for entry, record in zip(response.entries, records[start:end]):
            assert entry.end_of_sequence
            assert entry.info == schema_pb2.SampleInfo.FromString(
                pure_records.encode_sample_info(table_field, record)
            )
            assert [chunk.SerializeToString() for chunk in entry.data] == [
                chunk.data for chunk in record.item.chunks
            ]
        for record in records:
            assert fast_records.encode_sample_info(
                table_field, record
            ) == pure_records.encode_sample_info(table_field, record)


def test_a_tensor_bigger_than_its_content_can_be_is_never_allocated(fast) -> None:
    """A chunk claiming a huge tensor with a few bytes of content: neither fast path
    allocates it; the per-sample path refuses the chunk."""
    stream = _Stream(3)
    stream.layout = [(np.uint8, (4,), False)]
    response = reverb_service_pb2.SampleStreamResponse()
    stream.sample(response.entries.add(), plain=True)
    chunk = schema_pb2.ChunkData.FromString(response.entries[0].data[0].SerializeToString())
    tensor = chunk.data.tensors[0]
    tensor.tensor_shape.dim[1].size = 2**38  # 256 GiB of uint8 per step
    response.entries[0].data[0].CopyFrom(chunk)
    data = response.SerializeToString()
    filler = fast.BatchFiller(8, SampleInfo, errors.InvalidArgumentError)
    assert filler.add(data) == ([], 0)
    assert fast.decode_chunk_bytes(chunk.SerializeToString()) is None
    with pytest.raises(errors.InvalidArgumentError):
        SampleAssembler().add_bytes(data)
