"""``python -m reverb_py.server``: the replay server as a daemon.

Its reference is ``docs/configuration.md`` (the documentation site's Configuration
page): every config key with its type, default and range, ``[limits]``, the
command-line flags and Reverb's textproto form, rendered by :func:`config_reference`
from the settings declared here (the validation reads the same declarations), and the
checkpoint behaviour, signals and exit statuses. With no config the daemon serves one
table ``my_table`` (Uniform sampler, Fifo remover, ``MinSize(1)``, ``max_size``
1,000,000) on ``localhost:8000``. A TOML config looks like this::

    host = "localhost"      # "0.0.0.0" or "[::]" to accept other machines
    port = 8000
    checkpoint_dir = "/var/lib/replay"   # load the newest checkpoint at start, save here
    checkpoint_interval_seconds = 600    # also save periodically (optional)
    checkpoint_on_shutdown = true        # and once more on SIGINT/SIGTERM (optional)
    keep_checkpoints = 2                 # how many complete checkpoints to keep
    on_checkpoint_mismatch = "warn"      # or "refuse"
    log_level = "info"
    log_format = "text"
    token_file = "/etc/replay/token"     # clients must send this bearer token (optional)
    tls_cert_file = "/etc/replay/server.pem"   # TLS (optional)
    tls_key_file = "/etc/replay/server.key"
    tls_client_ca_file = "/etc/replay/ca.pem"  # mutual TLS (optional)
    metrics_port = 9090                  # Prometheus metrics at /metrics (optional)

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
    max_message_bytes = 268_435_456
    max_streams = 1024

Selector kinds, rate-limiter kinds and every other key: ``docs/configuration.md``, or
``python -c "from reverb_py.server import _daemon; print(_daemon.config_reference())"``.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import inspect
import ipaddress
import logging
import math
import os
import re
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

__all__ = ["ConfigError", "config_reference", "load_config", "tables_from_config", "main"]

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
_YEAR_S = 365 * 24 * 3600
# What a constructor raises for a value it refuses.
_REFUSALS = (ValueError, TypeError, OverflowError, errors.ReverbError)
# A number setting's kind: an integer or a float, read as a float.
_NUMBER = (int, float)


# ------------------------------------------------------------------ the settings
#
# Every key the daemon accepts is declared once below, as a Setting with its doc: the
# validation takes the allowed keys (unknown ones are refused, with did-you-mean), the
# defaults, the types and the bounds from these declarations, and config_reference()
# renders them for docs/configuration.md. A Setting cannot be declared without a doc.


@dataclasses.dataclass(frozen=True)
class Bounds:
    """The values a number setting takes: from ``low`` (excluded when ``low_open``) to
    ``high``; ``high_words`` is how the messages name ``high`` (default: the number)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_words: str = ""

    def words(self, integer: bool) -> str:
        """What a value must be: ``a positive integer``, ``in 0..65535``, ``>= 0``..."""
        if integer and self.low == 1 and self.high is None and not self.low_open:
            return "a positive integer"
        if self.low is not None and self.high is not None and not self.low_open:
            if not self.high_words:
                return f"in {self.low:g}..{self.high:g}"
        parts = []
        if self.low is not None:
            if self.low == 0 and self.low_open:
                parts.append("positive")
            else:
                parts.append(f"{'>' if self.low_open else '>='} {self.low:g}")
        if self.high is not None:
            parts.append(f"at most {self.high_words or format(self.high, 'g')}")
        return " and ".join(parts)

    def check(self, value: float, where: str) -> None:
        """Raises a ConfigError naming ``where`` when ``value`` is out of bounds."""
        low, high = self.low, self.high
        if (low is not None and (value < low or (self.low_open and value == low))) or (
            high is not None and value > high
        ):
            integer = isinstance(value, int)
            got = str(value) if integer else f"{value:g}"
            raise ConfigError(f"{where}: must be {self.words(integer)}, got {got}")


#: The default of a setting that must be given.
REQUIRED: Any = ...


