"""Differential test: the pure and the compiled writer engine.

The compiled twin is the pure source compiled as it is, so the two must agree exactly.
Seeded streams of writer operations, valid and invalid, run against both engines (each
with the same key generator and an in-memory transport that confirms what it takes);
every result, every raised error (type and message) and every byte of every request
must be the same.
"""

from __future__ import annotations

import importlib
import random
from typing import Any

import numpy as np
import pytest

from tests.helpers import compiled_module


class _Transport:
    """Takes every ready request, keeps its bytes and confirms it (or not)."""

    def __init__(self, confirm: bool) -> None:
        self.writer: Any = None
        self.requests: list[bytes] = []
        self.confirm = confirm

    def notify(self) -> None:
        while True:
            batch = self.writer.take_outgoing()
            if batch is None:
                return
            self.requests.append(batch.serialize())
            if self.confirm:
                self.writer.confirm(batch.item_keys)

    def wait_confirmed(self, max_pending: int, timeout: float | None) -> bool:
        return bool(self.writer.wait_until_pending_at_most(max_pending, 0))

    def close(self) -> None:
        pass


VALUES = [
    lambda rng: np.float32(rng.random()),
    lambda rng: np.arange(3, dtype=np.float32) * rng.random(),
    lambda rng: rng.randint(-5, 5),
    lambda rng: rng.random(),
    lambda rng: np.zeros((2, 2), dtype=np.uint8) + rng.randint(0, 9),
    lambda rng: "text",
    lambda rng: [1, 2],
    lambda rng: None,
]


def _run(module: Any, seed: int, confirm: bool) -> list[Any]:
    """Runs the seeded operations; returns the trace of outcomes and requests."""
    rng = random.Random(seed)
    module._RNG.seed(seed)  # the same keys on both sides
    transport = _Transport(confirm)
    options = (
        module.AutoTunedChunkerOptions(rng.randint(1, 6))
        if rng.random() < 0.5
        else module.ConstantChunkerOptions(rng.randint(1, 3), rng.randint(3, 6))
    )
    writer = module.InternalTrajectoryWriter(transport, options)
    transport.writer = writer
    refs: list[list[Any]] = []
    trace: list[Any] = []
    columns = rng.randint(1, 4)
    kinds = [rng.randrange(len(VALUES)) for _ in range(columns)]
    for _ in range(120):
        op = rng.random()
        try:
            if op < 0.45:
                flat = [
                    None
                    if rng.random() < 0.15
                    else VALUES[kinds[i] if rng.random() < 0.95 else rng.randrange(len(VALUES))](
                        rng
                    )
                    for i in range(rng.randint(1, columns))
                ]
                partial = rng.random() < 0.05
                new = writer.AppendPartial(flat) if partial else writer.Append(flat)
                refs.append([ref for ref in new if ref is not None])
                outcome: Any = ("append", [repr(ref) for ref in new])
            elif op < 0.8 and any(refs[-3:]):
                recent = [ref for step in refs[-3:] for ref in step]  # mostly still alive
                chosen = [
                    [rng.choice(recent) for _ in range(rng.randint(1, 3))]
                    for _ in range(rng.randint(1, 3))
                ]
                squeeze = [len(column) == 1 and rng.random() < 0.5 for column in chosen]
                priority = rng.choice([1.0, 0.5, 2.0, 3.0, 0.0, 1.5, 4.0, 7.0, -1.0, float("nan")])
                writer.CreateItem(rng.choice(["t", "u"]), priority, chosen, squeeze)
                outcome = ("create", writer.num_pending_items())
            elif op < 0.9:
                block = rng.randint(0, 3)
                outcome = ("flush", writer.Flush(block, timeout_ms=1))
            elif op < 0.95:
                writer.ConfigureChunker(
                    rng.randint(0, columns), module.ConstantChunkerOptions(1, rng.randint(1, 4))
                )
                outcome = ("configure",)
            else:
                writer.EndEpisode(clear_buffers=rng.random() < 0.5, timeout_ms=0)
                outcome = ("end", writer.episode_steps)
        except Exception as error:  # noqa: BLE001 - every error is part of the comparison
            outcome = ("error", type(error).__name__, str(error))
        trace.append(outcome)
    trace.append(("requests", transport.requests))
    trace.append(("state", repr(writer)))
    writer.Close()
    return trace


@pytest.mark.parametrize("confirm", [True, False])
@pytest.mark.parametrize("seed", range(12))
def test_twins_agree_on_random_operations(seed: int, confirm: bool) -> None:
    compiled = compiled_module("internal_writer")
    pure = importlib.import_module("reverb_py._writer.internal_writer")
    assert compiled is not pure
    assert _run(pure, seed, confirm) == _run(compiled, seed, confirm)


def test_twins_have_the_same_api() -> None:
    compiled = compiled_module("internal_writer")
    pure = importlib.import_module("reverb_py._writer.internal_writer")
    assert sorted(pure.__all__) == sorted(compiled.__all__)
    for name in pure.__all__:
        pure_obj, compiled_obj = getattr(pure, name), getattr(compiled, name)
        assert type(pure_obj) is type(compiled_obj) or callable(compiled_obj), name
        if isinstance(pure_obj, type):
            public = {attr for attr in vars(pure_obj) if not attr.startswith("_")}
            assert public <= set(dir(compiled_obj)), name
