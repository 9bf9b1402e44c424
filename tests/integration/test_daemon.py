"""``python -m reverb_py.server``: config handling, start-up log, graceful stop."""

from __future__ import annotations

import pathlib
import re
import signal
import subprocess
import sys

import grpc
import pytest

from reverb_py import _daemon
from reverb_py._proto import reverb_service_pb2 as pb

ROOT = pathlib.Path(__file__).parents[2]


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "reverb_py.server", *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def read_address(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    lines = []
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
        'port = 0\n'
        '[[tables]]\nname = "replay"\nmax_size = 10\n'
        'sampler = {kind = "prioritized", priority_exponent = 0.8}\n'
        'remover = {kind = "fifo"}\n'
        'rate_limiter = {kind = "sample_to_insert_ratio", samples_per_insert = 2.0, '
        'min_size_to_sample = 1, error_buffer = 10.0}\n'
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
        ('[[tables]]\nname = "a"\nmax_size = 0\nsampler = {kind = "uniform"}\n'
         'remover = {kind = "fifo"}\nrate_limiter = {kind = "min_size", min_size_to_sample = 1}',
         "tables[0].max_size"),
        ('[[tables]]\nname = "a"\nmax_size = 5\nsampler = {kind = "random"}\n'
         'remover = {kind = "fifo"}\nrate_limiter = {kind = "min_size", min_size_to_sample = 1}',
         "tables[0].sampler.kind"),
        ('[[tables]]\nname = "a"\nmax_size = 5\nsampler = {kind = "uniform"}\n'
         'remover = {kind = "fifo"}\nrate_limiter = {kind = "min_size", min_size_to_sample = 0}',
         "tables[0].rate_limiter"),
        ('[[tables]]\nname = "a"\nmax_size = 5\nsampler = {kind = "uniform"}\n'
         'remover = {kind = "fifo"}\nrate_limiter = {kind = "sample_to_insert_ratio", '
         'samples_per_insert = 1.0, min_size_to_sample = 1, error_buffer = 0.1}',
         "tables[0].rate_limiter"),
        ('[[tables]]\nname = "a"\nmax_size = "big"\nsampler = {kind = "uniform"}\n'
         'remover = {kind = "fifo"}\nrate_limiter = {kind = "min_size", min_size_to_sample = 1}',
         "tables[0].max_size"),
        ('[[tables]]\nname = "a"\nmax_size = 5\nsampler = {kind = "uniform"}\n'
         'rate_limiter = {kind = "min_size", min_size_to_sample = 1}',
         "tables[0].remover"),
        ('port = "x"', "config.port"),
        ('colour = "blue"', "config.colour"),
        ('[[tables', "not valid TOML"),
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
        'keep_checkpoints = 2\n'
        '[[tables]]\nname = "replay"\nmax_size = 10\nsampler = {kind = "uniform"}\n'
        'remover = {kind = "fifo"}\nrate_limiter = {kind = "min_size", min_size_to_sample = 1}\n'
    )
    import reverb_py

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
        ('checkpoint_on_shutdown = true', "config.checkpoint_dir"),
        ('keep_checkpoints = 0\ncheckpoint_dir = "x"', "config.keep_checkpoints"),
        ('checkpoint_dir = 5', "config.checkpoint_dir"),
    ],
)
def test_bad_checkpoint_options_name_the_field(tmp_path, text, field) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(text)
    process = start("--config", str(config))
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 2, output
    assert field in output, output
