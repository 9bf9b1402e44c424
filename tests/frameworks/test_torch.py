"""reverb_py.torch: IterableDatasets of tensors, alone and in a DataLoader with workers."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import reverb_py as reverb
from tests.frameworks._tables import SEQUENCE, dry_server, filled_server, within

torch = pytest.importorskip("torch")
reverb_torch = pytest.importorskip("reverb_py.torch")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    server = filled_server()
    try:
        yield f"localhost:{server.port}"
    finally:
        server.stop()


def test_trajectory_batches_are_tensors(address: str) -> None:
    dataset = reverb_torch.TrajectoryDataset.from_table_signature(
        address, "seq", 16, max_samples=20, batch_size=8
    )
    assert isinstance(dataset, torch.utils.data.IterableDataset)
    batches = list(dataset)
    assert [len(batch.info.key) for batch in batches] == [8, 8, 4]
    batch = batches[0]
    assert isinstance(batch, reverb.ReplaySample)
    assert batch.info.key.dtype == torch.int64
    # int64 keys index, compare and do arithmetic as any tensor (uint64 ones do not).
    keys = batch.info.key
    assert torch.equal(keys[keys.argsort()][0:1], keys.min().reshape(1))
    assert torch.equal(keys - keys, torch.zeros_like(keys))
    assert batch.info.probability.dtype == torch.float64
    assert batch.data["obs"].dtype == torch.float32
    assert tuple(batch.data["obs"].shape) == (8, SEQUENCE, 2)
    steps = batch.data["step"]
    assert torch.equal(steps, steps[:, :1] + torch.arange(SEQUENCE))
    assert torch.equal(batch.data["obs"][..., 0].long(), steps)


def test_a_batch_of_samples_from_several_workers() -> None:
    # Two workers ask for 2 samples at a time; the batch needs the samples of both.
    server = dry_server()
    try:
        dataset = reverb_torch.TrajectoryDataset(
            f"localhost:{server.port}", "queue8", (np.int64,), ((),), 2,
            num_workers_per_iterator=2, batch_size=8,
        )  # fmt: skip
        (batch,) = within(20, lambda: [next(iter(dataset))])
        assert sorted(batch.data[0].tolist()) == list(range(8))
    finally:
        server.stop()


def test_timesteps_one_at_a_time(address: str) -> None:
    dataset = reverb_torch.TimestepDataset(
        address, "steps", {"obs": np.float32, "step": np.int64}, {"obs": (2,), "step": ()}, 4,
        max_samples=5,
    )  # fmt: skip
    steps = list(dataset)
    assert len(steps) == 5
    assert tuple(steps[0].data["obs"].shape) == (2,)
    assert steps[0].data["step"].dim() == 0


def test_each_iter_opens_its_own_streams(address: str) -> None:
    dataset = reverb_torch.TrajectoryDataset.from_table_signature(address, "seq", 4, max_samples=3)
    assert len(list(dataset)) == 3
    assert len(list(dataset)) == 3


def test_pin_memory_without_an_accelerator_warns_and_does_not_pin(address: str) -> None:
    # As DataLoader(pin_memory=True): a warning, not an error, where nothing can pin.
    if torch.accelerator.is_available():
        pytest.skip("an accelerator is available")
    with pytest.warns(UserWarning, match="no accelerator is available"):
        dataset = reverb_torch.TrajectoryDataset(
            address, "seq", None, None, 4, max_samples=2, pin_memory=True
        )
    with pytest.warns(UserWarning, match="no accelerator is available"):
        reverb_torch.TimestepDataset.from_table_signature(address, "steps", 4, pin_memory=True)
    samples = list(dataset)
    assert len(samples) == 2
    assert not samples[0].data[0].is_pinned()


def test_bad_options_fail_when_the_dataset_is_built() -> None:
    with pytest.raises(ValueError, match="max_samples"):
        reverb_torch.TrajectoryDataset("localhost:1", "t", None, None, 4, max_samples=0)


LOADER = """
import json, sys, os
import torch
from torch.utils.data import DataLoader
import reverb_py.torch as reverb_torch
from reverb_py._client import channel

