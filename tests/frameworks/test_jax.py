"""reverb_py.jax: batches prefetched onto (CPU) devices, optionally sharded."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from reverb_py import errors
from tests.frameworks._tables import SEQUENCE, filled_server

jax = pytest.importorskip("jax")
reverb_jax = pytest.importorskip("reverb_py.jax")


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    server = filled_server()
    try:
        yield f"localhost:{server.port}"
    finally:
        server.stop()


def test_batches_arrive_on_the_device(address: str) -> None:
    with reverb_jax.TrajectoryIterator.from_table_signature(
        address, "seq", 16, max_samples=20, batch_size=8, prefetch=3
    ) as it:
        batches = list(it)
    assert [len(batch.info.key) for batch in batches] == [8, 8, 4]
    batch = batches[0]
    assert isinstance(batch.data["obs"], jax.Array)
    assert batch.data["obs"].shape == (8, SEQUENCE, 2)
    assert batch.data["obs"].devices() == {jax.local_devices()[0]}
    # Info stays on the host with its 64-bit keys.
    assert isinstance(batch.info.key, np.ndarray) and batch.info.key.dtype == np.uint64
    steps = np.asarray(batch.data["step"])
    np.testing.assert_array_equal(steps, steps[:, :1] + np.arange(SEQUENCE))
    np.testing.assert_array_equal(np.asarray(batch.data["obs"])[..., 0], steps)


def test_timesteps_on_the_device(address: str) -> None:
    it = reverb_jax.TimestepIterator.from_table_signature(
        address, "steps", 4, max_samples=6, batch_size=3
    )
    batches = list(it)
    assert [batch.data["obs"].shape for batch in batches] == [(3, 2), (3, 2)]


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="prefetch"):
        reverb_jax.TrajectoryIterator("localhost:1", "t", None, None, 4, prefetch=0)
    with pytest.raises(ValueError, match="shard=True needs a batch_size"):
        reverb_jax.TrajectoryIterator("localhost:1", "t", None, None, 4, shard=True)
    with pytest.raises(ValueError, match="multiple of the number of devices"):
        reverb_jax.TrajectoryIterator(
            "localhost:1", "t", None, None, 4, batch_size=3, shard=True,
            devices=[jax.local_devices()[0]] * 2,
        )  # fmt: skip


SHARDED = """
import sys
import jax, numpy as np
import reverb_py.jax as reverb_jax
assert len(jax.local_devices()) == 2
it = reverb_jax.TrajectoryIterator.from_table_signature(
    sys.argv[1], "seq", 8, max_samples=8, batch_size=4, shard=True, drop_remainder=True
)
for batch in it:
    obs = batch.data["obs"]
    assert obs.shape == (4, 3, 2)
    assert len(obs.sharding.device_set) == 2
    assert [shard.data.shape for shard in obs.addressable_shards] == [(2, 3, 2), (2, 3, 2)]
second = jax.local_devices()[1]
with reverb_jax.TrajectoryIterator.from_table_signature(
    sys.argv[1], "seq", 8, max_samples=4, batch_size=4, device=second
) as it:
    (batch,) = list(it)
