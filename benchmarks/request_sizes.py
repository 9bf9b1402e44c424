"""Insert requests as the server sees them: items and chunks per request, and the
server's CPU per request and per item, with one writer and with 8.

Run from the project root::

    python -m benchmarks.request_sizes [--repeats 3] [--seconds 4] [--out PATH]

A server process (compiled or pure, as the build; one Uniform table, ``max_size``
10**6, ``MinSize(1)``) counts every insert stream request it handles: its items, its
chunks, and how many requests held each number of items; and how many confirmation
messages it wrote. Its table is emptied before each load. Blocking writers write small
steps as ``benchmarks.compare``'s ``writers`` workload does (a length-1 item per step,
``flush(block_until_num_items=N)`` after each), for ``--seconds``, in four loads run in
turn, ``--repeats`` times:

* ``1x1_flush16`` and ``1x1_flush5``: one process of one writer;
* ``2x4_flush16`` and ``2x4_flush5``: 2 processes of 4 writer threads (8 writers).

Per load (medians over the repetitions): items/s, items and chunks per request,
confirmations per request, the server's CPU (from ``/proc``) per request and per item,
and the share of requests by items held (1 to 16, 17 meaning 17 or more).
"""

from __future__ import annotations

import collections
import json
import os
import sys
from typing import Any

from benchmarks import _writer_procs
from benchmarks._common import (
    RESULTS_DIR,
    implementation,
    machine_info,
    median,
    proc_cpu_seconds,
    start_worker,
    stop_worker,
    worker_parser,
    write_json,
)

TABLE = "writers"
LOADS = {
    "1x1_flush16": (1, 1, 16),
    "1x1_flush5": (1, 1, 5),
    "2x4_flush16": (2, 4, 16),
    "2x4_flush5": (2, 4, 5),
}
MAX_BUCKET = 17


def _server() -> None:
    """A server counting its insert requests; prints its port, then one JSON line of
    the counts since the last line per line read from stdin (until stdin closes)."""
    import reverb_py as reverb
    from reverb_py.server import _service

    counts: collections.Counter[str] = collections.Counter()
    sizes: collections.Counter[int] = collections.Counter()
    handle = _service._InsertStream._handle
    flush = _service._InsertStream._flush_confirmations

    def counted_handle(self: Any, request: Any) -> None:
        chunks, items, _ = request
        counts["requests"] += 1
        counts["items"] += len(items)
        counts["chunks"] += len(chunks)
        sizes[min(len(items), MAX_BUCKET)] += 1
        handle(self, request)

    async def counted_flush(self: Any) -> None:
        if self._confirmed:
            counts["confirmations"] += 1
        await flush(self)

    _service._InsertStream._handle = counted_handle  # type: ignore[method-assign]
    _service._InsertStream._flush_confirmations = counted_flush  # type: ignore[method-assign]
    server = _writer_procs.serve(TABLE)
    client = reverb.Client(f"localhost:{server.port}")
    for _ in sys.stdin:
        client.reset(TABLE)  # each load starts with an empty table
        print(json.dumps({"counts": dict(counts), "sizes": dict(sizes)}), flush=True)
        counts.clear()
        sizes.clear()
    server.stop()


def _counts(server: Any) -> dict[str, Any]:
    server.stdin.write("counts\n")
    server.stdin.flush()
    return json.loads(server.stdout.readline())


def _load(server: Any, port: int, load: str, seconds: float) -> dict[str, Any]:
    processes, threads, block_until = LOADS[load]
    procs = _writer_procs.start(port, TABLE, processes, threads, seconds, block_until)
    _counts(server)  # zero the counts (the writers start later)
    cpu0 = proc_cpu_seconds(server.pid)
    writers = _writer_procs.finish(procs, seconds)
    cpu1 = proc_cpu_seconds(server.pid)
    seen = _counts(server)
    assert cpu0 is not None and cpu1 is not None
    counts, sizes = seen["counts"], seen["sizes"]
    requests = counts["requests"]
    cpu_us = 1e6 * (cpu1 - cpu0)
    return {
        "items_per_s": writers["items"] / seconds,
        "items_per_request": counts["items"] / requests,
        "chunks_per_request": counts["chunks"] / requests,
        "confirmations_per_request": counts.get("confirmations", 0) / requests,
        "server_cpu_us_per_request": cpu_us / requests,
        "server_cpu_us_per_item": cpu_us / counts["items"],
        "client_cpu_us_per_item": 1e6 * writers["cpu_seconds"] / writers["items"],
        "requests_by_items": {
            str(n): sizes.get(str(n), 0) / requests for n in range(1, MAX_BUCKET + 1)
        },
    }


KEYS = (
    "items_per_s",
    "items_per_request",
    "chunks_per_request",
    "confirmations_per_request",
    "server_cpu_us_per_request",
    "server_cpu_us_per_item",
    "client_cpu_us_per_item",
)


def main(argv: list[str] | None = None) -> int:
    parser = worker_parser(__doc__ or "", 3, 4.0, str(RESULTS_DIR / "request_sizes.json"))
    args = parser.parse_args(argv)
    if args.worker:
        _server()
        return 0
    runs: dict[str, list[dict[str, Any]]] = {load: [] for load in LOADS}
    server, port = start_worker("benchmarks.request_sizes", "server", dict(os.environ))
    try:
        for rep in range(args.repeats):
            for load in LOADS:
                runs[load].append(_load(server, port, load, args.seconds))
                print(
                    f"  rep {rep} {load}: {runs[load][-1]['items_per_s']:,.0f} items/s, "
                    f"{runs[load][-1]['items_per_request']:.1f} items/request",
                    flush=True,
                )
    finally:
        stop_worker(server)
    summary = {
        load: {
            **{k: median([r[k] for r in runs[load]]) for k in KEYS},
            "requests_by_items": {
                n: median([r["requests_by_items"][n] for r in runs[load]])
                for n in runs[load][0]["requests_by_items"]
            },
        }
        for load in LOADS
    }
    data: dict[str, Any] = {
        "benchmark": "request_sizes",
        "machine": machine_info(),
        "implementation": implementation(),
        "config": {
            "repeats": args.repeats,
            "seconds": args.seconds,
            "loads": {k: dict(zip(("processes", "threads", "flush"), v)) for k, v in LOADS.items()},
            "item": "small step (obs float32[8], action float32[2], reward float32[]), "
            "length 1, num_keep_alive_refs=10",
            "table": "Uniform, Fifo remover, max_size 10**6, MinSize(1); one server, "
            "reset before each load",
            "requests_by_items": f"share of requests holding n items ({MAX_BUCKET}: or more)",
        },
        "runs": runs,
        "summary": summary,
    }
    path = write_json(args.out, data)
    width = max(len(k) for k in KEYS)
    print(f"{'':{width}s}  " + "  ".join(f"{load:>12s}" for load in LOADS))
    for k in KEYS:
        print(f"{k:{width}s}  " + "  ".join(f"{summary[load][k]:12,.1f}" for load in LOADS))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
