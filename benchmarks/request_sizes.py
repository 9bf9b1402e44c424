"""Insert requests as the server sees them: items and chunks per request, and the
server's CPU per request and per item, with one writer and with 8; and where the
writers' and the server's CPU per item goes (user, system, context switches) as writers
are added and as processes share a CPU.

Run from the project root::

    python -m benchmarks.request_sizes [--repeats 3] [--seconds 4] [--out PATH]

A server process (compiled or pure, as the build; one Uniform table, ``max_size``
10**6, ``MinSize(1)``) counts every insert stream request it handles: its items, its
chunks, and how many requests held each number of items; and how many confirmation
messages it wrote. Its table is emptied before each load. Blocking writers write small
steps as ``benchmarks.compare``'s ``writers`` workload does (a length-1 item per step,
``flush(block_until_num_items=N)`` after each), for ``--seconds``, in these loads run
in turn, ``--repeats`` times:

* ``1x1_flush16`` and ``1x1_flush5``: one process of one writer;
* ``2x4_flush16`` and ``2x4_flush5``: 2 processes of 4 writer threads (8 writers);
* ``2x1_flush16``: 2 processes of one writer; ``1x4_flush16``: one process of 4;
* ``1x1_flush16_apart``: one writer, its process pinned to one CPU and the server to
  another; ``1x1_flush16_one_core``: both pinned to the same CPU (the pinned loads run
  where processes can be pinned: Linux, two CPUs or more).

Per load (medians over the repetitions): items/s, items and chunks per request,
confirmations per request, the server's CPU (from ``/proc``) per request and per item,
split into user and system time, the writer processes' CPU per item (user and system,
from ``getrusage``) and their context switches per item (voluntary and involuntary),
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
    can_pin,
    implementation,
    machine_info,
    median,
    pin_process,
    proc_cpu_split,
    start_worker,
    stop_worker,
    worker_parser,
    write_json,
)

TABLE = "writers"
# load -> (processes, threads per process, flush's block_until, placement): None lets
# the scheduler place the processes; "apart" pins the server to one CPU and the writer
# processes to another, "one_core" pins them all to the same CPU.
LOADS: dict[str, tuple[int, int, int, str | None]] = {
    "1x1_flush16": (1, 1, 16, None),
    "1x1_flush5": (1, 1, 5, None),
    "2x4_flush16": (2, 4, 16, None),
    "2x4_flush5": (2, 4, 5, None),
    "2x1_flush16": (2, 1, 16, None),
    "1x4_flush16": (1, 4, 16, None),
    "1x1_flush16_apart": (1, 1, 16, "apart"),
    "1x1_flush16_one_core": (1, 1, 16, "one_core"),
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


def _placement(placement: str | None) -> tuple[set[int] | None, set[int] | None]:
    """The CPUs for the server and for the writer processes (None: unpinned)."""
    if placement is None:
        return None, None
    first, second = sorted(os.sched_getaffinity(0))[:2]
    return {first}, ({second} if placement == "apart" else {first})


def _load(server: Any, port: int, load: str, seconds: float) -> dict[str, Any]:
    processes, threads, block_until, placement = LOADS[load]
    server_cpus, writer_cpus = _placement(placement)
    if server_cpus is not None:
        pin_process(server.pid, server_cpus)
    try:
        procs = _writer_procs.start(
            port, TABLE, processes, threads, seconds, block_until, writer_cpus
        )
        _counts(server)  # zero the counts (the writers start later)
        cpu0 = proc_cpu_split(server.pid)
        writers = _writer_procs.finish(procs, seconds)
        cpu1 = proc_cpu_split(server.pid)
    finally:
        if server_cpus is not None:
            pin_process(server.pid, os.sched_getaffinity(0))
    seen = _counts(server)
    assert cpu0 is not None and cpu1 is not None
    counts, sizes = seen["counts"], seen["sizes"]
    requests = counts["requests"]
    items = writers["items"]
    cpu_us = 1e6 * (cpu1[0] + cpu1[1] - cpu0[0] - cpu0[1])
    switches = writers["voluntary_switches"] + writers["involuntary_switches"]
    return {
        "items_per_s": writers["items"] / seconds,
        "items_per_request": counts["items"] / requests,
        "chunks_per_request": counts["chunks"] / requests,
        "confirmations_per_request": counts.get("confirmations", 0) / requests,
        "server_cpu_us_per_request": cpu_us / requests,
        "server_cpu_us_per_item": cpu_us / counts["items"],
        "client_cpu_us_per_item": 1e6 * writers["cpu_seconds"] / items,
        "client_user_us_per_item": 1e6 * writers["user_seconds"] / items,
        "client_system_us_per_item": 1e6 * writers["system_seconds"] / items,
        "client_switches_per_item": switches / items,
        "server_user_us_per_item": 1e6 * (cpu1[0] - cpu0[0]) / counts["items"],
        "server_system_us_per_item": 1e6 * (cpu1[1] - cpu0[1]) / counts["items"],
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
    "client_user_us_per_item",
    "client_system_us_per_item",
    "client_switches_per_item",
    "server_user_us_per_item",
    "server_system_us_per_item",
)


def main(argv: list[str] | None = None) -> int:
    parser = worker_parser(__doc__ or "", 3, 4.0, str(RESULTS_DIR / "request_sizes.json"))
    args = parser.parse_args(argv)
    loads = {k: v for k, v in LOADS.items() if v[3] is None or can_pin()}
    if args.worker:
        _server()
        return 0
    runs: dict[str, list[dict[str, Any]]] = {load: [] for load in loads}
    server, port = start_worker("benchmarks.request_sizes", "server", dict(os.environ))
    try:
        for rep in range(args.repeats):
            for load in loads:
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
        for load in loads
    }
    data: dict[str, Any] = {
        "benchmark": "request_sizes",
        "machine": machine_info(),
        "implementation": implementation(),
        "config": {
            "repeats": args.repeats,
            "seconds": args.seconds,
            "loads": {
                k: dict(zip(("processes", "threads", "flush", "placement"), v))
                for k, v in loads.items()
            },
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
    for load in loads:
        print(load)
        for k in KEYS:
            print(f"  {k:{width}s}  {summary[load][k]:10,.1f}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
