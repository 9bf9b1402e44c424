"""``python -m reverb_py.server``: config handling, start-up log, graceful stop."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import grpc
import pytest

import reverb_py
from reverb_py._proto import reverb_service_pb2 as pb
from reverb_py.server import _daemon

ROOT = pathlib.Path(__file__).parents[2]


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "reverb_py.server", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def read_address(process: subprocess.Popen[str], lines: list[str] | None = None) -> str:
    """The address the daemon logs; the lines read up to it are added to ``lines``."""
    assert process.stdout is not None
    lines = [] if lines is None else lines
    for line in process.stdout:
        lines.append(line)
        match = re.search(r"serving on (\S+) \(implementation: (\w+)\)", line)
        if match:
            return match.group(1)
    raise AssertionError("no address logged:\n" + "".join(lines))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_daemon_serves_the_configured_tables_and_stops_on_signals(tmp_path, sig) -> None:
    config = tmp_path / "server.toml"
    config.write_text(
        "port = 0\n"
        '[[tables]]\nname = "replay"\nmax_size = 10\n'
        'sampler = {kind = "prioritized", priority_exponent = 0.8}\n'
        'remover = {kind = "fifo"}\n'
        'rate_limiter = {kind = "sample_to_insert_ratio", samples_per_insert = 2.0, '
        "min_size_to_sample = 1, error_buffer = 10.0}\n"
    )
    process = start("--config", str(config))
    try:
        address = read_address(process)
        with grpc.insecure_channel(address) as channel:
            info = channel.unary_unary(
                "/deepmind.reverb.ReverbService/ServerInfo",
                request_serializer=pb.ServerInfoRequest.SerializeToString,
                response_deserializer=pb.ServerInfoResponse.FromString,
            )(pb.ServerInfoRequest(), timeout=30)
        [table] = info.table_info
        assert table.name == "replay" and table.max_size == 10
        assert table.sampler_options.prioritized.priority_exponent == pytest.approx(0.8)
        assert table.rate_limiter_info.samples_per_insert == 2.0
        process.send_signal(sig)
        output, _ = process.communicate(timeout=30)
        assert process.returncode == 0
        assert "stopped" in output
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def test_default_tables() -> None:
    [table] = _daemon.tables_from_config({})
    info = table.info
    assert table.name == "my_table" and info.max_size == 1_000_000
    assert info.sampler_options.uniform and info.remover_options.fifo
    assert info.rate_limiter_info.min_size_to_sample == 1


@pytest.mark.parametrize(
    "text, field",
    [
        (
            '[[tables]]\nname = "a"\nmax_size = 0\nsampler = {kind = "uniform"}\n'
            'remover = {kind = "fifo"}\nrate_limiter = {kind = "min_size", min_size_to_sample = 1}',
            "tables[0].max_size",
        ),
        (
            '[[tables]]\nname = "a"\nmax_size = 5\nsampler = {kind = "random"}\n'
            'remover = {kind = "fifo"}\nrate_limiter = {kind = "min_size", min_size_to_sample = 1}',
            "tables[0].sampler.kind",
        ),
        (
            '[[tables]]\nname = "a"\nmax_size = 5\nsampler = {kind = "uniform"}\n'
            'remover = {kind = "fifo"}\nrate_limiter = {kind = "min_size", min_size_to_sample = 0}',
            "tables[0].rate_limiter",
        ),
        (
            '[[tables]]\nname = "a"\nmax_size = 5\nsampler = {kind = "uniform"}\n'
            'remover = {kind = "fifo"}\nrate_limiter = {kind = "sample_to_insert_ratio", '
            "samples_per_insert = 1.0, min_size_to_sample = 1, error_buffer = 0.1}",
            "tables[0].rate_limiter",
        ),
        (
            '[[tables]]\nname = "a"\nmax_size = "big"\nsampler = {kind = "uniform"}\n'
            'remover = {kind = "fifo"}\nrate_limiter = {kind = "min_size", min_size_to_sample = 1}',
            "tables[0].max_size",
        ),
        (
            '[[tables]]\nname = "a"\nmax_size = 5\nsampler = {kind = "uniform"}\n'
            'rate_limiter = {kind = "min_size", min_size_to_sample = 1}',
            "tables[0].remover",
        ),
        ('port = "x"', "config.port"),
        ('colour = "blue"', "config.colour"),
        ("[[tables", "not valid TOML"),
    ],
)
def test_bad_config_is_refused_naming_the_field(tmp_path, text, field) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(text)
    process = start("--config", str(config))
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 2, output
    assert field in output, output


def test_daemon_checkpoints_on_shutdown_and_restores_at_start(tmp_path) -> None:
    config = tmp_path / "server.toml"
    checkpoints = tmp_path / "ckpt"
    config.write_text(
        f'port = 0\ncheckpoint_dir = "{checkpoints}"\ncheckpoint_on_shutdown = true\n'
        "keep_checkpoints = 2\n"
        '[[tables]]\nname = "replay"\nmax_size = 10\nsampler = {kind = "uniform"}\n'
        'remover = {kind = "fifo"}\nrate_limiter = {kind = "min_size", min_size_to_sample = 1}\n'
    )
    process = start("--config", str(config))
    try:
        address = read_address(process)
        reverb_py.Client(address).insert([1.0], priorities={"replay": 1.0})
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
        assert process.returncode == 0, output
        assert "shutdown checkpoint written to" in output
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    process = start("--config", str(config))
    try:
        address = read_address(process)
        info = reverb_py.Client(address).server_info(timeout=30)
        assert info["replay"].current_size == 1
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert len([p for p in checkpoints.iterdir() if (p / "DONE").exists()]) == 2


@pytest.mark.parametrize(
    "text, field",
    [
        ('checkpoint_interval_seconds = 0\ncheckpoint_dir = "x"', "checkpoint_interval_seconds"),
        ("checkpoint_on_shutdown = true", "config.checkpoint_dir"),
        ('keep_checkpoints = 0\ncheckpoint_dir = "x"', "config.keep_checkpoints"),
        ("checkpoint_dir = 5", "config.checkpoint_dir"),
    ],
)
def test_bad_checkpoint_options_name_the_field(tmp_path, text, field) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(text)
    process = start("--config", str(config))
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 2, output
    assert field in output, output


def run_to_exit(process: subprocess.Popen[str], timeout: float = 60) -> str:
    """The whole output of a daemon that must exit by itself (not start serving)."""
    assert process.stdout is not None
    lines = []
    deadline = time.monotonic() + timeout
    for line in process.stdout:
        lines.append(line)
        if "serving on" in line:
            raise AssertionError("the daemon started serving:\n" + "".join(lines))
        if time.monotonic() > deadline:
            raise AssertionError("the daemon did not exit:\n" + "".join(lines))
    process.wait(timeout=timeout)
    return "".join(lines)


def stop(process: subprocess.Popen[str]) -> tuple[int, str]:
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    return process.returncode, output


def kill(process: subprocess.Popen[str]) -> None:
    """Kills the daemon if it still runs, and closes its pipe."""
    if process.poll() is None:
        process.kill()
    process.communicate(timeout=60)


def table_toml(max_size: int, sampler: str) -> str:
    return (
        '[[tables]]\nname = "replay"\n'
        f'max_size = {max_size}\nsampler = {sampler}\nremover = {{kind = "fifo"}}\n'
        'rate_limiter = {kind = "min_size", min_size_to_sample = 1}\n'
    )


def write_checkpoint_with_daemon(tmp_path: pathlib.Path, checkpoints: pathlib.Path) -> None:
    """A daemon with max_size 1,000,000 and Prioritized(0.8) checkpoints one item."""
    config = tmp_path / "first.toml"
    config.write_text(
        f'port = 0\ncheckpoint_dir = "{checkpoints}"\n'
        + table_toml(1_000_000, '{kind = "prioritized", priority_exponent = 0.8}')
    )
    process = start("--config", str(config))
    try:
        client = reverb_py.Client(read_address(process))
        client.insert([1.0], priorities={"replay": 1.0})
        client.checkpoint()
        code, output = stop(process)
        assert code == 0, output
    finally:
        kill(process)


@pytest.mark.parametrize("policy", [None, "warn"])
def test_checkpoint_settings_that_differ_from_the_config_are_logged(tmp_path, policy) -> None:
    checkpoints = tmp_path / "ckpt"
    write_checkpoint_with_daemon(tmp_path, checkpoints)
    config = tmp_path / "second.toml"
    option = f'on_checkpoint_mismatch = "{policy}"\n' if policy else ""
    config.write_text(
        f'port = 0\ncheckpoint_dir = "{checkpoints}"\n{option}'
        + table_toml(1000, '{kind = "uniform"}')
    )
    process = start("--config", str(config))
    start_up: list[str] = []
    try:
        address = read_address(process, start_up)
        info = reverb_py.Client(address).server_info(timeout=30)
        assert info["replay"].current_size == 1
        assert info["replay"].max_size == 1_000_000  # The checkpoint's, as in Reverb.
        code, output = stop(process)
        output = "".join(start_up) + output
        assert code == 0, output
    finally:
        kill(process)
    warnings = [line for line in output.splitlines() if " WARNING " in line]
    max_size = [line for line in warnings if "max_size" in line]
    assert max_size and "1000000" in max_size[0] and "1000" in max_size[0], output
    assert any("sampler" in line for line in warnings), output


def test_checkpoint_settings_that_differ_from_the_config_can_be_refused(tmp_path) -> None:
    checkpoints = tmp_path / "ckpt"
    write_checkpoint_with_daemon(tmp_path, checkpoints)
    config = tmp_path / "second.toml"
    config.write_text(
        f'port = 0\ncheckpoint_dir = "{checkpoints}"\non_checkpoint_mismatch = "refuse"\n'
        + table_toml(1000, '{kind = "uniform"}')
    )
    process = start("--config", str(config))
    try:
        output = run_to_exit(process)
    finally:
        kill(process)
    assert process.returncode == 1, output
    assert "Traceback" not in output, output
    [message] = [line for line in output.splitlines() if line.startswith("reverb_py.server:")]
    assert "max_size" in message and "sampler" in message, output


def test_bad_mismatch_policy_names_the_field(tmp_path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('on_checkpoint_mismatch = "ignore"\n')
    process = start("--config", str(config))
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 2, output
    assert "config.on_checkpoint_mismatch" in output and "ignore" in output, output


@pytest.mark.parametrize("port", [-1, 65536, 100_000])
def test_port_outside_the_range_names_the_field(tmp_path, port) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(f"port = {port}\n")
    process = start("--config", str(config))
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 2, output
    assert "config.port" in output and str(port) in output, output


def test_version() -> None:
    process = start("--version")
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert output.strip() == f"reverb_py {reverb_py.__version__}"


def test_missing_checkpoint_dir_is_created_at_start(tmp_path) -> None:
    checkpoints = tmp_path / "a" / "b" / "ckpt"
    config = tmp_path / "server.toml"
    config.write_text(f'port = 0\ncheckpoint_dir = "{checkpoints}"\n')
    process = start("--config", str(config))
    try:
        read_address(process)
        assert checkpoints.is_dir()
        assert list(checkpoints.iterdir()) == []  # The probe file is gone.
        code, output = stop(process)
        assert code == 0, output
    finally:
        kill(process)


@pytest.mark.parametrize(
    "directory, reason",
    [
        # Cannot be created (its parent is a file), even by root.
        ("{tmp}/file/ckpt", "cannot be created"),
        # Exists, but no file can be created there, even by root.
        ("/proc/self", "not writable"),
        ("{tmp}/file", "not a directory"),
    ],
)
def test_unusable_checkpoint_dir_is_refused_at_start(tmp_path, directory, reason) -> None:
    (tmp_path / "file").write_text("")
    directory = directory.format(tmp=tmp_path)
    config = tmp_path / "server.toml"
    config.write_text(f'port = 0\ncheckpoint_dir = "{directory}"\n')
    process = start("--config", str(config))
    try:
        output = run_to_exit(process)
    finally:
        kill(process)
    assert process.returncode == 1, output
    assert "Traceback" not in output, output
    assert f"checkpoint_dir {directory!r}" in output and reason in output, output


def test_failed_shutdown_checkpoint_exits_non_zero(tmp_path) -> None:
    checkpoints = tmp_path / "ckpt"
    config = tmp_path / "server.toml"
    config.write_text(
        f'port = 0\ncheckpoint_dir = "{checkpoints}"\ncheckpoint_on_shutdown = true\n'
        + table_toml(10, '{kind = "uniform"}')
    )
    process = start("--config", str(config))
    try:
        reverb_py.Client(read_address(process)).insert([1.0], priorities={"replay": 1.0})
        checkpoints.rmdir()
        checkpoints.write_text("not a directory any more")
        code, output = stop(process)
    finally:
        kill(process)
    assert code == 1, output
    assert "shutdown checkpoint failed" in output, output
    assert "shutdown checkpoint was not written" in output, output


def test_the_sample_config_in_the_daemon_help_is_valid_toml(tmp_path) -> None:
    text = _daemon.__doc__ or ""
    start = text.index("::\n") + 3
    end = text.index("\nSelector kinds")
    block = "\n".join(line[4:] for line in text[start:end].splitlines())
    config_path = tmp_path / "help.toml"
    config_path.write_text(block)
    config = _daemon.load_config(str(config_path))
    [table] = _daemon.tables_from_config(config)
    assert table.name == "replay"
    assert table.info.rate_limiter_info.samples_per_insert == 4.0
    assert config["on_checkpoint_mismatch"] == "warn"


# ------------------------------------------------------------------ bad values: one line


def table_with(**fields: str) -> str:
    """One ``[[tables]]`` entry of a good table, with ``fields`` replaced (None: left out)."""
    entry = {
        "name": '"a"',
        "max_size": "5",
        "sampler": '{kind = "uniform"}',
        "remover": '{kind = "fifo"}',
        "rate_limiter": '{kind = "min_size", min_size_to_sample = 1}',
        **fields,
    }
    return "[[tables]]\n" + "".join(f"{k} = {v}\n" for k, v in entry.items() if v != "None")


def limiter(**fields: object) -> str:
    return "{" + ", ".join(f"{k} = {v}" for k, v in fields.items()) + "}"


STI = '"sample_to_insert_ratio"'

# (TOML text, the start of the message after "bad config: ").
BAD_VALUES = [
    (
        table_with(sampler='{kind = "prioritized", priority_exponent = -1}'),
        "tables[0].sampler.priority_exponent: must be >= 0, got -1",
    ),
    (
        table_with(sampler='{kind = "prioritized", priority_exponent = nan}'),
        "tables[0].sampler.priority_exponent: must be a finite number",
    ),
    (
        table_with(sampler='{kind = "prioritized", priority_exponent = "high"}'),
        "tables[0].sampler.priority_exponent: expected",
    ),
    (table_with(sampler='{kind = "prioritized"}'), "tables[0].sampler.priority_exponent: missing"),
    (
        table_with(sampler='{kind = "prioritised", priority_exponent = 1}'),
        "tables[0].sampler.kind: unknown selector 'prioritised'; did you mean 'prioritized'?",
    ),
    (table_with(remover='{knd = "fifo"}'), "tables[0].remover.knd: unknown field; did you mean"),
    (table_with(remover="{}"), "tables[0].remover.kind: missing"),
    (table_with(remover='"fifo"'), "tables[0].remover: expected a table"),
    (
        table_with(rate_limiter=limiter(kind='"min_size"', min_size_to_sample=0)),
        "tables[0].rate_limiter.min_size_to_sample: must be a positive integer, got 0",
    ),
    (
        table_with(rate_limiter=limiter(kind='"minsize"', min_size_to_sample=1)),
        "tables[0].rate_limiter.kind: unknown rate limiter 'minsize'; did you mean 'min_size'?",
    ),
    (
        table_with(rate_limiter=limiter(kind='"min_size"', min_size=1)),
        "tables[0].rate_limiter.min_size: unknown field; did you mean 'min_size_to_sample'?",
    ),
    (
        table_with(
            rate_limiter=limiter(
                kind=STI, samples_per_insert=0, min_size_to_sample=1, error_buffer=10
            )
        ),
        "tables[0].rate_limiter.samples_per_insert: must be positive, got 0",
    ),
    (
        table_with(
            rate_limiter=limiter(
                kind=STI, samples_per_insert="inf", min_size_to_sample=1, error_buffer=10
            )
        ),
        "tables[0].rate_limiter.samples_per_insert: must be a finite number, got inf",
    ),
    (
        table_with(
            rate_limiter=limiter(
                kind=STI, samples_per_insert=1.0, min_size_to_sample=1, error_buffer=0.1
            )
        ),
        "tables[0].rate_limiter: The size of error_buffer must be >= 2",
    ),
    (
        table_with(
            rate_limiter=limiter(
                kind=STI, samples_per_insert=1.0, min_size_to_sample=1, error_buffer=-10
            )
        ),
        "tables[0].rate_limiter.error_buffer: must be >= 0, got -10",
    ),
    (
        table_with(
            rate_limiter=limiter(
                kind=STI, samples_per_insert=1.0, min_size_to_sample=1, error_buffer="[1]"
            )
        ),
        "tables[0].rate_limiter.error_buffer: expected a number or [min_diff, max_diff]",
    ),
    (
        table_with(
            rate_limiter=limiter(
                kind=STI, samples_per_insert=1.0, min_size_to_sample=1, error_buffer="[5, -5]"
            )
        ),
        "tables[0].rate_limiter.error_buffer: min_diff (5) is above max_diff (-5)",
    ),
    (
        table_with(rate_limiter=limiter(kind='"queue"', size=0)),
        "tables[0].rate_limiter.size: must be a positive integer, got 0",
    ),
    (
        table_with(
            rate_limiter=limiter(
                kind='"custom"', samples_per_insert=1, min_size_to_sample=1, min_diff=3, max_diff=2
            )
        ),
        "tables[0].rate_limiter: min_diff (3) is above max_diff (2)",
    ),
    (
        table_with(
            rate_limiter=limiter(
                kind='"custom"',
                samples_per_insert=1,
                min_size_to_sample=1,
                min_diff="nan",
                max_diff=2,
            )
        ),
        "tables[0].rate_limiter.min_diff: must be a finite number, got nan",
    ),
    (table_with(max_sise="5"), "tables[0].max_sise: unknown field; did you mean 'max_size'?"),
    (table_with(max_size="0"), "tables[0].max_size: must be a positive integer, got 0"),
    (table_with(max_size="5.5"), "tables[0].max_size: expected an integer, got 5.5"),
    (table_with(max_bytes="0"), "tables[0].max_bytes: must be a positive integer, got 0"),
    (table_with(max_times_sampled='"once"'), "tables[0].max_times_sampled: expected an integer"),
    (table_with(name='""'), "tables[0].name: must not be empty"),
    (table_with() + table_with(), "tables[1].name: duplicate table name 'a'"),
    (table_with(signature='{x = {dtype = "float99"}}'), "tables[0].signature.x.dtype: "),
    (
        table_with(signature='{x = {dtype = "int8", shape = [-2]}}'),
        "tables[0].signature.x.shape: dimensions are >= 0, or -1 for unknown",
    ),
    ("tables = []\n", "config.tables: at least one table is needed"),
    ("[[tables\n", "config "),
    ("\udcffport = 1\n", "config {tmp}/bad.toml is not UTF-8 text"),
    ("port = 70000\n", "config.port: must be in 0..65535, got 70000"),
    ('port = "x"\n', "config.port: expected an integer"),
    ("prot = 8000\n", "config.prot: unknown field; did you mean 'port'?"),
    (
        'chekpoint_dir = "/x"\n',
        "config.chekpoint_dir: unknown field; did you mean 'checkpoint_dir'?",
    ),
    ('host = "localhost:9000"\n', "config.host: 'localhost:9000' holds a port"),
    ('host = "::1"\n', 'config.host: an IPv6 address is written in brackets: "[::1]"'),
    ('host = ""\n', "config.host: not a host name or address"),
    ("metrics_port = 70000\n", "config.metrics_port: must be in 0..65535, got 70000"),
    ("port = 8123\nmetrics_port = 8123\n", "config.metrics_port: 8123 is the server's port too"),
    ('checkpoint_dir = ""\n', "config.checkpoint_dir: must not be empty"),
    ("checkpoint_dir = 5\n", "config.checkpoint_dir: expected a string"),
    (
        'checkpoint_dir = "/x"\ncheckpoint_interval_seconds = 0\n',
        "config.checkpoint_interval_seconds: must be positive and at most a year",
    ),
    (
        'checkpoint_dir = "/x"\ncheckpoint_interval_seconds = 1e10\n',
        "config.checkpoint_interval_seconds: must be positive and at most a year",
    ),
    (
        'checkpoint_dir = "/x"\ncheckpoint_interval_seconds = nan\n',
        "config.checkpoint_interval_seconds: must be a finite number, got nan",
    ),
    (
        'checkpoint_dir = "/x"\nkeep_checkpoints = 0\n',
        "config.keep_checkpoints: must be a positive integer, got 0",
    ),
    ("checkpoint_on_shutdown = true\n", "config.checkpoint_dir: needed by"),
    (
        'on_checkpoint_mismatch = "refuze"\n',
        'config.on_checkpoint_mismatch: must be "warn" or "refuse", got \'refuze\'; '
        "did you mean 'refuse'?",
    ),
    ('log_level = "loud"\n', "config.log_level: one of debug, info, warning, error, got 'loud'"),
    (
        "[limits]\nmax_stream = 1\n",
        "config.limits.max_stream: unknown field; did you mean 'max_streams'?",
    ),
    ("[limits]\nmax_streams = -5\n", "config.limits: ServerLimits.max_streams must be"),
    ("[limits]\nmax_message_bytes = 4294967296\n", "config.limits: ServerLimits.max_message"),
    ('token_file = "/nonexistent/token"\n', "token_file: cannot read token file"),
    ('tls_cert_file = "{tmp}/cert.pem"\n', "tls_cert_file and tls_key_file: give both"),
    ('tls_client_ca_file = "{tmp}/cert.pem"\n', "tls_client_ca_file: needs tls_cert_file"),
    (
        'tls_cert_file = "{tmp}/cert.pem"\ntls_key_file = "{tmp}/cert.pem"\n',
        "tls_cert_file: '{tmp}/cert.pem' holds no PEM certificate",
    ),
]


@pytest.mark.parametrize("check", [True, False], ids=["check-config", "start"])
@pytest.mark.parametrize("text, message", BAD_VALUES)
def test_every_bad_value_is_one_line_naming_it_with_exit_status_2(
    tmp_path, capsys, text, message, check
) -> None:
    (tmp_path / "cert.pem").write_text("not a certificate\n")
    config = tmp_path / "bad.toml"
    config.write_text(text.replace("{tmp}", str(tmp_path)), errors="surrogateescape")
    status = _daemon.main(["--config", str(config)] + (["--check-config"] if check else []))
    out, err = capsys.readouterr()
    assert status == 2, err
    assert out == ""
    [line] = err.splitlines()
    assert line.startswith(
        "reverb_py.server: bad config: " + message.replace("{tmp}", str(tmp_path))
    ), line


@pytest.mark.parametrize(
    "args, message",
    [
        (["--host", "localhost:8000"], "--host: 'localhost:8000' holds a port"),
        (["--metrics-port", "70000"], "--metrics-port: must be in 0..65535"),
        (["--port", "70000"], "--port: must be in 0..65535"),
        (["--port", "9000", "--metrics-port", "9000"], "--metrics-port: 9000 is the server's"),
        (["--checkpoint-dir", ""], "--checkpoint-dir: must not be empty"),
        (["--config", "{tmp}/server.yaml"], "{tmp}/server.yaml: unknown config format '.yaml'"),
        (["--config", "{tmp}/server.json"], "{tmp}/server.json: unknown config format '.json'"),
        (["--config", "{tmp}/none.toml"], "cannot read config {tmp}/none.toml: No such file"),
        (
            ["--config", 'tables { table_name: "a" max_sise: 3 }'],
            '--config line 1: Message type "PriorityTableCheckpoint" has no field named '
            "\"max_sise\"; did you mean 'max_size'?",
        ),
        (
            ["--config", "{tmp}/reverb.pbtxt"],
            "{tmp}/reverb.pbtxt line 1: tables[0].sampler: ",
        ),
    ],
)
def test_bad_arguments_and_config_files_are_one_line(tmp_path, capsys, args, message) -> None:
    for name in ("server.yaml", "server.json"):
        (tmp_path / name).write_text("port: 8000\n")
    (tmp_path / "reverb.pbtxt").write_text(
        'tables { table_name: "a" sampler { prioritized { priority_exponent: -1 } } '
        "remover { fifo: true } max_size: 3 rate_limiter { samples_per_insert: 1 "
        "min_size_to_sample: 1 min_diff: -1 max_diff: 1 } }\n"
    )
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    for check in ([], ["--check-config"]):
        status = _daemon.main(args + check)
        out, err = capsys.readouterr()
        assert status == 2, err
        [line] = err.splitlines()
        assert line.startswith(
            "reverb_py.server: bad config: " + message.replace("{tmp}", str(tmp_path))
        )


@pytest.mark.parametrize("check", [True, False], ids=["check-config", "start"])
def test_a_negative_priority_exponent_is_one_line_from_the_daemon_process(tmp_path, check) -> None:
    config = tmp_path / "server.toml"
    config.write_text(table_with(sampler='{kind = "prioritized", priority_exponent = -1}'))
    args = ["--config", str(config)] + (["--check-config"] if check else [])
    process = start(*args)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 2, output
    assert output.splitlines() == [
        "reverb_py.server: bad config: tables[0].sampler.priority_exponent: must be >= 0, got -1"
    ]


@pytest.mark.parametrize("suffix", [".textproto", ".pbtxt", ".txt", ""])
def test_textproto_extensions(tmp_path, capsys, suffix) -> None:
    config = tmp_path / f"reverb{suffix}"
    config.write_text(
        'tables { table_name: "a" sampler { fifo: true } remover { fifo: true } max_size: 3 '
        "rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 min_diff: -1 max_diff: 1 } }"
    )
    assert _daemon.main(["--config", str(config), "--check-config"]) == 0
    assert "config OK (1 tables)" in capsys.readouterr().out


def test_checkpoint_dir_is_spelled_like_the_other_flags_and_the_old_spelling_works() -> None:
    parser = _daemon._parser()
    assert parser.parse_args(["--checkpoint-dir", "a"]).checkpoint_dir == "a"
    assert parser.parse_args(["--checkpoint_dir", "b"]).checkpoint_dir == "b"
    text = parser.format_help()
    assert "--checkpoint-dir" in text and "--checkpoint_dir" not in text
    assert "reverb_py.server._daemon" in text  # where the config format is documented


# ------------------------------------------------------------------ every address


def _hold(family: int) -> socket.socket:
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
    listener.listen()
    return listener


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6], ids=["ipv4", "ipv6"])
@pytest.mark.parametrize("flag", ["--port", "--metrics-port"])
def test_a_port_held_on_one_address_of_localhost_is_refused_naming_it(family, flag) -> None:
    try:
        _hold(socket.AF_INET6).close()
    except OSError:
        pytest.skip("no IPv6 loopback here: localhost is one address")
    with _hold(family) as taken:
        port = taken.getsockname()[1]
        held = "[::1]" if family == socket.AF_INET6 else "127.0.0.1"
        args = ["--port", str(port)] if flag == "--port" else ["--port", "0", flag, str(port)]
        process = start(*args)
        try:
            output = run_to_exit(process)
        finally:
            kill(process)
    assert process.returncode == 1, output
    [message] = [line for line in output.splitlines() if line.startswith("reverb_py.server:")]
    assert message.endswith(f"localhost:{port}: port {port} is already in use on {held}"), output


# ------------------------------------------------------------------ start-up log


def read_until(process: subprocess.Popen[str], text: str, lines: list[str]) -> str:
    """Reads the daemon's lines into ``lines`` up to the first holding ``text``."""
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line)
        if text in line:
            return line
    raise AssertionError(f"no line with {text!r}:\n" + "".join(lines))


