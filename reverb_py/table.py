"""The table: items, their selectors, the rate limiter, and the waiting callers.

A :class:`Table` holds *items*. An item has a key (a uint64), a priority, a count of the
times it was sampled, and references to the *chunks* that hold its data (opaque objects
here; the server keeps the bytes it received). A chunk can be shared by many items, in
one table or several; it is freed when the last item that references it is removed,
because each item holds an ordinary reference to it.

Rules (Reverb's, see the docs of :mod:`reverb_py.rate_limiters` for the limiter):

* Inserting an existing key only updates its priority (the rate limiter still has to
  allow an insert, but nothing is counted).
* After a new item goes in, if the table holds more than ``max_size`` items the remover
  picks one to delete; this may be the item just inserted.
* Sampling increments ``times_sampled``; an item is deleted right after the sample that
  makes ``times_sampled == max_times_sampled`` (``max_times_sampled <= 0``: never). The
  sample still reports the table size counting that item.
* :meth:`Table.mutate` applies the deletes, then the priority updates; unknown keys are
  ignored.

Waiting: every operation runs on the event loop that owns the table (the server's loop
thread), so the table needs no locks. An insert or sample the rate limiter refuses waits
without blocking the loop, in arrival order, until it can proceed, its timeout passes
(:class:`~reverb_py.errors.DeadlineExceededError`) or it is cancelled (nothing is left
behind). A sample request for ``n`` items returns as soon as it holds at least one and
the limiter allows no more (flexible batching, as Reverb).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import operator
import random
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from reverb_py import _gc, _impl, errors, item_selectors, rate_limiters
from reverb_py._proto import checkpoint_pb2, schema_pb2
from reverb_py._pure._common import KEY_MAX
from reverb_py.reverb_types import SpecNest, TableInfo

__all__ = [
    "Item",
    "RateLimiterStatus",
    "SampledItem",
    "Table",
    "TableExtensionBase",
    "TableObserver",
    "TableSnapshot",
    "chunk_size",
]

_logger = logging.getLogger("reverb_py")

_TIMEOUT_MESSAGE = "Rate Limiter: Timeout exceeded before the right to insert was acquired."
_CLOSED_MESSAGE = "RateLimiter has been cancelled"


Item = _impl.Item
"""An item of a table (``key``, ``priority``, ``trajectory``, ``chunks``, ``episode_ids``,
``times_sampled``, ``inserted_at``): see :class:`reverb_py._pure.records.Item`."""


class SampledItem:
    """One sample handed out by a table.

    Attributes:
      item: The sampled :class:`Item` (possibly already deleted from the table).
      probability: The probability with which the sampler picked it.
      table_size: The table size at the time, counting the item even when this sample
        deleted it.
      priority: The item's priority at the time.
      times_sampled: The item's sample count, this sample included.
      rate_limited: Whether the request had to wait for the rate limiter.
    """

    __slots__ = ("item", "probability", "table_size", "priority", "times_sampled", "rate_limited")

    def __init__(
        self,
        item: Item,
        probability: float,
        table_size: int,
        priority: float,
        times_sampled: int,
        rate_limited: bool,
    ) -> None:
        self.item = item
        self.probability = probability
        self.table_size = table_size
        self.priority = priority
        self.times_sampled = times_sampled
        self.rate_limited = rate_limited

    @property
    def key(self) -> int:
        return int(self.item.key)

    def __repr__(self) -> str:
        return (
            f"SampledItem(key={self.item.key}, probability={self.probability!r}, "
            f"table_size={self.table_size}, priority={self.priority!r}, "
            f"times_sampled={self.times_sampled}, rate_limited={self.rate_limited})"
        )


class TableSnapshot:
    """A table's state at one moment: Reverb's ``PriorityTableCheckpoint`` and its items.

    Attributes:
      checkpoint: Settings, rate-limiter counters, signature and statistics.
      items: Copies of the items in insertion order (sharing their chunk objects).
    """

    __slots__ = ("checkpoint", "items")

    def __init__(
        self, checkpoint: checkpoint_pb2.PriorityTableCheckpoint, items: list[Item]
    ) -> None:
        self.checkpoint = checkpoint
        self.items = items


class TableExtensionBase:
    """Hooks a table calls as its items change (Reverb's table extensions).

    Subclass it, override any of the ``on_*`` methods and pass instances as
    ``Table(extensions=[...])``. The table calls them where Reverb calls its C++
    extensions (``reverb/cc/table_extensions``):

    * :meth:`on_insert` just after a new item went in (before the remover evicts one
      when the table is over ``max_size``);
    * :meth:`on_update` just after an item's priority changed (``mutate_priorities``,
      or an insert under a key the table holds);
    * :meth:`on_sample` for each sampled item, with ``item.times_sampled`` already
      counting this sample, before the item is deleted for reaching
      ``max_times_sampled``;
    * :meth:`on_delete` just after an item left the table (evicted, deleted by
      ``mutate_priorities`` or sampled ``max_times_sampled`` times);
    * :meth:`on_reset` just before ``reset`` removes every item (no ``on_delete`` then).

    Restoring a checkpoint calls no hook. Hooks run on the table's event loop (the
    server's loop thread), inside the table operation, so they see the table as it is at
    that point. They must be quick and must not block; slow or async work belongs in a
    task they schedule (``asyncio.get_running_loop().create_task(...)``). A hook must not
    insert into, sample from or mutate its own table (other tables are fine). An
    exception raised by a hook is logged (``reverb_py`` logger, ERROR, with the
    traceback) and the operation goes on: the table keeps serving. A table calls only
    the hooks a subclass overrides; without extensions nothing is called.

    One extension object may serve several tables (:meth:`Table.replace` keeps the
    extensions); each hook is told which table calls it.
    """

    def on_insert(self, table: Table, item: Item) -> None:
        """``item`` was just inserted into ``table``."""

    def on_update(self, table: Table, item: Item) -> None:
        """``item``'s priority was just changed (``item.priority`` is the new one)."""

    def on_sample(self, table: Table, item: Item) -> None:
        """``item`` was just sampled; ``item.times_sampled`` counts this sample."""

    def on_delete(self, table: Table, item: Item) -> None:
        """``item`` was just removed from ``table``."""

    def on_reset(self, table: Table) -> None:
        """``table`` is about to remove every item."""

    def build_internal_extensions(self, table_name: str) -> Sequence[TableExtensionBase]:
        """Reverb's hook for building its C++ extensions; here the extension itself."""
        return [self]


