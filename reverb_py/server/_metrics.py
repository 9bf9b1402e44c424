"""Prometheus metrics of a server, served over HTTP at ``/metrics`` (``metrics_port``).

Each server has its own ``prometheus_client.CollectorRegistry`` (never the global one,
so several servers in one process do not clash) holding its collector and
prometheus-client's process and platform collectors (``process_*``, ``python_info``).
Most values are read when Prometheus scrapes: the tables' sizes, counters and rate
limiter state, the servicer's open streams; the collector reads them on the server's
event loop (which owns the tables), so a scrape sees each table in one consistent state.
Only what cannot be read later is counted as it happens, each in a few integer
operations: the rate-limiter waits (on the waiting path only), the age of each sampled
item, each call's method, duration and status, and the checkpoints written or failed.

Names follow Prometheus' conventions: ``reverb_py_`` prefix, base units (seconds,
bytes), ``_total`` for counters, a ``table`` label for per-table series, ``side``
(``insert`` / ``sample``) for the two sides of a rate limiter, ``method`` for RPCs.

With a token (``Server(token=...)``) the HTTP port answers only requests that carry it,
as gRPC calls do: ``Authorization: Bearer <token>`` (Prometheus' ``authorization``
setting), or HTTP basic authentication with the token as the password (what a browser
asks for); anything else gets 401.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import bisect
import collections
import hmac
import inspect
import itertools
import socket
import socketserver
import threading
import time
import wsgiref.simple_server
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import grpc
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector, exposition
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
    from reverb_py.server._service import ReverbServicer
    from reverb_py.table import SampledItem, Table

__all__ = ["Histogram", "MetricsHTTPServer", "ServerMetrics"]

#: Bucket bounds (seconds) of the rate-limiter waits.
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0)
#: Bucket bounds (seconds) of the age of sampled items.
AGE_BUCKETS = (1.0, 10.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0)
#: Bucket bounds (seconds) of checkpoint saves.
CHECKPOINT_BUCKETS = (0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
#: Bucket bounds (seconds) of calls: a unary call's latency, a stream's lifetime.
RPC_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0, 60.0, 300.0, 1800.0, 3600.0,
)  # fmt: skip


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
      token: Whether calls need a token (shown, never the token itself).
      tls: ``"off"``, ``"on"`` or ``"mutual"`` (client certificates checked).
    """

    def __init__(
        self,
        tables: Sequence[Table],
        run_on_loop: Callable[[Any], Any],
        *,
        token: bool = False,
        tls: str = "off",
    ) -> None:
        from reverb_py import __version__
        from reverb_py._impl import IMPLEMENTATION

        self._tables = list(tables)
        self._run_on_loop = run_on_loop
        self._servicer: ReverbServicer | None = None
        self._build = (__version__, IMPLEMENTATION)
        self._auth = ("required" if token else "none", tls)
        self.started_at = time.time()
        # Calls by method: started, finished (durations), failed (by status).
        self.calls: collections.Counter[str] = collections.Counter()
        self.durations: dict[str, Histogram] = {}
        self.errors: collections.Counter[tuple[str, str]] = collections.Counter()
        self.checkpoint_durations = Histogram(CHECKPOINT_BUCKETS, 1e-6)
        self.checkpoint_bytes = 0
        self.checkpoint_items = 0
        self.checkpoint_failures = 0
        # When the last checkpoint was written (unix seconds) and how long it took.
        self.checkpoint_time: float | None = None
        self.checkpoint_seconds = 0.0
        self._observer = _TableObserver()
        for table in self._tables:
            self._observer.add(table.name)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)

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

    def timed(self, method: str, handler: grpc.RpcMethodHandler[Any, Any]) -> Any:
        """``handler`` counting its calls: started, their durations and failures.

        PERF(rpc-metrics): per call, not per message: a counter, two clock reads, a
        bisect and a look at the call's status when it ends.
        """
        calls = self.calls
        calls[method] += 0  # the series exists from the start
        duration = self.durations[method] = Histogram(RPC_BUCKETS, 1e-6)
        errors = self.errors
        clock = time.perf_counter_ns

        def ended(context: Any, started: int, failure: BaseException | None) -> None:
            duration.observe((clock() - started) // 1000)
            code = context.code()
            if code is not None and code is not grpc.StatusCode.OK:
                errors[method, code.name] += 1
            elif failure is not None and not isinstance(failure, asyncio.CancelledError):
                errors[method, "UNKNOWN"] += 1  # an exception gRPC reports as UNKNOWN

        behavior: Any = (
            handler.unary_unary
            or handler.stream_stream
            or handler.unary_stream
            or handler.stream_unary
        )
        if inspect.isasyncgenfunction(behavior):
            generator = behavior

            async def timed(request: Any, context: Any) -> Any:
                calls[method] += 1
                started = clock()
                failure = None
                try:
                    async for response in generator(request, context):
                        yield response
                except BaseException as error:
                    failure = error
                    raise
                finally:
                    ended(context, started, failure)

        else:
            coroutine = behavior

            async def timed(request: Any, context: Any) -> Any:  # type: ignore[misc]
                calls[method] += 1
                started = clock()
                failure = None
                try:
                    return await coroutine(request, context)
                except BaseException as error:
                    failure = error
                    raise
                finally:
                    ended(context, started, failure)

        options = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(timed, **options)
        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(timed, **options)
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(timed, **options)
        return grpc.unary_unary_rpc_method_handler(timed, **options)

    def call_refused(self, method: str) -> None:
        """A call refused before its handler ran (no token): counted as UNAUTHENTICATED."""
        name = method.rpartition("/")[2]
        self.calls[name] += 1
        self.errors[name, grpc.StatusCode.UNAUTHENTICATED.name] += 1

    def checkpoint_written(self, seconds: float, size: int, items: int) -> None:
        self.checkpoint_durations.observe(round(seconds * 1e6))
        self.checkpoint_bytes = size
        self.checkpoint_items = items
        self.checkpoint_time = time.time()
        self.checkpoint_seconds = seconds

    def checkpoint_failed(self) -> None:
        self.checkpoint_failures += 1

    def collect(self) -> list[Metric]:
        """Every metric family of the server (not the process collectors'), read on the
        server's loop."""
        families: list[Metric] = self._run_on_loop(self._families)
        return families

    def _families(self) -> list[Metric]:
        return self._table_families() + self._server_families()

    def _table_families(self) -> list[Metric]:
        table = ("table",)
        side = ("table", "side")

        def gauge(name: str, documentation: str, labels: Sequence[str] = table) -> Any:
            return GaugeMetricFamily(f"reverb_py_table_{name}", documentation, labels=labels)

        def counter(name: str, documentation: str, labels: Sequence[str] = table) -> Any:
            return CounterMetricFamily(f"reverb_py_table_{name}", documentation, labels=labels)

        size = gauge("size", "Items in the table.")
        max_size = gauge("max_size", "The most items the table holds.")
        inserts = counter(
            "inserts",
            "Items inserted (new keys; since start or the loaded checkpoint, across resets).",
        )
        samples = counter(
            "samples", "Samples taken (since start or the loaded checkpoint, across resets)."
        )
        deletes = counter(
            "deletes",
            "Items deleted for any reason (since start or the loaded checkpoint, across resets).",
        )
        evictions = counter(
            "evictions", "Items the remover evicted to make room (since the table was made)."
        )
        pending = gauge("waiting_inserts", "Inserts waiting for the rate limiter now.")
        pending_samples = gauge(
            "waiting_sample_requests", "Sample requests waiting for the rate limiter now."
        )
        chunk_bytes = gauge(
            "chunk_bytes", "Bytes of the chunks the table's items reference, each chunk once."
        )
        max_bytes = gauge(
            "max_chunk_bytes", "The most chunk bytes the table holds (tables with max_bytes only)."
        )
        cursor = gauge(
            "rate_limiter_cursor",
            "The rate limiter's diff: inserts * samples_per_insert - samples (since the last "
            "reset); inserts need it <= max_diff after them, samples >= min_diff.",
        )
        min_diff = gauge("rate_limiter_min_diff", "The lowest cursor a sample may leave.")
        max_diff = gauge("rate_limiter_max_diff", "The highest cursor an insert may leave.")
        per_insert = gauge(
            "rate_limiter_samples_per_insert", "The rate limiter's samples per insert."
        )
        min_size = gauge(
            "rate_limiter_min_size_to_sample",
            "The size below which sampling waits (and inserting never does).",
        )
        allows = gauge(
            "rate_limiter_allows",
            "1 when the rate limiter lets one more insert / sample through now.",
            side,
        )
        blocked = gauge(
            "rate_limiter_blocked", "1 while inserts / sample requests wait for it.", side
        )
        blocked_for = gauge(
            "rate_limiter_blocked_for_seconds",
            "How long inserts / sample requests have been waiting without a break (0: none waits).",
            side,
        )
        blocked_total = counter(
            "rate_limiter_blocked_seconds",
            "Time inserts / sample requests spent waiting (Reverb's TableWorkerTime).",
            side,
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
            limiter = t.rate_limiter_status()
            cursor.add_metric(name, limiter.cursor)
            min_diff.add_metric(name, limiter.min_diff)
            max_diff.add_metric(name, limiter.max_diff)
            per_insert.add_metric(name, limiter.samples_per_insert)
            min_size.add_metric(name, limiter.min_size_to_sample)
            for label, can, waiting, waited_for, waited in (
                (
                    "insert",
                    limiter.can_insert,
                    limiter.waiting_inserts,
                    limiter.inserts_blocked_for,
                    limiter.inserts_blocked_total,
                ),
                (
                    "sample",
                    limiter.can_sample,
                    limiter.waiting_samples,
                    limiter.samples_blocked_for,
                    limiter.samples_blocked_total,
                ),
            ):
                labels = [t.name, label]
                allows.add_metric(labels, int(can))
                blocked.add_metric(labels, int(waiting > 0))
                blocked_for.add_metric(labels, waited_for)
                blocked_total.add_metric(labels, waited)
            for family, histograms in (
                (insert_waits, observer.insert_waits),
                (sample_waits, observer.sample_waits),
                (ages, observer.ages),
            ):
                histogram = histograms[t.name]
                family.add_metric(name, histogram.buckets(), histogram.seconds())
        return [
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
            cursor,
            min_diff,
            max_diff,
            per_insert,
            min_size,
            allows,
            blocked,
            blocked_for,
            blocked_total,
            insert_waits,
            sample_waits,
            ages,
        ]

    def _server_families(self) -> list[Metric]:
        build = GaugeMetricFamily(
            "reverb_py_build_info",
            "Always 1: the version and implementation (cython or python) serving.",
            labels=("version", "implementation"),
        )
        build.add_metric(list(self._build), 1)
        started = GaugeMetricFamily(
            "reverb_py_server_start_time_seconds", "When the server started (unix seconds)."
        )
        started.add_metric([], self.started_at)
        auth = GaugeMetricFamily(
            "reverb_py_server_auth_info",
            "Always 1: whether calls need a token (required, none) and TLS (off, on, mutual).",
            labels=("token", "tls"),
        )
        auth.add_metric(list(self._auth), 1)
        families: list[Metric] = [build, started, auth]
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
        calls = CounterMetricFamily(
            "reverb_py_rpc_calls", "Calls started, by method.", labels=("method",)
        )
        for method, count in sorted(self.calls.items()):
            calls.add_metric([method], count)
        errors = CounterMetricFamily(
            "reverb_py_rpc_errors",
            "Calls that ended with an error, by method and status.",
            labels=("method", "code"),
        )
        for (method, code), count in sorted(self.errors.items()):
            errors.add_metric([method, code], count)
        durations = HistogramMetricFamily(
            "reverb_py_rpc_duration_seconds",
            "How long calls took, by method (for streams: how long they were open).",
            labels=("method",),
        )
        for method, histogram in sorted(self.durations.items()):
            durations.add_metric([method], histogram.buckets(), histogram.seconds())
        families += [calls, errors, durations]
        checkpoint_durations = HistogramMetricFamily(
            "reverb_py_checkpoint_duration_seconds",
            "How long writing each checkpoint took (snapshot and files).",
        )
        histogram = self.checkpoint_durations
        checkpoint_durations.add_metric([], histogram.buckets(), histogram.seconds())
        checkpoint_size = GaugeMetricFamily(
            "reverb_py_checkpoint_size_bytes", "Bytes of the files of the last checkpoint written."
        )
        checkpoint_size.add_metric([], self.checkpoint_bytes)
        checkpoint_items = GaugeMetricFamily(
            "reverb_py_checkpoint_items", "Items in the last checkpoint written."
        )
        checkpoint_items.add_metric([], self.checkpoint_items)
        failures = CounterMetricFamily(
            "reverb_py_checkpoint_failures", "Checkpoints that could not be written."
        )
        failures.add_metric([], self.checkpoint_failures)
        last = GaugeMetricFamily(
            "reverb_py_checkpoint_last_success_timestamp_seconds",
            "When the last checkpoint was written (unix seconds; absent before the first).",
        )
        last_seconds = GaugeMetricFamily(
            "reverb_py_checkpoint_last_duration_seconds",
            "How long the last checkpoint written took (absent before the first).",
        )
        if self.checkpoint_time is not None:
            last.add_metric([], self.checkpoint_time)
            last_seconds.add_metric([], self.checkpoint_seconds)
        families += [
            checkpoint_durations,
            checkpoint_size,
            checkpoint_items,
            failures,
            last,
            last_seconds,
        ]
        return families


class _Collector(Collector):
    def __init__(self, metrics: ServerMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self._metrics.collect()


_CHALLENGE = [
    ("Content-Type", "text/plain; charset=utf-8"),
    ("WWW-Authenticate", 'Bearer realm="reverb_py"'),
    ("WWW-Authenticate", 'Basic realm="reverb_py", charset="UTF-8"'),
]
_REFUSAL = (
    b"Unauthorized: this server needs its token: send 'Authorization: Bearer <token>' "
    b"(or basic authentication with the token as the password).\n"
)


def _authorized(environ: dict[str, Any], expected: bytes) -> bool:
    """Whether a request carries the token: ``Bearer <token>``, or basic authentication
    whose password is the token (any user name), compared in constant time."""
    scheme, _, credentials = environ.get("HTTP_AUTHORIZATION", "").strip().partition(" ")
    credentials = credentials.strip()
    scheme = scheme.lower()
    if scheme == "bearer":
        offered = credentials.encode("latin-1", "replace")
    elif scheme == "basic":
        try:
            decoded = base64.b64decode(credentials, validate=True)
        except (binascii.Error, ValueError):
            return False
        offered = decoded.partition(b":")[2]
    else:
        return False
    return hmac.compare_digest(offered, expected)


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
      token: The token every request must carry (``Authorization: Bearer <token>``,
        or basic authentication with the token as the password); None: none needed.

    Raises:
      ValueError: the port cannot be bound.
    """

    def __init__(
        self, registry: CollectorRegistry, host: str, port: int, token: str | None = None
    ) -> None:
        app = exposition.make_wsgi_app(registry)
        expected = None if token is None else token.encode("ascii")

        def route(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
            if expected is not None and not _authorized(environ, expected):
                start_response("401 Unauthorized", _CHALLENGE)
                return iter([_REFUSAL])
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