assert batch.data["obs"].devices() == {second}, batch.data["obs"].devices()
assert batch.data["step"].devices() == {second}, batch.data["step"].devices()
print("sharded ok")
"""


def test_batches_sharded_over_two_devices(address: str) -> None:
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    out = subprocess.run(
        [sys.executable, "-c", SHARDED, address],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "sharded ok" in out.stdout


def _transfer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "reverb_py-jax-transfer"]


def test_closing_mid_iteration_stops_the_transfer_thread(address: str) -> None:
    before = len(_transfer_threads())
    it = reverb_jax.TrajectoryIterator.from_table_signature(
        address, "seq", 16, batch_size=4, prefetch=2
    )
    assert len(_transfer_threads()) == before  # nothing starts before the first next()
    next(it)
    assert len(_transfer_threads()) == before + 1
    it.close()
    assert len(_transfer_threads()) == before
    with pytest.raises(StopIteration):
        next(it)


def test_a_collected_iterator_stops_its_transfer_thread(address: str) -> None:
    before = len(_transfer_threads())
    it = reverb_jax.TrajectoryIterator.from_table_signature(address, "seq", 16, batch_size=4)
    next(it)
    (thread,) = _transfer_threads()[before:]
    del it
    gc.collect()
    thread.join(30)
    assert not thread.is_alive()
    assert len(_transfer_threads()) == before


def test_a_server_stopped_mid_iteration_raises_in_the_consumer() -> None:
    server = filled_server()
    try:
        it = reverb_jax.TrajectoryIterator.from_table_signature(
            f"localhost:{server.port}", "seq", 8, batch_size=4
        )
        next(it)
    finally:
        server.stop()
    with pytest.raises((errors.UnavailableError, errors.CancelledOperationError)):
        for _ in range(10_000):
            next(it)
    assert not any(t.is_alive() for t in _transfer_threads())


# ------------------------------------------------------------------ how batches are put


def _batch() -> dict[str, object]:
    from reverb_py._client.datasets import aligned_empty

    aligned = aligned_empty((16, 3), np.dtype(np.float32))
    aligned[...] = np.arange(48, dtype=np.float32).reshape(16, 3)
    return {
        "aligned": aligned,
        "wide": np.arange(16, dtype=np.int64),  # narrowed to int32 unless x64
        "double": np.linspace(0, 1, 16),
        "frames": np.arange(16 * 4, dtype=np.uint8).reshape(16, 2, 2),
        "done": np.arange(16) % 2 == 0,
        "strided": np.arange(64, dtype=np.float32).reshape(16, 4)[:, ::2],
        "scalar": np.float32(2.5),
        "names": np.array([b"a", b"bc"] * 8, dtype=object),
        "nested": (np.zeros((16, 0), np.int32), [np.ones(16, np.complex64)]),
    }


def _same(direct: object, public: object) -> None:
    from reverb_py._codec import nest

    left, right = nest.flatten(direct), nest.flatten(public)
    assert len(left) == len(right)
    for a, b in zip(left, right):
        assert type(a) is type(b)
        if isinstance(b, np.ndarray):  # strings stay numpy arrays of bytes
            assert a is not None and list(a) == list(b)
            continue
        assert (a.shape, a.dtype, a.sharding, a.committed) == (
            b.shape, b.dtype, b.sharding, b.committed,
        )  # fmt: skip
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_direct_put_gives_what_device_put_gives() -> None:
    device = jax.local_devices()[0]
    put = reverb_jax._putter(device)
    assert isinstance(put.__self__, reverb_jax._DirectPut)
    for _ in range(2):  # the second time from the cached avals and dtypes
        _same(put(_batch()), reverb_jax._put(device, _batch()))
    assert not put.__self__.broken


def test_the_direct_put_uses_an_aligned_batch_in_place() -> None:
    device = jax.local_devices()[0]
    batch = _batch()
    placed = reverb_jax._putter(device)(batch)
    assert placed["aligned"].unsafe_buffer_pointer() == batch["aligned"].ctypes.data


def test_a_failing_direct_put_falls_back_to_device_put_for_good() -> None:
    device = jax.local_devices()[0]
    direct = reverb_jax._DirectPut(device)
    calls = []

    def failing(*args: object) -> object:
        calls.append(args)
        raise TypeError("another jaxlib")

    direct._call = failing
    _same(direct.put(_batch()), reverb_jax._put(device, _batch()))
    assert direct.broken and len(calls) == 1
    _same(direct.put(_batch()), reverb_jax._put(device, _batch()))
    assert len(calls) == 1


def test_without_the_internal_call_batches_go_through_device_put(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import types

    from jax._src import lib

    device = jax.local_devices()[0]
    # A JAX whose jaxlib has no such call (device_put keeps its own reference).
    monkeypatch.setattr(lib, "xla_client", types.ModuleType("xla_client"))
    put = reverb_jax._putter(device)
    assert not isinstance(getattr(put, "__self__", None), reverb_jax._DirectPut)
    _same(put(_batch()), reverb_jax._put(device, _batch()))


def test_a_sharding_target_goes_through_device_put() -> None:
    mesh = jax.sharding.Mesh(np.array(jax.local_devices()[:1]), ("batch",))
    target = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("batch"))
    put = reverb_jax._putter(target)
    assert not isinstance(getattr(put, "__self__", None), reverb_jax._DirectPut)
