"""Misbehaving clients against reverb_py and dm-reverb servers: server memory and latency.

Run from the project root (in the reverb_py environment)::

    python -m benchmarks.hostile [--quick] [--out benchmarks/results/hostile.json]

Each server is a worker process of its system's interpreter (as in ``benchmarks.compare``;
dm-reverb's from ``REVERB_PY_DM_REVERB_PYTHON``), holding one Uniform table filled with
``--items`` items of 1 MiB (random bytes, so compression does not shrink them). This
process plays the clients, with raw gRPC calls at Reverb's method paths, so both servers
see the same bytes. Scenarios, each on both systems, alternating which goes first:

1. ``stalled``: 10 ``SampleStream`` calls ask for 2^31-1 samples and never read; server
   ``VmRSS`` before and after ``--seconds``;
2. ``steady``: one call asks for 2^31-1 samples and reads as fast as it can; RSS sampled
   every 0.5 s, samples and bytes read;
3. ``cancel``: the steady reader cancels; server CPU seconds used in the next 2 s;
4. ``client_sample``: reverb_py's blocking ``Client.sample(num_samples=10**6)``, read for
   ``--seconds``; samples read, server RSS growth and this process's RSS growth;
5. ``writers``: 50 threads, each with its own ``TrajectoryWriter`` of small steps on a
   second table, for ``--seconds``; items confirmed;
6. ``probe``: during 1, 2 and 5, another client calls ``ServerInfo`` every 100 ms (5 s
   deadline); latencies (max, p99) and timeouts.

For reverb_py, ``loop_max_lag_s`` is the longest a task of its server's event loop that
asked to wake every millisecond waited beyond that: one loop iteration, i.e. every
callback that was ready at once, plus any time the process got no CPU.

Results: JSON with the machine, versions, and per system and scenario the figures.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import threading
import time
from typing import Any

import grpc
import numpy as np

from benchmarks._common import (
    RESULTS_DIR,
    machine_info,
    proc_cpu_seconds,
    proc_status_kib,
    write_json,
)
from benchmarks.compare import PROJECT_ROOT, Worker

PATH = "/deepmind.reverb.ReverbService/"
MIB = 1024 * 1024
FOREVER = 2**31 - 1


def _identity(value: bytes) -> bytes:
    return value


def _sample_request(table: str, num_samples: int) -> bytes:
    from reverb_py._proto import reverb_service_pb2 as pb

    return pb.SampleStreamRequest(table=table, num_samples=num_samples).SerializeToString()


def _fill(address: str, table: str, items: int) -> None:
    import reverb_py

    client = reverb_py.Client(address)
    rng = np.random.default_rng(0)
    with client.trajectory_writer(1) as writer:
        for _ in range(items):
            writer.append({"blob": rng.integers(0, 255, size=MIB, dtype=np.uint8)})
            writer.create_item(table, 1.0, {"blob": writer.history["blob"][-1:]})
            writer.flush(block_until_num_items=4)
        writer.flush()


class _Prober(threading.Thread):
    """Calls ServerInfo every 100 ms with a 5 s deadline, recording each latency."""

    def __init__(self, address: str) -> None:
        super().__init__(daemon=True)
        self._channel = grpc.insecure_channel(address)
        self._call = self._channel.unary_unary(
            PATH + "ServerInfo", request_serializer=_identity, response_deserializer=_identity
        )
        self.latencies: list[float] = []
        self.timeouts = 0
        self._finish = threading.Event()

    def run(self) -> None:
        while not self._finish.wait(0.1):
            start = time.perf_counter()
            try:
                self._call(b"", timeout=5)
                self.latencies.append(time.perf_counter() - start)
            except grpc.RpcError:
                self.timeouts += 1

    def finish(self) -> dict[str, Any]:
        self._finish.set()
        self.join(10)
        self._channel.close()
        lat = sorted(self.latencies)
        return {
            "probes": len(lat) + self.timeouts,
            "timeouts": self.timeouts,
            "max_s": lat[-1] if lat else None,
            "p99_s": lat[int(0.99 * (len(lat) - 1))] if lat else None,
            "median_s": lat[len(lat) // 2] if lat else None,
        }


def _rss_mib(pid: int) -> float:
    kib = proc_status_kib(pid, "VmRSS")
    return (kib or 0) / 1024


def stalled(server: Worker, table: str, seconds: float) -> dict[str, Any]:
    prober = _Prober(server.address)
    before = _rss_mib(server.pid)
    prober.start()
    channel = grpc.insecure_channel(server.address)
    stream = channel.stream_stream(
        PATH + "SampleStream", request_serializer=_identity, response_deserializer=_identity
    )
    calls = [stream(iter([_sample_request(table, FOREVER)])) for _ in range(10)]
    curve = []
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        curve.append((round(time.monotonic() - start, 2), round(_rss_mib(server.pid), 1)))
        time.sleep(0.5)
    after = _rss_mib(server.pid)
    for call in calls:
        call.cancel()
    channel.close()
    return {
        "rss_before_mib": round(before, 1),
        "rss_after_mib": round(after, 1),
        "rss_growth_mib": round(after - before, 1),
        "rss_curve": curve,
        "probe": prober.finish(),
    }


def steady(server: Worker, table: str, seconds: float) -> dict[str, Any]:
    prober = _Prober(server.address)
    before = _rss_mib(server.pid)
    prober.start()
    channel = grpc.insecure_channel(server.address)
    stream = channel.stream_stream(
        PATH + "SampleStream", request_serializer=_identity, response_deserializer=_identity
    )
    call = stream(iter([_sample_request(table, FOREVER)]))
    received = 0
    responses = 0
    curve = []
    peak = before
    start = time.monotonic()
    next_sample = start
    gaps = []
    last = start
    for response in call:
        now = time.monotonic()
        gaps.append(now - last)
        last = now
        received += len(response)
        responses += 1
        if now >= next_sample:
            rss = _rss_mib(server.pid)
            peak = max(peak, rss)
            curve.append((round(now - start, 2), round(rss, 1)))
            next_sample = now + 0.5
        if now - start >= seconds:
            break
    elapsed = time.monotonic() - start
    cpu_before = proc_cpu_seconds(server.pid) or 0.0
    call.cancel()
    time.sleep(2.0)
    cpu_after = proc_cpu_seconds(server.pid) or 0.0
    channel.close()
    return {
        "seconds": round(elapsed, 2),
        "received_mib": round(received / MIB, 1),
        "mib_per_s": round(received / MIB / elapsed, 1),
        "approx_samples": int(received / MIB),
        "responses": responses,
        "max_gap_s": round(max(gaps), 3) if gaps else None,
        "rss_before_mib": round(before, 1),
        "rss_peak_mib": round(peak, 1),
        "rss_growth_mib": round(peak - before, 1),
        "rss_curve": curve,
        "cpu_s_in_2s_after_cancel": round(cpu_after - cpu_before, 3),
        "probe": prober.finish(),
    }


def client_sample(server: Worker, table: str, seconds: float) -> dict[str, Any]:
    import reverb_py

    before = _rss_mib(server.pid)
    own_before = _rss_mib(os.getpid())
    client = reverb_py.Client(server.address)
    samples = client.sample(table, num_samples=10**6, emit_timesteps=False)
    count = 0
    peak = own_peak = 0.0
    start = time.monotonic()
    next_sample = start
    for _ in samples:
        count += 1
        now = time.monotonic()
        if now >= next_sample:
            peak = max(peak, _rss_mib(server.pid))
            own_peak = max(own_peak, _rss_mib(os.getpid()))
            next_sample = now + 0.5
        if now - start >= seconds:
            break
    elapsed = time.monotonic() - start
    samples.close()  # type: ignore[attr-defined]
    return {
        "seconds": round(elapsed, 2),
        "samples": count,
        "samples_per_s": round(count / elapsed, 1),
        "server_rss_growth_mib": round(peak - before, 1),
        "client_rss_growth_mib": round(own_peak - own_before, 1),
    }


def writers(server: Worker, table: str, seconds: float) -> dict[str, Any]:
    import reverb_py

    del table
    prober = _Prober(server.address)
    prober.start()
    client = reverb_py.Client(server.address)
    deadline = time.monotonic() + seconds
    counts = [0] * 50
    failures: list[str] = []

    def write(index: int) -> None:
        try:
            with client.trajectory_writer(1) as writer:
                step = {"obs": np.zeros(8, np.float32)}
                while time.monotonic() < deadline:
                    writer.append(step)
                    writer.create_item("small", 1.0, {"obs": writer.history["obs"][-1:]})
                    writer.flush(block_until_num_items=16)
                    counts[index] += 1
                writer.flush()
        except Exception as error:  # noqa: BLE001 - reported in the results.
            failures.append(repr(error))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 60)
    return {
        "threads": 50,
        "items": sum(counts),
        "items_per_s": round(sum(counts) / seconds, 1),
        "failures": failures[:5],
        "probe": prober.finish(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer items, shorter scenarios")
    parser.add_argument("--items", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument(
        "--only", default=None, help="comma-separated scenario names (default: all)"
    )
    parser.add_argument(
        "--systems", default="reverb_py,dm_reverb", help="comma-separated systems (default: both)"
    )
    args = parser.parse_args(argv)
    items = args.items or (100 if args.quick else 300)
    seconds = args.seconds or (5.0 if args.quick else 12.0)
    out = args.out or str(RESULTS_DIR / ("hostile_quick.json" if args.quick else "hostile.json"))
    dm_python = os.environ.get(
        "REVERB_PY_DM_REVERB_PYTHON", str(PROJECT_ROOT / ".venv-reverb" / "bin" / "python")
    )
    pythons = {"reverb_py": sys.executable, "dm_reverb": dm_python}
    systems = {name: pythons[name] for name in args.systems.split(",")}
    tables = [
        {"name": "big", "sampler": "uniform", "max_size": items, "limiter": ["min_size", 1]},
        {"name": "small", "sampler": "uniform", "max_size": 10_000, "limiter": ["min_size", 1]},
    ]
    log_dir = tempfile.mkdtemp(prefix="hostile-")
    servers: dict[str, Worker] = {}
    results: dict[str, Any] = {
        "machine": machine_info(),
        "items": items,
        "item_bytes": MIB,
        "seconds": seconds,
        "systems": {},
    }
    try:
        for system, python in systems.items():
            servers[system] = Worker(
                system, python, "server", {"tables": tables, "loop_lag": True}, log_dir, "s"
            )
        for system, server in servers.items():
            hello = server.wait_ready()
            results["systems"][system] = {"versions": hello["versions"], "scenarios": {}}
            print(f"{system}: filling {items} items of 1 MiB", flush=True)
            _fill(server.address, "big", items)
        order = list(servers)
        scenarios = (
            ("stalled", stalled),
            ("steady", steady),
            ("client_sample", client_sample),
            ("writers", writers),
        )
        if args.only:
            wanted = args.only.split(",")
            scenarios = tuple(entry for entry in scenarios if entry[0] in wanted)
        for index, (name, scenario) in enumerate(scenarios):
            for system in order if index % 2 == 0 else reversed(order):
                print(f"{system}: {name}", flush=True)
                servers[system].send("loop_lag")
                servers[system].result()
                figures = scenario(servers[system], "big", seconds)
                servers[system].send("loop_lag")
                figures["loop_max_lag_s"] = servers[system].result()
                results["systems"][system]["scenarios"][name] = figures
                summary = {k: v for k, v in figures.items() if k != "rss_curve"}
                print(f"  {summary}", flush=True)
    finally:
        for server in servers.values():
            server.stop()
    path = write_json(out, results)
    print(f"wrote {pathlib.Path(path)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