@dataclasses.dataclass(frozen=True)
class Setting:
    """One config key: its name, what it takes, its default, its bounds or choices,
    and its doc (one line, Markdown: rendered by :func:`config_reference`)."""

    key: str
    kind: type | tuple[type, ...]
    doc: str
    default: Any = REQUIRED
    bounds: Bounds | None = None
    choices: tuple[str, ...] = ()
    #: Numbers: whether ``inf`` and ``-inf`` are allowed.
    infinite: bool = False
    #: The type as the reference names it (default: from ``kind``).
    type_words: str = ""
    #: The default as the reference names it (default: from ``default``).
    default_words: str = ""

    def __post_init__(self) -> None:
        if not self.key or not self.doc.strip():
            raise ValueError(f"setting {self.key!r}: every setting needs a key and a doc")

    def read(self, mapping: Mapping[str, Any], where: str) -> Any:
        """``mapping[key]`` checked against the kind and the bounds (a number as a float);
        the default when it is absent.

        Raises:
          ConfigError: missing (no default), of another kind, or out of bounds.
        """
        if self.key not in mapping:
            return _field(mapping, self.key, where, self.kind, self.default)
        if self.kind == _NUMBER:
            value = _number(mapping, self.key, where, infinite=self.infinite)
        else:
            value = _field(mapping, self.key, where, self.kind)
        if self.bounds is not None:
            self.bounds.check(value, f"{where}.{self.key}")
        return value


def _read_in(
    settings: Mapping[str, Setting], mapping: Mapping[str, Any], where: str, key: str
) -> Any:
    """``settings[key].read(mapping, where)``: a key read must be declared."""
    return settings[key].read(mapping, where)


def _settings(*settings: Setting) -> dict[str, Setting]:
    """The settings by key, in order (a key declared twice is an error)."""
    by_key = {setting.key: setting for setting in settings}
    if len(by_key) != len(settings):
        raise ValueError("a setting is declared twice")
    return by_key


@dataclasses.dataclass(frozen=True)
class Kind:
    """One ``kind`` of a selector or rate limiter: its doc and its fields."""

    name: str
    doc: str
    settings: dict[str, Setting] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.doc.strip():
            raise ValueError(f"kind {self.name!r}: every kind needs a doc")


def _kinds(*kinds: Kind) -> dict[str, Kind]:
    return {kind.name: kind for kind in kinds}


_PORT_BOUNDS = Bounds(0, 65535)

#: The top-level keys of a TOML config.
TOP_LEVEL_SETTINGS = _settings(
    Setting(
        "host",
        str,
        "The interface to bind: a name or an address, without a port, an IPv6 address in "
        'brackets; `"0.0.0.0"` or `"[::]"` accepts other machines. The port is bound on '
        "every address the name resolves to.",
        None,
        default_words=f"`$REVERB_PY_HOST`, else `{DEFAULT_HOST}`",
    ),
    Setting(
        "port",
        int,
        "The port (0: any free port; the daemon logs the one bound).",
        DEFAULT_PORT,
        _PORT_BOUNDS,
    ),
    Setting(
        "tables",
        list,
        "The tables served, one `[[tables]]` entry each (below); at least one.",
        None,
        type_words="array of tables",
        default_words="one table `my_table`: Uniform sampler, Fifo remover, `MinSize(1)`, "
        "`max_size` 1,000,000",
    ),
    Setting(
        "checkpoint_dir",
        str,
        "Where checkpoints are written: the newest complete one there is loaded at start, "
        "`Client.checkpoint()` writes there. Created if missing; must be writable.",
        None,
        default_words="none: a checkpoint a client asks for goes to a temporary directory",
    ),
    Setting(
        "checkpoint_interval_seconds",
        _NUMBER,
        "Also write a checkpoint this often (needs `checkpoint_dir`).",
        None,
        Bounds(0, _YEAR_S, low_open=True, high_words=f"a year ({_YEAR_S} s)"),
        default_words="none: no periodic checkpoints",
    ),
    Setting(
        "checkpoint_on_shutdown",
        bool,
        "Also write a checkpoint when SIGINT or SIGTERM stops the daemon (needs "
        "`checkpoint_dir`); when it fails the exit status is 1.",
        False,
    ),
    Setting(
        "shutdown_grace_seconds",
        _NUMBER,
        "When SIGINT or SIGTERM stops the daemon (after the shutdown checkpoint), how long "
        "calls still open (writers' and samplers' streams) get to end before they are "
        "cancelled.",
        1.0,
        Bounds(0, 3600, high_words="an hour (3600 s)"),
    ),
    Setting(
        "keep_checkpoints",
        int,
        "How many complete checkpoints are kept in `checkpoint_dir` (older ones are removed).",
        1,
        Bounds(1),
    ),
    Setting(
        "on_checkpoint_mismatch",
        str,
        "When a restored table's settings differ from the config's: `warn` logs them and "
        "serves the checkpoint's, `refuse` exits with status 1.",
        "warn",
        choices=MISMATCH_POLICIES,
    ),
    Setting(
        "limits",
        dict,
        "Bounds on what clients can make the server hold (`[limits]`, below).",
        {},
        default_words="the defaults below",
    ),
    Setting(
        "log_level",
        str,
        "What the daemon logs (any case).",
        "info",
        choices=tuple(LOG_LEVELS),
    ),
    Setting(
        "log_format",
        str,
        "`text` (time, level, logger, process id, message) or `json` (one object per line).",
        "text",
        choices=tuple(LOG_FORMATS),
    ),
    Setting(
        "metrics_port",
        int,
        "Serve Prometheus metrics at `/metrics` and the status page on this port "
        "(0: any free port); not the server's port.",
        None,
        _PORT_BOUNDS,
        default_words="none: no metrics",
    ),
    Setting(
        "token_file",
        str,
        "A file holding the bearer token clients must send.",
        None,
        default_words="`$REVERB_PY_TOKEN` / `$REVERB_PY_TOKEN_FILE`, else none: no token",
    ),
    Setting(
        "tls_cert_file",
        str,
        "TLS: the server's PEM certificate chain (with `tls_key_file`).",
        None,
        default_words="none: no TLS",
    ),
    Setting(
        "tls_key_file",
        str,
        "TLS: the unencrypted PEM private key of `tls_cert_file`'s certificate.",
        None,
        default_words="none",
    ),
    Setting(
        "tls_client_ca_file",
        str,
        "Mutual TLS: the PEM certificates of the CA that signs client certificates "
        "(needs `tls_cert_file` and `tls_key_file`).",
        None,
        default_words="none: clients need no certificate",
    ),
)
_CREDENTIAL_KEYS = ("token_file", "tls_cert_file", "tls_key_file", "tls_client_ca_file")

