"""A soak: actor processes and a learner on one server for minutes; memory must stay flat.

Run from the project root (``make soak``)::

    python -m benchmarks.soak [--seconds 180] [--actors 4] [--out benchmarks/results/soak.json]

The server is the daemon (``python -m reverb_py.server``) with one table: Uniform
sampler, Fifo remover, ``max_size`` 20,000 (so it evicts all the time) and
``SampleToInsertRatio(samples_per_insert=4, min_size_to_sample=2000, error_buffer=4000)``.
Each actor is a process writing length-3 sequence items of 1 KiB steps with a
``TrajectoryWriter``; the learner (a thread here) samples batches of 64 and updates the
priorities of half of them. Every 2 s the server's ``VmRSS`` is read. At the end the
result says whether the run passed: no error in any actor or the learner, and memory flat
after warm-up (the median RSS of the last third of the run within 10% and 32 MiB of the
median of the middle third). Exit status 1 if it did not.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from typing import Any

from benchmarks._common import RESULTS_DIR, machine_info, proc_status_kib, write_json
from benchmarks.compare import PROJECT_ROOT

ACTOR = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import reverb_py

    client = reverb_py.Client(sys.argv[1])
    deadline = time.monotonic() + float(sys.argv[2])
    rng = np.random.default_rng(int(sys.argv[3]))
    items = 0
    with client.trajectory_writer(3) as writer:
        while time.monotonic() < deadline:
            writer.append({"obs": rng.integers(0, 255, 1024, dtype=np.uint8),
                           "reward": np.float32(1.0)})
            if writer.episode_steps >= 3:
                writer.create_item("replay", 1.0, {
                    "obs": writer.history["obs"][-3:],
                    "reward": writer.history["reward"][-3:],
                })
                items += 1
                writer.flush(block_until_num_items=32, timeout_ms=30_000)
            if writer.episode_steps >= 100:
                writer.end_episode(timeout_ms=30_000)
        writer.flush(timeout_ms=30_000)
    print("items", items, flush=True)
    """
)

CONFIG = """\
port = 0
[[tables]]
name = "replay"
max_size = 20000
sampler = {kind = "uniform"}
remover = {kind = "fifo"}
[tables.rate_limiter]
kind = "sample_to_insert_ratio"
samples_per_insert = 4.0
min_size_to_sample = 2000
error_buffer = 4000.0
"""


def _start_server(config_path: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "reverb_py.server", "--config", config_path],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        match = re.search(r"serving on (\S+) \(implementation", line)
        if match:
            threading.Thread(target=process.stdout.read, daemon=True).start()
            return process, match.group(1)
    raise RuntimeError("the server did not start")


class _Learner(threading.Thread):
    def __init__(self, address: str) -> None:
        super().__init__(daemon=True)
        self.address = address
        # Set once every actor is done: until then the learner keeps the limiter open.
        self.stop = threading.Event()
        self.samples = 0
        self.updates = 0
        self.errors: list[str] = []

    def run(self) -> None:
        import reverb_py

        client = reverb_py.Client(self.address)
        while not self.stop.is_set():
            try:
                batch = list(
                    client.sample("replay", 64, emit_timesteps=False, rate_limiter_timeout_ms=1000)
                )
            except reverb_py.errors.DeadlineExceededError:
                continue  # the rate limiter held the learner back; try again
            except Exception as error:  # noqa: BLE001 - counted as a failure.
                self.errors.append(repr(error))
                return
            self.samples += len(batch)
            updates = {s.info.key: 0.5 for s in batch[::2]}
            try:
                client.mutate_priorities("replay", updates=updates)
            except Exception as error:  # noqa: BLE001
                self.errors.append(repr(error))
                return
            self.updates += len(updates)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--out", default=str(RESULTS_DIR / "soak.json"))
    args = parser.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="soak-")
    config_path = os.path.join(workdir, "server.toml")
    with open(config_path, "w") as file:
        file.write(CONFIG)
    server, address = _start_server(config_path)
    deadline = time.monotonic() + args.seconds
    actors = [
        subprocess.Popen(
            [sys.executable, "-c", ACTOR, address, str(args.seconds), str(seed)],
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in range(args.actors)
    ]
    learner = _Learner(address)
    learner.start()
    curve: list[tuple[float, float]] = []
    start = time.monotonic()
    try:
        while time.monotonic() < deadline:
            kib = proc_status_kib(server.pid, "VmRSS")
            curve.append((round(time.monotonic() - start, 1), round((kib or 0) / 1024, 1)))
            time.sleep(2.0)
        actor_results: list[dict[str, Any]] = []
        for actor in actors:
            out, err = actor.communicate(timeout=120)
            match = re.search(r"items (\d+)", out)
            actor_results.append(
                {
                    "returncode": actor.returncode,
                    "items": int(match.group(1)) if match else None,
                    "stderr_tail": err[-500:] if actor.returncode else "",
                }
            )
    finally:
        learner.stop.set()
        learner.join(60)
        for actor in actors:
            if actor.poll() is None:
                actor.kill()
        server.terminate()
        server.wait(30)
    n = len(curve)
    middle = [rss for _, rss in curve[n // 3 : 2 * n // 3]]
    last = [rss for _, rss in curve[2 * n // 3 :]]
    middle_median = statistics.median(middle) if middle else 0.0
    last_median = statistics.median(last) if last else 0.0
    growth = last_median - middle_median
    flat = bool(middle) and growth <= max(0.10 * middle_median, 32.0)
    errors = [r["stderr_tail"] for r in actor_results if r["returncode"]] + learner.errors
    result = {
        "machine": machine_info(),
        "seconds": args.seconds,
        "actors": args.actors,
        "actor_items": [r["items"] for r in actor_results],
        "items_per_s": round(sum(r["items"] or 0 for r in actor_results) / args.seconds, 1),
        "learner_samples": learner.samples,
        "learner_priority_updates": learner.updates,
        "errors": errors,
        "rss_curve_mib": curve,
        "rss_middle_third_median_mib": middle_median,
        "rss_last_third_median_mib": last_median,
        "rss_growth_after_warmup_mib": round(growth, 1),
        "passed": flat and not errors,
    }
    write_json(args.out, result)
    print(
        f"soak: {result['items_per_s']} items/s, {learner.samples} samples, "
        f"errors {len(errors)}, RSS {middle_median:.0f} -> {last_median:.0f} MiB: "
        f"{'passed' if result['passed'] else 'FAILED'} ({args.out})"
    )
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