def _overridden(extensions: Sequence[TableExtensionBase], hook: str) -> tuple[Any, ...]:
    """The bound ``hook`` of each extension whose class overrides it."""
    default = getattr(TableExtensionBase, hook)
    return tuple(
        getattr(extension, hook)
        for extension in extensions
        if getattr(type(extension), hook) is not default
    )


def chunk_size(chunk: Any) -> int:
    """The bytes a chunk holds: ``len(chunk.data)`` (the server's chunks), else 0."""
    try:
        return len(chunk.data)
    except (AttributeError, TypeError):
        return 0


class TableObserver(Protocol):
    """What a table reports to an observer (the server's metrics) as it works.

    Called on the table's loop, inside the table operation; must be quick.
    """

    def waited(self, table: Table, insert: bool, seconds: float) -> None:
        """An insert (``insert``) or sample request that waited for the rate limiter
        left the queue (went through, timed out or was cancelled) after ``seconds``."""

    def sampled(self, table: Table, records: list[SampledItem], start: int) -> None:
        """``records[start:]`` were just sampled."""

    def resetting(self, table: Table) -> None:
        """``table`` is about to be reset: its rate limiter's counters go back to 0."""


class RateLimiterStatus(NamedTuple):
    """A table's rate limiter now: its settings, counters and waiting callers (what the
    server's metrics and status page show; see :meth:`Table.rate_limiter_status`)."""

    samples_per_insert: float
    min_size_to_sample: int
    min_diff: float
    max_diff: float
    inserts: int
    samples: int
    deletes: int
    #: ``inserts * samples_per_insert - samples``, Reverb's "diff": an insert may proceed
    #: while it stays <= ``max_diff`` after the insert, a sample while it stays >=
    #: ``min_diff`` after the sample (and the table holds ``min_size_to_sample``).
    cursor: float
    can_insert: bool
    can_sample: bool
    waiting_inserts: int
    waiting_samples: int
    #: How long inserts (samples) have been waiting without a break, in seconds; 0 when
    #: none waits.
    inserts_blocked_for: float
    samples_blocked_for: float
    #: Seconds inserts (samples) waited in all, as Reverb's ``TableWorkerTime``.
    inserts_blocked_total: float
    samples_blocked_total: float


class _Waiter:
    __slots__ = ("future", "item", "num_samples", "timer", "records", "rate_limited", "since")

    def __init__(self, future: asyncio.Future[Any], item: Item | None, num_samples: int) -> None:
        self.future = future
        self.item = item
        self.num_samples = num_samples
        self.timer: asyncio.TimerHandle | None = None
        self.records: list[SampledItem] = []
        self.rate_limited = True
        self.since = time.perf_counter()