#: The keys of a ``[[tables]]`` entry.
TABLE_SETTINGS = _settings(
    Setting("name", str, "The table's name, unique among the tables; not empty."),
    Setting("sampler", dict, "How items are sampled: a selector (below).", type_words="selector"),
    Setting(
        "remover",
        dict,
        "Which item is removed when the table is full: a selector (below).",
        type_words="selector",
    ),
    Setting("max_size", int, "The most items the table holds.", bounds=Bounds(1)),
    Setting(
        "max_times_sampled",
        int,
        "An item is removed once sampled this many times (0 or less: never).",
        0,
        default_words="`0`: never",
    ),
    Setting(
        "rate_limiter",
        dict,
        "When inserts and samples wait for each other: a rate limiter (below).",
        type_words="rate limiter",
    ),
    Setting(
        "signature",
        dict,
        "The items' structure, reported by `server_info` and checked by writers: a spec "
        "(below), or a table or an array of them.",
        None,
        type_words="spec, or table / array of specs",
        default_words="none",
    ),
    Setting(
        "max_bytes",
        int,
        "Remove items (as the remover picks them) once the table's chunks pass this many bytes.",
        None,
        Bounds(1),
        default_words="none: no bound",
    ),
)

#: The kinds of ``sampler`` and ``remover``, with their fields (``kind`` besides).
SELECTOR_KINDS = _kinds(
    Kind(
        "prioritized",
        "Items with probability proportional to `priority ** priority_exponent`.",
        _settings(
            Setting(
                "priority_exponent",
                _NUMBER,
                "0 samples uniformly; 1 in proportion to the priorities.",
                bounds=Bounds(0),
            )
        ),
    ),
    Kind("uniform", "Every item equally likely."),
    Kind("fifo", "The oldest item first."),
    Kind("lifo", "The newest item first."),
    Kind(
        "min_heap",
        "The item of the lowest priority first (ties: the least recently inserted or updated).",
    ),
    Kind(
        "max_heap",
        "The item of the highest priority first (ties: the least recently inserted or updated).",
    ),
)

_KIND_OF_SELECTOR = Setting("kind", str, "The selector's kind.", choices=tuple(SELECTOR_KINDS))

_MIN_SIZE_TO_SAMPLE = Setting(
    "min_size_to_sample",
    int,
    "Samples wait until the table holds this many items.",
    bounds=Bounds(1),
)
_SAMPLES_PER_INSERT = Setting(
    "samples_per_insert",
    _NUMBER,
    "The ratio of samples to inserts kept.",
    bounds=Bounds(0, low_open=True),
)
_QUEUE_SIZE = Setting("size", int, "The most items waiting to be sampled.", bounds=Bounds(1))

