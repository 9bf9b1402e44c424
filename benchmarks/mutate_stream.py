"""``mutate_priorities`` on the mutation stream against Reverb's unary call, one server.

Run from the project root::

    python -m benchmarks.mutate_stream [--repeats 5] [--out benchmarks/results/mutate_stream.json]

A server process holds one ``Prioritized(0.8)`` table of 10,000 items; a client process
updates the priorities of keys it holds, taking turns between the ways a call can go,
the order reversed from one repetition to the next:

* ``polled``: the blocking client's stream whose events the calling thread takes
  itself (``_PolledStream``; the asyncio client has no such way);
* ``stream``: the mutation stream as gRPC's blocking API drives it (a request thread
  and the channel's polling thread; ``client._mutate_streams.polled`` switched off),
  and the asyncio client's stream;
* ``unary``: Reverb's unary call (``client._mutate_streams.supported`` switched off).

Measured:

* ``blocking_256_us``: a blocking ``Client``'s call of 256 keys, median of 1,000;
* ``blocking_1000_keys_per_s``: 1,000-key calls for 2 s;
* ``aio_256_us``: an ``aio.Client``'s call of 256 keys (on uvloop), median of 1,000.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import time
from typing import Any

from benchmarks._common import (
    alternating_main,
    machine_info,
    median,
    write_json,
)

WAYS = ("polled", "stream", "unary")
BLOCKING_KEYS = ("blocking_256_us", "blocking_1000_keys_per_s")
AIO_KEYS = ("aio_256_us",)
KEYS = 10_000
SEED = 7


def held_keys(count: int = KEYS, seed: int = SEED) -> list[int]:
    """The server's keys (the client makes the same ones from the same seed)."""
    return random.Random(seed).sample(range(1, 2**62), count)


def prioritized_table(name: str, keys: list[int], max_size: int) -> Any:
    """A ``Prioritized(0.8)`` table (Fifo remover, ``MinSize(1)``) holding a bare item of
    priority 1 for each of ``keys``, inserted in-process."""
    import reverb_py as reverb
    from reverb_py.table import Item

    table = reverb.Table(
        name,
        reverb.selectors.Prioritized(0.8),
        reverb.selectors.Fifo(),
        max_size,
        reverb.rate_limiters.MinSize(1),
    )
    for key in keys:
        table.insert_or_enqueue(
            Item(key, 1.0, trajectory=b"", chunks=(), episode_ids=(), times_sampled=0)
        )
    return table


def _server() -> None:
    import reverb_py as reverb

    server = reverb.Server([prioritized_table("p", held_keys(), 10**6)], port=0)
    print(server.port, flush=True)
    sys.stdin.read()
    server.stop()


def _client(port: int, order: list[str]) -> None:
    import reverb_py as reverb
    from reverb_py._loop_thread import new_event_loop

    address = f"localhost:{port}"
    client = reverb.Client(address)
    if client.server_info()["p"].current_size != KEYS:
        raise RuntimeError("the server's table is not full")
    rng = random.Random(1)
    held = held_keys()
    batches_256 = [{k: rng.uniform(0.1, 2.0) for k in rng.sample(held, 256)} for _ in range(50)]
    batches_1000 = [{k: rng.uniform(0.1, 2.0) for k in rng.sample(held, 1000)} for _ in range(20)]
    clock = time.perf_counter
    out: dict[str, dict[str, float]] = {}
    for way in order:
        streams = client._mutate_streams
        streams.supported = way != "unary"
        streams.polled = way == "polled"
        for stream in streams._idle:
            stream.close()
        streams._idle.clear()
        for batch in batches_256:
            client.mutate_priorities("p", updates=batch)
        times = []
        for i in range(1000):
            t0 = clock()
            client.mutate_priorities("p", updates=batches_256[i % 50])
            times.append(clock() - t0)
        result = {"blocking_256_us": statistics.median(times) * 1e6}
        n = 0
        t0 = clock()
        while clock() - t0 < 2.0:
            client.mutate_priorities("p", updates=batches_1000[n % 20])
            n += 1
        result["blocking_1000_keys_per_s"] = n * 1000 / (clock() - t0)
        if way != "polled":
            loop = new_event_loop()
            try:
                result["aio_256_us"] = loop.run_until_complete(_aio(address, way, batches_256))
            finally:
                loop.close()
        out[way] = result
    print(json.dumps(out), flush=True)


async def _aio(address: str, way: str, batches: list[dict[int, float]]) -> float:
    import reverb_py as reverb

    client = reverb.aio.Client(address)
    try:
        await client.mutate_priorities("p", deletes=[0])  # connects
        client._mutate_streams.supported = way == "stream"
        for batch in batches:
            await client.mutate_priorities("p", updates=batch)
        times = []
        clock = time.perf_counter
        for i in range(1000):
            t0 = clock()
            await client.mutate_priorities("p", updates=batches[i % len(batches)])
            times.append(clock() - t0)
        return statistics.median(times) * 1e6
    finally:
        await client.close()
        await asyncio.sleep(0)


def main(argv: list[str] | None = None) -> int:
    ran = alternating_main(argv, __doc__ or "", "mutate_stream", WAYS, _server, _client)
    if ran is None:
        return 0
    args, runs = ran
    keys = BLOCKING_KEYS + AIO_KEYS
    summary = {
        way: {k: median([r[k] for r in runs[way]]) for k in keys if k in runs[way][0]}
        for way in WAYS
    }

    def better(a: str, b: str, k: str) -> float:
        """How many times better way ``a`` is than way ``b`` at ``k``."""
        if k.endswith("per_s"):
            return float(summary[a][k] / summary[b][k])
        return float(summary[b][k] / summary[a][k])

    ratios = {
        "stream_vs_unary": {k: better("stream", "unary", k) for k in keys},
        "polled_vs_stream": {k: better("polled", "stream", k) for k in BLOCKING_KEYS},
        "polled_vs_unary": {k: better("polled", "unary", k) for k in BLOCKING_KEYS},
    }
    data: dict[str, Any] = {
        "benchmark": "mutate_stream",
        "machine": machine_info(),
        "config": {
            "repeats": args.repeats,
            "table": f"Prioritized(0.8), {KEYS} items",
            "alternation": "the ways run in order, then in reverse order, repetition by repetition",
        },
        "ratio_convention": "a_vs_b: how many times better way a is than way b (> 1: better)",
        "runs": runs,
        "summary": summary,
        "ratios": ratios,
    }
    path = write_json(args.out, data)
    for k in keys:
        cells = "   ".join(f"{way} {summary[way][k]:10.1f}" for way in WAYS if k in summary[way])
        print(f"{k:26s} {cells}")
    for name, values in ratios.items():
        print(f"{name:18s} " + "   ".join(f"{k} x{v:.2f}" for k, v in values.items()))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
