"""Scale-out: aggregate inserts and samples with 1, 2 and 3 servers behind one target.

Run from the project root (in the reverb_py environment)::

    python -m benchmarks.scaling [--quick] [--repeats 2] [--out benchmarks/results/scaling.json]

Each server is the daemon (``python -m reverb_py.server``) in its own process, with one
table (Uniform sampler, Fifo remover, ``max_size`` 1,000,000, ``MinSize(1)``). The
clients use the one target ``ipv4:127.0.0.1:P1,127.0.0.1:P2,...``: gRPC's round robin
spreads their streams.

* **inserts**: ``--writer-procs`` processes, each with ``--writers`` TrajectoryWriters
  (blocking client; each new writer stream goes to the next server) writing the 44-byte
  small step, one length-1 item per step, ``flush(block_until_num_items=16)`` after
  every item, for a fixed time; items/s: the items the servers counted (``server_info``
  before and after) over the slowest process's time to its last confirmation; and the
  server processes' CPU seconds (``/proc``) per 10,000 items.
* **samples**: ``--sampler-procs`` processes, each a ``reverb_py.data.TrajectoryIterator``
  (``batch_size=256``, ``max_samples_per_stream=1024``: streams re-open and move to the
  next server) over the filled tables, for a fixed time; samples/s delivered.

The repetitions alternate the order of the server counts (1, 2, 3, then 3, 2, 1, ...);
medians are reported, with each count's ratio to one server. The whole run shares the
machine's cores: servers and clients compete for them, so the numbers say what one
machine gives, and the per-server CPU cost says what more machines would.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks import _common
from benchmarks._workloads import small_step

TABLE = "scaling"
ROOT = pathlib.Path(__file__).resolve().parents[1]


def _config(directory: str, index: int) -> str:
    path = os.path.join(directory, f"server{index}.toml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(
            'port = 0\nhost = "127.0.0.1"\n'
            f'[[tables]]\nname = "{TABLE}"\nmax_size = 1000000\n'
            'sampler = {kind = "uniform"}\nremover = {kind = "fifo"}\n'
            'rate_limiter = {kind = "min_size", min_size_to_sample = 1}\n'
        )
    return path


class Daemons:
    """``count`` daemons on loopback, each in its own process; stopped on exit."""

    def __init__(self, count: int, directory: str) -> None:
        self.processes: list[subprocess.Popen[str]] = []
        self.addresses: list[str] = []
        try:
            for index in range(count):
                process = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "reverb_py.server",
                        "--config",
                        _config(directory, index),
                    ],
                    cwd=ROOT,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                self.processes.append(process)
                self.addresses.append(_read_address(process))
        except BaseException:
            self.stop()
            raise

    @property
    def target(self) -> str:
        return "ipv4:" + ",".join(self.addresses)

    def cpu_seconds(self) -> list[float]:
        return [_common.proc_cpu_seconds(p.pid) or 0.0 for p in self.processes]

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()

    def __enter__(self) -> Daemons:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _read_address(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        match = re.search(r"serving on (\S+) ", line)
        if match:
            # Nothing else is read from the pipe: the daemon logs only at start and stop.
            return match.group(1)
    raise RuntimeError("the daemon did not start:\n" + "".join(lines))


def _sizes(target: str) -> list[int]:
    import reverb_py

    infos = reverb_py.Client(target).server_info_by_server(timeout=30)
    return [info[TABLE].current_size for info in infos.values()]


def _writer_proc(target: str, writers: int, seconds: float, start: Any, results: Any) -> None:
    import reverb_py

    client = reverb_py.Client(target)
    step = small_step()
    opened = [client.trajectory_writer(num_keep_alive_refs=1) for _ in range(writers)]
    start.wait()
    began = time.monotonic()
    deadline = began + seconds
    while time.monotonic() < deadline:
        for writer in opened:
            writer.append(step)
            writer.create_item(TABLE, 1.0, {k: writer.history[k][-1] for k in step})
            writer.flush(block_until_num_items=16)
    for writer in opened:
        writer.flush()
    results.put(time.monotonic() - began)
    for writer in opened:
        writer.close()


def _sampler_proc(target: str, seconds: float, start: Any, results: Any) -> None:
    import numpy as np

    import reverb_py

    step = small_step()
    iterator = reverb_py.data.TrajectoryIterator(
        target,
        TABLE,
        {k: np.asarray(v).dtype for k, v in step.items()},
        {k: np.asarray(v).shape for k, v in step.items()},
        max_in_flight_samples_per_worker=512,
        max_samples_per_stream=1024,
        batch_size=256,
    )
    next(iterator)  # Streams open before the clock starts.
    start.wait()
    deadline = time.monotonic() + seconds
    samples = 0
    while time.monotonic() < deadline:
        next(iterator)
        samples += 256
    iterator.close()
    results.put(samples)


def measure(count: int, args: argparse.Namespace, directory: str) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    with Daemons(count, directory) as daemons:
        target = daemons.target
        start = context.Event()
        results = context.Queue()
        procs = [
            context.Process(
                target=_writer_proc, args=(target, args.writers, args.seconds, start, results)
            )
            for _ in range(args.writer_procs)
        ]
        for proc in procs:
            proc.start()
        before = _sizes(target)
        cpu_before = daemons.cpu_seconds()
        start.set()
        # The slowest process's time from the start to its last item confirmed.
        elapsed = max(results.get(timeout=args.seconds + 120) for _ in procs)
        inserted = [a - b for a, b in zip(_sizes(target), before)]
        cpu = [a - b for a, b in zip(daemons.cpu_seconds(), cpu_before)]
        for proc in procs:
            proc.join()

        start = context.Event()
        procs = [
            context.Process(target=_sampler_proc, args=(target, args.seconds, start, results))
            for _ in range(args.sampler_procs)
        ]
        for proc in procs:
            proc.start()
        # Each sampler took its first batch before it waits: every stream is open.
        sample_began = time.monotonic()
        start.set()
        sampled = [results.get(timeout=args.seconds + 120) for _ in procs]
        for proc in procs:
            proc.join()
        sample_elapsed = time.monotonic() - sample_began
    total = sum(inserted)
    return {
        "servers": count,
        "inserts_per_s": total / elapsed,
        "items_per_server": inserted,
        "server_cpu_s_per_10k_items": [
            c / n * 10_000 if n else None for c, n in zip(cpu, inserted)
        ],
        "server_cpu_s_per_10k_items_all": sum(cpu) / total * 10_000 if total else None,
        "samples_per_s": sum(sampled) / sample_elapsed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--writer-procs", type=int, default=2)
    parser.add_argument("--writers", type=int, default=3)
    parser.add_argument("--sampler-procs", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.seconds is None:
        args.seconds = 1.0 if args.quick else 6.0
    repeats = 1 if args.quick else args.repeats
    counts = [1, 2, 3]
    runs: dict[int, list[dict[str, Any]]] = {count: [] for count in counts}
    with tempfile.TemporaryDirectory() as directory:
        for rep in range(repeats):
            for count in counts if rep % 2 == 0 else counts[::-1]:
                result = measure(count, args, directory)
                runs[count].append(result)
                print(
                    f"rep {rep + 1} servers={count}: inserts {result['inserts_per_s']:,.0f}/s "
                    f"{result['items_per_server']}, samples {result['samples_per_s']:,.0f}/s, "
                    f"server CPU {result['server_cpu_s_per_10k_items_all']:.2f} s/10k items",
                    flush=True,
                )
    summary = {}
    for count in counts:
        rows = runs[count]
        summary[str(count)] = {
            "inserts_per_s": _common.median([r["inserts_per_s"] for r in rows]),
            "samples_per_s": _common.median([r["samples_per_s"] for r in rows]),
            "server_cpu_s_per_10k_items": _common.median(
                [r["server_cpu_s_per_10k_items_all"] for r in rows]
            ),
        }
    one = summary["1"]
    for count in counts:
        row = summary[str(count)]
        row["inserts_vs_1"] = row["inserts_per_s"] / one["inserts_per_s"]
        row["samples_vs_1"] = row["samples_per_s"] / one["samples_per_s"]
    data = {
        "machine": _common.machine_info(),
        "implementation": _common.implementation(),
        "config": {
            "seconds": args.seconds,
            "repeats": repeats,
            "writer_procs": args.writer_procs,
            "writers_per_proc": args.writers,
            "sampler_procs": args.sampler_procs,
            "step": "small (44 bytes)",
            "flush": "block_until_num_items=16 after every item",
            "batch_size": 256,
            "max_samples_per_stream": 1024,
        },
        "summary": summary,
        "runs": {str(count): rows for count, rows in runs.items()},
    }
    out = args.out or (None if args.quick else str(_common.RESULTS_DIR / "scaling.json"))
    if out:
        print("wrote", _common.write_json(out, data))
    for count in counts:
        row = summary[str(count)]
        print(
            f"servers={count}: inserts {row['inserts_per_s']:,.0f}/s "
            f"({row['inserts_vs_1']:.2f}x), samples {row['samples_per_s']:,.0f}/s "
            f"({row['samples_vs_1']:.2f}x), server CPU {row['server_cpu_s_per_10k_items']:.2f} "
            "s per 10k items"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
