"""Prometheus metrics of a server, served over HTTP at ``/metrics`` (``metrics_port``).

Each server has its own ``prometheus_client.CollectorRegistry`` (never the global one,
so several servers in one process do not clash) holding one collector. Most values are
read when Prometheus scrapes: the tables' sizes and counters, the servicer's open
streams; the collector reads them on the server's event loop (which owns the tables),
so a scrape sees each table in one consistent state. Only what cannot be read later is
counted as it happens, each in a few integer operations: the rate-limiter waits (on the
waiting path only), the age of each sampled item, failed calls by status and the
checkpoints written.

Names follow Prometheus' conventions: ``reverb_py_`` prefix, base units (seconds,
bytes), ``_total`` for counters, a ``table`` label for per-table series.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import os
import socket
import socketserver
import threading
import time
import wsgiref.simple_server
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, exposition
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from reverb_py.server import _status_page

if TYPE_CHECKING:
    import grpc

    from reverb_py.server._service import ReverbServicer
    from reverb_py.table import SampledItem, Table

__all__ = ["Histogram", "MetricsHTTPServer", "ServerMetrics"]

#: Bucket bounds (seconds) of the rate-limiter waits.
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0)
#: Bucket bounds (seconds) of the age of sampled items.
AGE_BUCKETS = (1.0, 10.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0)
#: Bucket bounds (seconds) of checkpoint saves.
CHECKPOINT_BUCKETS = (0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)


class Histogram:
    """Counts of observations per bucket and their sum, in integers of ``unit`` seconds.

    PERF(histogram): an observation is one bisect and two additions, without the lock
    and per-bucket value objects of ``prometheus_client.Histogram``; it is only ever
    touched on the server's loop.
    """

    __slots__ = ("bounds", "counts", "labels", "sum", "unit")

    def __init__(self, bounds: Sequence[float], unit: float = 1.0) -> None:
        self.unit = unit
        self.labels: list[str] = [floatToGoString(bound) for bound in bounds]  # type: ignore[no-untyped-call]
        self.bounds = [round(bound / unit) for bound in bounds]
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound (+Inf)
        self.sum = 0

    def observe(self, value: int) -> None:
        """Counts ``value`` (in units) into the first bucket whose bound is >= it."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def buckets(self) -> list[tuple[str, int]]:
        """Cumulative ``(le, count)`` pairs as Prometheus expects, ``+Inf`` last."""
        pairs = []
        total = 0
        for label, count in zip(self.labels, self.counts):
            total += count
            pairs.append((label, total))
        pairs.append(("+Inf", total + self.counts[-1]))
        return pairs

    def seconds(self) -> float:
        return float(self.sum * self.unit)


class _TableObserver:
    """Takes a table's waits and samples (see :class:`reverb_py.table.TableObserver`)."""

    def __init__(self) -> None:
        self.insert_waits: dict[str, Histogram] = {}
        self.sample_waits: dict[str, Histogram] = {}
        self.ages: dict[str, Histogram] = {}
        # Inserts, samples and deletes counted before the table's resets.
        self.before_resets: dict[str, tuple[int, int, int]] = {}

    def add(self, name: str) -> None:
        self.insert_waits[name] = Histogram(WAIT_BUCKETS, 1e-6)
        self.sample_waits[name] = Histogram(WAIT_BUCKETS, 1e-6)
        self.ages[name] = Histogram(AGE_BUCKETS, 1e-9)
        self.before_resets[name] = (0, 0, 0)

    def counters(self, table: Table) -> tuple[int, int, int]:
        """The table's inserts, samples and deletes since the metrics started observing
        it (plus what it had then), across resets: Prometheus counters never go down."""
        inserts, samples, deletes = table.rate_limiter_counters()
        before = self.before_resets[table.name]
        return before[0] + inserts, before[1] + samples, before[2] + deletes

    def resetting(self, table: Table) -> None:
        self.before_resets[table.name] = self.counters(table)

    def waited(self, table: Table, insert: bool, seconds: float) -> None:
        waits = self.insert_waits if insert else self.sample_waits
        waits[table.name].observe(round(seconds * 1e6))

    def sampled(self, table: Table, records: list[SampledItem], start: int) -> None:
        histogram = self.ages[table.name]
        counts = histogram.counts
        bounds = histogram.bounds
        find = bisect.bisect_left
        now = time.time_ns()
        total = 0
        for record in itertools.islice(records, start, None):
            age = now - record.item.inserted_at
            counts[find(bounds, age)] += 1
            total += age
        histogram.sum += total