dataset = reverb_torch.TrajectoryDataset.from_table_signature(
    sys.argv[1], "seq", 8, max_samples=41, batch_size=4
)
batches = list(DataLoader(dataset, batch_size=None, num_workers=2))
assert all(isinstance(batch.data["obs"], torch.Tensor) for batch in batches)
steps = [batch.data["step"] for batch in batches]
assert all(torch.equal(s, s[:, :1] + torch.arange(s.shape[1])) for s in steps)
print(json.dumps({
    "sizes": sorted(len(batch.info.key) for batch in batches),
    "parent_loop": channel._shared_loop is not None,
}))
"""


def test_a_dataloader_with_two_workers(address: str) -> None:
    # A fresh interpreter: the parent of the forked workers never talked to gRPC.
    out = subprocess.run(
        [sys.executable, "-c", LOADER, address], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    # 41 samples split 21 + 20 between the workers, each batching its own.
    assert result["sizes"] == [1] + [4] * 10
    assert result["parent_loop"] is False


FORKED_AFTER_USE = """
import sys, os
import reverb_py
from reverb_py import data
next(data.TrajectoryIterator(sys.argv[1], "seq", None, None, 2, max_samples=1))
pid = os.fork()
if pid == 0:
    try:
        next(data.TrajectoryIterator(sys.argv[1], "seq", None, None, 2, max_samples=1))
    except RuntimeError as error:
        print("refused:", error, flush=True)
        os._exit(0)
    os._exit(3)
print("child", os.waitpid(pid, 0)[1], flush=True)
"""


def test_a_child_forked_while_the_client_ran_gets_a_clear_error(address: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", FORKED_AFTER_USE, address],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert "refused: This process was forked" in out.stdout, out.stderr[-3000:]
    assert "child 0" in out.stdout


@pytest.fixture()
def replay() -> Iterator[tuple[str, reverb.Table]]:
    """A server whose table ``replay`` holds 32 items (item i: ``obs`` i twice, ``step``
    i), and that table: the tests read the items' priorities off it."""
    table = reverb.Table(
        "replay",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        max_size=100,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature={
            "obs": reverb.TensorSpec((2,), np.float32),
            "step": reverb.TensorSpec((), np.int64),
        },
    )
    server = reverb.Server([table], port=0)
    try:
        with server.localhost_client().trajectory_writer(1) as writer:
            for step in range(32):
                writer.append({"obs": np.full(2, step, np.float32), "step": np.int64(step)})
                last = {"obs": writer.history["obs"][-1], "step": writer.history["step"][-1]}
                writer.create_item("replay", 1.0, last)
        yield f"localhost:{server.port}", table
    finally:
        server.stop()


def test_keys_are_the_server_keys_as_int64(replay: tuple[str, reverb.Table]) -> None:
    address, table = replay
    dataset = reverb_torch.TrajectoryDataset.from_table_signature(
        address, "replay", 16, max_samples=64, batch_size=64
    )
    (batch,) = list(dataset)
    keys = batch.info.key
    assert keys.dtype == torch.int64
    server_keys = {item.key for item in table.items()}
    # The same 64 bits: a key from 2**63 on reads as negative (64 samples of 32 random
    # keys: one such key misses with probability 2**-28 or less).
    assert (keys < 0).any()
    assert {int(key) % 2**64 for key in keys.tolist()} <= server_keys
    assert set(reverb_torch.keys_to_ints(keys)) <= server_keys
    assert reverb_torch.keys_to_ints(keys) == keys.view(torch.uint64).tolist()


def test_keys_above_2_63_go_back_unchanged() -> None:
    info = reverb.SampleInfo(2**64 - 1, 1.0, 1, 1.0, 1)
    sample = reverb_torch.to_tensors(reverb.ReplaySample(info, [np.zeros(2, np.float32)]))
    assert sample.info.key.dtype == torch.int64
    assert sample.info.key.item() == -1
    big = torch.tensor([-1, -(2**63), 2**63 - 1, 0])
    expected = [2**64 - 1, 2**63, 2**63 - 1, 0]
    assert reverb_torch.keys_to_ints(big) == expected
    assert reverb_torch.keys_to_ints(big.view(torch.uint64)) == expected
    assert reverb_torch.keys_to_ints(big.numpy()) == expected
    assert reverb_torch.keys_to_ints([-1, 2**64 - 1]) == [2**64 - 1, 2**64 - 1]
    with pytest.raises(ValueError, match="out of range"):
        reverb_torch.keys_to_ints([2**64])
    with pytest.raises(ValueError, match="out of range"):
        reverb_torch.keys_to_ints([-(2**63) - 1])
    with pytest.raises(ValueError, match="integers"):
        reverb_torch.keys_to_ints(torch.tensor([1.5]))


def test_update_priorities_takes_the_int64_keys(replay: tuple[str, reverb.Table]) -> None:
    address, table = replay
    (batch,) = list(
        reverb_torch.TrajectoryDataset.from_table_signature(
            address, "replay", 16, max_samples=64, batch_size=64
        )
    )
    keys = batch.info.key
    assert (keys < 0).any()
    # One priority per sample, the sample's step (distinct per item, so a key sampled
    # twice gets the same value twice).
    priorities = batch.data["step"].double() + 0.5
    reverb_torch.update_priorities(reverb.Client(address), "replay", batch, priorities)
    for key, step in zip(reverb_torch.keys_to_ints(keys), batch.data["step"].tolist()):
        assert table.get(key).priority == step + 0.5
    with pytest.raises(ValueError, match="one priority per key: 64 keys, 3 priorities"):
        reverb_torch.update_priorities(reverb.Client(address), "replay", batch, [1.0, 2.0, 3.0])


