"""Round trips with reverb_py's gRPC core settings against gRPC's defaults.

Run from the project root::

    python -m benchmarks.grpc_settings [--repeats 4] [--out benchmarks/results/grpc_settings.json]

``import reverb_py`` imports gRPC with ``GRPC_EXPERIMENTS`` set to
``reverb_py._grpc_settings.EXPERIMENTS`` (the core's EventEngine off for client channels
and server listeners); ``GRPC_EXPERIMENTS=""`` in the environment keeps gRPC's defaults.
Each repetition runs both settings, alternating which goes first; each side is a server
process and a client process with the same setting (one table, ``MinSize(1)``):

* ``mutate_256``: ``client.mutate_priorities`` of 256 keys the table does not hold (the
  call's round trip without table work), median of 1,000 calls;
* ``server_info``: ``client.server_info()``, median of 500 calls;
* ``insert_1``: a ``TrajectoryWriter`` appending a small step, creating a length-1 item
  and ``flush()`` (waiting for its confirmation) each time, median of 1,000 items;
* ``insert_flush16_items_per_s``: the ``benchmarks.compare`` writer (``flush(16)`` after
  each item) for 3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from benchmarks._common import (
    RESULTS_DIR,
    machine_info,
    median,
    start_worker,
    stop_worker,
    write_json,
)

SETTINGS = ("reverb_py", "grpc_defaults")


def _server() -> None:
    import reverb_py as reverb

    selectors, limiters = reverb.selectors, reverb.rate_limiters
    table = reverb.Table("t", selectors.Uniform(), selectors.Fifo(), 10**6, limiters.MinSize(1))
    server = reverb.Server([table], port=0)
    print(server.port, flush=True)
    sys.stdin.read()
    server.stop()


def _client(port: int) -> None:
    import reverb_py as reverb
    from benchmarks import _workloads as wl
    from reverb_py import _grpc_settings

    client = reverb.Client(f"localhost:{port}")
    clock = time.perf_counter

    def timed(fn: Any, n: int, warmup: int = 100) -> float:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(n):
            t0 = clock()
            fn()
            times.append(clock() - t0)
        return statistics.median(times) * 1e6

    unknown = {10**12 + i: 1.0 for i in range(256)}
    out: dict[str, Any] = {"experiments_applied": _grpc_settings.experiments_applied()}
    out["mutate_256_us"] = timed(lambda: client.mutate_priorities("t", updates=unknown), 1000)
    out["server_info_us"] = timed(client.server_info, 500)
    step = wl.small_step()
    with client.trajectory_writer(num_keep_alive_refs=wl.SEQ_LEN) as writer:

        def insert() -> None:
            writer.append(step)
            writer.create_item("t", 1.0, {k: writer.history[k][-1:] for k in wl.FIELDS})
            writer.flush()

        out["insert_1_us"] = timed(insert, 1000)

    class _NoServer:
        def cpu_seconds(self) -> None:
            return None

    rep = wl.writer_rep(client, _NoServer(), "t", [step], 3.0)
    out["insert_flush16_items_per_s"] = rep["count"] / rep["seconds"]
    print(json.dumps(out), flush=True)


def _run(setting: str) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("GRPC_EXPERIMENTS", None)
    if setting == "grpc_defaults":
        env["GRPC_EXPERIMENTS"] = ""
    server, port = start_worker("benchmarks.grpc_settings", "server", env)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.grpc_settings", "--worker", f"client:{port}"],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=True,
        )
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        if result["experiments_applied"] != (setting == "reverb_py"):
            raise RuntimeError(f"{setting}: experiments_applied={result['experiments_applied']}")
        return result
    finally:
        stop_worker(server)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--out", default=str(RESULTS_DIR / "grpc_settings.json"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker == "server":
        _server()
        return 0
    if args.worker:
        _client(int(args.worker.split(":")[1]))
        return 0
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SETTINGS}
    for rep in range(args.repeats):
        for setting in SETTINGS if rep % 2 == 0 else SETTINGS[::-1]:
            runs[setting].append(_run(setting))
    keys = ("mutate_256_us", "server_info_us", "insert_1_us", "insert_flush16_items_per_s")
    summary = {s: {k: median([r[k] for r in runs[s]]) for k in keys} for s in SETTINGS}
    ratios = {
        k: (
            summary["reverb_py"][k] / summary["grpc_defaults"][k]
            if k.endswith("per_s")
            else summary["grpc_defaults"][k] / summary["reverb_py"][k]
        )
        for k in keys
    }
    data = {
        "benchmark": "grpc_settings",
        "machine": machine_info(),
        "config": {"repeats": args.repeats, "alternation": "settings alternate first/second"},
        "ratio_convention": "how many times better reverb_py's settings are (> 1: better)",
        "summary": summary,
        "ratios": ratios,
        "runs": runs,
    }
    path = write_json(args.out, data)
    for k in keys:
        print(
            f"{k:<28} reverb_py {summary['reverb_py'][k]:>10,.0f}   gRPC defaults "
            f"{summary['grpc_defaults'][k]:>10,.0f}   x{ratios[k]:.2f}"
        )
    print(f"# wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