class ServerMetrics:
    """The metrics of one server: its registry and what it counts as it goes.

    Args:
      tables: The server's tables (their chunk bytes are tracked from now on).
      run_on_loop: Runs a function on the server's loop and returns its result (a
        scrape reads the tables there).
    """

    def __init__(self, tables: Sequence[Table], run_on_loop: Callable[[Any], Any]) -> None:
        self._tables = list(tables)
        self._run_on_loop = run_on_loop
        self._servicer: ReverbServicer | None = None
        self.errors: collections.Counter[str] = collections.Counter()
        self.checkpoint_durations = Histogram(CHECKPOINT_BUCKETS, 1e-6)
        self.checkpoint_bytes = 0
        self.checkpoint_items = 0
        self._observer = _TableObserver()
        for table in self._tables:
            self._observer.add(table.name)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))

    def attach(self, servicer: ReverbServicer) -> None:
        """Starts observing the tables and the servicer (on the server's loop)."""
        self._servicer = servicer
        servicer.metrics = self
        for table in self._tables:
            table.track_chunk_bytes()
            table.set_observer(self._observer)

    def detach(self) -> None:
        """Stops observing the tables (on the server's loop)."""
        for table in self._tables:
            if table._observer is self._observer:
                table.set_observer(None)

    def call_failed(self, code: grpc.StatusCode) -> None:
        self.errors[code.name] += 1

    def checkpoint_written(self, seconds: float, size: int, items: int) -> None:
        self.checkpoint_durations.observe(round(seconds * 1e6))
        self.checkpoint_bytes = size
        self.checkpoint_items = items

    def collect(self) -> list[Metric]:
        """Every metric family, read on the server's loop."""
        families: list[Metric] = self._run_on_loop(self._families)
        return families

    def _families(self) -> list[Metric]:
        table = ("table",)
        size = GaugeMetricFamily("reverb_py_table_size", "Items in the table.", labels=table)
        max_size = GaugeMetricFamily(
            "reverb_py_table_max_size", "The most items the table holds.", labels=table
        )
        inserts = CounterMetricFamily(
            "reverb_py_table_inserts",
            "Items inserted (new keys; since start or the loaded checkpoint, across resets).",
            labels=table,
        )
        samples = CounterMetricFamily(
            "reverb_py_table_samples",
            "Samples taken (since start or the loaded checkpoint, across resets).",
            labels=table,
        )
        deletes = CounterMetricFamily(
            "reverb_py_table_deletes",
            "Items deleted for any reason (since start or the loaded checkpoint, across resets).",
            labels=table,
        )
        evictions = CounterMetricFamily(
            "reverb_py_table_evictions",
            "Items the remover evicted to make room (since the table was made).",
            labels=table,
        )
        pending = GaugeMetricFamily(
            "reverb_py_table_waiting_inserts",
            "Inserts waiting for the rate limiter now.",
            labels=table,
        )
        pending_samples = GaugeMetricFamily(
            "reverb_py_table_waiting_sample_requests",
            "Sample requests waiting for the rate limiter now.",
            labels=table,
        )
        chunk_bytes = GaugeMetricFamily(
            "reverb_py_table_chunk_bytes",
            "Bytes of the chunks the table's items reference, each chunk once.",
            labels=table,
        )
        max_bytes = GaugeMetricFamily(
            "reverb_py_table_max_chunk_bytes",
            "The most chunk bytes the table holds (tables with max_bytes only).",
            labels=table,
        )
        insert_waits = HistogramMetricFamily(
            "reverb_py_table_insert_wait_seconds",
            "How long inserts the rate limiter held waited.",
            labels=table,
        )
        sample_waits = HistogramMetricFamily(
            "reverb_py_table_sample_wait_seconds",
            "How long sample requests the rate limiter held waited.",
            labels=table,
        )
        ages = HistogramMetricFamily(
            "reverb_py_table_sampled_item_age_seconds",
            "Age of each sampled item (since its insertion) when it was sampled.",
            labels=table,
        )
        observer = self._observer
        for t in self._tables:
            name = [t.name]
            size.add_metric(name, len(t))
            max_size.add_metric(name, t.max_size)
            counted_inserts, counted_samples, counted_deletes = observer.counters(t)
            inserts.add_metric(name, counted_inserts)
            samples.add_metric(name, counted_samples)
            deletes.add_metric(name, counted_deletes)
            evictions.add_metric(name, t.num_evictions)
            pending.add_metric(name, t.num_pending_inserts)
            pending_samples.add_metric(name, t.num_pending_samples)
            chunk_bytes.add_metric(name, t.chunk_bytes)
            if t.max_bytes is not None:
                max_bytes.add_metric(name, t.max_bytes)
            for family, histograms in (
                (insert_waits, observer.insert_waits),
                (sample_waits, observer.sample_waits),
                (ages, observer.ages),
            ):
                histogram = histograms[t.name]
                family.add_metric(name, histogram.buckets(), histogram.seconds())
        families: list[Metric] = [
            size,
            max_size,
            inserts,
            samples,
            deletes,
            evictions,
            pending,
            pending_samples,
            chunk_bytes,
            max_bytes,
            insert_waits,
            sample_waits,
            ages,
        ]
        servicer = self._servicer
        if servicer is not None:
            total = GaugeMetricFamily(
                "reverb_py_chunk_bytes",
                "Bytes of every chunk the server holds (tables and insert streams), "
                "each chunk once.",
            )
            total.add_metric([], servicer.live_chunk_bytes())
            streams = GaugeMetricFamily(
                "reverb_py_open_streams", "Streams open now, by RPC.", labels=("method",)
            )
            for method, count in sorted(servicer.streams_by_method.items()):
                streams.add_metric([method], count)
            families += [total, streams]
        errors = CounterMetricFamily(
            "reverb_py_rpc_errors", "Calls that ended with an error, by status.", labels=("code",)
        )
        for code, count in sorted(self.errors.items()):
            errors.add_metric([code], count)
        durations = HistogramMetricFamily(
            "reverb_py_checkpoint_duration_seconds",
            "How long writing each checkpoint took (snapshot and files).",
        )
        histogram = self.checkpoint_durations
        durations.add_metric([], histogram.buckets(), histogram.seconds())
        checkpoint_size = GaugeMetricFamily(
            "reverb_py_checkpoint_size_bytes", "Bytes of the files of the last checkpoint written."
        )
        checkpoint_size.add_metric([], self.checkpoint_bytes)
        checkpoint_items = GaugeMetricFamily(
            "reverb_py_checkpoint_items", "Items in the last checkpoint written."
        )
        checkpoint_items.add_metric([], self.checkpoint_items)
        families += [errors, durations, checkpoint_size, checkpoint_items]
        return families


