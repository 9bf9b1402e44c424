"""Tables from Reverb's server-executable config (``ReverbServerConfig``), as
``reverb_server --config=...`` reads it.

A config is a textproto of :class:`ReverbServerConfig` (Reverb's field names)::

    port: 8000
    tables {
      table_name: "replay"
      sampler { prioritized { priority_exponent: 0.8 } }
      remover { fifo: true }
      max_size: 1000000
      max_times_sampled: 0
      rate_limiter {
        samples_per_insert: 4.0
        min_size_to_sample: 1000
        min_diff: -400.0
        max_diff: 400.0
      }
    }

Each ``tables`` entry is a ``PriorityTableCheckpoint``: ``table_name``, ``sampler`` and
``remover`` (``KeyDistributionOptions``: ``fifo``, ``lifo``, ``uniform``, ``heap {
min_heap }``, ``prioritized { priority_exponent }``), ``max_size``,
``max_times_sampled``, ``rate_limiter`` (``samples_per_insert``, ``min_size_to_sample``,
``min_diff``, ``max_diff``) and optionally ``signature`` (a ``StructuredValue``, as
TensorFlow's structure coder writes it). Counters and items (``num_deleted_episodes``,
``rate_limiter.sample_count``, ...) are ignored, as in Reverb.

:func:`parse_config` turns the text into the message and checks it; any error is a
:class:`~reverb_py.errors.ConfigError` naming the field and its line (``config.textproto
line 7: tables[0].max_size: must be positive, got 0``). The other functions take parsed
messages, as Reverb's do, and raise ``ValueError`` for bad settings.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from google.protobuf import text_format

from reverb_py import item_selectors, rate_limiters
from reverb_py._codec.signature import decode_signature
from reverb_py._proto.checkpoint_pb2 import PriorityTableCheckpoint, RateLimiterCheckpoint
from reverb_py._proto.reverb_config_pb2 import ReverbServerConfig
from reverb_py._proto.schema_pb2 import KeyDistributionOptions
from reverb_py.errors import ConfigError
from reverb_py.table import Table

__all__ = [
    "ReverbServerConfig",
    "parse_config",
    "rate_limiter_from_proto",
    "selector_from_proto",
    "tables_from_proto",
]


def selector_from_proto(options: KeyDistributionOptions) -> item_selectors.ItemSelector:
    """The selector a ``KeyDistributionOptions`` describes (Reverb's rules).

    Raises:
      ValueError: no distribution set, ``fifo``/``lifo``/``uniform`` set to false, or
        bad settings (a negative priority exponent).
    """
    which = options.WhichOneof("distribution")
    if which is None:
        raise ValueError("no distribution set (fifo, lifo, uniform, heap or prioritized)")
    if which in ("fifo", "lifo", "uniform"):
        if not getattr(options, which):
            raise ValueError(f"distribution={which} but the associated boolean value is false.")
        return {
            "fifo": item_selectors.Fifo,
            "lifo": item_selectors.Lifo,
            "uniform": item_selectors.Uniform,
        }[which]()
    if which == "heap":
        return item_selectors.HeapSelector(options.heap.min_heap)
    return item_selectors.Prioritized(options.prioritized.priority_exponent)


def rate_limiter_from_proto(proto: RateLimiterCheckpoint) -> rate_limiters.RateLimiter:
    """The rate limiter of a ``RateLimiterCheckpoint``'s settings (counters ignored).

    Raises:
      ValueError: settings Reverb's ``RateLimiter`` refuses.
    """
    return rate_limiters.RateLimiter(
        samples_per_insert=proto.samples_per_insert,
        min_size_to_sample=proto.min_size_to_sample,
        min_diff=proto.min_diff,
        max_diff=proto.max_diff,
    )


def tables_from_proto(configs: Sequence[PriorityTableCheckpoint]) -> list[Table]:
    """One :class:`~reverb_py.Table` per config (Reverb's ``tables_from_proto``).

    Raises:
      ValueError: a bad setting (:func:`parse_config` says which field and line).
    """
    return [_table(config) for config in configs]


def _table(config: PriorityTableCheckpoint) -> Table:
    signature = decode_signature(config.signature) if config.HasField("signature") else None
    return Table(
        name=config.table_name,
        sampler=selector_from_proto(config.sampler),
        remover=selector_from_proto(config.remover),
        max_size=config.max_size,
        rate_limiter=rate_limiter_from_proto(config.rate_limiter),
        max_times_sampled=config.max_times_sampled,
        signature=signature,
    )


# ------------------------------------------------------------------------- locating

# Comments, strings, names/numbers, punctuation: enough of the text format to find
# where each field starts (protobuf has parsed the text before this runs).
_TOKEN = re.compile(
    r"""(?P<skip>\s+|\#[^\n]*)
      | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
      | (?P<word>[A-Za-z0-9_.+\-]+)
      | (?P<punct>[{}<>:,;\[\]])""",
    re.VERBOSE,
)

Path = tuple[tuple[str, int], ...]


def _field_lines(text: str) -> dict[Path, int]:
    """The line (1-based) where each field occurrence starts, by path:
    ``(("tables", 0), ("max_size", 0))`` for the first table's ``max_size``."""
    tokens: list[tuple[str, int]] = []
    line = 1
    for match in _TOKEN.finditer(text):
        if match.lastgroup != "skip":
            tokens.append((match.group(), line))
        line += match.group().count("\n")
    lines: dict[Path, int] = {}
    counts: dict[Path, dict[str, int]] = {}
    stack: list[tuple[str, int]] = []
    i = 0
    while i < len(tokens):
        token, at = tokens[i]
        i += 1
        if token in ("}", ">"):
            if stack:
                stack.pop()
            continue
        if token in (",", ";"):
            continue
        name = token
        if token == "[":  # an extension or Any type URL: [name]
            while i < len(tokens) and tokens[i][0] != "]":
                name += tokens[i][0]
                i += 1
            i += 1
        parent = tuple(stack)
        seen = counts.setdefault(parent, {})
        index = seen.get(name, 0)
        seen[name] = index + 1
        lines[parent + ((name, index),)] = at
        if i < len(tokens) and tokens[i][0] == ":":
            i += 1
        if i < len(tokens) and tokens[i][0] in ("{", "<"):
            stack.append((name, index))
            i += 1
        elif i < len(tokens) and tokens[i][0] == "[":
            depth = 0
            while i < len(tokens):
                depth += tokens[i][0] == "["
                depth -= tokens[i][0] == "]"
                i += 1
                if depth == 0:
                    break
        else:
            i += 1
            while i < len(tokens) and tokens[i][0][:1] in ("'", '"'):
                i += 1  # adjacent string literals are one value
    return lines


class _Locator:
    def __init__(self, text: str, source: str) -> None:
        self._lines = _field_lines(text)
        self._source = source

    def error(self, path: Path, message: str) -> ConfigError:
        """A ConfigError for the field at ``path`` (or its nearest written ancestor)."""
        dotted = ".".join(
            name if index == 0 and name != "tables" else f"{name}[{index}]" for name, index in path
        )
        probe = path
        while probe and probe not in self._lines:
            probe = probe[:-1]
        where = f"{self._source} line {self._lines[probe]}" if probe else self._source
        return ConfigError(f"{where}: {dotted}: {message}")


def parse_config(text: str, source: str = "config") -> ReverbServerConfig:
    """Parses and checks a ``ReverbServerConfig`` textproto.

    Args:
      text: the textproto.
      source: what to call it in errors (the file name).

    Returns:
      The message; :func:`tables_from_proto` of its ``tables`` cannot fail.

    Raises:
      ConfigError: a syntax error, an unknown field, a value of the wrong type, or a
        setting refused, with the field's name and line.
    """
    config = ReverbServerConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as error:
        line = error.GetLine() if hasattr(error, "GetLine") else None
        message = str(error)
        # ParseError's text starts with "line:column : "; say it our way.
        message = re.sub(r"^\d+:\d+ : ", "", message).replace("reverb_py.proto.", "")
        where = f"{source} line {line}" if line else source
        raise ConfigError(f"{where}: {message}") from None
    locate = _Locator(text, source)
    if not 0 <= config.port <= 65535:
        raise locate.error((("port", 0),), f"must be in 0..65535, got {config.port}")
    names: set[str] = set()
    for index, table in enumerate(config.tables):
        path: Path = (("tables", index),)
        if not table.table_name:
            raise locate.error((*path, ("table_name", 0)), "must not be empty")
        if table.table_name in names:
            raise locate.error(
                (*path, ("table_name", 0)), f"duplicate table name {table.table_name!r}"
            )
        names.add(table.table_name)
        for field in ("sampler", "remover", "rate_limiter"):
            if not table.HasField(field):
                raise locate.error((*path, (field, 0)), "missing")
            if field == "rate_limiter":
                continue
            try:
                selector_from_proto(getattr(table, field))
            except ValueError as error:
                raise locate.error((*path, (field, 0)), str(error)) from None
        if table.max_size <= 0:
            raise locate.error((*path, ("max_size", 0)), f"must be positive, got {table.max_size}")
        if table.max_times_sampled < 0:
            raise locate.error(
                (*path, ("max_times_sampled", 0)),
                f"must not be negative, got {table.max_times_sampled}",
            )
        try:
            rate_limiter_from_proto(table.rate_limiter)
        except ValueError as error:
            raise locate.error((*path, ("rate_limiter", 0)), str(error)) from None
        try:
            _table(table)
        except ValueError as error:
            # Everything else was checked above: what is left is the signature's.
            at: Path = (*path, ("signature", 0)) if table.HasField("signature") else path
            raise locate.error(at, str(error)) from None
    return config


def load_config(path: str) -> ReverbServerConfig:
    """Reads and checks a ``ReverbServerConfig`` textproto file (see :func:`parse_config`).

    Raises:
      ConfigError: the file cannot be read, or what :func:`parse_config` raises.
    """
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except OSError as error:
        raise ConfigError(f"cannot read config {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config {path} is not UTF-8 text") from None
    return parse_config(text, path)
