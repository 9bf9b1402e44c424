"""The ``Server`` facade: tables served over gRPC from a background event-loop thread."""

from __future__ import annotations

import asyncio
import atexit
import logging
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from reverb_py import _impl, _secrets
from reverb_py._loop_thread import LoopThread
from reverb_py.server import _auth
from reverb_py.server._chunks import parse_chunk
from reverb_py.server._health import Health
from reverb_py.server._limits import ServerLimits
from reverb_py.server._logs import log_checkpoint
from reverb_py.server._metrics import MetricsHTTPServer, ServerMetrics
from reverb_py.server._service import ReverbServicer
from reverb_py.table import Table

if TYPE_CHECKING:
    from reverb_py.client import Client

__all__ = ["Server"]

_logger = logging.getLogger("reverb_py")

_OPTIONS = [
    ("grpc.max_send_message_length", -1),
    # gRPC lets a second server bind a port in use (SO_REUSEPORT) and then clients reach
    # either at random. Reverb turns that off too: a taken port is an error.
    ("grpc.so_reuseport", 0),
]

_MISMATCH_POLICIES = ("warn", "refuse")
# How long a stopping server waits for the handlers of its cancelled calls to finish.
_HANDLER_DRAIN_S = 1.0
# How long a scrape waits for the server's loop to read the tables.
_SCRAPE_TIMEOUT_S = 10.0

T = TypeVar("T")

# Servers still serving. They are stopped when the interpreter exits (before it freezes
# the loop threads), so a script that never calls stop() still exits.
_serving: weakref.WeakSet[Server] = weakref.WeakSet()


@atexit.register
def _stop_servers_at_exit() -> None:
    for server in list(_serving):
        server.stop()


def _check_port(port: object) -> int:
    if port is None:
        return 0
    if isinstance(port, bool) or not isinstance(port, int):
        raise TypeError(f"port must be an integer or None, got {port!r}")
    if not 0 <= port <= 65535:
        raise ValueError(f"port must be between 0 and 65535 (0: any free port), got {port}")
    return port


_WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")


def _server_id(host: str, port: int) -> str:
    """How the server names itself: the bound ``host:port`` (the machine's name for
    a server on every interface)."""
    name = socket.gethostname() if host in _WILDCARD_HOSTS else host
    if ":" in name and not name.startswith("["):
        name = f"[{name}]"
    return f"{name}:{port}"


_FREE_PORT_ATTEMPTS = 5


def _refused_addresses(host: str, port: int) -> list[str]:
    """The addresses of ``host`` whose ``port`` refuses TCP connections (a listener that
    was bound a moment ago accepts them); addresses of a family the machine lacks are not
    counted."""
    if host == "localhost":
        # As gRPC binds it: both loopback addresses, whatever the resolver says.
        targets: list[tuple[int, Any]] = [
            (socket.AF_INET6, ("::1", port)),
            (socket.AF_INET, ("127.0.0.1", port)),
        ]
    else:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError:
            return []
        targets = [(family, sockaddr) for family, _, _, _, sockaddr in infos]
    if len(targets) < 2:
        return []
    refused = []
    for family, sockaddr in targets:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.settimeout(1.0)
            try:
                probe.connect(sockaddr)
            except ConnectionRefusedError:
                refused.append(str(sockaddr[0]))
            except OSError:
                pass
    return refused


