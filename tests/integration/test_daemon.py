"""``python -m reverb_py.server``: config handling, start-up log, graceful stop."""

from __future__ import annotations

import pathlib
import re
import signal
import subprocess
import sys
import time

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