def test_checkpoints_in_a_temporary_directory_are_warned_of(tmp_path) -> None:
    process = start("--port", "0")
    lines: list[str] = []
    try:
        address = read_address(process, lines)
        warning = read_until(process, "no checkpoint_dir", lines)
        assert " WARNING " in warning and "will not be loaded at the next start" in warning
        path = reverb_py.Client(address).checkpoint()
        directory = os.path.dirname(path)
        assert f"goes to {directory}, a temporary directory" in warning, warning
        code, output = stop(process)
        assert code == 0, output
    finally:
        kill(process)


def test_the_checkpoint_load_is_logged_as_it_begins(tmp_path) -> None:
    checkpoints = tmp_path / "ckpt"
    write_checkpoint_with_daemon(tmp_path, checkpoints)
    [checkpoint] = [p for p in checkpoints.iterdir() if (p / "DONE").exists()]
    config = tmp_path / "second.toml"
    config.write_text(
        f'port = 0\ncheckpoint_dir = "{checkpoints}"\n'
        + table_toml(1_000_000, '{kind = "prioritized", priority_exponent = 0.8}')
    )
    process = start("--config", str(config))
    lines: list[str] = []
    try:
        read_address(process, lines)
        code, output = stop(process)
        assert code == 0, output
    finally:
        kill(process)
    [loading] = [i for i, line in enumerate(lines) if "loading checkpoint" in line]
    [loaded] = [i for i, line in enumerate(lines) if "checkpoint loaded from" in line]
    assert loading < loaded < len(lines) - 1  # the last line read: "serving on"
    assert re.search(
        rf"loading checkpoint {re.escape(str(checkpoint))} \(\d+\.\d MB\); "
        r"localhost:\d+ is NOT_SERVING until it is loaded",
        lines[loading],
    ), lines[loading]


