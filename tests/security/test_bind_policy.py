"""Where a server listens: localhost by default, ``host=`` or ``REVERB_PY_HOST``
otherwise, and a warning when other machines can reach an unauthenticated server."""

from __future__ import annotations

import logging
import os
import pathlib
import re
import signal
import subprocess
import sys

import pytest

from reverb_py import rate_limiters, selectors
from reverb_py.server import Server, Table, _auth

ROOT = pathlib.Path(__file__).parents[2]


def table() -> Table:
    return Table("t", selectors.Uniform(), selectors.Fifo(), 10, rate_limiters.MinSize(1))


@pytest.fixture(autouse=True)
def no_host_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_auth.HOST_ENV, raising=False)


@pytest.mark.parametrize(
    "host", ["localhost", "LOCALHOST", "127.0.0.1", "127.1.2.3", "::1", "[::1]"]
)
def test_loopback_hosts(host: str) -> None:
    assert _auth.is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "[::]", "10.1.2.3", "no-such-host.invalid"])
def test_hosts_other_machines_reach(host: str) -> None:
    assert not _auth.is_loopback(host)


def test_the_warning_names_the_risk() -> None:
    assert _auth.exposure_warning("localhost", 1, tls=False, token=False, mtls=False) is None
    open_ = _auth.exposure_warning("0.0.0.0", 8000, tls=False, token=False, mtls=False)
    assert open_ is not None
    assert "0.0.0.0:8000 is reachable from other machines" in open_
    assert "not authenticated" in open_ and "reset" in open_


def test_the_default_is_localhost() -> None:
    with Server([table()], port=0) as server:
        assert server.address == f"localhost:{server.port}"


def test_reverb_py_host_is_used_when_no_host_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_auth.HOST_ENV, "127.0.0.1")
    with Server([table()], 0) as server:
        assert server.address == f"127.0.0.1:{server.port}"
        assert set(server.localhost_client().server_info(timeout=10)) == {"t"}


def test_an_explicit_host_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_auth.HOST_ENV, "no-such-host.invalid")
    with Server([table()], port=0, host="localhost") as server:
        assert server.address.startswith("localhost:")


def test_an_exposed_unauthenticated_server_logs_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Binds localhost, but is told it is reachable: no test opens a port to the network.
    monkeypatch.setattr(_auth, "is_loopback", lambda host: False)
    with caplog.at_level(logging.WARNING, logger="reverb_py"):
        with Server([table()], port=0) as server:
            pass
    [record] = [r for r in caplog.records if "reachable from other machines" in r.message]
    assert record.levelno == logging.WARNING
    assert f"localhost:{server.port}" in record.message


def test_a_local_server_logs_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="reverb_py"):
        with Server([table()], port=0):
            pass
    assert not [r for r in caplog.records if "reachable" in r.message]


def test_the_daemon_binds_reverb_py_host(tmp_path: pathlib.Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text("port = 0\n")
    env = {**os.environ, _auth.HOST_ENV: "127.0.0.1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "reverb_py.server", "--config", str(config)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            if re.search(r"serving on 127\.0\.0\.1:\d+ ", line):
                break
        else:
            raise AssertionError("".join(lines))
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
        assert process.returncode == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
