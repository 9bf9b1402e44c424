"""A server whose tables wait on their rate limiters, for the status page's tests and its
screenshot (``docs/status_page.png``).

* ``replay``: an actor inserts for a while, a learner samples 4 times per insert
  (``SampleToInsertRatio``), then the actor stops: the learner waits at ``min_diff``;
* ``warmup``: ``MinSize(1000)`` holding 250 items, two sample requests waiting;
* ``events``: a queue of 50, full, one insert waiting.

``python -m tests.browser.stalled docs/status_page.png`` runs it for a minute and takes
the screenshot with headless Chromium.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import threading
import time
from collections.abc import Iterator

import numpy as np

import reverb_py as reverb
from reverb_py import errors

WARMUP_ITEMS = 250


@contextlib.contextmanager
def stalled_server(actor_seconds: float, token: str | None = None) -> Iterator[reverb.Server]:
    """The server above, its callers running; stopped (and its callers ended) on exit.

    Yields once ``warmup`` and ``events`` have their waiting calls; the actor of
    ``replay`` goes on for ``actor_seconds`` more.
    """
    tables = [
        reverb.Table(
            "replay",
            reverb.selectors.Prioritized(0.8),
            reverb.selectors.Fifo(),
            10_000,
            reverb.rate_limiters.SampleToInsertRatio(4.0, 20, 40.0),
        ),
        reverb.Table(
            "warmup",
            reverb.selectors.Uniform(),
            reverb.selectors.Fifo(),
            100_000,
            reverb.rate_limiters.MinSize(1000),
        ),
        reverb.Table.queue("events", 50),
    ]
    server = reverb.Server(tables, port=0, metrics_port=0, token=token)
    stop = threading.Event()
    client = server.localhost_client()
    threads: list[threading.Thread] = []

    def run(target: object) -> None:
        def guarded() -> None:
            try:
                target()  # type: ignore[operator]
            except (errors.ReverbError, ConnectionError):
                if not stop.is_set():
                    raise

        thread = threading.Thread(target=guarded, daemon=True)
        thread.start()
        threads.append(thread)

    def actor() -> None:
        deadline = time.monotonic() + actor_seconds
        with client.trajectory_writer(1) as writer:
            step = 0
            while time.monotonic() < deadline and not stop.is_set():
                writer.append({"observation": np.full(64, step, np.float32)})
                writer.create_item("replay", 1.0, writer.history["observation"][-1:])
                step += 1
                if step % 4 == 0:
                    writer.flush()
                    stop.wait(0.04)  # about 100 steps a second

    def learner() -> None:
        while not stop.is_set():
            for _ in client.sample("replay", 8, rate_limiter_timeout_ms=600_000):
                pass

    def waiting_sampler() -> None:
        list(client.sample("warmup", 1, rate_limiter_timeout_ms=600_000))

    def waiting_actor() -> None:
        client.insert(np.zeros(4, np.float32), {"events": 1.0})

    try:
        for step in range(WARMUP_ITEMS):
            client.insert(np.float32(step), {"warmup": 1.0})
        for step in range(50):
            client.insert(np.float32(step), {"events": 1.0})
        for target in (actor, learner, waiting_sampler, waiting_sampler, waiting_actor):
            run(target)
        warmup, events = tables[1], tables[2]
        deadline = time.monotonic() + 60
        while warmup.num_pending_samples < 2 or events.num_pending_inserts < 1:
            assert time.monotonic() < deadline, "the callers never waited"
            stop.wait(0.02)
        yield server
    finally:
        stop.set()
        with contextlib.suppress(errors.ReverbError):
            # Room for the waiting insert, which then ends before the server stops.
            list(client.sample("events", 1, rate_limiter_timeout_ms=1000))
        threads[-1].join(timeout=30)
        server.stop()
        for thread in threads:
            thread.join(timeout=30)


def main(path: str) -> None:
    from tests.browser.chromium import Chromium

    with (
        stalled_server(actor_seconds=35) as server,
        tempfile.TemporaryDirectory() as profile,
        Chromium(profile, width=1300, height=900) as browser,
    ):
        browser.open(f"http://localhost:{server.metrics_port}/")
        time.sleep(60)  # a minute of history on the charts
        browser.wait_for("document.querySelectorAll('.badge.blocked').length === 3")
        browser.screenshot(path)


if __name__ == "__main__":
    main(sys.argv[1])
