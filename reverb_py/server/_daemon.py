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
    log_format = "text"                  # or "json": one object per line (--log-format)
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

The config's format is chosen by the file's extension: ``.toml`` for TOML,
``.textproto``, ``.pbtxt`` or ``.txt`` (or no extension) for Reverb's server-executable
config, a ``ReverbServerConfig`` textproto (see
:mod:`reverb_py.server_executable.server_from_proto`); any other extension is refused.
``--config`` also takes the textproto itself, as ``reverb_server --config='...'`` does.
A textproto sets the tables and the port; the host and checkpoint options come from
``--host`` and ``--checkpoint-dir``. An error in it names the field and its line.

Every bad value is refused before anything starts, in one line naming the field
(``bad config: tables[0].sampler.priority_exponent: must be >= 0, got -1``), with the
closest valid name for a misspelt one, and exit status 2. ``--check-config`` reads
and checks the config (tables, limits, checkpoint options, token and TLS files) without
serving: exit status 0 and ``config OK`` when it is usable, 2 and the message otherwise
(the checkpoint directory is not created or probed).

The port is bound on every address the host resolves to (``localhost``: ``[::1]`` and
``127.0.0.1``), the metrics port too: when another program holds it on one of them the
daemon refuses to start, naming that address. While a checkpoint loads, the port is
bound and the gRPC health service answers NOT_SERVING (SERVING once loaded); the load
is logged as it begins, with the checkpoint's path and size. Without ``checkpoint_dir``
a checkpoint asked for by a client goes to a temporary directory and is not loaded at
the next start: the daemon logs a WARNING saying where.

Signals: SIGINT and SIGTERM stop the daemon (after the shutdown checkpoint, if
configured); a second one while it stops is logged, a third makes it exit at once
with status 1, without finishing the shutdown. SIGHUP is logged and ignored (the
config is read only at start), so a closed terminal does not stop the daemon.

Exit status: 0 after SIGINT/SIGTERM, 1 when the server cannot start (port in use,
unusable checkpoint directory, refused or damaged checkpoint), the shutdown checkpoint
failed, or a third signal forced the exit, 2 for a bad config. ``--version`` prints the
version.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import ipaddress
import logging
import math
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import reverb_py
from reverb_py import _impl, errors, rate_limiters, selectors
from reverb_py.errors import ConfigError
from reverb_py.server import _auth
from reverb_py.server._limits import ServerLimits
from reverb_py.server._logs import LOG_FORMATS, configure_logging
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
_TOP_LEVEL_KEYS = (
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
    "log_format",
    "metrics_port",
    *_CREDENTIAL_KEYS,
)
_TABLE_KEYS = (
    "name",
    "sampler",
    "remover",
    "max_size",
    "max_times_sampled",
    "rate_limiter",
    "signature",
    "max_bytes",
)
_YEAR_S = 365 * 24 * 3600
# What a constructor raises for a value it refuses.
_REFUSALS = (ValueError, TypeError, OverflowError, errors.ReverbError)


def _did_you_mean(name: str, choices: Sequence[str]) -> str:
    """``; did you mean 'x'?`` for the choice closest to ``name``, or nothing."""
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


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


def _number(
    mapping: Mapping[str, Any],
    key: str,
    where: str,
    default: Any = ...,
    *,
    infinite: bool = False,
) -> Any:
    """A number (int or float) as a float: never NaN, infinite only where allowed."""
    if key not in mapping:
        return _field(mapping, key, where, (int, float), default)
    value = float(_field(mapping, key, where, (int, float)))
    if math.isnan(value) or (math.isinf(value) and not infinite):
        raise ConfigError(f"{where}.{key}: must be a finite number, got {value}")
    return value


def _at_least(
    mapping: Mapping[str, Any], key: str, where: str, low: int, default: Any = ...
) -> Any:
    """An integer >= ``low``."""
    if key not in mapping:
        return _field(mapping, key, where, int, default)
    value: int = _field(mapping, key, where, int)
    if value < low:
        words = "a positive integer" if low == 1 else f"at least {low}"
        raise ConfigError(f"{where}.{key}: must be {words}, got {value}")
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
        name = unknown[0]
        raise ConfigError(
            f"{where}.{name}: unknown field{_did_you_mean(name, allowed)} "
            f"(allowed: {', '.join(allowed)})"
        )


