"""The server's mutation-stream answers: written while the next request is read, or awaited.

Run from the project root::

    python -m benchmarks.mutate_answers [--repeats 6] [--seconds 4] [--out PATH]

Two ways of the same server, differing only in how its ``MutatePrioritiesStream`` handler
writes each answer:

* ``task``: reverb_py's handler: each answer is written by a task of its own while the
  handler reads the next request (one write at a time);
* ``awaited``: the former handler (``reverb_py.server._service.ANSWER_TASK`` off): each
  answer's write is awaited before the next request is read.

Each repetition runs both ways, in alternating order, each on a fresh server process
holding one ``Prioritized(0.8)`` table of 100,000 items (inserted in-process). This
process' blocking ``Client`` sends ``mutate_priorities`` calls of 256 keys (a learner's
batch; 39 prebuilt calls over 10,000 of the keys, cycled), one at a time, for
``--seconds``, as ``benchmarks.compare``'s ``mutate_256_latency`` does. Measured per way
and repetition: the round trip's median, 10th and 90th percentile, and the server's CPU
(from ``/proc``) per call.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from typing import Any

from benchmarks._common import (
    RESULTS_DIR,
    ab_medians,
    machine_info,
    print_ab,
    proc_cpu_seconds,
    start_worker,
    stop_worker,
    worker_parser,
    write_json,
)
from benchmarks.mutate_stream import held_keys, prioritized_table

WAYS = ("task", "awaited")
TABLE = "prioritized"
ITEMS = 100_000
UPDATED = 10_000
PER_CALL = 256
SEED = 11


def _server(way: str) -> None:
    """A server of ``way``; prints its port, then runs until stdin closes."""
    import reverb_py as reverb
    from reverb_py.server import _service

    _service.ANSWER_TASK = way == "task"
    server = reverb.Server([prioritized_table(TABLE, held_keys(ITEMS, SEED), ITEMS)], port=0)
    print(server.port, flush=True)
    sys.stdin.read()
    server.stop()


def _calls() -> list[dict[int, float]]:
    rng = random.Random(SEED + 1)
    keys = rng.sample(held_keys(ITEMS, SEED), UPDATED)
    return [
        {key: rng.uniform(0.1, 2.0) for key in keys[i : i + PER_CALL]}
        for i in range(0, UPDATED - PER_CALL + 1, PER_CALL)
    ]


def _repetition(pid: int, port: int, seconds: float, calls: list[dict[int, float]]) -> Any:
    import reverb_py as reverb

    client = reverb.Client(f"localhost:{port}")
    if client.server_info()[TABLE].current_size != ITEMS:
        raise RuntimeError("the server's table is not full")
    for updates in calls:  # opens the stream, warms both ends
        client.mutate_priorities(TABLE, updates=updates)
    clock = time.perf_counter
    times = []
    cpu0 = proc_cpu_seconds(pid)
    deadline = clock() + seconds
    i = 0
    while True:
        t0 = clock()
        client.mutate_priorities(TABLE, updates=calls[i % len(calls)])
        t1 = clock()
        times.append(t1 - t0)
        i += 1
        if t1 >= deadline:
            break
    cpu1 = proc_cpu_seconds(pid)
    assert cpu0 is not None and cpu1 is not None
    times.sort()
    return {
        "calls": len(times),
        "round_trip_us": 1e6 * statistics.median(times),
        "round_trip_p10_us": 1e6 * times[len(times) // 10],
        "round_trip_p90_us": 1e6 * times[(len(times) * 9) // 10],
        "server_cpu_us_per_call": 1e6 * (cpu1 - cpu0) / len(times),
    }


def measure(repeats: int, seconds: float) -> dict[str, list[dict[str, Any]]]:
    calls = _calls()
    runs: dict[str, list[dict[str, Any]]] = {way: [] for way in WAYS}
    for rep in range(repeats):
        for way in WAYS if rep % 2 == 0 else WAYS[::-1]:
            server, port = start_worker(
                "benchmarks.mutate_answers", f"server:{way}", dict(os.environ)
            )
            try:
                runs[way].append(_repetition(server.pid, port, seconds, calls))
            finally:
                stop_worker(server)
            print(f"  rep {rep} {way}: {runs[way][-1]['round_trip_us']:.1f} µs", flush=True)
    return runs


KEYS = ("round_trip_us", "round_trip_p10_us", "round_trip_p90_us", "server_cpu_us_per_call")


def main(argv: list[str] | None = None) -> int:
    parser = worker_parser(__doc__ or "", 6, 4.0, None)
    args = parser.parse_args(argv)
    if args.worker:
        _server(args.worker.partition(":")[2])
        return 0
    runs = measure(args.repeats, args.seconds)
    summary, ratios = ab_medians(runs, KEYS, "awaited", "task")
    data: dict[str, Any] = {
        "benchmark": "mutate_answers",
        "machine": machine_info(),
        "config": {
            "repeats": args.repeats,
            "seconds": args.seconds,
            "table": f"Prioritized(0.8), Fifo remover, {ITEMS:,} items",
            "calls": f"{PER_CALL} keys each, over {UPDATED:,} of the keys, one at a time, "
            "blocking Client",
            "server": "a fresh server process per way and repetition",
            "alternation": "the two ways alternate first/second in each repetition",
        },
        "ways": {
            "task": "each answer written by a task while the next request is read",
            "awaited": "each answer's write awaited before the next request is read",
        },
        "runs": runs,
        "summary": summary,
        "ratio_convention": "awaited / task, medians (> 1: the task way takes less)",
        "ratios": ratios,
    }
    path = write_json(args.out or RESULTS_DIR / "mutate_answers.json", data)
    print_ab(summary, ratios, ("task", "awaited"), KEYS, ",.1f")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