class Server:
    """Serves tables over gRPC at Reverb's method paths, from a background thread.

    The server runs a ``grpc.aio`` server on its own event-loop thread (uvloop when
    installed), so it works from plain synchronous code. The tables passed in are the
    live tables: their ``info``, ``can_sample`` and ``can_insert`` report what the
    server holds.

    Args:
      tables: The tables to serve; at least one, with distinct names.
      port: The port to listen on; None or 0 picks a free one (see :attr:`port`).
      checkpointer: Where ``Client.checkpoint()`` writes checkpoints, and where the
        newest complete checkpoint (or the checkpointer's fallback) is loaded from at
        start, replacing the state of the tables it names. None: a
        :func:`reverb_py.checkpointers.default_checkpointer` (a fresh temporary
        directory, so nothing is loaded).
      host: The interface to bind. None: ``$REVERB_PY_HOST`` if set, else ``localhost``.
        Unlike Reverb, which binds every interface, the server is reachable only from
        this machine unless told otherwise (``"[::]"`` or ``"0.0.0.0"`` for every
        interface); ``REVERB_PY_HOST`` lets a program written for Reverb
        (``Server(tables, port)``) serve other machines unchanged. A server that other
        machines can reach and that does not authenticate its clients logs a WARNING
        naming the risk when it starts.
      on_checkpoint_mismatch: What to do when the loaded checkpoint's settings of a
        table (``max_size``, ``max_times_sampled``, sampler, remover, rate limiter,
        signature) differ from the table's: ``"warn"`` (the default) logs a warning
        naming each setting and serves the checkpoint's, as Reverb does; ``"refuse"``
        raises ``ValueError`` naming them.
      limits: What clients can make the server hold (:class:`ServerLimits`: request
        size, open streams, chunks kept by insert streams); None: the defaults.
      token: A bearer token every call must carry (``authorization: Bearer <token>``);
        other calls end with ``UNAUTHENTICATED``. None: ``$REVERB_PY_TOKEN``, else the
        file ``$REVERB_PY_TOKEN_FILE`` names, else no token; ``""``: no token.
      tls: The server's certificate and key (:class:`ServerTLS`, optionally with the
        CA of client certificates for mutual TLS); None: plaintext, as Reverb.
      metrics_port: Serve Prometheus metrics over HTTP at ``/metrics`` on this port, on
        the same interface as the server: 0 picks a free one (see
        :attr:`metrics_port`); None (the default): no metrics, nothing listens. The
        metrics and the status page at ``/`` are read-only; with a token they need it
        too (``Authorization: Bearer <token>``, or basic authentication with the token as
        the password), others get 401.

    A server that is never stopped is stopped when the interpreter exits.

    Beside Reverb's service the server runs the standard gRPC health service
    (``grpc.health.v1.Health``, for orchestrators' probes; no token needed): SERVING for
    ``""`` and Reverb's service once the checkpoint is loaded and the server started,
    NOT_SERVING from the start of :meth:`stop`.

    Raises:
      ValueError: no tables, duplicate table names, a port outside 0-65535, the port
        cannot be bound (for example because another server uses it), the checkpoint
        to load names a table the server does not have, or differs from the tables
        with ``on_checkpoint_mismatch="refuse"``.
      TypeError: a port that is not an integer.
    """

    def __init__(
        self,
        tables: Sequence[Table] | None = None,
        port: int | None = None,
        checkpointer: Any = None,
        *,
        host: str | None = None,
        on_checkpoint_mismatch: str = "warn",
        limits: ServerLimits | None = None,
        token: str | None = None,
        tls: _auth.ServerTLS | None = None,
        metrics_port: int | None = None,
    ) -> None:
        if tls is not None and not isinstance(tls, _auth.ServerTLS):
            raise TypeError(f"tls must be a ServerTLS or None, got {type(tls).__name__}")
        self._token = _secrets.resolve_token(token)
        self._tls = tls
        if limits is not None and not isinstance(limits, ServerLimits):
            raise TypeError(f"limits must be a ServerLimits or None, got {limits!r}")
        self._limits = limits if limits is not None else ServerLimits()
        if not tables:
            raise ValueError("At least one table must be provided")
        port = _check_port(port)
        if metrics_port is not None:
            metrics_port = _check_port(metrics_port)
        host = _auth.resolve_host(host)
        if on_checkpoint_mismatch not in _MISMATCH_POLICIES:
            raise ValueError(
                f"on_checkpoint_mismatch must be 'warn' or 'refuse', got {on_checkpoint_mismatch!r}"
            )
        names = [table.name for table in tables]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(
                f"Multiple items in tables have the same name: {', '.join(duplicates)}"
            )
        from reverb_py import checkpointers

        self._checkpointer = checkpointer or checkpointers.default_checkpointer()
        self._tables = list(tables)
        self._restore(self._tables, self._checkpointer, on_checkpoint_mismatch)
        self._host = host
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()
        self._loop_thread = LoopThread(name="reverb_py-server")
        self._metrics: ServerMetrics | None = None
        self._metrics_http: MetricsHTTPServer | None = None
        if metrics_port is not None:
            self._metrics = ServerMetrics(
                self._tables,
                self._run_on_loop,
                token=self._token is not None,
                tls="off" if tls is None else "mutual" if tls.mutual else "on",
            )
        try:
            self._port = self._loop_thread.run(self._start(host, port))
        except BaseException:
            self._stopped.set()
            self._loop_thread.stop()
            raise
        if self._metrics is not None and metrics_port is not None:
            try:
                self._metrics_http = MetricsHTTPServer(
                    self._metrics.registry, host, metrics_port, self._token
                )
            except BaseException:
                self._stopped.set()
                try:
                    self._loop_thread.run(self._stop(None))
                finally:
                    self._loop_thread.stop()
                raise
        _serving.add(self)
        warning = _auth.exposure_warning(
            host,
            self._port,
            tls=tls is not None,
            token=self._token is not None,
            mtls=tls is not None and tls.mutual,
        )
        if warning is not None:
            _logger.warning("%s", warning)

    @staticmethod
    def _restore(tables: Sequence[Table], checkpointer: Any, on_mismatch: str) -> None:
        started = time.monotonic()
        loaded = checkpointer.load_latest(parse_chunk)
        if loaded is None:
            return
        path, snapshots = loaded
        by_name = {table.name: table for table in tables}
        for snapshot in snapshots:
            name = snapshot.checkpoint.table_name
            if name not in by_name:
                raise ValueError(
                    f"Checkpoint {path} holds table '{name}', which this server does not "
                    f"have (tables: {', '.join(sorted(by_name))})."
                )
        differences = [
            f"table '{snapshot.checkpoint.table_name}' {difference}"
            for snapshot in snapshots
            for difference in by_name[snapshot.checkpoint.table_name].config_differences(snapshot)
        ]
        if differences and on_mismatch == "refuse":
            raise ValueError(
                f"Checkpoint {path} differs from the configured tables: " + "; ".join(differences)
            )
        for difference in differences:
            _logger.warning("checkpoint %s overrides the configuration: %s", path, difference)
        for snapshot in snapshots:
            by_name[snapshot.checkpoint.table_name].restore(snapshot)
        log_checkpoint(
            "loaded from",
            path,
            time.monotonic() - started,
            len(snapshots),
            sum(len(by_name[snapshot.checkpoint.table_name]) for snapshot in snapshots),
        )

    @property
    def checkpointer(self) -> Any:
        return self._checkpointer

    async def _start(self, host: str, port: int, attempts: int = _FREE_PORT_ATTEMPTS) -> int:
        on_refused = None if self._metrics is None else self._metrics.call_refused

        interceptors = (
            [] if self._token is None else [_auth.TokenInterceptor(self._token, on_refused)]
        )
        self._grpc_server = grpc.aio.server(
            options=_OPTIONS + self._limits.grpc_options(), interceptors=interceptors
        )
        servicer = ReverbServicer(
            {table.name: table for table in self._tables},
            checkpointer=self._checkpointer,
            limits=self._limits,
        )
        self._servicer = servicer
        if self._metrics is not None:
            self._metrics.attach(servicer)
        self._grpc_server.add_generic_rpc_handlers(servicer.handlers())
        self._health = Health(self._grpc_server)
        await self._health.not_serving()
        try:
            if self._tls is None:
                bound = self._grpc_server.add_insecure_port(f"{host}:{port}")
            else:
                bound = self._grpc_server.add_secure_port(
                    f"{host}:{port}", self._tls.server_credentials()
                )
        except RuntimeError:
            bound = 0
        if not bound:
            await self._grpc_server.stop(None)
            reason = f"{host!r} is not an address of this machine"
            if port:
                reason = f"port {port} is already in use, or {reason}"
            raise ValueError(f"Failed to bind the gRPC server to {host}:{port}: {reason}")
        if port == 0 and attempts > 1 and _refused_addresses(host, bound):
            # NOTE(free-port): gRPC binds every address of the host on the port it got for
            # the first one, and keeps the server when some other address had that port
            # taken already (by another program's socket): clients of those addresses would
            # be refused. Another free port is asked for instead.
            await self._grpc_server.stop(None)
            return await self._start(host, port, attempts - 1)
        servicer.server_id = _server_id(host, bound)
        await self._grpc_server.start()
        # The checkpoint was loaded before the server started: it serves from now on.
        await self._health.serving()
        return bound

    def _run_on_loop(self, function: Callable[[], T]) -> T:
        """Runs ``function`` on the server's loop (from another thread); its result."""

        async def call() -> T:
            return function()

        return self._loop_thread.run(call(), timeout=_SCRAPE_TIMEOUT_S)

    @property
    def metrics_port(self) -> int | None:
        """The port of the metrics (``/metrics``), or None when there are none."""
        return None if self._metrics_http is None else self._metrics_http.port

    @property
    def limits(self) -> ServerLimits:
        return self._limits

    @property
    def port(self) -> int:
        """The port the server listens on (the real one, also when 0 was asked for)."""
        return self._port

    @property
    def address(self) -> str:
        """``host:port`` for clients on this machine."""
        return f"{self._host}:{self._port}"

    @property
    def tables(self) -> list[Table]:
        return list(self._tables)

    def checkpoint(self) -> str:
        """Writes a checkpoint of every table with the server's checkpointer.

        Returns:
          The path of the checkpoint directory. Serving goes on while it is written.
        """
        return self._checkpoint(None)

    def _checkpoint(self, kind: str | None) -> str:
        """:meth:`checkpoint`, its log line led by ``kind`` (the daemon's ``periodic``,
        ``shutdown``)."""
        path: str = self._loop_thread.run(self._servicer.checkpoint(kind))
        return path

    def stop(self, grace: float | None = None) -> None:
        """Stops serving. Idempotent; safe from any thread but the server's own.

        Waiting inserts and samples fail (a sample stream ends with CANCELLED), then the
        gRPC server stops: after ``grace`` seconds open calls are cancelled (None: at
        once).
        """
        with self._stop_lock:
            if self._stopped.is_set():
                return
            _serving.discard(self)
            try:
                if self._metrics_http is not None:
                    self._metrics_http.stop()
                self._loop_thread.run(self._stop(grace))
            finally:
                self._loop_thread.stop()
                self._stopped.set()

    async def _stop(self, grace: float | None) -> None:
        if self._metrics is not None:
            self._metrics.detach()
        await self._health.stopping()
        for table in self._tables:
            table.close()
        await self._grpc_server.stop(grace)
        # The calls are cancelled; let their handlers finish (their streams release what
        # they hold) before the loop stops, within a bound. A handler still running when
        # the loop thread ends is cancelled there, which gRPC reports as a traceback.
        current = asyncio.current_task()
        handlers = [task for task in asyncio.all_tasks() if task is not current]
        if handlers:
            await asyncio.wait(handlers, timeout=_HANDLER_DRAIN_S)

    def wait(self) -> None:
        """Blocks until the server is stopped (by :meth:`stop` from another thread).

        Ctrl-C raises ``KeyboardInterrupt`` here, as in Reverb; the server keeps running
        until stopped.
        """
        self._stopped.wait()

    def localhost_client(
        self,
        root_certificates: bytes | str | None = None,
        private_key: bytes | str | None = None,
        certificate_chain: bytes | str | None = None,
    ) -> Client:
        """A blocking :class:`reverb_py.Client` connected to this server, with its token.

        A server with TLS needs the CA of its certificate (``root_certificates``; the
        certificate must name ``localhost``), and with mutual TLS a client certificate.
        """
        from reverb_py.client import Client

        return Client(
            f"localhost:{self._port}",
            token=self._token or "",
            root_certificates=root_certificates,
            private_key=private_key,
            certificate_chain=certificate_chain,
        )

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __del__(self) -> None:
        # During interpreter shutdown the loop thread may be frozen already; waiting for
        # it would never end. The atexit hook stopped every serving server before that.
        if sys.is_finalizing():
            return
        if hasattr(self, "_stopped") and not self._stopped.is_set():
            try:
                self.stop()
            except Exception:  # noqa: BLE001 - a finaliser has nothing to report to.
                pass

    def __repr__(self) -> str:
        tables = ", ".join(table.name for table in self._tables)
        state = "stopped" if self._stopped.is_set() else "serving"
        return (
            f"Server(address={self.address!r}, tables=[{tables}], "
            f"implementation={_impl.IMPLEMENTATION!r}, {state})"
        )