def _check_fields_of_kind(
    config: Mapping[str, Any], keys: Mapping[str, Sequence[str]], where: str
) -> None:
    """Checks the field names of a table with a ``kind``: those of its kind when it is a
    known one, else (``kind`` missing) those of every kind."""
    kind = config.get("kind")
    if isinstance(kind, str) and kind in keys:
        _check_keys(config, keys[kind], where)
    elif "kind" not in config:
        every = {key: None for names in keys.values() for key in names}
        _check_keys(config, list(every), where)


def _choice(
    mapping: Mapping[str, Any], key: str, where: str, choices: Sequence[str], what: str
) -> str:
    """``mapping[key]``, one of ``choices`` (the message calls it ``what``)."""
    value: str = _field(mapping, key, where, str)
    if value not in choices:
        raise ConfigError(
            f"{where}.{key}: unknown {what} {value!r}{_did_you_mean(value, choices)} "
            f"(one of: {', '.join(choices)})"
        )
    return value


_SIMPLE_SELECTORS: dict[str, Callable[[], selectors.ItemSelector]] = {
    "uniform": selectors.Uniform,
    "fifo": selectors.Fifo,
    "lifo": selectors.Lifo,
    "min_heap": selectors.MinHeap,
    "max_heap": selectors.MaxHeap,
}


def _selector(config: Any, where: str) -> selectors.ItemSelector:
    if not isinstance(config, dict):
        raise ConfigError(f'{where}: expected a table like {{kind = "uniform"}}')
    keys = {kind: ["kind"] for kind in _SIMPLE_SELECTORS}
    keys["prioritized"] = ["kind", "priority_exponent"]
    _check_fields_of_kind(config, keys, where)
    kind = _choice(config, "kind", where, ["prioritized", *_SIMPLE_SELECTORS], "selector")
    if kind != "prioritized":
        return _SIMPLE_SELECTORS[kind]()
    exponent = _number(config, "priority_exponent", where)
    if exponent < 0:
        raise ConfigError(f"{where}.priority_exponent: must be >= 0, got {exponent:g}")
    try:
        return selectors.Prioritized(exponent)
    except _REFUSALS as error:
        raise ConfigError(f"{where}.priority_exponent: {_one_line(error)}") from None


_RATE_LIMITER_KEYS = {
    "min_size": ["kind", "min_size_to_sample"],
    "sample_to_insert_ratio": ["kind", "samples_per_insert", "min_size_to_sample", "error_buffer"],
    "queue": ["kind", "size"],
    "stack": ["kind", "size"],
    "custom": ["kind", "samples_per_insert", "min_size_to_sample", "min_diff", "max_diff"],
}


def _rate_limiter(config: Any, where: str) -> rate_limiters.RateLimiter:
    if not isinstance(config, dict):
        raise ConfigError(f'{where}: expected a table like {{kind = "min_size"}}')
    _check_fields_of_kind(config, _RATE_LIMITER_KEYS, where)
    kind = _choice(config, "kind", where, list(_RATE_LIMITER_KEYS), "rate limiter")
    try:
        if kind == "min_size":
            return rate_limiters.MinSize(_at_least(config, "min_size_to_sample", where, 1))
        if kind in ("queue", "stack"):
            size = _at_least(config, "size", where, 1)
            return rate_limiters.Queue(size) if kind == "queue" else rate_limiters.Stack(size)
        samples_per_insert = _number(config, "samples_per_insert", where)
        if samples_per_insert <= 0:
            raise ConfigError(
                f"{where}.samples_per_insert: must be positive, got {samples_per_insert:g}"
            )
        min_size = _at_least(config, "min_size_to_sample", where, 1)
        if kind == "sample_to_insert_ratio":
            buffer = _field(config, "error_buffer", where, (int, float, list))
            if isinstance(buffer, list):
                if len(buffer) != 2 or not all(
                    isinstance(b, (int, float)) and not isinstance(b, bool) for b in buffer
                ):
                    raise ConfigError(
                        f"{where}.error_buffer: expected a number or [min_diff, max_diff]"
                    )
                pair = _diffs(float(buffer[0]), float(buffer[1]), f"{where}.error_buffer")
                return rate_limiters.SampleToInsertRatio(samples_per_insert, min_size, pair)
            number = _number(config, "error_buffer", where)
            if number < 0:
                raise ConfigError(f"{where}.error_buffer: must be >= 0, got {number:g}")
            return rate_limiters.SampleToInsertRatio(samples_per_insert, min_size, number)
        min_diff, max_diff = _diffs(
            _number(config, "min_diff", where, infinite=True),
            _number(config, "max_diff", where, infinite=True),
            where,
        )
        return rate_limiters.RateLimiter(samples_per_insert, min_size, min_diff, max_diff)
    except ConfigError:
        raise
    except _REFUSALS as error:
        raise ConfigError(f"{where}: {_one_line(error)}") from None


