"""Clients and servers of either implementation behind one interface.

A *client side* runs the operations of :mod:`_ops` — the dm-reverb worker process, the
blocking reverb_py client, or the asyncio reverb_py client — with ``call(op, **args)``
(bounded wait) and ``submit(op, **args)`` (a future, for calls that must block while the
test does something else). A *server handle* gives an address and what the server holds.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any

import reverb_py

from . import _aio_ops, _ops
from ._procs import CALL_TIMEOUT, DmCallError, DmServer, DmWorker, wait_for


def error_of(error: BaseException) -> tuple[list[str], str]:
    """``(class names of the exception and its bases, message)`` for either side."""
    if isinstance(error, DmCallError):
        return error.error_mro, error.message
    return [cls.__name__ for cls in type(error).__mro__], str(error)


class ClientSide:
    key = ""
    label = ""

    def submit(self, op: str, **args: Any) -> concurrent.futures.Future[Any]:
        raise NotImplementedError

    def call(self, op: str, timeout: float = CALL_TIMEOUT, **args: Any) -> Any:
        return wait_for(self.submit(op, **args), timeout, f"{self.label}: {op}()", self._log())

    def call_error(self, op: str, timeout: float = CALL_TIMEOUT, **args: Any) -> tuple:
        """Runs ``op`` expecting it to raise; returns :func:`error_of` of the error."""
        try:
            result = self.call(op, timeout, **args)
        except AssertionError:
            raise
        except BaseException as error:  # noqa: BLE001 - inspected by the caller.
            return error_of(error)
        raise AssertionError(f"{self.label}: {op}() returned {result!r} instead of raising")

    def _log(self) -> Any:
        return None

    def close(self) -> None:
        pass


class DmSide(ClientSide):
    key = "dm"
    label = "dm-reverb client"

    def __init__(self, worker: DmWorker) -> None:
        self.worker = worker

    def submit(self, op: str, **args: Any) -> concurrent.futures.Future[Any]:
        return self.worker.submit(op, **args)

    def _log(self) -> Any:
        return self.worker


def _in_thread(fn: Any, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
    """Runs ``fn`` in a daemon thread (a hung call never blocks interpreter exit)."""
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # noqa: BLE001 - handed to the future.
            future.set_exception(error)

    threading.Thread(target=run, daemon=True).start()
    return future


class RpSyncSide(ClientSide):
    key = "rp_sync"
    label = "reverb_py client (blocking)"

    def submit(self, op: str, **args: Any) -> concurrent.futures.Future[Any]:
        return _in_thread(getattr(_ops, op), reverb_py, **args)


class RpAioSide(ClientSide):
    key = "rp_aio"
    label = "reverb_py client (asyncio)"

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def submit(self, op: str, **args: Any) -> concurrent.futures.Future[Any]:
        function = getattr(_aio_ops, op, None)
        if function is None:
            raise NotImplementedError(f"reverb_py.aio has no {op}")
        return asyncio.run_coroutine_threadsafe(function(**args), self.loop)

    def close(self) -> None:
        async def drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.loop.shutdown_asyncgens()

        try:
            asyncio.run_coroutine_threadsafe(drain(), self.loop).result(CALL_TIMEOUT)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(CALL_TIMEOUT)
            if not self.thread.is_alive():
                self.loop.close()


class ServerHandle:
    key = ""
    label = ""
    address = ""

    def info(self, table: str) -> dict:
        """``_ops.info_to_json`` of one table, as the server itself reports it."""
        raise NotImplementedError


class RpServerHandle(ServerHandle):
    key = "rp"
    label = "reverb_py server"

    def __init__(self, server: reverb_py.Server) -> None:
        self.server = server
        self.address = f"localhost:{server.port}"
        self.tables = {table.name: table for table in server.tables}

    def info(self, table: str) -> dict:
        return _ops.info_to_json(self.tables[table].info)

    def on_loop(self, fn: Any) -> Any:
        """Runs ``fn()`` on the server's event loop (table state is not thread-safe)."""

        async def run() -> Any:
            return fn()

        return self.server._loop_thread.run(run(), timeout=CALL_TIMEOUT)

    def items(self, table: str) -> list[Any]:
        """``(key, priority, times_sampled)`` of every item, oldest first."""
        return self.on_loop(
            lambda: [
                (item.key, item.priority, item.times_sampled) for item in self.tables[table].items()
            ]
        )


class DmServerHandle(ServerHandle):
    key = "dm"
    label = "dm-reverb server"

    def __init__(self, server: DmServer, worker: DmWorker) -> None:
        self.server = server
        self.worker = worker
        self.address = server.address

    def info(self, table: str) -> dict:
        return self.worker.call("server_info", address=self.address)[table]


def annotated_call(where: str, client: ClientSide, op: str, **args: Any) -> Any:
    """``client.call(op, **args)``; an error fails the test with ``where`` in front."""
    try:
        return client.call(op, **args)
    except AssertionError:
        raise
    except BaseException as error:  # noqa: BLE001 - re-raised with context.
        mro, message = error_of(error)
        raise AssertionError(f"{where} raised {mro[0]}: {message}") from error


def reset_tables(handle: ServerHandle, tables: list[str]) -> None:
    client = reverb_py.Client(handle.address)
    for table in tables:
        client.reset(table)