# ------------------------------------------------------------------ signals


def serving_daemon_with_shutdown_checkpoint(
    tmp_path: pathlib.Path, extra: str = ""
) -> tuple[Any, str]:
    config = tmp_path / "server.toml"
    config.write_text(
        f'port = 0\ncheckpoint_dir = "{tmp_path / "ckpt"}"\ncheckpoint_on_shutdown = true\n'
        + extra
        + table_toml(10, '{kind = "uniform"}')
    )
    process = start("--config", str(config))
    return process, read_address(process)


def test_sighup_is_logged_and_ignored(tmp_path) -> None:
    process, address = serving_daemon_with_shutdown_checkpoint(tmp_path)
    lines: list[str] = []
    try:
        client = reverb_py.Client(address)
        client.insert([1.0], priorities={"replay": 1.0})
        process.send_signal(signal.SIGHUP)
        line = read_until(process, "SIGHUP", lines)
        assert "ignored" in line
        assert client.server_info(timeout=30)["replay"].current_size == 1
        code, output = stop(process)
        assert code == 0, output
        assert "shutdown checkpoint written to" in output
    finally:
        kill(process)


@pytest.mark.parametrize("signals", [2, 3])
def test_a_second_signal_while_stopping_is_logged_and_a_third_forces_exit(
    tmp_path, signals
) -> None:
    # An insert stream left open holds the stop for the grace period after the shutdown
    # checkpoint: ten minutes here, so the stop waits until the test closes the stream.
    process, address = serving_daemon_with_shutdown_checkpoint(
        tmp_path, "shutdown_grace_seconds = 600\n"
    )
    lines: list[str] = []
    try:
        client = reverb_py.Client(address)
        writer = client.writer(1)
        writer.append([1.0])
        writer.create_item("replay", 1, 1.0)
        writer.flush()
        process.send_signal(signal.SIGTERM)
        read_until(process, "received SIGTERM, stopping", lines)
        process.send_signal(signal.SIGINT)
        line = read_until(process, "already stopping", lines)
        assert " WARNING " in line and "received SIGINT" in line
        assert "send again to force exit" in line
        if signals == 3:
            process.send_signal(signal.SIGTERM)
        else:
            writer.close()  # the stop goes on
        assert process.stdout is not None
        lines.extend(process.stdout)
        process.wait(timeout=60)
        output = "".join(lines)
        if signals == 3:
            assert process.returncode == 1, output
            assert "forced exit" in output and "stopped\n" not in output, output
        else:
            assert process.returncode == 0, output
            assert "shutdown checkpoint written to" in output and "stopped" in output, output
    finally:
        kill(process)