def _diffs(min_diff: float, max_diff: float, where: str) -> tuple[float, float]:
    """``(min_diff, max_diff)``, checked: no NaN, and the lower one first."""
    if math.isnan(min_diff) or math.isnan(max_diff):
        raise ConfigError(f"{where}: min_diff and max_diff must be numbers, not nan")
    if min_diff > max_diff:
        raise ConfigError(
            f"{where}: min_diff ({min_diff:g}) is above max_diff ({max_diff:g}): nothing "
            "could ever be inserted or sampled"
        )
    return min_diff, max_diff


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
        except _REFUSALS as error:
            raise ConfigError(f"{where}.dtype: {_one_line(error)}") from None
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
    """Builds the tables of a parsed config (see the module docstring).

    Raises:
      ConfigError: naming the first bad field.
    """
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
        _check_keys(entry, _TABLE_KEYS, where)
        name = _field(entry, "name", where, str)
        if not name:
            raise ConfigError(f"{where}.name: must not be empty")
        if name in names:
            raise ConfigError(f"{where}.name: duplicate table name {name!r}")
        names.add(name)
        max_size = _at_least(entry, "max_size", where, 1)
        max_bytes = _at_least(entry, "max_bytes", where, 1, None)
        sampler = _selector(_field(entry, "sampler", where, dict), f"{where}.sampler")
        remover = _selector(_field(entry, "remover", where, dict), f"{where}.remover")
        limiter = _rate_limiter(_field(entry, "rate_limiter", where, dict), f"{where}.rate_limiter")
        max_times_sampled = _field(entry, "max_times_sampled", where, int, 0)
        signature = (
            _signature(entry["signature"], f"{where}.signature") if "signature" in entry else None
        )
        try:
            table = Table(
                name=name,
                sampler=sampler,
                remover=remover,
                max_size=max_size,
                rate_limiter=limiter,
                max_times_sampled=max_times_sampled,
                signature=signature,
                max_bytes=max_bytes,
            )
        except _REFUSALS as error:
            raise ConfigError(f"{where}: {_one_line(error)}") from None
        tables.append(table)
    return tables


def load_config(path: str) -> dict[str, Any]:
    """Reads a TOML config file (its top-level names checked)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    try:
        with open(path, "rb") as file:
            config: dict[str, Any] = tomllib.load(file)
    except OSError as error:
        raise ConfigError(f"cannot read config {path}: {error.strerror or error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config {path} is not valid TOML: {_one_line(error)}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config {path} is not UTF-8 text") from None
    _check_keys(config, _TOP_LEVEL_KEYS, "config")
    return config


#: Extensions of TOML configs.
TOML_SUFFIXES = (".toml",)
#: Extensions of ``ReverbServerConfig`` textproto configs (a file without one is too).
TEXTPROTO_SUFFIXES = (".textproto", ".pbtxt", ".txt")


def read_config(value: str) -> tuple[dict[str, Any], list[Table], int]:
    """The settings, tables and port of ``--config VALUE``.

    ``VALUE`` is a TOML file (``.toml``), a ``ReverbServerConfig`` textproto file
    (``.textproto``, ``.pbtxt``, ``.txt`` or no extension), or, as Reverb's
    ``reverb_server --config`` takes it, the textproto itself. A textproto has no
    daemon settings (host, checkpoints): those come from the defaults and the command
    line; its port is used as written (0, or no ``port``: any free port).

    Raises:
      ConfigError: another extension, a file that cannot be read, or a bad value.
    """
    inline = not os.path.exists(value) and any(mark in value for mark in ":{<")
    if inline:
        proto = _textproto(lambda: server_from_proto.parse_config(value, "--config"))
        where = "--config"
    else:
        suffix = os.path.splitext(value)[1].lower()
        if suffix in TOML_SUFFIXES:
            config = load_config(value)
            return config, tables_from_config(config), port_from_config(config)
        if suffix and suffix not in TEXTPROTO_SUFFIXES:
            raise ConfigError(
                f"{value}: unknown config format {suffix!r} (.toml for TOML; .textproto, "
                ".pbtxt or .txt for Reverb's ReverbServerConfig textproto)"
            )
        if not os.path.isfile(value):
            reason = "not a file" if os.path.exists(value) else "no such file"
            raise ConfigError(f"cannot read config {value}: {reason}")
        proto = _textproto(lambda: server_from_proto.load_config(value))
        where = value
    if not proto.tables:
        raise ConfigError(f"{where}: tables: at least one table is needed")
    try:
        tables = server_from_proto.tables_from_proto(proto.tables)
    except _REFUSALS as error:
        raise ConfigError(f"{where}: tables: {_one_line(error)}") from None
    return {}, tables, proto.port


def _textproto(parse: Any) -> Any:
    """``parse()``; a ConfigError for a misspelt field gets the closest field's name."""
    import re

    try:
        return parse()
    except ConfigError as error:
        message = str(error)
        match = re.search(r'Message type "([\w.]+)" has no field named "(\w+)"', message)
        if match is None:
            raise
        fields = _message_fields(match.group(1))
        raise ConfigError(message.rstrip(".") + _did_you_mean(match.group(2), fields)) from None


