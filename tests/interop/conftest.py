"""Fixtures of the interop suite: dm-reverb in child processes, reverb_py in this one.

``REVERB_PY_DM_REVERB_PYTHON`` names the Python of a venv with dm-reverb 0.14 and
TensorFlow (``make interop`` creates ``.venv-reverb``). dm-reverb and TensorFlow are
never imported here: a *worker* process runs dm-reverb client operations, and each
dm-reverb server runs in its own process. Importing TensorFlow costs seconds, so the
worker and the shared dm-reverb server are started once per session, in parallel.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import reverb_py

from . import _procs, _scenarios, _sides

#: Per-test bound (pytest-timeout) for this suite: the first test also pays for starting
#: the dm-reverb processes (TensorFlow import), which can exceed the default 60 s on a
#: cold disk cache.
INTEROP_TIMEOUT = 300


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.timeout(INTEROP_TIMEOUT))


@pytest.fixture(scope="session")
def dm_python() -> str:
    python = _procs.dm_python()
    if not python or not os.path.exists(python):
        pytest.fail(
            f"REVERB_PY_DM_REVERB_PYTHON={python!r} is not a Python executable; run "
            "`make interop` (it creates .venv-reverb with dm-reverb 0.14)"
        )
    return python


@pytest.fixture(scope="session")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("interop")


@pytest.fixture(scope="session")
def dm_processes(
    dm_python: str, scratch: Path
) -> Iterator[tuple[_procs.DmWorker, _procs.DmServer]]:
    """The dm-reverb worker and the shared dm-reverb server, started in parallel."""
    worker = _procs.DmWorker(dm_python, scratch / "worker")
    server = None
    try:
        server = _procs.DmServer(
            dm_python, _scenarios.SHARED_TABLES, scratch / "dm_shared_server.log"
        )
        worker.wait_ready()
        server.wait_ready()
        server.require_ready()
        yield worker, server
    finally:
        worker.close()
        if server is not None:
            server.close()
        _procs.assert_no_tensorflow_here()


@pytest.fixture(scope="session")
def dm_worker(dm_processes: tuple[_procs.DmWorker, _procs.DmServer]) -> _procs.DmWorker:
    return dm_processes[0]


@pytest.fixture(scope="session")
def dm_server(dm_processes: tuple[_procs.DmWorker, _procs.DmServer]) -> _sides.DmServerHandle:
    worker, server = dm_processes
    return _sides.DmServerHandle(server, worker)


@pytest.fixture(scope="session")
def rp_server() -> Iterator[_sides.RpServerHandle]:
    """A reverb_py server (in this process) with the shared tables."""
    server = reverb_py.Server(_scenarios.build_rp_tables(_scenarios.SHARED_TABLES), port=0)
    try:
        yield _sides.RpServerHandle(server)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def dm_client(dm_worker: _procs.DmWorker) -> _sides.DmSide:
    return _sides.DmSide(dm_worker)


@pytest.fixture(scope="session")
def rp_sync_client() -> _sides.RpSyncSide:
    return _sides.RpSyncSide()


@pytest.fixture(scope="session")
def rp_aio_client() -> Iterator[_sides.RpAioSide]:
    side = _sides.RpAioSide()
    try:
        yield side
    finally:
        side.close()


@pytest.fixture
def make_dm_server(dm_python: str, tmp_path: Path) -> Iterator:
    """Starts extra dm-reverb servers for one test; all are stopped afterwards."""
    servers: list[_procs.DmServer] = []

    def start(tables: list[dict], checkpoint_dir: str | None = None) -> _procs.DmServer:
        server = _procs.DmServer(
            dm_python,
            tables,
            tmp_path / f"dm_server_{len(servers)}.log",
            checkpoint_dir=checkpoint_dir,
        )
        servers.append(server)
        server.wait_ready()
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.close()
