"""Table extensions built on :class:`~reverb_py.table.TableExtensionBase`.

:class:`InsertOnSampleExtension` is Reverb's one built-in extension
(``reverb/cc/table_extensions/insert_on_sample.cc``): the first time an item of the
table it is attached to is sampled, a copy of the item goes into another table.
"""

from __future__ import annotations

import asyncio
import logging

from reverb_py import errors
from reverb_py.table import Item, Table, TableExtensionBase

__all__ = ["InsertOnSampleExtension"]

_logger = logging.getLogger("reverb_py")


class InsertOnSampleExtension(TableExtensionBase):
    """Copies each item into ``target_table`` when it is sampled for the first time.

    The copy has the item's key, priority and data (its chunks are shared, not copied),
    a sample count of 0 and a new insertion time. It goes into the target as an insert
    from a writer would: at once if the target's rate limiter allows, else queued behind
    the target's other waiting inserts, for at most ``timeout`` seconds. A copy that
    cannot go in (refused, timed out, target closed) is logged as a WARNING, as Reverb
    does; the source table is not affected.

    Both tables must be served by the same server (they share its event loop).

    Args:
      target_table: The table receiving the copies (not the table the extension is
        attached to).
      timeout: Seconds a copy may wait for the target's rate limiter; None: no limit.
    """

    def __init__(self, target_table: Table, timeout: float | None = None) -> None:
        if not isinstance(target_table, Table):
            raise TypeError(f"target_table must be a Table, got {target_table!r}")
        if timeout is not None and not timeout >= 0:
            raise ValueError(f"timeout must be None or >= 0 seconds, got {timeout!r}")
        self._target = target_table
        self._timeout = timeout

    @property
    def target_table(self) -> Table:
        return self._target

    def __repr__(self) -> str:
        return f"InsertOnSampleExtension(target={self._target.name!r}, timeout={self._timeout!r})"

    def on_sample(self, table: Table, item: Item) -> None:
        if item.times_sampled != 1:
            return
        if table is self._target:
            raise errors.InvalidArgumentError(
                f"InsertOnSampleExtension on table {table.name!r} targets that same table"
            )
        copy = Item(item.key, item.priority, item.trajectory, item.chunks, item.episode_ids)
        where = f"item {item.key} from table {table.name!r} to table {self._target.name!r}"
        try:
            pending = self._target.insert_or_enqueue(copy)
        except errors.ReverbError as error:
            _logger.warning("InsertOnSampleExtension: cannot copy %s: %s", where, error)
            return
        if pending is None:
            return
        timer = None
        if self._timeout is not None:
            timer = asyncio.get_running_loop().call_later(self._timeout, pending.cancel)

        def done(future: asyncio.Future[None]) -> None:
            if timer is not None:
                timer.cancel()
            if future.cancelled():
                _logger.warning(
                    "InsertOnSampleExtension: copying %s timed out after %s s",
                    where,
                    self._timeout,
                )
            elif future.exception() is not None:
                _logger.warning(
                    "InsertOnSampleExtension: cannot copy %s: %s", where, future.exception()
                )

        pending.add_done_callback(done)
