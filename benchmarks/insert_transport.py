"""A blocking TrajectoryWriter's inserts over its two transports, one server.

Run from the project root::

    python -m benchmarks.insert_transport [--repeats 5] [--out PATH]

A server process holds one ``queue`` table; a client process writes small steps (as
``benchmarks.compare``'s ``insert_small``: obs float32[8], action float32[2], reward
float32[]), one length-1 item per step, with ``flush(block_until_num_items=16)`` and with
``flush(5)`` after every item, over each transport in turn (the order reversed from one
repetition to the next):

* ``polled``: ``PolledInsertTransport``, the stream the writer's thread drives itself;
* ``loop``: ``InsertTransport`` on the client's loop thread.

Items per second, medians over the repetitions.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from benchmarks._common import (
    ab_medians,
    alternating_main,
    machine_info,
    print_ab,
    write_json,
)

WAYS = ("polled", "loop")
FLUSHES = (16, 5)
ITEMS = 8_000


def _server() -> None:
    import reverb_py as reverb

    server = reverb.Server([reverb.Table.queue("q", 10**6)], port=0)
    print(server.port, flush=True)
    sys.stdin.read()
    server.stop()


def _items_per_s(client: Any, block_until: int) -> float:
    import numpy as np

    step = {
        "obs": np.zeros(8, np.float32),
        "action": np.zeros(2, np.float32),
        "reward": np.float32(0),
    }
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for _ in range(100):  # warm-up
            writer.append(step)
            writer.create_item("q", 1.0, {k: writer.history[k][-1:] for k in step})
        writer.flush()
        t0 = time.perf_counter()
        for _ in range(ITEMS):
            writer.append(step)
            writer.create_item("q", 1.0, {k: writer.history[k][-1:] for k in step})
            writer.flush(block_until_num_items=block_until)
        writer.flush()
        return ITEMS / (time.perf_counter() - t0)


def _client(port: int, order: list[str]) -> None:
    import reverb_py as reverb
    from reverb_py._client import polled_insert

    client = reverb.Client(f"localhost:{port}")
    out: dict[str, dict[str, float]] = {}
    for way in order:
        polled_insert.ENABLED = way == "polled"
        out[way] = {f"flush_{n}": _items_per_s(client, n) for n in FLUSHES}
    print(json.dumps(out), flush=True)


def main(argv: list[str] | None = None) -> int:
    ran = alternating_main(argv, __doc__ or "", "insert_transport", WAYS, _server, _client)
    if ran is None:
        return 0
    args, runs = ran
    keys = [f"flush_{n}" for n in FLUSHES]
    summary, ratios = ab_medians(runs, keys, "polled", "loop")
    data: dict[str, Any] = {
        "benchmark": "insert_transport",
        "machine": machine_info(),
        "config": {
            "repeats": args.repeats,
            "items_per_run": ITEMS,
            "step": "obs float32[8], action float32[2], reward float32[]",
            "alternation": "the two ways alternate first/second in each repetition",
        },
        "unit": "items/s",
        "ratio_convention": "polled / loop (> 1: the polled transport is faster)",
        "runs": runs,
        "summary": summary,
        "ratios": ratios,
    }
    path = write_json(args.out, data)
    print_ab(summary, ratios, ("polled", "loop"), keys)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
