"""What the server logs: client errors by level, one line per checkpoint event, the
daemon's ``--log-level`` / ``log_level`` and ``log_format`` (text naming the logger and
the process, or JSON); gRPC's own INFO lines are not printed."""

from __future__ import annotations

import io
import json
import logging
import os
import pathlib
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

import reverb_py
from reverb_py import checkpointers, errors, rate_limiters, selectors
from reverb_py.errors import ConfigError
from reverb_py.server import Server, Table, _daemon, _logs, configure_logging

ROOT = pathlib.Path(__file__).parents[2]

STOP_WITH_A_CLIENT = """
import os, sys
import reverb_py
from reverb_py import rate_limiters, selectors
from reverb_py.server import Server, Table
print(os.environ["GRPC_VERBOSITY"])
server = Server([Table("t", selectors.Fifo(), selectors.Fifo(), 10, rate_limiters.MinSize(1))], 0)
client = reverb_py.Client(server.address)
client.server_info(timeout=20)
server.stop()
"""


INFO_LINE = re.compile(r"^I\d{4} ", re.MULTILINE)
GRPC_CORE_LINE = re.compile(r"^[DIWE]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\] ")


def run_script(
    verbosity: str | None, source: str = STOP_WITH_A_CLIENT
) -> subprocess.CompletedProcess[str]:
    # The "api" tracer makes gRPC's core log INFO lines on every call, at a verbosity that
    # lets them through: a deterministic stand-in for "Got goaway" and its kind.
    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    env["GRPC_TRACE"] = "api"
    if verbosity is not None:
        env["GRPC_VERBOSITY"] = verbosity
    return subprocess.run(
        [sys.executable, "-c", source],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_grpc_core_info_lines_are_not_printed() -> None:
    result = run_script(None)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ERROR"
    assert not INFO_LINE.search(result.stderr), result.stderr
    assert "Got goaway" not in result.stderr


def test_without_reverb_py_grpc_prints_them() -> None:
    source = "import grpc\ngrpc.insecure_channel('localhost:1').close()\n"
    result = run_script(None, source)
    assert INFO_LINE.search(result.stderr), result.stderr


def test_grpc_verbosity_set_by_the_user_is_kept() -> None:
    result = run_script("INFO")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "INFO"
    assert INFO_LINE.search(result.stderr), result.stderr


def table(name: str = "t") -> Table:
    return Table(name, selectors.Fifo(), selectors.Fifo(), 10, rate_limiters.MinSize(1))


def test_client_errors_are_logged_with_the_peer_at_their_level(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with Server([table()], port=0) as server:
        client = server.localhost_client()
        with caplog.at_level(logging.DEBUG, logger="reverb_py"):
            with pytest.raises(errors.NotFoundError):
                client.reset("missing")
            with pytest.raises(errors.DeadlineExceededError):
                next(iter(client.sample("t", 1, rate_limiter_timeout_ms=1)))
    [not_found] = [r for r in caplog.records if r.getMessage().startswith("NOT_FOUND from ")]
    assert not_found.levelno == logging.WARNING and "missing" in not_found.getMessage()
    assert re.match(r"NOT_FOUND from ipv[46]:\S+:\d+: ", not_found.getMessage())
    [timeout] = [r for r in caplog.records if r.getMessage().startswith("DEADLINE_EXCEEDED from")]
    assert timeout.levelno == logging.DEBUG


class FailingOnceCheckpointer(checkpointers.DefaultCheckpointer):
    """Its first save fails as a full disk would."""

    failed = False

    def save(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not self.failed:
            self.failed = True
            raise OSError(28, "No space left on device")
        return super().save(*args, **kwargs)


def test_each_checkpoint_event_is_one_line_with_duration_and_size(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    checkpointer = FailingOnceCheckpointer(str(tmp_path))
    with Server([table()], port=0, checkpointer=checkpointer) as server:
        client = server.localhost_client()
        client.insert(np.zeros(2), {"t": 1.0})
        client.insert(np.ones(2), {"t": 1.0})
        caplog.clear()
        with pytest.raises(errors.ReverbError, match="No space left"):
            client.checkpoint()
        failed = [(r.levelno, r.getMessage()) for r in caplog.records]
        caplog.clear()
        path = client.checkpoint()
        asked = [r.getMessage() for r in caplog.records]
        caplog.clear()
        second = server.checkpoint()
        direct = [r.getMessage() for r in caplog.records]
    size = _logs.directory_bytes(path) / 1e6
    [(level, message)] = failed
    assert level == logging.ERROR
    assert re.fullmatch(
        r"checkpoint failed after \d+\.\d{3} s \(asked by ipv[46]:\S+\): "
        r".*No space left on device",
        message,
    ), message
    assert len(asked) == 1, asked
    assert re.fullmatch(
        rf"checkpoint written to {re.escape(path)} in \d+\.\d{{3}} s "
        rf"\(1 tables, 2 items, {size:.1f} MB; asked by ipv[46]:\S+\)",
        asked[0],
    ), asked
    assert direct == [direct[0]] and direct[0].startswith(f"checkpoint written to {second} in ")
    caplog.clear()
    with Server([table()], port=0, checkpointer=checkpointer):
        pass
    loaded = [r.getMessage() for r in caplog.records if "checkpoint loaded from" in r.getMessage()]
    assert re.fullmatch(
        rf"checkpoint loaded from {re.escape(second)} in \d+\.\d{{3}} s \(1 tables, 2 items\)",
        loaded[0],
    )
    assert not [r for r in caplog.records if r.getMessage().startswith("Loaded checkpoint")]


@pytest.fixture
def restore_logging():  # type: ignore[no-untyped-def]
    """Puts the process's logging back as it was after a test configures it."""
    root = logging.getLogger()
    ours = logging.getLogger("reverb_py")
    handlers, level, our_level = list(root.handlers), root.level, ours.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    ours.setLevel(our_level)


def test_text_lines_name_the_logger_and_the_process(restore_logging) -> None:
    stream = io.StringIO()
    configure_logging("debug", stream=stream)
    configure_logging(logging.DEBUG, "text", stream=stream)  # replaces, does not add
    logging.getLogger("reverb_py").debug("hello %s", "there")
    logging.getLogger("grpc").debug("not shown: DEBUG is reverb_py's own")
    logging.getLogger("other").warning("shown")
    lines = stream.getvalue().splitlines()
    pid = os.getpid()
    assert len(lines) == 2, lines
    assert re.fullmatch(
        rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d,\d{{3}} DEBUG reverb_py\[{pid}\] hello there",
        lines[0],
    ), lines
    assert lines[1].endswith(f" WARNING other[{pid}] shown")


def test_json_lines_are_one_object_each(restore_logging) -> None:
    stream = io.StringIO()
    configure_logging(logging.INFO, "json", stream=stream)
    logger = logging.getLogger("reverb_py.test")
    logger.info("first\nsecond line %d", 2)
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("failed")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2, lines
    first, second = (json.loads(line) for line in lines)
    assert first.keys() == {"time", "level", "logger", "pid", "message"}
    assert first["message"] == "first\nsecond line 2" and first["level"] == "INFO"
    assert first["logger"] == "reverb_py.test" and first["pid"] == os.getpid()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["time"])
    assert second["level"] == "ERROR" and "ValueError: boom" in second["exception"]


def test_bad_logging_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="log_format: one of text, json, got 'xml'"):
        configure_logging(logging.INFO, "xml")
    with pytest.raises(ValueError, match="level"):
        configure_logging("loud")
    with pytest.raises(ConfigError, match="config.log_format"):
        _daemon.log_format(None, {"log_format": "xml"})
    assert _daemon.log_format(None, {"log_format": "json"}) == "json"
    assert _daemon.log_format("text", {"log_format": "json"}) == "text"
    assert _daemon.log_format(None, {}) == "text"


def test_the_daemon_logs_json_and_one_line_per_checkpoint(tmp_path: pathlib.Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text(
        f'port = 0\nlog_format = "json"\ncheckpoint_dir = "{tmp_path / "ckpt"}"\n'
        "checkpoint_on_shutdown = true\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "reverb_py.server", "--config", str(config)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            if "serving on" in line:
                break
        else:
            raise AssertionError("".join(lines))
        process.send_signal(signal.SIGTERM)
        lines.extend(process.stdout)
        process.stdout.close()
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, "".join(lines)
    # Every line is an object, but for gRPC core's own lines (its format, on stderr).
    records = [json.loads(line) for line in lines if not GRPC_CORE_LINE.match(line)]
    assert {record["pid"] for record in records} == {process.pid}
    assert records[0]["logger"] == "reverb_py"
    # (google-crc32c's warning of a slow checksum path depends on the environment.)
    about = [
        r["message"]
        for r in records
        if "checkpoint" in r["message"] and not r["message"].startswith("google-crc32c")
    ]
    assert len(about) == 1, about
    assert re.match(r"shutdown checkpoint written to \S+ in \d+\.\d{3} s \(1 tables", about[0])


@pytest.mark.parametrize(
    "flag, config, level",
    [
        (None, {}, logging.INFO),
        (None, {"log_level": "WARNING"}, logging.WARNING),
        ("debug", {"log_level": "error"}, logging.DEBUG),
        ("error", {}, logging.ERROR),
    ],
)
def test_log_level_from_the_flag_or_the_config(flag, config, level) -> None:
    assert _daemon.log_level(flag, config) == level


def test_an_unknown_log_level_is_a_bad_config() -> None:
    with pytest.raises(ConfigError, match="config.log_level"):
        _daemon.log_level(None, {"log_level": "loud"})


@pytest.mark.parametrize("where", ["flag", "config"])
def test_the_daemon_logs_debug_lines_when_asked(tmp_path: pathlib.Path, where: str) -> None:
    config = tmp_path / "server.toml"
    config.write_text("port = 0\n" + ('log_level = "debug"\n' if where == "config" else ""))
    args = ["--config", str(config)] + (["--log-level", "DEBUG"] if where == "flag" else [])
    process = subprocess.Popen(
        [sys.executable, "-m", "reverb_py.server", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            match = re.search(r"serving on (\S+) ", line)
            if match:
                break
        else:
            raise AssertionError("".join(lines))
        client = reverb_py.Client(match.group(1))
        with pytest.raises(errors.DeadlineExceededError):
            next(iter(client.sample("my_table", 1, rate_limiter_timeout_ms=1)))
        process.send_signal(signal.SIGTERM)
        # Read on through the same buffered file (communicate() would skip what it holds).
        lines.extend(process.stdout)
        process.stdout.close()
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    output = "".join(lines)
    assert re.search(r"INFO reverb_py\[\d+\] table 'my_table': Table\(", output), output
    assert re.search(r"DEBUG reverb_py\[\d+\] DEADLINE_EXCEEDED from \S+: ", output), output
