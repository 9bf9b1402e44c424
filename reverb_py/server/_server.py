"""The ``Server`` facade: tables served over gRPC from a background event-loop thread."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from reverb_py import _impl, _secrets
from reverb_py._loop_thread import LoopThread
from reverb_py.server import _auth
from reverb_py.server._chunks import parse_chunk
from reverb_py.server._health import Health, ReadyGate
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


def _has_address(family: int, sockaddr: tuple[Any, ...]) -> bool:
    """Whether this machine can bind ``sockaddr`` (of ``family``) at all (on any port)."""
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((sockaddr[0], 0, *sockaddr[2:]))
    except OSError:
        return False
    return True


def _bind_targets(host: str) -> list[str]:
    """The addresses a server on ``host`` binds, each as written before ``:port``.

    gRPC binds every address a name resolves to, and keeps the server as long as one of
    them could be bound. Binding them one by one tells which one could not. ``localhost``
    is both loopback addresses (as gRPC binds it, whatever the resolver says); addresses
    of a family this machine lacks are left out. A wildcard or a literal address is
    bound as it is; a name that does not resolve too (gRPC then says why it failed).
    """
    if host in _WILDCARD_HOSTS:
        return [host]
    name = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(name.split("%")[0])
        return [host]
    except ValueError:
        pass
    candidates: list[tuple[int, tuple[Any, ...]]]
    if name.lower() == "localhost":
        candidates = [(socket.AF_INET6, ("::1", 0)), (socket.AF_INET, ("127.0.0.1", 0))]
    else:
        try:
            infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
        except OSError:
            return [host]
        candidates = [(family, tuple(sockaddr)) for family, _, _, _, sockaddr in infos]
    targets: list[str] = []
    for family, sockaddr in candidates:
        if family not in (socket.AF_INET, socket.AF_INET6) or not _has_address(family, sockaddr):
            continue
        target = f"[{sockaddr[0]}]" if family == socket.AF_INET6 else str(sockaddr[0])
        if target not in targets:
            targets.append(target)
    return targets or [host]


def _bind_all(
    add_port: Callable[[str], int], targets: Sequence[str], port: int
) -> tuple[int, str | None]:
    """Binds ``port`` on every target with ``add_port`` (gRPC's: the port bound, or 0).

    Port 0 takes the free port the first target gets on the others too. Returns the
    port and None, or the port and the first target that could not be bound.
    """
    bound = port
    for target in targets:
        got = add_port(f"{target}:{bound}")
        if not got:
            return bound, target
        bound = got
    return bound, None


def _bind_failure(what: str, host: str, target: str, port: int) -> str:
    """Why ``target:port`` (an address of ``host``) could not be bound, in one line."""
    name = target[1:-1] if target.startswith("[") and target.endswith("]") else target
    reason = f"{host!r} is not an address of this machine"
    if port:
        reason = f"port {port} is already in use, or {reason}"
        family = socket.AF_INET6 if ":" in name else socket.AF_INET
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((name, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                reason = f"port {port} is already in use"
            elif error.errno == errno.EADDRNOTAVAIL:
                reason = f"{name} is not an address of this machine"
    where = f"{host}:{port}"
    if target != host:
        # NOTE(every-address): a client of the name may reach any of its addresses: a
        # server that holds the port on some only would see some clients refused, or
        # reaching another program.
        return f"Failed to bind the {what} to {where}: {reason} on {target}"
    return f"Failed to bind the {what} to {where}: {reason}"


def _check_metrics_port(host: str, port: int) -> None:
    """Refuses an explicit metrics port that another program holds on an address of
    ``host`` (the metrics server itself binds one of them).

    Raises:
      ValueError: naming the address.
    """
    if port == 0:
        return
    for target in _bind_targets(host):
        if target in _WILDCARD_HOSTS:
            continue
        name = target[1:-1] if target.startswith("[") else target
        family = socket.AF_INET6 if ":" in name else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((name, port))
            except OSError as error:
                if error.errno == errno.EADDRINUSE:
                    raise ValueError(_bind_failure("metrics server", host, target, port)) from None


def _directory_size(path: str) -> int:
    """The bytes of the files directly in ``path`` (a checkpoint's)."""
    try:
        return sum(entry.stat().st_size for entry in os.scandir(path) if entry.is_file())
    except OSError:
        return 0


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
    (``grpc.health.v1.Health``, for orchestrators' probes; no token needed). The port
    is bound before the checkpoint is loaded: meanwhile the health service answers
    NOT_SERVING for ``""`` and Reverb's service, and Reverb's calls wait; SERVING once
    it is loaded, NOT_SERVING again from the start of :meth:`stop`. The constructor
    returns once the server serves. The port is bound on every address of ``host``
    (``localhost``: ``[::1]`` and ``127.0.0.1``).

    Raises:
      ValueError: no tables, duplicate table names, a port outside 0-65535, the port
        cannot be bound on one of the host's addresses (for example because another
        program uses it there; the message names the address), the checkpoint
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
        try:
            # NOTE(serve-while-loading): the port is bound and the health service
            # answers (NOT_SERVING) while the checkpoint loads, so that a probe tells a
            # loading server from a dead one; Reverb's calls wait until it is loaded.
            self._restore(on_checkpoint_mismatch)
            if self._metrics is not None and metrics_port is not None:
                _check_metrics_port(host, metrics_port)
                self._metrics_http = MetricsHTTPServer(
                    self._metrics.registry, host, metrics_port, self._token
                )
            self._loop_thread.run(self._ready())
        except BaseException:
            self._stopped.set()
            try:
                if self._metrics_http is not None:
                    self._metrics_http.stop()
                self._loop_thread.run(self._stop(None))
            finally:
                self._loop_thread.stop()
            raise
        warning = _auth.exposure_warning(
            host,
            self._port,
            tls=tls is not None,
            token=self._token is not None,
            mtls=tls is not None and tls.mutual,
        )
        if warning is not None:
            _logger.warning("%s", warning)

    def _load_latest(self) -> tuple[str, list[Any]] | None:
        """The checkpointer's newest checkpoint; logs each one as its load begins."""
        from reverb_py._storage import load as _load
        from reverb_py.checkpointers import DefaultCheckpointer

        checkpointer = self._checkpointer
        if not (
            isinstance(checkpointer, DefaultCheckpointer)
            and type(checkpointer).load_latest is DefaultCheckpointer.load_latest
        ):
            _logger.info("looking for a checkpoint to load in %r", checkpointer)
            loaded: tuple[str, list[Any]] | None = checkpointer.load_latest(parse_chunk)
            return loaded
        default = checkpointer
        address = self.address

        def load(path: str) -> list[Any]:
            _logger.info(
                "loading checkpoint %s (%.1f MB); %s is NOT_SERVING until it is loaded",
                path,
                _directory_size(path) / 1e6,
                address,
            )
            return default.load(path, parse_chunk)

        # DefaultCheckpointer.load_latest, with each path known as its load begins.
        return _load.load_latest(
            os.path.abspath(default.path), default.fallback_checkpoint_path, load
        )

    def _restore(self, on_mismatch: str) -> None:
        started = time.monotonic()
        tables = self._tables
        loaded = self._load_latest()
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

        self._gate = ReadyGate()
        interceptors: list[grpc.aio.ServerInterceptor] = [self._gate]
        if self._token is not None:
            interceptors.insert(0, _auth.TokenInterceptor(self._token, on_refused))
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
        tls = self._tls

        def add_port(address: str) -> int:
            try:
                if tls is None:
                    return self._grpc_server.add_insecure_port(address)
                return self._grpc_server.add_secure_port(address, tls.server_credentials())
            except RuntimeError:
                return 0

        targets = _bind_targets(host)
        bound, failed = _bind_all(add_port, targets, port)
        if failed is not None:
            await self._grpc_server.stop(None)
            if port == 0 and failed != targets[0] and attempts > 1:
                # NOTE(free-port): the free port the first address got is taken on
                # another address of the host (by another program): another one is
                # asked for.
                return await self._start(host, port, attempts - 1)
            raise ValueError(_bind_failure("gRPC server", host, failed, bound))
        servicer.server_id = _server_id(host, bound)
        await self._grpc_server.start()
        return bound

    async def _ready(self) -> None:
        """The checkpoint is loaded: Reverb's calls go through, and health is SERVING."""
        self._gate.open()
        await self._health.serving()

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
        # A server still serving when the interpreter exits serves until the process
        # ends, as Reverb's does: threads of the program may still be calling it (they
        # are frozen with it), and its loop thread (a daemon) may be frozen already, so
        # waiting for it here would never end.
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