class _Collector(Collector):
    def __init__(self, metrics: ServerMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self._metrics.collect()


def directory_bytes(path: str) -> int:
    """The bytes of the files under ``path`` (a checkpoint directory)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


class _QuietHandler(wsgiref.simple_server.WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name.
        pass


class _Server(socketserver.ThreadingMixIn, wsgiref.simple_server.WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class MetricsHTTPServer:
    """``/metrics`` of a registry over HTTP, from a thread of its own, with the status
    page at ``/`` and the ``/status.json`` it reads (:mod:`._status_page`).

    Args:
      registry: What to serve.
      host: The interface to bind (as the gRPC server's; ``[::]`` and other IPv6
        addresses too).
      port: The port; 0 picks a free one (see :attr:`port`).

    Raises:
      ValueError: the port cannot be bound.
    """

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        app = exposition.make_wsgi_app(registry)

        def route(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
            path = environ.get("PATH_INFO")
            if path == "/metrics":
                return iter(app(environ, start_response))
            if path in ("/", "/index.html"):
                start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
                return iter([_status_page.PAGE])
            if path == "/status.json":
                body = _status_page.status_json(registry.collect())
                start_response(
                    "200 OK", [("Content-Type", "application/json"), ("Cache-Control", "no-store")]
                )
                return iter([body])
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return iter([b"Not found: the status page is at /, the metrics at /metrics\n"])

        address = host.strip("[]")
        server_class: type[_Server] = _Server6 if ":" in address else _Server
        try:
            self._httpd = wsgiref.simple_server.make_server(
                address, port, route, server_class=server_class, handler_class=_QuietHandler
            )
        except OSError as error:
            raise ValueError(
                f"Failed to bind the metrics server to {host}:{port}: {error.strerror or error}"
            ) from None
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="reverb_py-metrics", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stops serving and closes the socket. Idempotent."""
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join()
        self._httpd.server_close()
