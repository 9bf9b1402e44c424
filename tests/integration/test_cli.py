"""``reverb-py`` / ``python -m reverb_py``: info, checkpoint and reset against a live server."""

from __future__ import annotations

import io
import os
import pathlib
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest

import reverb_py
from reverb_py import cli, rate_limiters, selectors
from reverb_py._secrets import TOKEN_ENV, TOKEN_FILE_ENV
from reverb_py.server import Server, Table
from reverb_py.tensor_spec import TensorSpec

ROOT = pathlib.Path(__file__).parents[2]
TOKEN = "cli-token-42"


@pytest.fixture(autouse=True)
def no_token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.delenv(TOKEN_FILE_ENV, raising=False)
    monkeypatch.delenv(cli.ADDRESS_ENV, raising=False)


@pytest.fixture
def server(tmp_path) -> Iterator[Server]:
    tables = [
        Table(
            "replay",
            selectors.Prioritized(0.8),
            selectors.Fifo(),
            100,
            rate_limiters.SampleToInsertRatio(2.0, 1, 10.0),
            signature={"obs": TensorSpec((3,), np.float32), "act": TensorSpec((), np.int64)},
        ),
        Table("queue", selectors.Fifo(), selectors.Fifo(), 7, rate_limiters.Queue(7)),
    ]
    checkpointer = reverb_py.checkpointers.DefaultCheckpointer(str(tmp_path / "ckpt"))
    with Server(tables, port=0, checkpointer=checkpointer, token=TOKEN) as server:
        client = reverb_py.Client(server.address, token=TOKEN)
        client.insert({"obs": np.zeros(3, np.float32), "act": np.int64(1)}, {"replay": 1.0})
        client.insert({"obs": np.ones(3, np.float32), "act": np.int64(2)}, {"replay": 1.0})
        yield server


@pytest.fixture
def token_file(tmp_path) -> str:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return str(path)