def _message_fields(name: str) -> list[str]:
    """The field names of the message type ``name`` used by ``ReverbServerConfig``."""
    seen: set[str] = set()
    pending = [server_from_proto.ReverbServerConfig.DESCRIPTOR]
    while pending:
        descriptor = pending.pop()
        if descriptor.full_name in seen:
            continue
        seen.add(descriptor.full_name)
        if name in (descriptor.name, descriptor.full_name):
            return [field.name for field in descriptor.fields]
        pending.extend(
            field.message_type for field in descriptor.fields if field.message_type is not None
        )
    return []


def limits_from_config(config: Mapping[str, Any]) -> ServerLimits:
    """The config's ``[limits]`` table as :class:`ServerLimits` (defaults for the rest)."""
    values = config.get("limits", {})
    if not isinstance(values, Mapping):
        raise ConfigError(f"config.limits: must be a table, got {values!r}")
    _check_keys(values, [field.name for field in dataclasses.fields(ServerLimits)], "config.limits")
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"config.limits.{name}: must be an integer, got {value!r}")
    try:
        return ServerLimits.from_mapping(values, "config.limits")
    except _REFUSALS as error:
        raise ConfigError(_one_line(error)) from None


def log_level(flag: str | None, config: Mapping[str, Any]) -> int:
    """The logging level: ``--log-level``, else the config's ``log_level``, else INFO."""
    name = flag or _field(config, "log_level", "config", str, "info")
    if name.lower() not in LOG_LEVELS:
        raise ConfigError(
            f"config.log_level: one of {', '.join(LOG_LEVELS)}, got {name!r}"
            + _did_you_mean(name.lower(), list(LOG_LEVELS))
        )
    return LOG_LEVELS[name.lower()]


def log_format(flag: str | None, config: Mapping[str, Any]) -> str:
    """The log format: ``--log-format``, else the config's ``log_format``, else text."""
    name: str = flag or _field(config, "log_format", "config", str, "text")
    if name not in LOG_FORMATS:
        raise ConfigError(
            f"config.log_format: one of {', '.join(LOG_FORMATS)}, got {name!r}"
            + _did_you_mean(name, LOG_FORMATS)
        )
    return name


def _port(value: int, where: str) -> int:
    if not 0 <= value <= 65535:
        raise ConfigError(f"{where}: must be in 0..65535, got {value}")
    return value


def metrics_port(flag: int | None, config: Mapping[str, Any]) -> int | None:
    """The metrics port: ``--metrics-port``, else the config's ``metrics_port``, else
    None (no metrics)."""
    if flag is not None:
        return _port(flag, "--metrics-port")
    port: int | None = _field(config, "metrics_port", "config", int, None)
    return None if port is None else _port(port, "config.metrics_port")


def port_from_config(config: Mapping[str, Any]) -> int:
    """The config's ``port`` (default 8000), checked to be in 0..65535."""
    return _port(_field(config, "port", "config", int, DEFAULT_PORT), "config.port")