BESIDE_A_SERVER = """
import json, sys
import numpy as np
from torch.utils.data import DataLoader
import reverb_py as reverb
import reverb_py.torch as reverb_torch
from tests.frameworks._tables import filled_server


def main(context):
    if context == "fork":
        # A server, and no client, in the process that forks the workers.
        server = reverb.Server([reverb.Table.queue("q", 10)], port=0)
        dataset = reverb_torch.TrajectoryDataset(
            f"localhost:{server.port}", "q", np.int64, (), 2, max_samples=2
        )
    else:
        server = filled_server()  # a server, and its client writing the items
        dataset = reverb_torch.TrajectoryDataset.from_table_signature(
            f"localhost:{server.port}", "seq", 8, max_samples=41, batch_size=4
        )
    try:
        loader = DataLoader(
            dataset, batch_size=None, num_workers=2, timeout=60,
            multiprocessing_context=None if context == "fork" else context,
        )
        try:
            result = {"sizes": sorted(len(batch.info.key) for batch in loader)}
        except RuntimeError as error:
            result = {"error": str(error)}
        print(json.dumps(result))
    finally:
        server.stop()


if __name__ == "__main__":
    main(sys.argv[1])
"""


def _beside_a_server(context: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", BESIDE_A_SERVER, context],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_workers_forked_beside_a_server_say_to_pass_spawn() -> None:
    # gRPC cannot run in a child forked from a process that uses it: the worker says
    # what to pass instead of hanging in gRPC.
    result = _beside_a_server("fork")
    assert 'multiprocessing_context="spawn"' in str(result.get("error")), result


def test_spawned_workers_sample_beside_a_server() -> None:
    assert _beside_a_server("spawn") == {"sizes": [1] + [4] * 10}


def test_the_documented_spawn_example_is_what_the_module_says() -> None:
    for text in (reverb_torch.__doc__, reverb_torch.TrajectoryDataset.__doc__):
        assert 'multiprocessing_context="spawn"' in text
        assert "batch_size=None" in text


def test_a_batch_as_a_tensordict(address: str) -> None:
    tensordict = pytest.importorskip("tensordict")
    (batch,) = list(
        reverb_torch.TrajectoryDataset.from_table_signature(
            address, "seq", 8, max_samples=8, batch_size=8
        )
    )
    td = reverb_torch.to_tensordict(batch)
    assert isinstance(td, tensordict.TensorDict)
    assert tuple(td.batch_size) == (8,)
    assert td["obs"] is batch.data["obs"]
    assert td["step"].shape == (8, SEQUENCE)
    assert td["info", "key"].dtype == torch.int64
    assert torch.equal(td["info", "key"], batch.info.key)
    assert set(td["info"].keys()) == set(reverb.SampleInfo._fields)
    # Indexing the batch indexes every entry (TorchRL's way with a TensorDict).
    assert torch.equal(td[2:4]["step"], batch.data["step"][2:4])
    one = reverb_torch.to_tensordict(next(iter(
        reverb_torch.TrajectoryDataset(address, "plain", None, None, 2, max_samples=1)
    )))  # fmt: skip
    assert tuple(one.batch_size) == ()
    assert one["0"].shape == (SEQUENCE, 2)
    assert one["info", "key"].dtype == torch.int64


def test_update_priorities_from_a_tensordict(replay: tuple[str, reverb.Table]) -> None:
    pytest.importorskip("tensordict")
    address, table = replay
    (batch,) = list(
        reverb_torch.TrajectoryDataset.from_table_signature(
            address, "replay", 16, max_samples=64, batch_size=64
        )
    )
    td = reverb_torch.to_tensordict(batch)
    td["td_error"] = (td["step"].double() + 0.25).unsqueeze(-1)  # TorchRL's shape (B, 1)
    reverb_torch.update_priorities(reverb.Client(address), "replay", td, "td_error")
    keys = reverb_torch.keys_to_ints(td["info", "key"])
    assert any(key >= 2**63 for key in keys)
    for key, step in zip(keys, td["step"].tolist()):
        assert table.get(key).priority == step + 0.25


WITHOUT_TENSORDICT = """
import sys
sys.modules["tensordict"] = None  # as if it were not installed
import reverb_py.torch as reverb_torch
from reverb_py import ReplaySample, SampleInfo
try:
    reverb_torch.to_tensordict(ReplaySample(SampleInfo(1, 1.0, 1, 1.0, 1), [1.0]))
except ImportError as error:
    print("refused:", error)
"""


def test_reverb_py_torch_imports_without_tensordict() -> None:
    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_TENSORDICT], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "refused: reverb_py.torch.to_tensordict needs tensordict: pip install tensordict" in (
        out.stdout
    )