def run(*argv: str, answer: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = cli.main(list(argv), stdin=io.StringIO(answer), stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def test_info_shows_every_table(server: Server, token_file: str) -> None:
    status, out, err = run("info", server.address, "--token-file", token_file)
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0].split() == [
        "table", "size", "max_size", "max_times_sampled", "inserts", "samples", "episodes"
    ]  # fmt: skip
    assert lines[1].split() == ["queue", "0", "7", "0", "0", "0", "0"]
    assert lines[2].split() == ["replay", "2", "100", "0", "2", "0", "2"]
    assert "  sampler:      Prioritized(priority_exponent=0.8)" in lines
    assert "  remover:      Fifo" in lines
    assert "act: int64[]" in out and "obs: float32[3]" in out
    assert "samples_per_insert=2 min_size_to_sample=1 min_diff=-8 max_diff=12" in out
    assert "signature:    none" in out  # the queue has none


def test_commands_take_the_token_from_the_environment(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run("info", server.address)[0] == 1
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    assert run("info", server.address)[0] == 0


def test_without_the_token_the_error_says_so(server: Server) -> None:
    status, _, err = run("info", server.address)
    assert status == 1 and "UnauthenticatedError" in err


def test_checkpoint(server: Server, token_file: str, tmp_path) -> None:
    status, out, err = run("checkpoint", server.address, "--token-file", token_file)
    assert status == 0, err
    path = pathlib.Path(out.strip())
    assert path.parent == tmp_path / "ckpt" and (path / "DONE").exists()
    # The progress goes to stderr: stdout is the path alone, for scripts.
    first, last = err.splitlines()
    assert first == f"writing a checkpoint of {server.address}..."
    pattern = rf"checkpoint written in \d+\.\d\d s, \d+\.\d [kM]B: {re.escape(str(path))}"
    assert re.fullmatch(pattern, last), last


def test_a_checkpoint_in_a_temporary_directory_is_warned_of(token_file: str) -> None:
    table = Table("t", selectors.Fifo(), selectors.Fifo(), 10, rate_limiters.MinSize(1))
    with Server([table], port=0, token=TOKEN) as server:  # No checkpointer: a temp dir.
        status, out, err = run("checkpoint", server.address, "--token-file", token_file)
    assert status == 0, err
    [warning] = [line for line in err.splitlines() if "warning" in line]
    assert f"{os.path.dirname(out.strip())} is a temporary directory" in warning
    assert "will not load this checkpoint when it restarts" in warning


def test_reset_asks_first(server: Server, token_file: str) -> None:
    client = reverb_py.Client(server.address, token=TOKEN)
    status, out, _ = run(
        "reset", server.address, "replay", "--token-file", token_file, answer="n\n"
    )
    assert status == 3 and "Remove all 2 items of table 'replay'" in out
    assert client.server_info(timeout=10)["replay"].current_size == 2
    status, out, _ = run(
        "reset", server.address, "replay", "--token-file", token_file, answer="y\n"
    )
    assert status == 0 and "reset" in out
    assert client.server_info(timeout=10)["replay"].current_size == 0


def test_reset_yes_does_not_ask(server: Server, token_file: str) -> None:
    status, out, _ = run("reset", server.address, "replay", "--yes", "--token-file", token_file)
    assert status == 0 and "?" not in out
    assert (
        reverb_py.Client(server.address, token=TOKEN).server_info(timeout=10)["replay"].current_size
        == 0
    )


def test_reset_of_an_unknown_table(server: Server, token_file: str) -> None:
    status, _, err = run("reset", server.address, "nope", "--yes", "--token-file", token_file)
    assert status == 1 and "no table 'nope'" in err and "queue, replay" in err


def test_nothing_listening_fails_at_once(unused_port: int) -> None:
    started = time.monotonic()
    status, _, err = run("info", f"localhost:{unused_port}", "--timeout", "30")
    assert time.monotonic() - started < 5  # not the 30 s of --timeout
    assert status == 1
    assert err == (
        f"reverb-py: cannot reach localhost:{unused_port}: connection refused: "
        "no server is listening there\n"
    )


def test_a_server_that_does_not_answer_gets_the_timeout() -> None:
    # It accepts connections (the kernel does) but never speaks gRPC.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        started = time.monotonic()
        status, _, err = run("info", f"127.0.0.1:{port}", "--timeout", "0.5")
        assert time.monotonic() - started >= 0.5
    assert status == 1 and "did not answer within 0.5s" in err


def test_the_address_defaults_to_the_environment_then_localhost_8000(
    server: Server, token_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cli.ADDRESS_ENV, server.address)
    status, out, err = run("info", "--token-file", token_file)
    assert status == 0, err
    assert "replay" in out
    status, out, err = run("reset", "replay", "--yes", "--token-file", token_file)
    assert status == 0 and "reset" in out, err
    monkeypatch.delenv(cli.ADDRESS_ENV)
    args = cli._parser().parse_args(["reset", "replay"])
    assert args.address is None and args.table == "replay"
    assert cli.DEFAULT_ADDRESS == "localhost:8000"


def test_a_bad_token_file_is_a_usage_error(tmp_path) -> None:
    status, _, err = run("info", "localhost:1", "--token-file", str(tmp_path / "none"))
    assert status == 2 and "cannot read token file" in err


def test_python_dash_m_reverb_py(server: Server, token_file: str) -> None:
    env = {**os.environ, TOKEN_FILE_ENV: token_file}
    env.pop(TOKEN_ENV, None)
    result = subprocess.run(
        [sys.executable, "-m", "reverb_py", "info", server.address],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "replay" in result.stdout and "queue" in result.stdout


@pytest.fixture
def unused_port() -> int:
    # A port of a server that has stopped: nothing listens there now.
    with Server(
        [Table("t", selectors.Fifo(), selectors.Fifo(), 1, rate_limiters.MinSize(1))], 0
    ) as s:
        port = s.port
    return port


def test_the_console_script_is_installed() -> None:
    from importlib import metadata

    scripts = {entry.name: entry.value for entry in metadata.entry_points(group="console_scripts")}
    assert scripts.get("reverb-py") == "reverb_py.cli:main"