def check_host(host: str, where: str) -> str:
    """``host`` if a server can be told to bind it: a name or an address, without a
    port, an IPv6 address in brackets.

    Raises:
      ConfigError: naming ``where``.
    """
    if not host or host != host.strip() or any(char in host for char in " /\t\n"):
        raise ConfigError(f"{where}: not a host name or address: {host!r}")
    if host.startswith("["):
        inner = host[1:-1] if host.endswith("]") else ""
        try:
            ipaddress.IPv6Address(inner.split("%")[0])
        except ValueError:
            raise ConfigError(f"{where}: {host!r} is not an IPv6 address in brackets") from None
        return host
    if ":" in host:
        try:
            ipaddress.IPv6Address(host.split("%")[0])
        except ValueError:
            name, _, port = host.rpartition(":")
            hint = f" (set port = {port})" if port.isdigit() else ""
            raise ConfigError(
                f"{where}: {host!r} holds a port; give the host alone, {name!r}{hint}"
            ) from None
        raise ConfigError(f'{where}: an IPv6 address is written in brackets: "[{host}]"')
    return host


class CheckpointSettings:
    """The daemon's checkpoint options, checked."""

    def __init__(self, config: Mapping[str, Any], where: str = "config.checkpoint_dir") -> None:
        self.directory: str | None = _field(config, "checkpoint_dir", "config", str, None)
        if self.directory == "":
            raise ConfigError(f"{where}: must not be empty")
        interval = _number(config, "checkpoint_interval_seconds", "config", None)
        if interval is not None and not 0 < interval <= _YEAR_S:
            raise ConfigError(
                f"config.checkpoint_interval_seconds: must be positive and at most a year "
                f"({_YEAR_S} s), got {interval:g}"
            )
        self.interval: float | None = interval
        self.on_shutdown: bool = _field(config, "checkpoint_on_shutdown", "config", bool, False)
        self.keep: int = _at_least(config, "keep_checkpoints", "config", 1, 1)
        self.on_mismatch: str = _field(config, "on_checkpoint_mismatch", "config", str, "warn")
        if self.on_mismatch not in MISMATCH_POLICIES:
            raise ConfigError(
                f'config.on_checkpoint_mismatch: must be "warn" or "refuse", got '
                f"{self.on_mismatch!r}" + _did_you_mean(self.on_mismatch, MISMATCH_POLICIES)
            )
        if self.directory is None and (self.interval is not None or self.on_shutdown):
            raise ConfigError(
                "config.checkpoint_dir: needed by checkpoint_interval_seconds and "
                "checkpoint_on_shutdown"
            )
        try:
            self.checkpointer()
        except _REFUSALS as error:
            raise ConfigError(f"{where}: {_one_line(error)}") from None

    def checkpointer(self) -> Any:
        if self.directory is None:
            return None
        from reverb_py.checkpointers import DefaultCheckpointer

        return DefaultCheckpointer(self.directory, keep=self.keep)


def check_tls_files(cert: str | None, key: str | None, client_ca: str | None) -> None:
    """Checks that the TLS files hold what gRPC will need: a PEM certificate chain and
    its unencrypted private key, and PEM certificates of the client CA.

    Raises:
      ConfigError: naming the option and its file.
    """
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if cert is not None and key is not None:
        try:
            context.load_verify_locations(cafile=cert)
        except (ssl.SSLError, OSError):
            raise ConfigError(f"tls_cert_file: {cert!r} holds no PEM certificate") from None
        try:
            context.load_cert_chain(cert, key, password=lambda: b"")
        except (ssl.SSLError, OSError):
            raise ConfigError(
                f"tls_key_file: {key!r} is not the unencrypted PEM private key of the "
                f"certificate in {cert!r}"
            ) from None
    if client_ca is not None:
        try:
            context.load_verify_locations(cafile=client_ca)
        except (ssl.SSLError, OSError):
            raise ConfigError(
                f"tls_client_ca_file: {client_ca!r} holds no PEM certificate"
            ) from None


@dataclasses.dataclass
class Settings:
    """Everything the daemon serves with, checked."""

    tables: list[Table]
    host: str | None
    port: int
    checkpoints: CheckpointSettings
    limits: ServerLimits
    level: int
    log_format: str
    metrics_port: int | None
    token: str | None
    tls: _auth.ServerTLS | None