#: The kinds of ``rate_limiter``, with their fields (``kind`` besides).
RATE_LIMITER_KINDS = _kinds(
    Kind(
        "min_size",
        "Samples wait until the table holds `min_size_to_sample` items; inserts never wait.",
        _settings(_MIN_SIZE_TO_SAMPLE),
    ),
    Kind(
        "sample_to_insert_ratio",
        "Keeps the samples per insert near `samples_per_insert`, within `error_buffer`.",
        _settings(
            _SAMPLES_PER_INSERT,
            _MIN_SIZE_TO_SAMPLE,
            Setting(
                "error_buffer",
                (int, float, list),
                "The error `inserts * samples_per_insert - samples` is kept within "
                "`samples_per_insert * min_size_to_sample` ± a number, or within "
                "`[min_diff, max_diff]`; at least `2 * max(1, samples_per_insert)` wide.",
                bounds=Bounds(0),
                type_words="number or `[min_diff, max_diff]`",
            ),
        ),
    ),
    Kind(
        "queue",
        "A FIFO queue of `size` items: each is sampled once (use a `fifo` sampler and "
        "remover and `max_times_sampled = 1`).",
        _settings(_QUEUE_SIZE),
    ),
    Kind(
        "stack",
        "A LIFO stack of `size` items: each is sampled once (use a `lifo` sampler and "
        "remover and `max_times_sampled = 1`).",
        _settings(_QUEUE_SIZE),
    ),
    Kind(
        "custom",
        "Reverb's `RateLimiter`: once the table holds `min_size_to_sample` items, the "
        "error `inserts * samples_per_insert - samples` is kept within "
        "`[min_diff, max_diff]` (inserts wait above it, samples below).",
        _settings(
            _SAMPLES_PER_INSERT,
            _MIN_SIZE_TO_SAMPLE,
            Setting("min_diff", _NUMBER, "The lower bound (`-inf` allowed).", infinite=True),
            Setting(
                "max_diff",
                _NUMBER,
                "The upper bound (`inf` allowed); not below `min_diff`.",
                infinite=True,
            ),
        ),
    ),
)
_KIND_OF_RATE_LIMITER = Setting(
    "kind", str, "The rate limiter's kind.", choices=tuple(RATE_LIMITER_KINDS)
)

#: The keys of a spec in ``signature`` (a table with ``dtype``).
SPEC_SETTINGS = _settings(
    Setting("dtype", str, "numpy's name of the dtype: `float32`, `int64`, `uint8`, `bool`..."),
    Setting(
        "shape",
        list,
        "The dimensions; -1 for one of unknown size.",
        [],
        type_words="array of integers",
        default_words="`[]` (a scalar)",
    ),
    Setting("name", str, "The spec's name.", None, default_words="none"),
)


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


def _check_fields_of_kind(config: Mapping[str, Any], kinds: Mapping[str, Kind], where: str) -> None:
    """Checks the field names of a table with a ``kind``: those of its kind when it is a
    known one, else (``kind`` missing) those of every kind."""
    keys = {name: ["kind", *kind.settings] for name, kind in kinds.items()}
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
    _check_fields_of_kind(config, SELECTOR_KINDS, where)
    kind = _choice(config, _KIND_OF_SELECTOR.key, where, _KIND_OF_SELECTOR.choices, "selector")
    fields = SELECTOR_KINDS[kind].settings
    if kind != "prioritized":
        return _SIMPLE_SELECTORS[kind]()
    exponent = fields["priority_exponent"].read(config, where)
    try:
        return selectors.Prioritized(exponent)
    except _REFUSALS as error:
        raise ConfigError(f"{where}.priority_exponent: {_one_line(error)}") from None


