"""Helpers shared by the benchmark scripts: machine info, timing, JSON output."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import pathlib
import platform
import statistics
import sys
from collections.abc import Callable
from typing import Any

RESULTS_DIR = pathlib.Path(__file__).resolve().parent / "results"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(module: str) -> str | None:
    try:
        mod = __import__(module)
    except Exception:  # noqa: BLE001 - informational only
        return None
    return getattr(mod, "__version__", None)


def machine_info() -> dict[str, Any]:
    """Platform, CPU, cores, Python/numpy/Cython versions, date (UTC)."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    try:
        load = list(os.getloadavg())
    except (AttributeError, OSError):
        load = None
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "loadavg_at_start": load,
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "numpy": _version("numpy"),
        "cython": _version("Cython"),
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def implementation() -> str:
    from reverb_py import _impl

    return _impl.IMPLEMENTATION


def median(values: list[float]) -> float:
    return statistics.median(values)


def write_json(path: str | os.PathLike[str], data: dict[str, Any]) -> pathlib.Path:
    """Writes ``data`` atomically (through ``<path>.tmp``)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def worker_parser(
    doc: str, repeats: int, seconds: float, out: str | None
) -> argparse.ArgumentParser:
    """The command line of a benchmark that starts its own worker processes:
    ``--repeats``, ``--seconds``, ``--out`` and the hidden ``--worker``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--seconds", type=float, default=seconds)
    parser.add_argument("--out", default=out)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    return parser


def ab_medians(
    runs: dict[str, list[dict[str, Any]]], keys: tuple[str, ...] | list[str], a: str, b: str
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """An A/B benchmark's medians per way and key, and way ``a``'s over way ``b``'s."""
    summary = {way: {k: median([r[k] for r in rs]) for k in keys} for way, rs in runs.items()}
    return summary, {k: summary[a][k] / summary[b][k] for k in keys}


def print_ab(
    summary: dict[str, dict[str, float]],
    ratios: dict[str, float],
    ways: tuple[str, str],
    keys: list[str] | tuple[str, ...],
    value_format: str = ",.0f",
) -> None:
    """One line per key of an A/B benchmark's medians: ``key  a <value>  b <value>  x<ratio>``."""
    width = max(len(k) for k in keys)
    for k in keys:
        values = "   ".join(f"{way} {format(summary[way][k], value_format):>11}" for way in ways)
        print(f"{k:{width}s}  {values}   x{ratios[k]:.2f}")


def fmt_rate(value: float | None) -> str:
    """Ops/s, human readable: 1.23M, 456k, 789."""
    if value is None:
        return "n/a"
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e3:
        return f"{value / 1e3:.0f}k"
    return f"{value:.0f}"


def dist_versions(names: tuple[str, ...]) -> dict[str, str | None]:
    """Installed versions of the distributions ``names`` (None when not installed)."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def proc_status_kib(pid: int, field: str = "VmRSS") -> int | None:
    """``field`` (``VmRSS``, ``VmHWM``, ...) of ``/proc/<pid>/status`` in KiB, Linux only."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def proc_cpu_split(pid: int) -> tuple[float, float] | None:
    """User and system CPU time of process ``pid`` (all its threads), from
    ``/proc/<pid>/stat``; None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
        fields = stat[stat.rindex(")") + 2 :].split()  # fields from #3 (state) on
        tick = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tick, int(fields[12]) / tick
    except (OSError, ValueError, IndexError):
        return None


def proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of process ``pid`` (all its threads), from ``/proc/<pid>/stat``."""
    split = proc_cpu_split(pid)
    return None if split is None else split[0] + split[1]


def can_pin() -> bool:
    """Whether processes can be pinned to CPUs here (Linux, at least two CPUs usable)."""
    return hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2


def pin_process(pid: int, cpus: set[int]) -> None:
    """Pins every thread process ``pid`` has now to ``cpus`` (threads it starts later
    inherit the affinity of the thread that starts them). Linux only."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except ProcessLookupError:  # the thread ended meanwhile
            pass


def thread_cpu_seconds() -> dict[str, float]:
    """CPU seconds of each thread of this process, by Python thread name (threads Python
    does not know, e.g. gRPC's C threads, are summed as ``"other"``). Linux only."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    tick = os.sysconf("SC_CLK_TCK")
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        name = names.get(int(tid), "other")
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def reset_peak_rss(pid: int) -> bool:
    """Resets ``VmHWM`` of process ``pid`` to its current RSS (``/proc/<pid>/clear_refs``,
    value 5; Linux >= 4.0, own processes). False when not allowed."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def fs_type(path: str | os.PathLike[str]) -> str | None:
    """The file system type (``ext4``, ``tmpfs``, ...) holding ``path``, from
    ``/proc/mounts`` (longest matching mount point). Linux only."""
    path = os.path.realpath(path)
    best, kind = "", None
    try:
        with open("/proc/mounts", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mount = parts[1]
                inside = path == mount or path.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) > len(best):
                    best, kind = mount, parts[2]
    except OSError:
        pass
    return kind


def start_worker(module: str, role: str, env: dict[str, str]) -> tuple[Any, int]:
    """``python -m <module> --worker <role>`` with its stdin and stdout piped; returns the
    process and the port it prints first (a server worker)."""
    import subprocess

    proc = subprocess.Popen(
        [sys.executable, "-m", module, "--worker", role],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def stop_worker(proc: Any, timeout: float = 30) -> None:
    """Closes a :func:`start_worker` process' stdin (its signal to stop) and waits."""
    if proc.stdin is not None:
        proc.stdin.close()
    proc.wait(timeout=timeout)


def alternating_runs(module: str, ways: tuple[str, ...], repeats: int) -> dict[str, list[Any]]:
    """A/B(/C) runs of ``python -m <module>``: one server worker (``--worker server``,
    printing its port), and per repetition one client process (``--worker
    client:<port>:<way>,<way>...``) that runs every way and prints one JSON object keyed
    by way as its last line. The ways run in order, then in reverse order, repetition by
    repetition. Returns each way's results, one per repetition."""
    import subprocess

    runs: dict[str, list[Any]] = {way: [] for way in ways}
    server, port = start_worker(module, "server", dict(os.environ))
    try:
        for rep in range(repeats):
            order = list(ways if rep % 2 == 0 else ways[::-1])
            done = subprocess.run(
                [sys.executable, "-m", module, "--worker", f"client:{port}:{','.join(order)}"],
                capture_output=True,
                text=True,
                timeout=600,
                check=True,
            )
            result = json.loads(done.stdout.strip().splitlines()[-1])
            for way in ways:
                runs[way].append(result[way])
    finally:
        stop_worker(server)
    return runs


def alternating_main(
    argv: list[str] | None,
    doc: str,
    name: str,
    ways: tuple[str, ...],
    server: Callable[[], None],
    client: Callable[[int, list[str]], None],
) -> tuple[argparse.Namespace, dict[str, list[Any]]] | None:
    """The command line of an :func:`alternating_runs` benchmark ``benchmarks.<name>``
    (``--repeats``, ``--out``; ``--worker`` for its own processes). Returns the
    arguments and the runs, or None in a worker process (its work done)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(RESULTS_DIR / f"{name}.json"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker == "server":
        server()
        return None
    if args.worker:
        _, port, order = args.worker.split(":")
        client(int(port), order.split(","))
        return None
    return args, alternating_runs(f"benchmarks.{name}", ways, args.repeats)
