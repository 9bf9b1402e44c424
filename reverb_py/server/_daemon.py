"""``python -m reverb_py.server``: the replay server as a daemon.

With no config it serves one table ``my_table`` (Uniform sampler, Fifo remover,
``MinSize(1)``, ``max_size`` 1,000,000) on ``localhost:8000``. A TOML config file sets
the address and the tables::

    host = "localhost"      # "0.0.0.0" or "[::]" to accept other machines (default:
                            # $REVERB_PY_HOST, else localhost)
    port = 8000
    checkpoint_dir = "/var/lib/replay"   # load the newest checkpoint at start, save here
    checkpoint_interval_seconds = 600    # also save periodically (optional)
    checkpoint_on_shutdown = true        # and once more on SIGINT/SIGTERM (optional)
    keep_checkpoints = 2                 # how many complete checkpoints to keep (default 1)
    on_checkpoint_mismatch = "warn"      # or "refuse" (see below)
    log_level = "info"                   # debug, info, warning or error (--log-level)
    token_file = "/etc/replay/token"     # clients must send this bearer token (optional;
                                         # default: $REVERB_PY_TOKEN / $REVERB_PY_TOKEN_FILE)
    tls_cert_file = "/etc/replay/server.pem"   # TLS (optional): certificate chain
    tls_key_file = "/etc/replay/server.key"    # and private key
    tls_client_ca_file = "/etc/replay/ca.pem"  # mutual TLS (optional): CA of client certs
    metrics_port = 9090                  # Prometheus metrics at /metrics (optional;
                                         # --metrics-port; 0: any free port)

    [[tables]]
    name = "replay"
    sampler = {kind = "prioritized", priority_exponent = 0.8}
    remover = {kind = "fifo"}
    max_size = 1_000_000
    max_times_sampled = 0
    max_bytes = 8_589_934_592            # optional: evict once the chunks pass 8 GiB

    [tables.rate_limiter]
    kind = "sample_to_insert_ratio"
    samples_per_insert = 4.0
    min_size_to_sample = 1000
    error_buffer = 400.0

    [limits]                             # optional; 0 lifts a bound
    max_message_bytes = 268_435_456      # the largest request read (256 MiB)
    max_streams = 1024                   # insert and sample streams open at once
    max_stream_chunk_bytes = 1_073_741_824   # chunks one insert stream keeps (1 GiB)
    max_held_chunk_bytes = 4_294_967_296     # chunks all insert streams keep (4 GiB)

Selector kinds: ``uniform``, ``prioritized`` (``priority_exponent``), ``fifo``, ``lifo``,
``min_heap``, ``max_heap``. Rate-limiter kinds: ``min_size`` (``min_size_to_sample``),
``sample_to_insert_ratio`` (``samples_per_insert``, ``min_size_to_sample``,
``error_buffer`` as a number or ``[min_diff, max_diff]``), ``queue`` / ``stack``
(``size``), ``custom`` (``samples_per_insert``, ``min_size_to_sample``, ``min_diff``,
``max_diff``). A bad config is refused with a message naming the field. With
``checkpoint_dir`` the newest complete checkpoint there is loaded at start (its tables
must be configured), ``Client.checkpoint()`` writes there, and the interval and shutdown
options add periodic and final checkpoints. The directory is created if missing and must
be writable: the daemon refuses to start otherwise. A failed periodic checkpoint is logged
(ERROR) and the daemon keeps serving; a failed shutdown checkpoint makes it exit with
status 1.

A restored table takes its settings from the checkpoint, not from the config (as in
Reverb). ``on_checkpoint_mismatch`` says what to do when they differ (``max_size``,
``max_times_sampled``, sampler, remover, rate limiter, signature): ``"warn"`` (the
default) logs a WARNING naming each setting with the configured and the checkpoint
value and serves the checkpoint's; ``"refuse"`` makes the daemon exit with status 1 and a
one-line message naming them.

A table may declare its ``signature`` (reported by ``server_info``, checked by
writers): a spec is a table with ``dtype`` (numpy's name), ``shape`` (``-1`` for an
unknown dimension; default ``[]``) and an optional ``name``; other tables are dicts of
specs and arrays are lists::

    [tables.signature]
    observation = {dtype = "float32", shape = [84, 84, 4]}
    action = {dtype = "int32"}

``--config`` also takes Reverb's server-executable config, a ``ReverbServerConfig``
textproto: a file whose name does not end in ``.toml``, or the text itself as
``reverb_server --config='...'`` takes it (see
:mod:`reverb_py.server_executable.server_from_proto`). It sets the tables and the port;
the host and checkpoint options come from ``--host`` and ``--checkpoint_dir``. An error
in it names the field and its line.

``--check-config`` reads and checks the config (tables, limits, checkpoint options,
token and TLS files) without serving: exit status 0 and ``config OK`` when it is usable,
2 and the message otherwise (the checkpoint directory is not created or probed).

Exit status: 0 after SIGINT/SIGTERM, 1 when the server cannot start (port in use,
unusable checkpoint directory, refused checkpoint) or the shutdown checkpoint failed,
2 for a bad config. ``--version`` prints the version.
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import reverb_py
from reverb_py import _impl, rate_limiters, selectors
from reverb_py.errors import ConfigError
from reverb_py.server import _auth
from reverb_py.server._limits import ServerLimits
from reverb_py.server._server import Server
from reverb_py.server_executable import server_from_proto
from reverb_py.table import Table
from reverb_py.tensor_spec import TensorSpec

__all__ = ["ConfigError", "load_config", "tables_from_config", "main"]

_logger = logging.getLogger("reverb_py")

DEFAULT_HOST = "localhost"
DEFAULT_PORT = 8000
MISMATCH_POLICIES = ("warn", "refuse")
LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
_CREDENTIAL_KEYS = ("token_file", "tls_cert_file", "tls_key_file", "tls_client_ca_file")


def _field(
    mapping: Mapping[str, Any],
    key: str,
    where: str,
    kind: type | tuple[type, ...],
    default: Any = ...,
) -> Any:
    if key not in mapping:
        if default is ...:
            raise ConfigError(f"{where}.{key}: missing")
        return default
    value = mapping[key]
    if isinstance(value, bool) and kind is not bool:
        raise ConfigError(f"{where}.{key}: expected {_kind_name(kind)}, got {value!r}")
    if not isinstance(value, kind):
        raise ConfigError(f"{where}.{key}: expected {_kind_name(kind)}, got {value!r}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {
        int: "an integer",
        float: "a number",
        str: "a string",
        dict: "a table",
        list: "a list",
        bool: "true or false",
    }
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _check_keys(mapping: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    unknown = sorted(set(mapping) - set(allowed))
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown field (allowed: {', '.join(allowed)})")


def _selector(config: Any, where: str) -> selectors.ItemSelector:
    if not isinstance(config, dict):
        raise ConfigError(f'{where}: expected a table like {{kind = "uniform"}}')
    kind = _field(config, "kind", where, str)
    if kind == "prioritized":
        _check_keys(config, ["kind", "priority_exponent"], where)
        exponent = _field(config, "priority_exponent", where, (int, float))
        return selectors.Prioritized(float(exponent))
    simple = {
        "uniform": selectors.Uniform,
        "fifo": selectors.Fifo,
        "lifo": selectors.Lifo,
        "min_heap": selectors.MinHeap,
        "max_heap": selectors.MaxHeap,
    }
    if kind not in simple:
        raise ConfigError(
            f"{where}.kind: unknown selector {kind!r} (one of: prioritized, {', '.join(simple)})"
        )
    _check_keys(config, ["kind"], where)
    return simple[kind]()


def _rate_limiter(config: Any, where: str) -> rate_limiters.RateLimiter:
    if not isinstance(config, dict):
        raise ConfigError(f'{where}: expected a table like {{kind = "min_size"}}')
    kind = _field(config, "kind", where, str)
    number = (int, float)
    try:
        if kind == "min_size":
            _check_keys(config, ["kind", "min_size_to_sample"], where)
            return rate_limiters.MinSize(_field(config, "min_size_to_sample", where, int))
        if kind == "sample_to_insert_ratio":
            _check_keys(
                config, ["kind", "samples_per_insert", "min_size_to_sample", "error_buffer"], where
            )
            buffer = _field(config, "error_buffer", where, (int, float, list))
            if isinstance(buffer, list):
                if len(buffer) != 2 or not all(isinstance(b, number) for b in buffer):
                    raise ConfigError(
                        f"{where}.error_buffer: expected a number or [min_diff, max_diff]"
                    )
                buffer = (float(buffer[0]), float(buffer[1]))
            return rate_limiters.SampleToInsertRatio(
                float(_field(config, "samples_per_insert", where, number)),
                _field(config, "min_size_to_sample", where, int),
                buffer,
            )
        if kind in ("queue", "stack"):
            _check_keys(config, ["kind", "size"], where)
            size = _field(config, "size", where, int)
            return rate_limiters.Queue(size) if kind == "queue" else rate_limiters.Stack(size)
        if kind == "custom":
            _check_keys(
                config,
                ["kind", "samples_per_insert", "min_size_to_sample", "min_diff", "max_diff"],
                where,
            )
            return rate_limiters.RateLimiter(
                float(_field(config, "samples_per_insert", where, number)),
                _field(config, "min_size_to_sample", where, int),
                float(_field(config, "min_diff", where, number)),
                float(_field(config, "max_diff", where, number)),
            )
    except ConfigError:
        raise
    except ValueError as error:
        raise ConfigError(f"{where}: {error}") from None
    raise ConfigError(
        f"{where}.kind: unknown rate limiter {kind!r} (one of: min_size, "
        "sample_to_insert_ratio, queue, stack, custom)"
    )


def _signature(value: Any, where: str) -> Any:
    """A signature nest from TOML: a table with ``dtype`` is a spec, other tables are
    dicts, arrays are lists."""
    if isinstance(value, dict) and "dtype" in value:
        _check_keys(value, ["dtype", "shape", "name"], where)
        dtype = _field(value, "dtype", where, str)
        shape = _field(value, "shape", where, list, [])
        if not all(isinstance(dim, int) and not isinstance(dim, bool) for dim in shape):
            raise ConfigError(f"{where}.shape: expected a list of integers (-1: unknown)")
        if any(dim < -1 for dim in shape):
            raise ConfigError(f"{where}.shape: dimensions are >= 0, or -1 for unknown")
        name = _field(value, "name", where, str, None)
        try:
            return TensorSpec([None if dim == -1 else dim for dim in shape], dtype, name)
        except (TypeError, ValueError) as error:
            raise ConfigError(f"{where}.dtype: {error}") from None
    if isinstance(value, dict):
        return {key: _signature(item, f"{where}.{key}") for key, item in value.items()}
    if isinstance(value, list):
        return [_signature(item, f"{where}[{index}]") for index, item in enumerate(value)]
    raise ConfigError(
        f'{where}: expected a spec like {{dtype = "float32", shape = [3]}}, a table or a list'
    )


def default_tables() -> list[Table]:
    """The table served when no config is given."""
    return [
        Table(
            name="my_table",
            sampler=selectors.Uniform(),
            remover=selectors.Fifo(),
            max_size=1_000_000,
            rate_limiter=rate_limiters.MinSize(1),
        )
    ]


def tables_from_config(config: Mapping[str, Any]) -> list[Table]:
    """Builds the tables of a parsed config (see the module docstring)."""
    entries = _field(config, "tables", "config", list, None)
    if entries is None:
        return default_tables()
    if not entries:
        raise ConfigError("config.tables: at least one table is needed")
    tables = []
    names: set[str] = set()
    for index, entry in enumerate(entries):
        where = f"tables[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a table")
        _check_keys(
            entry,
            [
                "name",
                "sampler",
                "remover",
                "max_size",
                "max_times_sampled",
                "rate_limiter",
                "signature",
                "max_bytes",
            ],
            where,
        )
        name = _field(entry, "name", where, str)
        if not name:
            raise ConfigError(f"{where}.name: must not be empty")
        if name in names:
            raise ConfigError(f"{where}.name: duplicate table name {name!r}")
        names.add(name)
        max_size = _field(entry, "max_size", where, int)
        if max_size <= 0:
            raise ConfigError(f"{where}.max_size: must be a positive integer, got {max_size}")
        max_bytes = _field(entry, "max_bytes", where, int, None)
        if max_bytes is not None and max_bytes <= 0:
            raise ConfigError(f"{where}.max_bytes: must be a positive integer, got {max_bytes}")
        tables.append(
            Table(
                name=name,
                sampler=_selector(_field(entry, "sampler", where, dict), f"{where}.sampler"),
                remover=_selector(_field(entry, "remover", where, dict), f"{where}.remover"),
                max_size=max_size,
                rate_limiter=_rate_limiter(
                    _field(entry, "rate_limiter", where, dict), f"{where}.rate_limiter"
                ),
                max_times_sampled=_field(entry, "max_times_sampled", where, int, 0),
                signature=_signature(entry["signature"], f"{where}.signature")
                if "signature" in entry
                else None,
                max_bytes=max_bytes,
            )
        )
    return tables


def load_config(path: str) -> dict[str, Any]:
    """Reads a TOML config file."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    try:
        with open(path, "rb") as file:
            config: dict[str, Any] = tomllib.load(file)
    except OSError as error:
        raise ConfigError(f"cannot read config {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config {path} is not valid TOML: {error}") from None
    _check_keys(
        config,
        [
            "host",
            "port",
            "tables",
            "checkpoint_dir",
            "checkpoint_interval_seconds",
            "checkpoint_on_shutdown",
            "keep_checkpoints",
            "on_checkpoint_mismatch",
            "limits",
            "log_level",
            "metrics_port",
            *_CREDENTIAL_KEYS,
        ],
        "config",
    )
    return config


