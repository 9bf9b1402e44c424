"""A sampler that waits on the rate limiter logs what it waits for, at an interval."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator

import grpc
import numpy as np
import pytest

from reverb_py import errors, rate_limiters, selectors
from reverb_py._client import datasets
from reverb_py._client.sampling import describe_wait, sample_stream
from reverb_py._proto import schema_pb2
from reverb_py.server import Server, Table

MESSAGE = "table 'replay': 3 of 1000 items (min_size_to_sample)"


@pytest.fixture
def server() -> Iterator[Server]:
    table = Table("replay", selectors.Uniform(), selectors.Fifo(), 100, rate_limiters.MinSize(1000))
    with Server([table], port=0) as server:
        client = server.localhost_client()
        for step in range(3):
            client.insert(np.float32(step), {"replay": 1.0})
        yield server


class Waits(logging.Handler):
    """Collects the wait reports; ``seen`` is set at the first one."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("sampling has waited"):
            self.messages.append(record.getMessage())
            self.seen.set()


@pytest.fixture
def waits() -> Iterator[Waits]:
    handler = Waits()
    logger = logging.getLogger("reverb_py")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


async def test_a_sample_stream_logs_what_the_rate_limiter_waits_for(
    server: Server, waits: Waits
) -> None:
    async with grpc.aio.insecure_channel(server.address) as channel:

        async def sample() -> None:
            async for _ in sample_stream(channel, "replay", 1, wait_report_s=0.05):
                pass

        task = asyncio.ensure_future(sample())
        try:
            assert await asyncio.get_running_loop().run_in_executor(None, waits.seen.wait, 30)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert waits.messages[0].endswith(f" s: {MESSAGE}"), waits.messages


def test_a_dataset_sampler_logs_what_the_rate_limiter_waits_for(
    server: Server, waits: Waits
) -> None:
    sampler = datasets.Sampler(
        server.address,
        "replay",
        datasets.SamplerOptions(max_in_flight_samples_per_worker=1, num_workers_per_iterator=1),
        wait_report_s=0.05,
    )
    taken: list[object] = []
    taker = threading.Thread(target=lambda: taken.append(sampler.take()))
    taker.start()
    try:
        assert waits.seen.wait(30)
    finally:
        sampler.close()
        taker.join(30)
    assert taken == [[]]
    assert waits.messages[0].endswith(f" s: {MESSAGE}"), waits.messages


def info(
    size: int, inserts: int, samples: int, spi: float, min_diff: float
) -> schema_pb2.TableInfo:
    message = schema_pb2.TableInfo(name="replay", current_size=size)
    limiter = message.rate_limiter_info
    limiter.samples_per_insert = spi
    limiter.min_size_to_sample = 10
    limiter.min_diff = min_diff
    limiter.max_diff = 1e9
    limiter.insert_stats.completed = inserts
    limiter.sample_stats.completed = samples
    return message


def test_the_wait_is_described_from_the_table_info() -> None:
    assert describe_wait("replay", info(3, 3, 0, 1.0, 0.0)) == (
        "table 'replay': 3 of 10 items (min_size_to_sample)"
    )
    # 40 inserts at 2 samples each allow 80 samples (min_diff 0): the 81st needs one more.
    assert describe_wait("replay", info(40, 40, 80, 2.0, 0.0)) == (
        "table 'replay': 80 samples of 40 inserts at samples_per_insert 2: 1 more insert needed"
    )
    assert "sampling allowed now" in describe_wait("replay", info(40, 40, 10, 2.0, 0.0))


def test_client_sample_and_data_iterators_take_the_interval(server: Server, waits: Waits) -> None:
    """The public sampling calls pass ``wait_report_s`` on."""
    from reverb_py import data
    from reverb_py.client import Client

    ended: list[object] = []

    def take(iterator: Iterator[object]) -> None:
        try:
            ended.append(next(iterator, None))
        except errors.CancelledOperationError as error:  # the server stopped under it
            ended.append(error)

    iterator = data.TrajectoryIterator(server.address, "replay", None, None, 1, wait_report_s=0.05)
    waiting = threading.Thread(target=take, args=(iterator,))
    waiting.start()
    try:
        assert waits.seen.wait(30)
    finally:
        iterator.close()
        waiting.join(30)
    assert not waiting.is_alive() and ended == [None]
    assert waits.messages[0].endswith(f" s: {MESSAGE}"), waits.messages

    waits.seen.clear()
    samples = Client(server.address).sample("replay", 1, wait_report_s=0.05)
    waiting = threading.Thread(target=take, args=(samples,))
    waiting.start()
    try:
        assert waits.seen.wait(30)
    finally:
        server.stop()  # the table can never hold 1000 items: stopping ends the wait
        waiting.join(30)
    assert not waiting.is_alive() and len(ended) == 2
    assert isinstance(ended[1], errors.CancelledOperationError), ended
