"""Items reach the table without a flush, as with dm-reverb's auto-tuned writers.

TF-Agents' ``ReverbAddTrajectoryObserver`` appends a step, creates an item of the last
``sequence_length`` steps (``num_keep_alive_refs=sequence_length + 1``) and flushes only
when the episode ends; its test then finds every item in the table. dm-reverb's
auto-tuned chunker starts with one-step chunks and changes the length only after 10
items, so each of those items is sent (in the background) as soon as it is created.
Sending is asynchronous in both systems: each check waits for the table to reach the
size, and fails when it has not within ``DEADLINE_S``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import numpy as np
import pytest

import reverb_py as reverb
from reverb_py import structured_writer as sw

DEADLINE_S = 10.0
STEPS = 8  # items of the last 2 steps from step 1 on: 7 items, all before the tuner moves


@pytest.fixture
def server() -> Iterator[reverb.Server]:
    table = reverb.Table(
        name="t",
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=1000,
        rate_limiter=reverb.rate_limiters.MinSize(1),
    )
    with reverb.Server([table]) as server:
        yield server


def size(server: reverb.Server) -> int:
    return int(server.tables[0].info.current_size)


def reached(server: reverb.Server, expected: int) -> bool:
    current = size(server)
    assert current <= expected
    return current == expected


def wait_for_size(server: reverb.Server, expected: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not reached(server, expected):
        if time.monotonic() > deadline:
            pytest.fail(f"{size(server)} items in the table {DEADLINE_S} s after the {expected}th")
        time.sleep(0.002)


async def wait_for_size_async(server: reverb.Server, expected: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not reached(server, expected):
        if time.monotonic() > deadline:
            pytest.fail(f"{size(server)} items in the table {DEADLINE_S} s after the {expected}th")
        await asyncio.sleep(0.002)


def two_step_config() -> sw.Config:
    pattern = sw.pattern_from_transform({"x": None}, lambda step: {"x": step["x"][-2:]})
    return sw.create_config(pattern, "t")


def test_trajectory_writer(server: reverb.Server) -> None:
    client = server.localhost_client()
    with client.trajectory_writer(num_keep_alive_refs=3) as writer:
        for step in range(STEPS):
            writer.append({"x": np.float32(step)})
            if step >= 1:
                writer.create_item("t", 1.0, {"x": writer.history["x"][-2:]})
            wait_for_size(server, step)


def test_structured_writer(server: reverb.Server) -> None:
    client = server.localhost_client()
    with client.structured_writer([two_step_config()]) as writer:
        for step in range(STEPS):
            writer.append({"x": np.float32(step)})
            wait_for_size(server, step)


async def test_asyncio_trajectory_writer(server: reverb.Server) -> None:
    async with reverb.aio.Client(f"localhost:{server.port}") as client:
        writer = await client.trajectory_writer(num_keep_alive_refs=3)
        try:
            for step in range(STEPS):
                writer.append({"x": np.float32(step)})
                if step >= 1:
                    writer.create_item("t", 1.0, {"x": writer.history["x"][-2:]})
                await wait_for_size_async(server, step)
        finally:
            await writer.close()


async def test_asyncio_structured_writer(server: reverb.Server) -> None:
    async with reverb.aio.Client(f"localhost:{server.port}") as client:
        writer = await client.structured_writer([two_step_config()])
        try:
            for step in range(STEPS):
                writer.append({"x": np.float32(step)})
                await wait_for_size_async(server, step)
        finally:
            await writer.close()


def test_blocking_writer_sends_without_taking_confirmations(server: reverb.Server) -> None:
    """One-step chunks: each item is ready when it is created. A blocking writer takes
    its confirmations only while it waits in a flush; between flushes (and without any)
    no item may wait for one."""
    client = server.localhost_client()
    with client.trajectory_writer(num_keep_alive_refs=2) as writer:
        writer.append({"x": np.float32(0)})
        writer.configure(("x",), num_keep_alive_refs=2, max_chunk_length=1)
        for step in range(1, 40):
            writer.append({"x": np.float32(step)})
            writer.create_item("t", 1.0, {"x": writer.history["x"][-2:]})
            wait_for_size(server, step)
            if step % 16 == 0:
                writer.flush()


def test_legacy_writer_sends_items_once_their_chunk_is_complete(server: reverb.Server) -> None:
    """dm-reverb's legacy Writer writes an item with its chunk; waiting for its
    ``max_in_flight_items`` does not make later items wait."""
    client = server.localhost_client()
    with client.writer(max_sequence_length=2, chunk_length=1, max_in_flight_items=10) as writer:
        for step in range(30):
            writer.append({"x": np.float32(step)})
            writer.create_item("t", num_timesteps=1, priority=1.0)
            wait_for_size(server, step + 1)