#: Suffixes of TOML configs; any other file given to ``--config`` is a textproto.
TOML_SUFFIXES = (".toml",)


def read_config(value: str) -> tuple[dict[str, Any], list[Table], int]:
    """The settings, tables and port of ``--config VALUE``.

    ``VALUE`` is a TOML file (``.toml``), a ``ReverbServerConfig`` textproto file (any
    other name), or, as Reverb's ``reverb_server --config`` takes it, the textproto
    itself. A textproto has no daemon settings (host, checkpoints): those come from the
    defaults and the command line; its port is used as written (0, or no ``port``:
    any free port).
    """
    if value.endswith(TOML_SUFFIXES):
        config = load_config(value)
        return config, tables_from_config(config), port_from_config(config)
    if os.path.isfile(value):
        proto = server_from_proto.load_config(value)
    elif not os.path.exists(value) and any(mark in value for mark in ":{<"):
        proto = server_from_proto.parse_config(value, "--config")
    else:
        raise ConfigError(f"cannot read config {value}: not a file")
    if not proto.tables:
        raise ConfigError(f"{value}: tables: at least one table is needed")
    return {}, server_from_proto.tables_from_proto(proto.tables), proto.port


def limits_from_config(config: Mapping[str, Any]) -> ServerLimits:
    """The config's ``[limits]`` table as :class:`ServerLimits` (defaults for the rest)."""
    values = config.get("limits", {})
    if not isinstance(values, Mapping):
        raise ConfigError(f"config.limits: must be a table, got {values!r}")
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"config.limits.{name}: must be an integer, got {value!r}")
    try:
        return ServerLimits.from_mapping(values, "config.limits")
    except ValueError as error:
        raise ConfigError(str(error)) from None


