"""reverb_py.torch: IterableDatasets of tensors, alone and in a DataLoader with workers."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest

import reverb_py as reverb
from tests.frameworks._tables import SEQUENCE, dry_server, filled_server, within

torch = pytest.importorskip("torch")
reverb_torch = pytest.importorskip("reverb_py.torch")


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
    assert batch.info.key.dtype == torch.uint64
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


def test_pin_memory_without_an_accelerator_is_refused(address: str) -> None:
    if torch.cuda.is_available():
        pytest.skip("an accelerator is available")
    with pytest.raises(ValueError, match="pin_memory=True needs an accelerator"):
        reverb_torch.TrajectoryDataset(address, "seq", None, None, 4, pin_memory=True)


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