def settings(args: argparse.Namespace) -> Settings:
    """The daemon's settings from its arguments and their config.

    Raises:
      ConfigError: a bad value, naming it (one line).
    """
    if args.config:
        config, tables, config_port = read_config(args.config)
    else:
        config, tables, config_port = {}, default_tables(), DEFAULT_PORT
    if args.checkpoint_dir is not None:
        config = {**config, "checkpoint_dir": args.checkpoint_dir}
    level = log_level(args.log_level, config)
    format_ = log_format(args.log_format, config)
    host: str | None = args.host or _field(config, "host", "config", str, None)
    if host is not None:
        check_host(host, "--host" if args.host else "config.host")
    port = _port(args.port, "--port") if args.port is not None else config_port
    where = "--checkpoint-dir" if args.checkpoint_dir is not None else "config.checkpoint_dir"
    checkpoints = CheckpointSettings(config, where)
    limits = limits_from_config(config)
    metrics = metrics_port(args.metrics_port, config)
    if metrics is not None and metrics != 0 and metrics == port:
        where = "--metrics-port" if args.metrics_port is not None else "config.metrics_port"
        raise ConfigError(f"{where}: {metrics} is the server's port too")
    files = [
        getattr(args, key) or _field(config, key, "config", str, None) for key in _CREDENTIAL_KEYS
    ]
    try:
        token, tls = _auth.daemon_credentials(*files)
    except _REFUSALS as error:
        raise ConfigError(_one_line(error)) from None
    check_tls_files(files[1], files[2], files[3])
    return Settings(tables, host, port, checkpoints, limits, level, format_, metrics, token, tls)


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


def _checkpoint(server: Server, kind: str) -> bool:
    """Writes a checkpoint (the server logs it, or why it failed, in one line led by
    ``kind``); returns whether it was written."""
    try:
        server._checkpoint(kind)
    except Exception:  # noqa: BLE001 - keep serving; the server's log line says why.
        return False
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m reverb_py.server",
        description="reverb_py replay server. The config format, signals and exit "
        "statuses: docs/configuration.md of the repository, or python -m pydoc "
        "reverb_py.server._daemon.",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="config: TOML (.toml), Reverb's ReverbServerConfig textproto (.textproto, "
        ".pbtxt, .txt), or the textproto itself",
    )
    parser.add_argument(
        "--host", help=f"interface to bind (default: $REVERB_PY_HOST, else {DEFAULT_HOST})"
    )
    parser.add_argument("--port", type=int, help=f"port (default {DEFAULT_PORT})")
    parser.add_argument(
        "--checkpoint-dir", metavar="DIR", help="checkpoint directory (overrides the config's)"
    )
    # Reverb's spelling, kept working.
    parser.add_argument("--checkpoint_dir", dest="checkpoint_dir", help=argparse.SUPPRESS)
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
        "--log-format",
        choices=list(LOG_FORMATS),
        help="log lines as text or as JSON objects (default text; config key log_format)",
    )
    parser.add_argument(
        "--check-config", action="store_true", help="check the config and exit (0 ok, 2 bad)"
    )
    parser.add_argument("--version", action="version", version=f"reverb_py {reverb_py.__version__}")
    return parser


class _Signals:
    """Signals recorded by their handler and taken by the main thread; the interpreter
    writes a byte on the wakeup pipe for each, so that :meth:`wait` returns.

    NOTE(signal-wakeup): the handler only records the signal. Setting a threading.Event
    from the handler could deadlock: the handler runs in the main thread, which may be
    holding that Event's lock at that very moment (entering its wait).
    """

    def __init__(self) -> None:
        self.received: list[int] = []
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._previous_wakeup = signal.set_wakeup_fd(self._write)
        self._previous: dict[int, Any] = {}

    def handle(self, *signums: int) -> None:
        """Records these signals from now on (instead of their former action)."""
        for signum in signums:
            previous = signal.signal(signum, self._record)
            self._previous.setdefault(signum, previous)

    def _record(self, signum: int, _frame: Any) -> None:
        self.received.append(signum)

    def wake(self) -> None:
        """Ends a :meth:`wait` (from any thread)."""
        try:
            os.write(self._write, b"\0")
        except BlockingIOError:
            pass  # The pipe is full: a wait ends anyway.

    def wait(self, timeout: float | None) -> bool:
        """Waits for a signal or :meth:`wake`; whether one came before ``timeout``."""
        ready, _, _ = select.select([self._read], [], [], timeout)
        if ready:
            _drain(self._read)
        return bool(ready) or bool(self.received)

    def close(self) -> None:
        signal.set_wakeup_fd(self._previous_wakeup)
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        os.close(self._read)
        os.close(self._write)