class Table:
    """A table of items with a sampler, a remover and a rate limiter.

    Args:
      name: The table's name; must not be empty.
      sampler: The selector that picks sampled items.
      remover: The selector that picks the item to evict when the table is full.
      max_size: The most items the table holds; must be positive.
      rate_limiter: When inserts and samples may proceed. The object belongs to this
        table from now on.
      max_times_sampled: Delete an item after this many samples; ``<= 0``: never.
      extensions: Table extensions (see :class:`TableExtensionBase`).
      signature: An optional nest of :class:`reverb_py.TensorSpec` describing the
        items' data. Stored and reported, never enforced on the server (clients check).
      max_bytes: The most chunk bytes the table's items may reference (see
        :attr:`chunk_bytes`: each chunk once, however many items share it); after an
        insert takes the table over it, the remover evicts items (possibly the new one)
        until it is at most ``max_bytes``. None (the default): no limit. Not part of
        Reverb's settings: not in ``server_info`` nor in checkpoints (a restored table
        keeps its own and evicts down to it).

    Raises:
      ValueError: empty name, non-positive ``max_size`` or ``max_bytes``, a signature
        leaf that is not a spec, or a rate limiter already used by another table.

    The object handed to a :class:`reverb_py.Server` is the live table: ``info``,
    ``can_sample`` and ``can_insert`` report what the server holds.
    """

    def __init__(
        self,
        name: str,
        sampler: item_selectors.ItemSelector,
        remover: item_selectors.ItemSelector,
        max_size: int,
        rate_limiter: rate_limiters.RateLimiter,
        max_times_sampled: int = 0,
        extensions: Sequence[TableExtensionBase] = (),
        signature: SpecNest | None = None,
        *,
        seed: int | None = None,
        max_bytes: int | None = None,
    ) -> None:
        if not name:
            raise ValueError("name must be nonempty")
        if max_size <= 0:
            raise ValueError(f"max_size ({max_size}) must be a positive integer")
        if not isinstance(sampler, item_selectors.ItemSelector):
            raise TypeError(f"sampler must be an item selector, got {sampler!r}")
        if not isinstance(remover, item_selectors.ItemSelector):
            raise TypeError(f"remover must be an item selector, got {remover!r}")
        if not isinstance(rate_limiter, rate_limiters.RateLimiter):
            raise TypeError(f"rate_limiter must be a RateLimiter, got {rate_limiter!r}")
        self._name = str(name)
        self._max_size = int(max_size)
        self._max_times_sampled = int(max_times_sampled)
        if max_bytes is not None and (
            isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0
        ):
            raise ValueError(f"max_bytes ({max_bytes!r}) must be a positive integer or None")
        self._max_bytes = max_bytes
        self._extensions = tuple(extensions)
        for extension in self._extensions:
            if not isinstance(extension, TableExtensionBase):
                raise TypeError(f"extensions must be TableExtensionBase objects, got {extension!r}")
        # PERF(no-extensions): each hook point tests one of these tuples (empty without
        # extensions) and calls nothing more.
        self._on_insert = _overridden(self._extensions, "on_insert")
        self._on_update = _overridden(self._extensions, "on_update")
        self._on_sample = _overridden(self._extensions, "on_sample")
        self._on_delete = _overridden(self._extensions, "on_delete")
        self._on_reset = _overridden(self._extensions, "on_reset")
        self._signature: SpecNest | None = None
        self._signature_proto: Any = None
        if signature:
            from reverb_py._codec.signature import (
                check_sendable,
                decode_signature,
                encode_signature,
            )

            self._signature_proto = encode_signature(signature)
            check_sendable(self._signature_proto)
            self._signature = decode_signature(self._signature_proto)
        rate_limiter._bind(self._name)
        self._rate_limiter_config = rate_limiter
        self._limiter = rate_limiter.new_state()
        self._set_selectors(sampler, remover)
        # A dict; the compiled twin's also indexes the items for mutate's batch lookups.
        self._items: dict[int, Item] = _impl.mutations.ItemMap()
        self._episodes: collections.Counter[int] = collections.Counter()
        self._num_deleted_episodes = 0
        self._num_unique_samples = 0
        self._random = random.Random(seed).random
        self._insert_waiters: collections.deque[_Waiter] = collections.deque()
        self._sample_waiters: collections.deque[_Waiter] = collections.deque()
        self._closed = False
        # Time accounting for TableWorkerTime (nanoseconds).
        self._inserts_blocked_since = 0
        self._samples_blocked_since = 0
        self._inserts_blocked_ns = 0
        self._samples_blocked_ns = 0
        # NOTE(chunk-bytes): each chunk the items reference counts once, however many
        # items share it: references per chunk (by identity) and the bytes of them all.
        # PERF(chunk-bytes): kept only once asked for (track_chunk_bytes: the server's
        # metrics); it costs about 0.5 us per insert and delete.
        self._chunk_refs: dict[Any, int] | None = None
        self._chunk_bytes = 0
        self._num_evictions = 0
        self._observer: TableObserver | None = None
        if max_bytes is not None:
            self.track_chunk_bytes()

    def _set_selectors(
        self, sampler: item_selectors.ItemSelector, remover: item_selectors.ItemSelector
    ) -> None:
        self._sampler_config = sampler
        self._remover_config = remover
        self._sampler = sampler.new_structure()
        self._remover = remover.new_structure()
        # NOTE(strict-first): a new priority goes to the selector that refuses more values
        # first; if it refuses, the other one never saw it and the table is unchanged.
        if remover._STRICTNESS > sampler._STRICTNESS:
            self._strict, self._lax = self._remover, self._sampler
        else:
            self._strict, self._lax = self._sampler, self._remover
        # PERF(priority-users): priority updates go only to selectors that order by
        # priority, strictest first; Uniform/Fifo/Lifo ignore them.
        self._priority_users = tuple(
            structure
            for structure, config in sorted(
                ((self._sampler, sampler), (self._remover, remover)),
                key=lambda pair: -pair[1]._STRICTNESS,
            )
            if config._USES_PRIORITY
        )

    # ------------------------------------------------------------------ constructors

    @classmethod
    def queue(
        cls,
        name: str,
        max_size: int,
        extensions: Sequence[TableExtensionBase] = (),
        signature: SpecNest | None = None,
    ) -> Table:
        """A FIFO queue: Fifo sampler and remover, each item sampled once.

        Inserts wait while it holds ``max_size`` items; samples wait while it is empty.
        """
        return cls(
            name=name,
            sampler=item_selectors.Fifo(),
            remover=item_selectors.Fifo(),
            max_size=max_size,
            max_times_sampled=1,
            rate_limiter=rate_limiters.Queue(max_size),
            extensions=extensions,
            signature=signature,
        )

    @classmethod
    def stack(
        cls,
        name: str,
        max_size: int,
        extensions: Sequence[TableExtensionBase] = (),
        signature: SpecNest | None = None,
    ) -> Table:
        """A LIFO stack: Lifo sampler and remover, each item sampled once."""
        return cls(
            name=name,
            sampler=item_selectors.Lifo(),
            remover=item_selectors.Lifo(),
            max_size=max_size,
            max_times_sampled=1,
            rate_limiter=rate_limiters.Stack(max_size),
            extensions=extensions,
            signature=signature,
        )

    def replace(
        self,
        name: str | None = None,
        sampler: item_selectors.ItemSelector | None = None,
        remover: item_selectors.ItemSelector | None = None,
        max_size: int | None = None,
        rate_limiter: rate_limiters.RateLimiter | None = None,
        max_times_sampled: int | None = None,
        extensions: Sequence[TableExtensionBase] | None = None,
        signature: SpecNest | None = None,
    ) -> Table:
        """Returns a new, empty table with this one's settings, except those given.

        The rate limiter is rebuilt from this table's settings (counters start at 0).
        """
        return Table(
            name=name if name is not None else self._name,
            sampler=sampler or item_selectors.selector_from_options(self._sampler_config.options()),
            remover=remover or item_selectors.selector_from_options(self._remover_config.options()),
            max_size=max_size if max_size is not None else self._max_size,
            rate_limiter=rate_limiter
            or rate_limiters.RateLimiter(
                self._limiter.samples_per_insert,
                self._limiter.min_size_to_sample,
                self._limiter.min_diff,
                self._limiter.max_diff,
            ),
            max_times_sampled=(
                max_times_sampled if max_times_sampled is not None else self._max_times_sampled
            ),
            extensions=extensions if extensions is not None else self._extensions,
            signature=signature if signature is not None else self._signature,
            max_bytes=self._max_bytes,
        )

    # ------------------------------------------------------------------ properties

    @property
    def name(self) -> str:
        """The table's name."""
        return self._name

    @property
    def max_size(self) -> int:
        return self._max_size

    @property
    def max_bytes(self) -> int | None:
        """The most chunk bytes the table holds, or None (no limit)."""
        return self._max_bytes

    @property
    def max_times_sampled(self) -> int:
        return self._max_times_sampled

    @property
    def signature(self) -> SpecNest | None:
        """The declared signature (a nest of TensorSpecs), or None."""
        return self._signature

    @property
    def extensions(self) -> tuple[TableExtensionBase, ...]:
        return self._extensions

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def get(self, key: int) -> Item | None:
        """The item with this key, or None."""
        return self._items.get(key)

    def items(self) -> list[Item]:
        """Every item, oldest insertion first."""
        return sorted(self._items.values(), key=lambda item: item.inserted_at)

    @property
    def num_pending_inserts(self) -> int:
        """How many inserts are waiting for the rate limiter (for back-pressure)."""
        return len(self._insert_waiters)

    @property
    def num_pending_samples(self) -> int:
        """How many sample requests are waiting for the rate limiter."""
        return len(self._sample_waiters)

    @property
    def max_enqueued_inserts(self) -> int:
        """Reverb's bound on queued inserts: ``max(1, min(max_size // 10, 1000))``."""
        return max(1, min(int(self._max_size * 0.1), 1000))

    @property
    def chunk_bytes(self) -> int:
        """The bytes of the chunks the table's items reference, each chunk counted once
        (also when several items share it; a chunk shared with another table counts in
        both). A chunk's bytes are ``len(chunk.data)``: the ``ChunkData`` as it arrived.

        O(1) once :meth:`track_chunk_bytes` was called, else counted now (O(items)).
        """
        if self._chunk_refs is not None:
            return self._chunk_bytes
        seen: set[int] = set()
        total = 0
        for item in self._items.values():
            for chunk in item.chunks:
                if id(chunk) not in seen:
                    seen.add(id(chunk))
                    total += chunk_size(chunk)
        return total

    def track_chunk_bytes(self) -> None:
        """Keeps :attr:`chunk_bytes` up to date as items come and go. Idempotent."""
        if self._chunk_refs is not None:
            return
        self._chunk_refs = {}
        self._chunk_bytes = 0
        for item in self._items.values():
            self._reference(item.chunks)

    @property
    def num_evictions(self) -> int:
        """How many items the remover evicted since the table was made."""
        return self._num_evictions

    def set_observer(self, observer: TableObserver | None) -> None:
        """Reports waits and samples to ``observer`` from now on (None: to nobody)."""
        self._observer = observer

    def can_sample(self, num_samples: int) -> bool:
        """Whether the rate limiter would allow ``num_samples`` samples now.

        Like Reverb, only the limiter is consulted (not ``max_times_sampled``).
        """
        return bool(self._limiter.can_sample(num_samples))

    def can_insert(self, num_inserts: int) -> bool:
        """Whether the rate limiter would allow ``num_inserts`` inserts now."""
        return bool(self._limiter.can_insert(num_inserts))

    # ------------------------------------------------------------------ info

    def info_proto(self) -> schema_pb2.TableInfo:
        """The table's settings and counters as Reverb's ``TableInfo`` message."""
        limiter = self._limiter
        info = schema_pb2.TableInfo(
            name=self._name,
            sampler_options=self._sampler_config.options(),
            remover_options=self._remover_config.options(),
            max_size=self._max_size,
            max_times_sampled=self._max_times_sampled,
            current_size=len(self._items),
            num_episodes=len(self._episodes),
            num_deleted_episodes=self._num_deleted_episodes,
            num_unique_samples=self._num_unique_samples,
        )
        rl = info.rate_limiter_info
        rl.samples_per_insert = limiter.samples_per_insert
        rl.min_diff = limiter.min_diff
        rl.max_diff = limiter.max_diff
        rl.min_size_to_sample = limiter.min_size_to_sample
        rl.insert_stats.completed = limiter.inserts
        rl.sample_stats.completed = limiter.samples
        if self._signature_proto is not None:
            info.signature.CopyFrom(self._signature_proto)
        now = time.perf_counter_ns()
        inserts_blocked = self._inserts_blocked_ns
        if self._inserts_blocked_since:
            inserts_blocked += now - self._inserts_blocked_since
        samples_blocked = self._samples_blocked_ns
        if self._samples_blocked_since:
            samples_blocked += now - self._samples_blocked_since
        worker = info.table_worker_time
        worker.waiting_for_sampling_ms = inserts_blocked // 1_000_000
        worker.waiting_for_inserts_ms = samples_blocked // 1_000_000
        return info

    @property
    def info(self) -> TableInfo:
        """A snapshot of the settings and counters (:class:`reverb_py.reverb_types.TableInfo`)."""
        return TableInfo.from_proto(self.info_proto())

    def rate_limiter_status(self) -> RateLimiterStatus:
        """The rate limiter's settings, counters and waiting callers now (read on the
        table's loop)."""
        limiter = self._limiter
        now = time.perf_counter_ns()
        inserts_for = now - self._inserts_blocked_since if self._inserts_blocked_since else 0
        samples_for = now - self._samples_blocked_since if self._samples_blocked_since else 0
        inserts = limiter.inserts
        samples = limiter.samples
        spi = limiter.samples_per_insert
        return RateLimiterStatus(
            samples_per_insert=spi,
            min_size_to_sample=limiter.min_size_to_sample,
            min_diff=limiter.min_diff,
            max_diff=limiter.max_diff,
            inserts=inserts,
            samples=samples,
            deletes=limiter.deletes,
            cursor=float(inserts) * spi - float(samples),
            can_insert=bool(limiter.can_insert(1)),
            can_sample=bool(limiter.can_sample(1)),
            waiting_inserts=len(self._insert_waiters),
            waiting_samples=len(self._sample_waiters),
            inserts_blocked_for=inserts_for / 1e9,
            samples_blocked_for=samples_for / 1e9,
            inserts_blocked_total=(self._inserts_blocked_ns + inserts_for) / 1e9,
            samples_blocked_total=(self._samples_blocked_ns + samples_for) / 1e9,
        )

    def rate_limiter_counters(self) -> tuple[int, int, int]:
        """The limiter's ``(inserts, samples, deletes)`` counters."""
        return (self._limiter.inserts, self._limiter.samples, self._limiter.deletes)

    def __repr__(self) -> str:
        return (
            f"Table(sampler={self._sampler_config!r}, remover={self._remover_config!r}, "
            f"max_size={self._max_size}, max_times_sampled={self._max_times_sampled}, "
            f"name={self._name!r}, rate_limiter={self._rate_limiter_config!r}, "
            f"signature={self._signature!r})"
        )

    # ------------------------------------------------------------------ insert

    async def insert(self, item: Item, *, timeout: float | None = None) -> None:
        """Inserts ``item``, or updates the priority if its key is already present.

        Waits (in arrival order) until the rate limiter allows an insert.

        Args:
          item: The item. Its priority is converted to float and checked first.
          timeout: Seconds to wait for the rate limiter; None waits forever, 0 or less
            fails at once if the insert cannot proceed now.

        Raises:
          InvalidArgumentError: a bad key or a priority a selector refuses (nothing
            changes).
          DeadlineExceededError: the timeout passed first.
          CancelledOperationError: the table was closed.
        """
        self._check_item(item)
        if self._closed:
            raise errors.CancelledOperationError(_CLOSED_MESSAGE)
        if not self._insert_waiters and self._limiter.can_insert(1):
            self._insert_now(item)
            if self._sample_waiters:
                self._pump()
            return
        await self._wait(_Waiter(asyncio.get_running_loop().create_future(), item, 0), timeout)

    def insert_or_enqueue(self, item: Item) -> asyncio.Future[None] | None:
        """Inserts ``item`` now if the rate limiter allows, else queues it.

        For callers that keep reading while inserts wait (the server's insert stream).
        Queued inserts keep arrival order with those of :meth:`insert`.

        Returns:
          None when the item went in now; otherwise a future that completes when it
          does (or fails, e.g. with a refused priority). Cancelling the future removes
          the item from the queue.

        Raises:
          InvalidArgumentError: a bad key or a refused priority (when inserted now).
          CancelledOperationError: the table was closed.
        """
        self._check_item(item)
        if self._closed:
            raise errors.CancelledOperationError(_CLOSED_MESSAGE)
        if not self._insert_waiters and self._limiter.can_insert(1):
            self._insert_now(item)
            if self._sample_waiters:
                self._pump()
            return None
        waiter = _Waiter(asyncio.get_running_loop().create_future(), item, 0)
        if not self._insert_waiters:
            self._inserts_blocked_since = time.perf_counter_ns()
        self._insert_waiters.append(waiter)
        waiter.future.add_done_callback(lambda future: self._forget_cancelled(waiter))
        return waiter.future

    def _forget_cancelled(self, waiter: _Waiter) -> None:
        if waiter.future.cancelled():
            self._forget(waiter)
        if self._observer is not None:
            self._observer.waited(self, True, time.perf_counter() - waiter.since)

    def _check_item(self, item: Item) -> None:
        key = item.key
        if type(key) is not int:  # noqa: E721 - exact type: bool and numpy ints need int().
            if isinstance(key, bool) or not hasattr(key, "__index__"):
                raise errors.InvalidArgumentError(f"Item key must be an integer, got {key!r}.")
            item.key = key = int(key)
        if not 0 <= key <= KEY_MAX:
            raise errors.InvalidArgumentError(f"Key must be an integer in [0, 2**64), got {key!r}.")
        priority = item.priority = float(item.priority)
        if priority != priority:
            # Every selector refuses NaN, also those that ignore priorities.
            raise errors.InvalidArgumentError(
                f"Priority must not be NaN (key={key}, priority={priority!r})."
            )

    def _insert_now(self, item: Item) -> None:
        key = item.key
        existing = self._items.get(key)
        if existing is not None:
            for structure in self._priority_users:
                structure.update(key, item.priority)
            existing.priority = item.priority
            if self._on_update:
                self._call_hooks(self._on_update, existing)
        else:
            self._strict.insert(key, item.priority)
            self._lax.insert(key, item.priority)
            if not item.inserted_at:
                item.inserted_at = time.time_ns()
            self._items[key] = item
            episodes = self._episodes
            for episode_id in item.episode_ids:
                episodes[episode_id] += 1
            if self._chunk_refs is not None:
                self._reference(item.chunks)
            if self._on_insert:
                self._call_hooks(self._on_insert, item)
            if len(self._items) > self._max_size:
                victim, _ = self._remover.sample(self._random())
                self._num_evictions += 1
                self._delete(victim)
            if self._max_bytes is not None and self._chunk_bytes > self._max_bytes:
                self._evict_to_max_bytes()
            self._limiter.on_insert()

    def _evict_to_max_bytes(self) -> int:
        """Evicts with the remover until the chunk bytes are at most ``max_bytes``;
        returns how many items went."""
        evicted = 0
        limit = self._max_bytes
        assert limit is not None
        while self._items and self._chunk_bytes > limit:
            victim, _ = self._remover.sample(self._random())
            self._num_evictions += 1
            self._delete(victim)
            evicted += 1
        return evicted

    def _reference(self, chunks: Sequence[Any]) -> None:
        refs = self._chunk_refs
        assert refs is not None
        for chunk in chunks:
            count = refs.get(chunk, 0)
            refs[chunk] = count + 1
            if not count:
                self._chunk_bytes += chunk_size(chunk)

    def _release(self, chunks: Sequence[Any]) -> None:
        refs = self._chunk_refs
        assert refs is not None
        for chunk in chunks:
            count = refs[chunk] - 1
            if count:
                refs[chunk] = count
            else:
                del refs[chunk]
                self._chunk_bytes -= chunk_size(chunk)

    def _delete(self, key: int) -> Item | None:
        item = self._items.pop(key, None)
        if item is None:
            return None
        self._sampler.delete(key)
        self._remover.delete(key)
        self._limiter.on_delete(1)
        if self._chunk_refs is not None:
            self._release(item.chunks)
        if item.episode_ids:
            episodes = self._episodes
            for episode_id in item.episode_ids:
                count = episodes[episode_id] - 1
                if count:
                    episodes[episode_id] = count
                else:
                    del episodes[episode_id]
                    self._num_deleted_episodes += 1
        if self._on_delete:
            self._call_hooks(self._on_delete, item)
        return item

    def _call_hooks(self, hooks: tuple[Any, ...], *args: Any) -> None:
        """Calls extension hooks; an exception is logged and goes no further."""
        for hook in hooks:
            try:
                hook(self, *args)
            except Exception:  # noqa: BLE001 - a hook must not take the table down
                _logger.exception(
                    "table %r: extension hook %s failed; the table goes on",
                    self._name,
                    getattr(hook, "__qualname__", hook),
                )

    # ------------------------------------------------------------------ sample

    async def sample(
        self, num_samples: int = 1, *, timeout: float | None = None
    ) -> list[SampledItem]:
        """Samples up to ``num_samples`` items.

        Waits (in arrival order) until the rate limiter allows at least one sample, then
        returns as many as it allows right away, at most ``num_samples`` (flexible
        batching).

        Args:
          num_samples: The most samples wanted; must be >= 1.
          timeout: Seconds to wait for the first sample; None waits forever, 0 or less
            fails at once if no sample can be taken now.

        Returns:
          Between 1 and ``num_samples`` samples.

        Raises:
          InvalidArgumentError: ``num_samples < 1``.
          DeadlineExceededError: the timeout passed before any sample was allowed.
          CancelledOperationError: the table was closed.
        """
        if num_samples < 1:
            raise errors.InvalidArgumentError(
                f"num_samples must be a positive integer, got {num_samples}."
            )
        if self._closed:
            raise errors.CancelledOperationError(_CLOSED_MESSAGE)
        loop = asyncio.get_running_loop()
        if not self._sample_waiters:
            records: list[SampledItem] = []
            self._take_samples(records, num_samples, False)
            if len(records) == num_samples or (records and not self._insert_waiters):
                if self._insert_waiters:
                    self._pump()
                return records
            if records:
                # Waiting inserts may make room for more samples: let them take turns
                # with this request, as Reverb's worker does, before settling for less.
                waiter = _Waiter(loop.create_future(), None, num_samples)
                waiter.records = records
                waiter.rate_limited = False
                self._sample_waiters.append(waiter)
                self._pump()
                result: list[SampledItem] = waiter.future.result()
                return result
        waiter = _Waiter(loop.create_future(), None, num_samples)
        records = await self._wait(waiter, timeout)
        return records

    def _take_samples(
        self, records: list[SampledItem], num_samples: int, rate_limited: bool
    ) -> None:
        limiter = self._limiter
        items = self._items
        sampler = self._sampler
        rand = self._random
        max_times = self._max_times_sampled
        on_sample = self._on_sample
        start = len(records)
        while len(records) < num_samples and items and limiter.try_sample():
            key, probability = sampler.sample(rand())
            item = items[key]
            times = item.times_sampled
            if times == 0:
                self._num_unique_samples += 1
            times += 1
            item.times_sampled = times
            records.append(
                SampledItem(item, probability, len(items), item.priority, times, rate_limited)
            )
            if on_sample:
                self._call_hooks(on_sample, item)
            if times == max_times:
                self._delete(key)
        # PERF(observer): one test per batch; the observer's work is per sample.
        if self._observer is not None and len(records) > start:
            self._observer.sampled(self, records, start)

    # ------------------------------------------------------------------ waiting

    async def _wait(self, waiter: _Waiter, timeout: float | None) -> Any:
        queue = self._insert_waiters if waiter.item is not None else self._sample_waiters
        if timeout is not None and timeout <= 0:
            raise errors.DeadlineExceededError(_TIMEOUT_MESSAGE)
        if not queue:
            if waiter.item is not None:
                self._inserts_blocked_since = time.perf_counter_ns()
            else:
                self._samples_blocked_since = time.perf_counter_ns()
        queue.append(waiter)
        if timeout is not None:
            waiter.timer = asyncio.get_running_loop().call_later(timeout, self._expire, waiter)
        try:
            return await waiter.future
        finally:
            if waiter.timer is not None:
                waiter.timer.cancel()
            if not waiter.future.done() or waiter.future.cancelled():
                self._forget(waiter)
            if self._observer is not None and waiter.rate_limited:
                self._observer.waited(
                    self, waiter.item is not None, time.perf_counter() - waiter.since
                )

    def _forget(self, waiter: _Waiter) -> None:
        queue = self._insert_waiters if waiter.item is not None else self._sample_waiters
        try:
            queue.remove(waiter)
        except ValueError:
            return
        self._note_unblocked(queue)

    def _note_unblocked(self, queue: collections.deque[_Waiter]) -> None:
        if queue:
            return
        now = time.perf_counter_ns()
        if queue is self._insert_waiters:
            if self._inserts_blocked_since:
                self._inserts_blocked_ns += now - self._inserts_blocked_since
                self._inserts_blocked_since = 0
        elif self._samples_blocked_since:
            self._samples_blocked_ns += now - self._samples_blocked_since
            self._samples_blocked_since = 0

    def _expire(self, waiter: _Waiter) -> None:
        if waiter.future.done():
            return
        self._forget(waiter)
        waiter.future.set_exception(errors.DeadlineExceededError(_TIMEOUT_MESSAGE))

    def _pump(self) -> None:
        """Lets waiting inserts and samples proceed, in arrival order, while they can.

        Mirrors Reverb's table worker: one insert per round, then as many samples for
        the oldest sample request as the limiter allows; rounds repeat while anything
        progressed. A sample request left holding some samples completes with them.
        """
        inserts = self._insert_waiters
        samples = self._sample_waiters
        limiter = self._limiter
        while True:
            progressed = False
            while inserts and inserts[0].future.done():
                inserts.popleft()
                self._note_unblocked(inserts)
            if inserts and limiter.can_insert(1):
                waiter = inserts.popleft()
                self._note_unblocked(inserts)
                try:
                    self._insert_now(waiter.item)  # type: ignore[arg-type]
                except errors.ReverbError as error:
                    waiter.future.set_exception(error)
                else:
                    waiter.future.set_result(None)
                progressed = True
            while samples and samples[0].future.done():
                samples.popleft()
                self._note_unblocked(samples)
            if samples:
                waiter = samples[0]
                before = len(waiter.records)
                self._take_samples(waiter.records, waiter.num_samples, waiter.rate_limited)
                if len(waiter.records) > before:
                    progressed = True
                if len(waiter.records) >= waiter.num_samples:
                    samples.popleft()
                    self._note_unblocked(samples)
                    waiter.future.set_result(waiter.records)
            if not progressed:
                break
        if samples and samples[0].records:
            waiter = samples.popleft()
            self._note_unblocked(samples)
            waiter.future.set_result(waiter.records)

    # ------------------------------------------------------------------ mutate / reset

    def mutate(
        self,
        updates: Mapping[int, float] | Iterable[tuple[int, float]] | None = None,
        deletes: Iterable[int] | None = None,
    ) -> None:
        """Deletes items, then updates priorities; unknown keys are ignored.

        Args:
          updates: New priorities, as a mapping or ``(key, priority)`` pairs.
          deletes: Keys to delete.

        Raises:
          InvalidArgumentError: a priority a selector refuses. Unlike Reverb, nothing is
            applied then (neither the deletes nor any update).
        """
        delete_keys = set(deletes) if deletes else ()
        keys: list[int] = []
        values: list[Any] = []
        if updates:
            if isinstance(updates, Mapping):
                keys = list(updates.keys())
                values = list(updates.values())
            else:
                pairs = updates if isinstance(updates, (list, tuple)) else list(updates)
                keys = [key for key, _ in pairs]
                values = [priority for _, priority in pairs]
        self._mutate(keys, values, delete_keys)

    def mutate_columns(
        self,
        keys: Sequence[int],
        priorities: Sequence[float],
        deletes: Iterable[int] | None = None,
    ) -> None:
        """:meth:`mutate` with the updates as two parallel sequences (the server's path).

        Args:
          keys: Keys whose priorities to set.
          priorities: As many new priorities.
          deletes: Keys to delete.

        Raises:
          InvalidArgumentError: ``keys`` and ``priorities`` differ in length, or a
            priority a selector refuses; nothing is applied then.
        """
        self._mutate(keys, priorities, set(deletes) if deletes else ())

    def _mutate(
        self, keys: Sequence[int], values: Sequence[Any], delete_keys: Collection[int]
    ) -> None:
        if len(keys) or len(values):
            mutations = _impl.mutations
            # Found keys that are not deleted, with their priorities as floats and items.
            keys, priorities, targets = mutations.select_updates(
                self._items, keys, values, delete_keys
            )
            if keys:
                if not self._priority_users:
                    # The selectors that order by priority refuse NaN themselves.
                    for key, priority in zip(keys, priorities):
                        if priority != priority:
                            raise errors.InvalidArgumentError(
                                f"Priority must not be NaN (key={key}, priority={priority!r})."
                            )
                for structure in self._priority_users:
                    structure.update_many(keys, priorities)
                mutations.assign_priorities(targets, priorities)
                if self._on_update:
                    for target in targets:
                        self._call_hooks(self._on_update, target)
        deleted = False
        for key in delete_keys:
            if self._delete(key) is not None:
                deleted = True
        if deleted and (self._insert_waiters or self._sample_waiters):
            self._pump()

    def reset(self) -> None:
        """Removes every item and sets the rate limiter's counters and the stats to 0.

        Waiting inserts may proceed afterwards.
        """
        if self._on_reset:
            self._call_hooks(self._on_reset)
        if self._observer is not None:
            self._observer.resetting(self)
        self._items.clear()
        if self._chunk_refs is not None:
            self._chunk_refs.clear()
        self._chunk_bytes = 0
        self._sampler.clear()
        self._remover.clear()
        self._limiter.reset()
        self._episodes.clear()
        self._num_deleted_episodes = 0
        self._num_unique_samples = 0
        if self._insert_waiters or self._sample_waiters:
            self._pump()

    # ------------------------------------------------------------------ checkpoints

    def snapshot(self) -> TableSnapshot:
        """A consistent copy of the table's state, for a checkpoint.

        Settings, rate-limiter counters and statistics go into Reverb's
        ``PriorityTableCheckpoint``; items are copied (their chunks are shared, not
        copied: chunk bytes never change) in insertion order. Runs in O(items) on the
        table's loop, so the table is never seen half-changed.
        """
        checkpoint = checkpoint_pb2.PriorityTableCheckpoint(
            table_name=self._name,
            max_size=self._max_size,
            max_times_sampled=self._max_times_sampled,
            num_deleted_episodes=self._num_deleted_episodes,
            num_unique_samples=self._num_unique_samples,
        )
        checkpoint.sampler.CopyFrom(self._sampler_config.options())
        checkpoint.remover.CopyFrom(self._remover_config.options())
        limiter = self._limiter
        rl = checkpoint.rate_limiter
        rl.samples_per_insert = limiter.samples_per_insert
        rl.min_diff = limiter.min_diff
        rl.max_diff = limiter.max_diff
        rl.min_size_to_sample = limiter.min_size_to_sample
        rl.sample_count = limiter.samples
        rl.insert_count = limiter.inserts
        rl.delete_count = limiter.deletes
        if self._signature_proto is not None:
            checkpoint.signature.CopyFrom(self._signature_proto)
        with _gc.paused():
            items = [
                Item(
                    item.key,
                    item.priority,
                    item.trajectory,
                    item.chunks,
                    item.episode_ids,
                    item.times_sampled,
                    item.inserted_at,
                )
                for item in self._items.values()
            ]
        items.sort(key=operator.attrgetter("inserted_at"))
        return TableSnapshot(checkpoint, items)

    def config_differences(self, snapshot: TableSnapshot) -> list[str]:
        """The settings in which a snapshot differs from this table, one line each.

        Compares ``max_size``, ``max_times_sampled``, sampler, remover, the rate
        limiter's settings and the signature; each line reads ``"<setting>: configured
        <value>, checkpoint <value>"``. Empty when the snapshot matches.
        """
        checkpoint = snapshot.checkpoint
        rl = checkpoint.rate_limiter
        try:
            stored_limiter: object = rate_limiters.RateLimiter(
                rl.samples_per_insert, rl.min_size_to_sample, rl.min_diff, rl.max_diff
            )
        except ValueError:  # restore() refuses it with its own message
            stored_limiter = (
                rl.samples_per_insert,
                rl.min_size_to_sample,
                rl.min_diff,
                rl.max_diff,
            )
        pairs: list[tuple[str, object, object]] = [
            ("max_size", self._max_size, int(checkpoint.max_size)),
            ("max_times_sampled", self._max_times_sampled, int(checkpoint.max_times_sampled)),
            ("sampler", self._sampler_config, _selector_or_options(checkpoint.sampler)),
            ("remover", self._remover_config, _selector_or_options(checkpoint.remover)),
            ("rate_limiter", self._rate_limiter_config, stored_limiter),
        ]
        differences = [
            f"{setting}: configured {configured!r}, checkpoint {stored!r}"
            for setting, configured, stored in pairs
            if configured != stored
        ]
        stored_signature = checkpoint.signature if checkpoint.HasField("signature") else None
        if self._signature_proto != stored_signature:
            differences.append(
                f"signature: configured {_describe_signature(self._signature_proto)}, "
                f"checkpoint {_describe_signature(stored_signature)}"
            )
        return differences

    def restore(self, snapshot: TableSnapshot) -> None:
        """Replaces this table's state with a snapshot's (Reverb's restore semantics).

        Sampler, remover, ``max_size``, ``max_times_sampled``, the rate limiter (settings
        and counters), the signature and the statistics come from the snapshot; the
        constructor's settings are ignored, extensions are kept. Items go in in the
        snapshot's order without touching the rate limiter.

        Raises:
          InvalidArgumentError: the snapshot is of another table or cannot be applied
            (the table is then left empty).
        """
        checkpoint = snapshot.checkpoint
        config, sampler, remover = self._validate_checkpoint(checkpoint)
        self._swap_state(checkpoint, config, sampler, remover)
        self._restore_items(snapshot.items)
        if self._max_bytes is not None and self._chunk_bytes > self._max_bytes:
            evicted = self._evict_to_max_bytes()
            _logger.warning(
                "table %r: the restored items were over max_bytes=%d; %d evicted",
                self._name,
                self._max_bytes,
                evicted,
            )
        if self._insert_waiters or self._sample_waiters:
            self._pump()

    def _validate_checkpoint(
        self, checkpoint: checkpoint_pb2.PriorityTableCheckpoint
    ) -> tuple[rate_limiters.RateLimiter, item_selectors.ItemSelector, item_selectors.ItemSelector]:
        """The first step of :meth:`restore`: checks the snapshot's table name, rate
        limiter, selectors and ``max_size``; returns the rate limiter's settings (bound
        to this table), the sampler and the remover. Changes nothing of the table.

        Raises:
          InvalidArgumentError: the snapshot is of another table or a setting is bad.
        """
        if checkpoint.table_name != self._name:
            raise errors.InvalidArgumentError(
                f"Checkpoint of table {checkpoint.table_name!r} cannot be restored into "
                f"table {self._name!r}."
            )
        rl = checkpoint.rate_limiter
        try:
            config = rate_limiters.RateLimiter(
                rl.samples_per_insert, rl.min_size_to_sample, rl.min_diff, rl.max_diff
            )
        except ValueError as error:
            raise errors.InvalidArgumentError(
                f"Checkpoint of table {self._name!r} has a bad rate limiter: {error}"
            ) from None
        config._bind(self._name)
        sampler = item_selectors.selector_from_options(checkpoint.sampler)
        remover = item_selectors.selector_from_options(checkpoint.remover)
        if checkpoint.max_size <= 0:
            raise errors.InvalidArgumentError(
                f"Checkpoint of table {self._name!r} has max_size {checkpoint.max_size}."
            )
        return config, sampler, remover

    def _swap_state(
        self,
        checkpoint: checkpoint_pb2.PriorityTableCheckpoint,
        config: rate_limiters.RateLimiter,
        sampler: item_selectors.ItemSelector,
        remover: item_selectors.ItemSelector,
    ) -> None:
        """The second step of :meth:`restore`: drops every item and takes the
        snapshot's settings, rate-limiter state, signature and statistics."""
        self._items.clear()
        if self._chunk_refs is not None:
            self._chunk_refs.clear()
        self._chunk_bytes = 0
        self._episodes.clear()
        self._max_size = int(checkpoint.max_size)
        self._max_times_sampled = int(checkpoint.max_times_sampled)
        self._rate_limiter_config = config
        rl = checkpoint.rate_limiter
        self._limiter = _impl.RateLimiterState(
            rl.samples_per_insert,
            rl.min_size_to_sample,
            rl.min_diff,
            rl.max_diff,
            rl.insert_count,
            rl.sample_count,
            rl.delete_count,
        )
        self._set_selectors(sampler, remover)
        if checkpoint.HasField("signature"):
            from reverb_py._codec.signature import decode_signature

            self._signature_proto = checkpoint.signature
            self._signature = decode_signature(checkpoint.signature)
        else:
            self._signature_proto = None
            self._signature = None
        self._num_deleted_episodes = int(checkpoint.num_deleted_episodes)
        self._num_unique_samples = int(checkpoint.num_unique_samples)

    def _restore_items(self, items: Iterable[Item]) -> None:
        """The last step of :meth:`restore`: inserts the snapshot's items, in order,
        without touching the rate limiter.

        Raises:
          InvalidArgumentError: an item is bad (the table is then left empty).
        """
        check_item = self._check_item
        strict_insert = self._strict.insert
        lax_insert = self._lax.insert
        table_items = self._items
        episodes = self._episodes
        try:
            for item in items:
                key = item.key
                priority = item.priority
                if (
                    type(key) is not int  # noqa: E721 - exact types: the usual case
                    or not 0 <= key <= KEY_MAX
                    or type(priority) is not float  # noqa: E721
                ):
                    check_item(item)
                    key = item.key
                    priority = item.priority
                strict_insert(key, priority)
                lax_insert(key, priority)
                table_items[key] = item
                for episode_id in item.episode_ids:
                    episodes[episode_id] += 1
                if self._chunk_refs is not None:
                    self._reference(item.chunks)
        except errors.ReverbError as error:
            self._items.clear()
            if self._chunk_refs is not None:
                self._chunk_refs.clear()
            self._chunk_bytes = 0
            self._episodes.clear()
            self._sampler.clear()
            self._remover.clear()
            raise errors.InvalidArgumentError(
                f"Checkpoint of table {self._name!r} has a bad item: {error}"
            ) from None

    def close(self) -> None:
        """Closes the table: waiting and later inserts and samples fail.

        They raise :class:`~reverb_py.errors.CancelledOperationError`. Items stay.
        Idempotent.
        """
        self._closed = True
        for queue in (self._insert_waiters, self._sample_waiters):
            while queue:
                waiter = queue.popleft()
                if not waiter.future.done():
                    waiter.future.set_exception(errors.CancelledOperationError(_CLOSED_MESSAGE))
            self._note_unblocked(queue)


def _selector_or_options(options: Any) -> object:
    """The selector a checkpoint's options describe, or the options when they are bad."""
    try:
        return item_selectors.selector_from_options(options)
    except (ValueError, errors.ReverbError):
        return options


def _describe_signature(proto: Any) -> str:
    if proto is None:
        return "none"
    from reverb_py._codec.signature import decode_signature

    try:
        return repr(decode_signature(proto))
    except (ValueError, TypeError, errors.ReverbError):
        return "an unreadable signature"