def log_level(flag: str | None, config: Mapping[str, Any]) -> int:
    """The logging level: ``--log-level``, else the config's ``log_level``, else INFO."""
    name = flag or _field(config, "log_level", "config", str, "info")
    if name.lower() not in LOG_LEVELS:
        raise ConfigError(f"config.log_level: one of {', '.join(LOG_LEVELS)}, got {name!r}")
    return LOG_LEVELS[name.lower()]


def metrics_port(flag: int | None, config: Mapping[str, Any]) -> int | None:
    """The metrics port: ``--metrics-port``, else the config's ``metrics_port``, else
    None (no metrics)."""
    port: int | None = (
        flag if flag is not None else _field(config, "metrics_port", "config", int, None)
    )
    if port is not None and not 0 <= port <= 65535:
        raise ConfigError(f"config.metrics_port: must be in 0..65535, got {port}")
    return port


def port_from_config(config: Mapping[str, Any]) -> int:
    """The config's ``port`` (default 8000), checked to be in 0..65535."""
    port: int = _field(config, "port", "config", int, DEFAULT_PORT)
    if not 0 <= port <= 65535:
        raise ConfigError(f"config.port: must be in 0..65535, got {port}")
    return port


class CheckpointSettings:
    """The daemon's checkpoint options, checked."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.directory: str | None = _field(config, "checkpoint_dir", "config", str, None)
        interval = _field(config, "checkpoint_interval_seconds", "config", (int, float), None)
        if interval is not None and interval <= 0:
            raise ConfigError(
                f"config.checkpoint_interval_seconds: must be positive, got {interval}"
            )
        self.interval: float | None = None if interval is None else float(interval)
        self.on_shutdown: bool = _field(config, "checkpoint_on_shutdown", "config", bool, False)
        self.keep: int = _field(config, "keep_checkpoints", "config", int, 1)
        if self.keep < 1:
            raise ConfigError(f"config.keep_checkpoints: must be at least 1, got {self.keep}")
        self.on_mismatch: str = _field(config, "on_checkpoint_mismatch", "config", str, "warn")
        if self.on_mismatch not in MISMATCH_POLICIES:
            raise ConfigError(
                f'config.on_checkpoint_mismatch: must be "warn" or "refuse", got '
                f"{self.on_mismatch!r}"
            )
        if self.directory is None and (self.interval is not None or self.on_shutdown):
            raise ConfigError(
                "config.checkpoint_dir: needed by checkpoint_interval_seconds and "
                "checkpoint_on_shutdown"
            )

    def checkpointer(self) -> Any:
        if self.directory is None:
            return None
        from reverb_py.checkpointers import DefaultCheckpointer

        return DefaultCheckpointer(self.directory, keep=self.keep)


def check_checkpoint_dir(path: str) -> None:
    """Creates the checkpoint directory if missing and checks that files can be written
    there (by creating and removing a probe file).

    Raises:
      OSError: with a message naming the directory and the reason.
    """
    where = f"checkpoint_dir {path!r}"
    if os.path.exists(path) and not os.path.isdir(path):
        raise OSError(f"{where} is not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        raise OSError(f"{where} cannot be created: {error.strerror or error}") from None
    probe = os.path.join(path, f".reverb_py-probe-{os.getpid()}")
    try:
        with open(probe, "wb") as file:
            file.write(b"probe")
            file.flush()
            os.fsync(file.fileno())
        os.remove(probe)
    except OSError as error:
        raise OSError(
            f"{where} is not writable (a probe file cannot be created and removed there): "
            f"{error.strerror or error}"
        ) from None


def _checkpoint(server: Server, reason: str) -> bool:
    """Writes a checkpoint; logs and returns whether it was written."""
    try:
        path = server.checkpoint()
    except Exception as error:  # noqa: BLE001 - keep serving; the log says why.
        _logger.error("%s checkpoint failed: %s", reason, error)
        return False
    _logger.info("%s checkpoint written to %s", reason, path)
    return True


def _one_line(error: BaseException) -> str:
    return "; ".join(line.strip() for line in str(error).splitlines() if line.strip())


def _drain(fd: int) -> None:
    """Reads everything waiting in a non-blocking pipe."""
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the daemon until SIGINT or SIGTERM; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m reverb_py.server", description="reverb_py replay server"
    )
    parser.add_argument(
        "--config",
        help="TOML config file (.toml), ReverbServerConfig textproto file, or the textproto "
        "itself (see the module docs)",
    )
    parser.add_argument(
        "--host", help=f"interface to bind (default: $REVERB_PY_HOST, else {DEFAULT_HOST})"
    )
    parser.add_argument("--port", type=int, help=f"port (default {DEFAULT_PORT})")
    parser.add_argument("--checkpoint_dir", help="checkpoint directory (overrides the config's)")
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics at /metrics on this port (config key metrics_port)",
    )
    for key in _CREDENTIAL_KEYS:
        parser.add_argument(f"--{key.replace('_', '-')}", metavar="PATH", help=f"config's {key}")
    parser.add_argument(
        "--log-level",
        choices=list(LOG_LEVELS),
        type=str.lower,
        help="what the daemon logs (default info; config key log_level)",
    )
    parser.add_argument(
        "--check-config", action="store_true", help="check the config and exit (0 ok, 2 bad)"
    )
    parser.add_argument("--version", action="version", version=f"reverb_py {reverb_py.__version__}")
    args = parser.parse_args(argv)
    if args.port is not None and not 0 <= args.port <= 65535:
        parser.error(f"--port: must be in 0..65535, got {args.port}")
    try:
        if args.config:
            config, tables, config_port = read_config(args.config)
        else:
            config, tables, config_port = {}, default_tables(), DEFAULT_PORT
        if args.checkpoint_dir is not None:
            config = {**config, "checkpoint_dir": args.checkpoint_dir}
        level = log_level(args.log_level, config)
        # DEBUG is reverb_py's own: gRPC's and asyncio's debug lines stay out.
        logging.basicConfig(
            level=max(level, logging.INFO), format="%(asctime)s %(levelname)s %(message)s"
        )
        _logger.setLevel(level)
        host = args.host or _field(config, "host", "config", str, None)
        port = args.port if args.port is not None else config_port
        checkpoints = CheckpointSettings(config)
        limits = limits_from_config(config)
        metrics = metrics_port(args.metrics_port, config)
        token, tls = _auth.daemon_credentials(
            *(
                getattr(args, key) or _field(config, key, "config", str, None)
                for key in _CREDENTIAL_KEYS
            )
        )
    except ConfigError as error:
        print(f"reverb_py.server: bad config: {error}", file=sys.stderr)
        return 2
    if args.check_config:
        print(f"reverb_py.server: config OK ({len(tables)} tables)")
        return 0
    try:
        if checkpoints.directory is not None:
            check_checkpoint_dir(checkpoints.directory)
        server = Server(
            tables,
            port=port,
            host=host,
            checkpointer=checkpoints.checkpointer(),
            on_checkpoint_mismatch=checkpoints.on_mismatch,
            limits=limits,
            token=token,
            tls=tls,
            metrics_port=metrics,
        )
    except (ValueError, OSError) as error:
        print(f"reverb_py.server: {_one_line(error)}", file=sys.stderr)
        return 1
    # NOTE(signal-wakeup): the handler only records the signal; a byte on the wakeup
    # pipe (written by the interpreter itself) ends the wait. Setting a threading.Event
    # from the handler could deadlock: the handler runs in the main thread, which may be
    # holding that Event's lock at that very moment (entering its wait).
    received: list[int] = []

    def request_stop(signum: int, _frame: Any) -> None:
        received.append(signum)

    wakeup_read, wakeup_write = os.pipe()
    os.set_blocking(wakeup_read, False)
    os.set_blocking(wakeup_write, False)
    previous_wakeup = signal.set_wakeup_fd(wakeup_write)
    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    try:
        _logger.info("serving on %s (implementation: %s)", server.address, _impl.IMPLEMENTATION)
        if server.metrics_port is not None:
            _logger.info("metrics on port %d at /metrics", server.metrics_port)
        for table in tables:
            _logger.info("table %r: %r", table.name, table)
        while not received:
            ready, _, _ = select.select([wakeup_read], [], [], checkpoints.interval)
            if ready:
                _drain(wakeup_read)
            elif not received:
                _checkpoint(server, "periodic")
    finally:
        signal.set_wakeup_fd(previous_wakeup)
        os.close(wakeup_read)
        os.close(wakeup_write)
    _logger.info("received %s, stopping", signal.Signals(received[0]).name)
    saved = _checkpoint(server, "shutdown") if checkpoints.on_shutdown else True
    server.stop(grace=1.0)
    if not saved:
        _logger.error("stopped; the shutdown checkpoint was not written (exit status 1)")
        return 1
    _logger.info("stopped")
    return 0