def _rate_limiter(config: Any, where: str) -> rate_limiters.RateLimiter:
    if not isinstance(config, dict):
        raise ConfigError(f'{where}: expected a table like {{kind = "min_size"}}')
    _check_fields_of_kind(config, RATE_LIMITER_KINDS, where)
    kind = _choice(
        config, _KIND_OF_RATE_LIMITER.key, where, _KIND_OF_RATE_LIMITER.choices, "rate limiter"
    )
    fields = RATE_LIMITER_KINDS[kind].settings
    try:
        if kind == "min_size":
            return rate_limiters.MinSize(fields["min_size_to_sample"].read(config, where))
        if kind in ("queue", "stack"):
            size = fields["size"].read(config, where)
            return rate_limiters.Queue(size) if kind == "queue" else rate_limiters.Stack(size)
        samples_per_insert = fields["samples_per_insert"].read(config, where)
        min_size = fields["min_size_to_sample"].read(config, where)
        if kind == "sample_to_insert_ratio":
            error_buffer = fields["error_buffer"]
            buffer = _field(config, error_buffer.key, where, error_buffer.kind)
            if isinstance(buffer, list):
                if len(buffer) != 2 or not all(
                    isinstance(b, (int, float)) and not isinstance(b, bool) for b in buffer
                ):
                    raise ConfigError(
                        f"{where}.error_buffer: expected a number or [min_diff, max_diff]"
                    )
                pair = _diffs(float(buffer[0]), float(buffer[1]), f"{where}.error_buffer")
                return rate_limiters.SampleToInsertRatio(samples_per_insert, min_size, pair)
            number = _number(config, error_buffer.key, where)
            if error_buffer.bounds is not None:
                error_buffer.bounds.check(number, f"{where}.error_buffer")
            return rate_limiters.SampleToInsertRatio(samples_per_insert, min_size, number)
        min_diff, max_diff = _diffs(
            fields["min_diff"].read(config, where),
            fields["max_diff"].read(config, where),
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
        _check_keys(value, list(SPEC_SETTINGS), where)
        dtype = SPEC_SETTINGS["dtype"].read(value, where)
        shape = SPEC_SETTINGS["shape"].read(value, where)
        if not all(isinstance(dim, int) and not isinstance(dim, bool) for dim in shape):
            raise ConfigError(f"{where}.shape: expected a list of integers (-1: unknown)")
        if any(dim < -1 for dim in shape):
            raise ConfigError(f"{where}.shape: dimensions are >= 0, or -1 for unknown")
        name = SPEC_SETTINGS["name"].read(value, where)
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
    """Builds the tables of a parsed config (see :data:`TABLE_SETTINGS`).

    Raises:
      ConfigError: naming the first bad field.
    """
    entries = TOP_LEVEL_SETTINGS["tables"].read(config, "config")
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
        _check_keys(entry, list(TABLE_SETTINGS), where)
        read = functools.partial(_read_in, TABLE_SETTINGS, entry, where)
        name = read("name")
        if not name:
            raise ConfigError(f"{where}.name: must not be empty")
        if name in names:
            raise ConfigError(f"{where}.name: duplicate table name {name!r}")
        names.add(name)
        max_size = read("max_size")
        max_bytes = read("max_bytes")
        sampler = _selector(read("sampler"), f"{where}.sampler")
        remover = _selector(read("remover"), f"{where}.remover")
        limiter = _rate_limiter(read("rate_limiter"), f"{where}.rate_limiter")
        max_times_sampled = read("max_times_sampled")
        # A spec, or a table or an array of specs: _signature checks the kinds.
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
    _check_keys(config, list(TOP_LEVEL_SETTINGS), "config")
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
    name = flag or _read_in(TOP_LEVEL_SETTINGS, config, "config", "log_level")
    if name.lower() not in LOG_LEVELS:
        raise ConfigError(
            f"config.log_level: one of {', '.join(LOG_LEVELS)}, got {name!r}"
            + _did_you_mean(name.lower(), list(LOG_LEVELS))
        )
    return LOG_LEVELS[name.lower()]


def log_format(flag: str | None, config: Mapping[str, Any]) -> str:
    """The log format: ``--log-format``, else the config's ``log_format``, else text."""
    setting = TOP_LEVEL_SETTINGS["log_format"]
    name: str = flag or setting.read(config, "config")
    if name not in setting.choices:
        raise ConfigError(
            f"config.log_format: one of {', '.join(LOG_FORMATS)}, got {name!r}"
            + _did_you_mean(name, setting.choices)
        )
    return name


def _port(value: int, where: str) -> int:
    _PORT_BOUNDS.check(value, where)
    return value


def metrics_port(flag: int | None, config: Mapping[str, Any]) -> int | None:
    """The metrics port: ``--metrics-port``, else the config's ``metrics_port``, else
    None (no metrics)."""
    if flag is not None:
        return _port(flag, "--metrics-port")
    port: int | None = _read_in(TOP_LEVEL_SETTINGS, config, "config", "metrics_port")
    return port


def port_from_config(config: Mapping[str, Any]) -> int:
    """The config's ``port`` (default 8000), checked to be in 0..65535."""
    port: int = _read_in(TOP_LEVEL_SETTINGS, config, "config", "port")
    return port


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
        read = functools.partial(_read_in, TOP_LEVEL_SETTINGS, config, "config")
        self.directory: str | None = read("checkpoint_dir")
        if self.directory == "":
            raise ConfigError(f"{where}: must not be empty")
        self.interval: float | None = read("checkpoint_interval_seconds")
        self.on_shutdown: bool = read("checkpoint_on_shutdown")
        self.keep: int = read("keep_checkpoints")
        self.on_mismatch: str = read("on_checkpoint_mismatch")
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
    shutdown_grace: float = 1.0


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
    read = functools.partial(_read_in, TOP_LEVEL_SETTINGS, config, "config")
    host: str | None = args.host or read("host")
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
    files = [getattr(args, key) or read(key) for key in _CREDENTIAL_KEYS]
    try:
        token, tls = _auth.daemon_credentials(*files)
    except _REFUSALS as error:
        raise ConfigError(_one_line(error)) from None
    check_tls_files(files[1], files[2], files[3])
    grace = float(read("shutdown_grace_seconds"))
    return Settings(
        tables, host, port, checkpoints, limits, level, format_, metrics, token, tls, grace
    )


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
        description="reverb_py replay server. Every config key (type, default, range), "
        "the textproto form, checkpoints, signals and exit statuses: "
        "docs/configuration.md (the documentation's Configuration page), or python -m "
        "pydoc reverb_py.server._daemon.",
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
        doc = TOP_LEVEL_SETTINGS[key].doc.replace("`", "")
        parser.add_argument(f"--{key.replace('_', '-')}", metavar="PATH", help=doc)
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


# ------------------------------------------------------------------ the reference
#
# docs/configuration.md shows what config_reference() renders from the declarations above,
# ServerLimits' fields, the parser's flags and TEXTPROTO_FIELDS (its build inserts it).


@dataclasses.dataclass(frozen=True)
class ProtoField:
    """A field of Reverb's ``ReverbServerConfig`` textproto and what it sets, in the
    TOML config's terms (``toml`` empty: read and ignored)."""

    message: str
    field: str
    toml: str
    doc: str


_COUNTER = "A checkpoint's counter."

#: Every field of ``ReverbServerConfig`` and of the messages it holds (a signature's
#: ``StructuredValue`` aside), by message.
TEXTPROTO_FIELDS = (
    ProtoField("ReverbServerConfig", "port", "`port`", "0 or absent: any free port."),
    ProtoField(
        "ReverbServerConfig", "tables", "`[[tables]]`", "One entry per table; at least one."
    ),
    ProtoField("PriorityTableCheckpoint", "table_name", "`name`", "Not empty, unique."),
    ProtoField("PriorityTableCheckpoint", "sampler", "`sampler`", "A `KeyDistributionOptions`."),
    ProtoField("PriorityTableCheckpoint", "remover", "`remover`", "A `KeyDistributionOptions`."),
    ProtoField("PriorityTableCheckpoint", "max_size", "`max_size`", "Positive."),
    ProtoField(
        "PriorityTableCheckpoint", "max_times_sampled", "`max_times_sampled`", "Not negative."
    ),
    ProtoField(
        "PriorityTableCheckpoint",
        "rate_limiter",
        '`rate_limiter` of `kind = "custom"`',
        "A `RateLimiterCheckpoint`.",
    ),
    ProtoField(
        "PriorityTableCheckpoint",
        "signature",
        "`signature`",
        "A `StructuredValue`, as TensorFlow's structure coder writes it.",
    ),
    ProtoField("PriorityTableCheckpoint", "num_deleted_episodes", "", _COUNTER),
    ProtoField("PriorityTableCheckpoint", "num_unique_samples", "", _COUNTER),
    ProtoField("PriorityTableCheckpoint", "deprecated_items", "", "A checkpoint's items."),
    ProtoField("KeyDistributionOptions", "fifo", '`kind = "fifo"`', "`fifo: true`."),
    ProtoField("KeyDistributionOptions", "lifo", '`kind = "lifo"`', "`lifo: true`."),
    ProtoField("KeyDistributionOptions", "uniform", '`kind = "uniform"`', "`uniform: true`."),
    ProtoField(
        "KeyDistributionOptions",
        "prioritized",
        '`kind = "prioritized"`',
        "`prioritized { priority_exponent: 0.8 }`.",
    ),
    ProtoField(
        "KeyDistributionOptions",
        "heap",
        '`kind = "min_heap"` or `"max_heap"`',
        "`heap { min_heap: true }`, or `false`.",
    ),
    ProtoField("KeyDistributionOptions", "is_deterministic", "", ""),
    ProtoField(
        "KeyDistributionOptions.Prioritized",
        "priority_exponent",
        "`priority_exponent`",
        "At least 0.",
    ),
    ProtoField(
        "KeyDistributionOptions.Heap",
        "min_heap",
        '`kind = "min_heap"` (true) or `"max_heap"` (false)',
        "",
    ),
    ProtoField("RateLimiterCheckpoint", "samples_per_insert", "`samples_per_insert`", "Positive."),
    ProtoField("RateLimiterCheckpoint", "min_size_to_sample", "`min_size_to_sample`", "Positive."),
    ProtoField("RateLimiterCheckpoint", "min_diff", "`min_diff`", ""),
    ProtoField("RateLimiterCheckpoint", "max_diff", "`max_diff`", "Not below `min_diff`."),
    ProtoField("RateLimiterCheckpoint", "sample_count", "", _COUNTER),
    ProtoField("RateLimiterCheckpoint", "insert_count", "", _COUNTER),
    ProtoField("RateLimiterCheckpoint", "delete_count", "", _COUNTER),
)

#: A signature in TOML, shown by the reference.
SIGNATURE_EXAMPLE = """\
[tables.signature]
observation = {dtype = "float32", shape = [84, 84, 4]}
action = {dtype = "int32"}
"""

#: The parts of the reference, as :func:`config_reference` names them.
REFERENCE_PARTS = ("flags", "keys", "limits", "textproto")


def config_reference(part: str | None = None) -> str:
    """The daemon's configuration reference, in Markdown: ``part`` of it (one of
    :data:`REFERENCE_PARTS`: the command-line flags, the TOML keys, ``[limits]``, the
    textproto's fields), or all of them.

    Rendered from the declarations the daemon validates with (:data:`TOP_LEVEL_SETTINGS`,
    :data:`TABLE_SETTINGS`, :data:`SELECTOR_KINDS`, :data:`RATE_LIMITER_KINDS`,
    :data:`SPEC_SETTINGS`), :class:`ServerLimits`' fields and docs, the daemon's argument
    parser and :data:`TEXTPROTO_FIELDS`; ``docs/configuration.md`` shows it.

    Raises:
      ValueError: an unknown part, or a limit without a doc.
    """
    render = {
        "flags": _flags_reference,
        "keys": _keys_reference,
        "limits": _limits_reference,
        "textproto": _textproto_reference,
    }
    if part is None:
        return "\n".join(render[name]() for name in REFERENCE_PARTS)
    if part not in render:
        raise ValueError(f"unknown reference part {part!r} (one of: {', '.join(render)})")
    return render[part]()


def _sentence(text: str) -> str:
    """``text`` with a capital and a full stop."""
    text = text.strip()
    if not text:
        return text
    return text[0].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(" --- " for _ in header) + "|",
        *("| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows),
    ]
    return "\n".join(lines) + "\n"


def _toml(value: Any) -> str:
    """``value`` as TOML writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, int):
        return f"{value:_}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return str(value)


def _type_words(setting: Setting) -> str:
    if setting.type_words:
        return setting.type_words
    names = {int: "integer", str: "string", bool: "boolean", dict: "table", list: "array"}
    if setting.kind == _NUMBER:
        return "number"
    kinds = setting.kind if isinstance(setting.kind, tuple) else (setting.kind,)
    return " or ".join(names[kind] for kind in kinds)


def _default_words(setting: Setting) -> str:
    if setting.default_words:
        return setting.default_words
    if setting.default is REQUIRED:
        return "required"
    return f"`{_toml(setting.default)}`"


def _range_words(setting: Setting) -> str:
    if setting.choices:
        return "one of " + ", ".join(f"`{choice}`" for choice in setting.choices)
    if setting.bounds is not None:
        return setting.bounds.words(setting.kind is int)
    if setting.infinite:
        return "any number, `inf` and `-inf` too"
    return ""


def _setting_row(setting: Setting, name: str = "") -> list[str]:
    return [
        f"`{name or setting.key}`",
        _type_words(setting),
        _default_words(setting),
        _range_words(setting),
        setting.doc,
    ]


_SETTING_HEADER = ("key", "type", "default", "range", "what")


def _flags_of(parser: argparse.ArgumentParser) -> dict[str, list[argparse.Action]]:
    """The parser's actions by destination, in order (other spellings with the first)."""
    by_dest: dict[str, list[argparse.Action]] = {}
    for action in parser._actions:
        by_dest.setdefault(action.dest, []).append(action)
    return by_dest


def _invocation(action: argparse.Action) -> str:
    """``--port PORT``: how a flag is written."""
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    if action.metavar is not None:
        value = str(action.metavar)
    elif action.choices is not None:
        value = "{" + ",".join(str(choice) for choice in action.choices) + "}"
    else:
        value = action.dest.upper()
    return ", ".join(f"{option} {value}" for option in action.option_strings)


def _flags_reference() -> str:
    rows = []
    for dest, actions in _flags_of(_parser()).items():
        shown = [action for action in actions if action.help != argparse.SUPPRESS]
        others = [
            o
            for action in actions
            if action.help == argparse.SUPPRESS
            for o in action.option_strings
        ]
        flag = " ".join(f"`{_invocation(action)}`" for action in shown)
        if others:
            flag += " (also " + ", ".join(f"`{option}`" for option in others) + ")"
        key = f"`{dest}`" if dest in TOP_LEVEL_SETTINGS else ""
        rows.append([flag, key, _sentence(" ".join(action.help or "" for action in shown))])
    return _table(("flag", "config key", "what"), rows)


def _kinds_reference(title: str, intro: str, kind_key: Setting, kinds: Mapping[str, Kind]) -> str:
    text = [
        f"### {title}\n",
        intro + "\n",
        _table(
            ("kind", "keys", "what"),
            [
                [f"`{name}`", ", ".join(f"`{key}`" for key in kind.settings), kind.doc]
                for name, kind in kinds.items()
            ],
        ),
    ]
    rows = [_setting_row(kind_key)]
    seen: list[Setting] = []
    for kind in kinds.values():
        for setting in kind.settings.values():
            if setting not in seen:
                seen.append(setting)
                rows.append(_setting_row(setting))
    if len(rows) > 1:
        text.append(_table(_SETTING_HEADER, rows))
    return "\n".join(text)


def _keys_reference() -> str:
    flags = {
        dest: [a for a in actions if a.help != argparse.SUPPRESS]
        for dest, actions in _flags_of(_parser()).items()
    }
    rows = []
    for setting in TOP_LEVEL_SETTINGS.values():
        row = _setting_row(setting)
        overridden = flags.get(setting.key, [])
        if overridden:
            row[-1] += " Flag: " + ", ".join(f"`{a.option_strings[0]}`" for a in overridden) + "."
        rows.append(row)
    return "\n".join(
        [
            "### Top-level keys\n",
            _table(_SETTING_HEADER, rows),
            "### `[[tables]]`\n",
            _table(_SETTING_HEADER, [_setting_row(s) for s in TABLE_SETTINGS.values()]),
            _kinds_reference(
                "Selectors",
                '`sampler` and `remover` are each a table such as `{kind = "fifo"}`: a `kind` '
                "and that kind's keys.",
                _KIND_OF_SELECTOR,
                SELECTOR_KINDS,
            ),
            _kinds_reference(
                "Rate limiters",
                '`rate_limiter` is a table such as `{kind = "min_size", min_size_to_sample = '
                "1}`: a `kind` and that kind's keys.",
                _KIND_OF_RATE_LIMITER,
                RATE_LIMITER_KINDS,
            ),
            "### Signatures\n",
            "A `signature` is a spec (a table with `dtype`), or a table of signatures (a "
            "dict) or an array of them (a list):\n",
            _table(_SETTING_HEADER, [_setting_row(s) for s in SPEC_SETTINGS.values()]),
            "```toml\n" + SIGNATURE_EXAMPLE + "```\n",
        ]
    )


def _attribute_docs(cls: type) -> dict[str, str]:
    """The ``Attributes:`` section of a class's (Google-style) docstring, by name, as
    Markdown."""
    doc = inspect.cleandoc(cls.__doc__ or "")
    _, _, section = doc.partition("\nAttributes:\n")
    docs: dict[str, str] = {}
    name = None
    for line in section.splitlines():
        if line and not line.startswith(" "):
            break  # The next section.
        entry = re.match(r"^  (\w+): (.*)$", line)
        if entry:
            name = entry.group(1)
            docs[name] = entry.group(2)
        elif name is not None and line.strip():
            docs[name] += " " + line.strip()
    return {key: value.replace("``", "`") for key, value in docs.items()}


def _bytes_words(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def _limits_reference() -> str:
    docs = _attribute_docs(ServerLimits)
    rows = []
    for field in dataclasses.fields(ServerLimits):
        if not docs.get(field.name):
            raise ValueError(f"ServerLimits.{field.name} has no doc in its Attributes")
        default = field.default
        words = f"`{_toml(default)}`"
        if isinstance(default, int) and field.name.endswith("_bytes"):
            words += f" ({_bytes_words(default)})"
        rows.append([f"`{field.name}`", words, docs[field.name]])
    return "Each is an integer, positive; 0 or -1 lifts the bound.\n\n" + _table(
        ("key", "default", "what"), rows
    )


def _textproto_reference() -> str:
    rows = [
        [f"`{row.message}`", f"`{row.field}`", row.toml or "ignored (as by Reverb)", row.doc]
        for row in TEXTPROTO_FIELDS
    ]
    return _table(("message", "field", "TOML", "what"), rows)


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


def _serve(server: Server, checkpoints: CheckpointSettings, signals: _Signals, grace: float) -> int:
    """Serves until SIGINT/SIGTERM, then stops (open calls get ``grace`` seconds); the
    exit status."""
    stopped: list[bool] = []  # Whether the shutdown checkpoint (if any) was written.
    stop_signals = 0

    def shut_down() -> None:
        saved = True
        try:
            if checkpoints.on_shutdown:
                saved = _checkpoint(server, "shutdown")
            server.stop(grace=grace)
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
        return _serve(server, checkpoints, signals, checked.shutdown_grace)
    finally:
        signals.close()