def _flush_logs() -> None:
    for handler in logging.getLogger().handlers + _logger.handlers:
        handler.flush()


def _serve(server: Server, checkpoints: CheckpointSettings, signals: _Signals) -> int:
    """Serves until SIGINT/SIGTERM, then stops; the exit status."""
    stopped: list[bool] = []  # Whether the shutdown checkpoint (if any) was written.
    stop_signals = 0

    def shut_down() -> None:
        saved = True
        try:
            if checkpoints.on_shutdown:
                saved = _checkpoint(server, "shutdown")
            server.stop(grace=1.0)
        except Exception as error:  # noqa: BLE001 - the log and the status say it.
            _logger.error("stopping failed: %s", error)
            saved = False
        finally:
            stopped.append(saved)
            signals.wake()

    while not stopped:
        timeout = checkpoints.interval if stop_signals == 0 else None
        if not signals.wait(timeout) and stop_signals == 0:
            _checkpoint(server, "periodic")
        while signals.received:
            signum = signals.received.pop(0)
            name = signal.Signals(signum).name
            if signum == signal.SIGHUP:
                _logger.info(
                    "received SIGHUP: ignored (the config is read only at start; stop the "
                    "daemon with SIGTERM)"
                )
                continue
            stop_signals += 1
            if stop_signals == 1:
                _logger.info("received %s, stopping", name)
                threading.Thread(target=shut_down, name="reverb_py-shutdown").start()
            elif stop_signals == 2:
                _logger.warning("received %s: already stopping; send again to force exit", name)
            else:
                _logger.error(
                    "received %s again: forced exit before the shutdown finished (exit status 1)",
                    name,
                )
                _flush_logs()
                os._exit(1)
    if not stopped[0]:
        _logger.error("stopped; the shutdown checkpoint was not written (exit status 1)")
        return 1
    _logger.info("stopped")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the daemon until SIGINT or SIGTERM; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        checked = settings(args)
    except ConfigError as error:
        print(f"reverb_py.server: bad config: {_one_line(error)}", file=sys.stderr)
        return 2
    if args.check_config:
        print(f"reverb_py.server: config OK ({len(checked.tables)} tables)")
        return 0
    # DEBUG is reverb_py's own: gRPC's and asyncio's debug lines stay out.
    configure_logging(checked.level, checked.log_format)
    checkpoints = checked.checkpoints
    # SIGHUP is ignored (logged) from here on: a closed terminal does not stop a
    # loading daemon. SIGINT and SIGTERM stop it at once until it serves.
    signals = _Signals()
    signals.handle(signal.SIGHUP)
    try:
        try:
            if checkpoints.directory is not None:
                check_checkpoint_dir(checkpoints.directory)
            server = Server(
                checked.tables,
                port=checked.port,
                host=checked.host,
                checkpointer=checkpoints.checkpointer(),
                on_checkpoint_mismatch=checkpoints.on_mismatch,
                limits=checked.limits,
                token=checked.token,
                tls=checked.tls,
                metrics_port=checked.metrics_port,
            )
        except (ValueError, OSError, errors.ReverbError) as error:
            print(f"reverb_py.server: {_one_line(error)}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("reverb_py.server: interrupted while starting", file=sys.stderr)
            return 1
        signals.handle(signal.SIGINT, signal.SIGTERM)
        _logger.info("serving on %s (implementation: %s)", server.address, _impl.IMPLEMENTATION)
        if server.metrics_port is not None:
            _logger.info("metrics on port %d at /metrics", server.metrics_port)
        for table in checked.tables:
            _logger.info("table %r: %r", table.name, table)
        if checkpoints.directory is None:
            _logger.warning(
                "no checkpoint_dir: a checkpoint a client asks for goes to %s, a temporary "
                "directory, and will not be loaded at the next start (set checkpoint_dir or "
                "--checkpoint-dir)",
                getattr(server.checkpointer, "path", "a temporary directory"),
            )
        return _serve(server, checkpoints, signals)
    finally:
        signals.close()
