"""Loopback servers shared by the framework tests (sequence and step tables; tables that
run dry)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

import reverb_py as reverb

SEQUENCE = 3
STEPS = 100

SIGNATURE = {
    "obs": reverb.TensorSpec((SEQUENCE, 2), np.float32),
    "step": reverb.TensorSpec((SEQUENCE,), np.int64),
}
STEP_SIGNATURE = {
    "obs": reverb.TensorSpec((2,), np.float32),
    "step": reverb.TensorSpec((), np.int64),
}


def _uniform(name: str, signature: object) -> reverb.Table:
    return reverb.Table(
        name=name,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=10_000,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=signature,
    )


def filled_server() -> reverb.Server:
    """A server (port 0) whose ``seq`` items (``plain``: the same, no signature) are 3
    steps and ``steps`` items one step;
    every step's ``obs`` is its ``step`` twice. The caller stops it."""
    server = reverb.Server(
        [
            _uniform("seq", SIGNATURE),
            _uniform("plain", None),
            _uniform("steps", STEP_SIGNATURE),
            _uniform("empty", None),
        ],
        port=0,
    )
    try:
        with server.localhost_client().trajectory_writer(SEQUENCE) as writer:
            for step in range(STEPS):
                writer.append({"obs": np.full(2, step, np.float32), "step": np.int64(step)})
                last = {"obs": writer.history["obs"][-1], "step": writer.history["step"][-1]}
                writer.create_item("steps", 1.0, last)
                if step + 1 >= SEQUENCE:
                    item = {
                        "obs": writer.history["obs"][-SEQUENCE:],
                        "step": writer.history["step"][-SEQUENCE:],
                    }
                    writer.create_item("seq", 1.0, item)
                    writer.create_item("plain", 1.0, item)
            writer.flush()
    except BaseException:
        server.stop()
        raise
    return server


def dry_server() -> reverb.Server:
    """A server (port 0) whose tables run dry: ``drain`` (each item sampled 10 times)
    holds items ``0, 1, 2``, the queues ``queue`` (3 places) and ``queue8`` (8 places)
    ``0, 1, …`` up to their size; every item is one squeezed int64. The caller stops it."""
    server = reverb.Server(
        [
            reverb.Table(
                "drain",
                reverb.selectors.Uniform(),
                reverb.selectors.Fifo(),
                max_size=100,
                rate_limiter=reverb.rate_limiters.MinSize(1),
                max_times_sampled=10,
            ),
            reverb.Table.queue("queue", 3),
            reverb.Table.queue("queue8", 8),
        ],
        port=0,
    )
    try:
        with server.localhost_client().trajectory_writer(1) as writer:
            for value in range(8):
                writer.append(np.int64(value))
                tables = ["drain", "queue", "queue8"] if value < 3 else ["queue8"]
                for table in tables:
                    writer.create_item(table, 1.0, writer.history[-1])
            writer.flush()
    except BaseException:
        server.stop()
        raise
    return server


def within(seconds: float, produce: Callable[[], list[Any]]) -> list[Any]:
    """``produce()`` run on a thread, failing the test if it has not returned within
    ``seconds`` (a blocked TensorFlow iterator cannot be interrupted otherwise; stopping
    the server then ends it)."""
    result: list[Any] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.extend(produce())
        except BaseException as error:
            failure.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"nothing came back within {seconds} s"
    if failure:
        raise failure[0]
    return result
