"""A server's records (``Item``, ``Chunk``, ``LiveChunks``) compiled or pure, under many writers.

Run from the project root (a compiled build)::

    python -m benchmarks.server_records [--repeats 6] [--seconds 4] [--kept] [--out PATH]

Two ways of the same compiled server, differing only in the ``records`` twin its tables
and insert streams use:

* ``compiled``: ``reverb_py._speedups.records`` (the default build), whose ``Item`` and
  ``Chunk`` are not containers of the cyclic garbage collector and whose ``LiveChunks``
  files borrowed references;
* ``pure``: ``reverb_py._pure.records``, ``__slots__`` classes the collector tracks and a
  ``WeakValueDictionary`` of live chunks (one weak reference object per chunk).

Each repetition runs both ways, in alternating order: a server process holding one
Uniform table (``max_size`` 10**6) and 8 blocking writers on it, 2 processes x 4 threads
(as ``benchmarks.compare``'s ``writers`` workload: small steps, a length-1 item per step,
``flush(block_until_num_items=16)``), for ``--seconds``. Measured per way and repetition:
the writers' items per second; the server's CPU seconds (from ``/proc``) per item; and,
inside the server, the time spent in the collector's passes (``gc.callbacks``) per item and
how many objects the collector tracks before and after. Without ``--kept`` each
repetition starts a fresh server of each way; with it, one server of each way is kept
for every repetition, so the table grows (to about 10**5 items per repetition).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from typing import Any

from benchmarks import _writer_procs
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

WAYS = ("compiled", "pure")
TABLE = "writers"
PROCESSES = 2
THREADS = 4
FLUSH = 16  # flush(block_until_num_items=16) after every item


def _use_pure_records() -> None:
    """Points every module holding a records type at the pure twin's (before a server
    exists)."""
    from reverb_py import _impl, table
    from reverb_py._pure import records
    from reverb_py.server import _chunks, _replies, _service

    for module in (_impl, table, _service):
        module.Item = records.Item  # type: ignore[attr-defined]
    for module in (_impl, _chunks, _replies, _service):
        module.Chunk = records.Chunk  # type: ignore[attr-defined]
    for module in (_impl, _chunks, _service):
        module.LiveChunks = records.LiveChunks  # type: ignore[attr-defined]


def _server(way: str) -> None:
    """A server of ``way``; prints its port, then one JSON line of its collector's totals
    per line read from stdin, until stdin closes."""
    import reverb_py as reverb

    if reverb.IMPLEMENTATION != "cython":
        raise SystemExit("benchmarks.server_records needs the compiled build (make build).")
    if way == "pure":
        _use_pure_records()
    totals = {"seconds": 0.0, "collections": 0}
    started: list[float] = []

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            totals["seconds"] += time.perf_counter() - started.pop()
            totals["collections"] += 1

    gc.callbacks.append(timed)
    server = _writer_procs.serve(TABLE)
    for _ in sys.stdin:
        held = server._servicer._tables[TABLE].items()[:1]
        stats = {
            "gc_seconds": totals["seconds"],
            "gc_collections": totals["collections"],
            "gc_tracked_objects": len(gc.get_objects()),
            # Which twin the server's records really came from (a check of the patching).
            "records": sorted(
                {type(server._servicer._live_chunks).__module__}
                | {type(record).__module__ for item in held for record in (item, *item.chunks)}
            ),
        }
        print(json.dumps(stats), flush=True)
    server.stop()


def _server_stats(server: Any) -> dict[str, Any]:
    server.stdin.write("stats\n")
    server.stdin.flush()
    return json.loads(server.stdout.readline())


def _repetition(server: Any, port: int, seconds: float) -> dict[str, Any]:
    """8 writers on ``server`` for ``seconds``: what they and the server spent."""
    procs = _writer_procs.start(port, TABLE, PROCESSES, THREADS, seconds, FLUSH)
    before = _server_stats(server)
    cpu0 = proc_cpu_seconds(server.pid)
    writers = _writer_procs.finish(procs, seconds)
    cpu1 = proc_cpu_seconds(server.pid)
    after = _server_stats(server)
    items = writers["items"]
    assert cpu0 is not None and cpu1 is not None
    return {
        "items": items,
        "items_per_s": items / seconds,
        "server_cpu_us_per_item": 1e6 * (cpu1 - cpu0) / items,
        "client_cpu_us_per_item": 1e6 * writers["cpu_seconds"] / items,
        "gc_us_per_item": 1e6 * (after["gc_seconds"] - before["gc_seconds"]) / items,
        "gc_collections": after["gc_collections"] - before["gc_collections"],
        "gc_tracked_before": before["gc_tracked_objects"],
        "gc_tracked_after": after["gc_tracked_objects"],
        "records": after["records"],
    }


def _start(way: str) -> tuple[Any, int]:
    return start_worker("benchmarks.server_records", f"server:{way}", dict(os.environ))


def measure(repeats: int, seconds: float, kept: bool) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {way: [] for way in WAYS}
    servers = {way: _start(way) for way in WAYS} if kept else {}
    try:
        for rep in range(repeats):
            for way in WAYS if rep % 2 == 0 else WAYS[::-1]:
                if kept:
                    server, port = servers[way]
                    runs[way].append(_repetition(server, port, seconds))
                else:
                    server, port = _start(way)
                    try:
                        runs[way].append(_repetition(server, port, seconds))
                    finally:
                        stop_worker(server)
                print(f"  rep {rep} {way}: {runs[way][-1]['items_per_s']:,.0f} items/s", flush=True)
    finally:
        for server, _ in servers.values():
            stop_worker(server)
    return runs


KEYS = (
    "items_per_s",
    "server_cpu_us_per_item",
    "client_cpu_us_per_item",
    "gc_us_per_item",
    "gc_tracked_after",
)


def main(argv: list[str] | None = None) -> int:
    parser = worker_parser(__doc__ or "", 6, 4.0, None)
    parser.add_argument(
        "--kept", action="store_true", help="one server per way for every repetition"
    )
    args = parser.parse_args(argv)
    if args.worker:
        _server(args.worker.partition(":")[2])
        return 0
    runs = measure(args.repeats, args.seconds, args.kept)
    summary, ratios = ab_medians(runs, KEYS, "compiled", "pure")
    name = "server_records-kept" if args.kept else "server_records"
    data: dict[str, Any] = {
        "benchmark": "server_records",
        "machine": machine_info(),
        "config": {
            "repeats": args.repeats,
            "seconds": args.seconds,
            "server": "fresh per repetition" if not args.kept else "one per way, kept",
            "writers": f"{PROCESSES} processes x {THREADS} threads, blocking clients",
            "item": "small step (obs float32[8], action float32[2], reward float32[]), "
            "length 1, flush(block_until_num_items=16)",
            "table": "Uniform, Fifo remover, max_size 10**6, MinSize(1)",
            "alternation": "the two ways alternate first/second in each repetition",
        },
        "ways": {
            "compiled": "reverb_py._speedups.records (the build's records)",
            "pure": "reverb_py._pure.records (tracked by the collector; WeakValueDictionary)",
        },
        "runs": runs,
        "summary": summary,
        "ratio_convention": "compiled / pure, medians",
        "ratios": ratios,
    }
    path = write_json(args.out or RESULTS_DIR / f"{name}.json", data)
    print_ab(summary, ratios, ("compiled", "pure"), KEYS, ",.2f")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
