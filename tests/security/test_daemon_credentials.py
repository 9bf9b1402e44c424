"""The daemon's ``token_file`` and ``tls_*`` options (config keys and flags)."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys

import pytest
import trustme

import reverb_py
from reverb_py import errors
from reverb_py._secrets import TOKEN_ENV, TOKEN_FILE_ENV

ROOT = pathlib.Path(__file__).parents[2]
TOKEN = "daemon-token-123"


def run(*args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in (TOKEN_ENV, TOKEN_FILE_ENV)}
    return subprocess.Popen(
        [sys.executable, "-m", "reverb_py.server", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def address_of(process: subprocess.Popen[str]) -> tuple[str, list[str]]:
    assert process.stdout is not None
    lines: list[str] = []
    for line in process.stdout:
        lines.append(line)
        match = re.search(r"serving on (\S+) ", line)
        if match:
            return match.group(1), lines
    raise AssertionError("".join(lines))


def stop(process: subprocess.Popen[str]) -> str:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        assert process.stdout is not None
        output = ""
        if not process.stdout.closed:
            # Through the same buffered file: communicate() would skip what it holds.
            output = process.stdout.read()
            process.stdout.close()
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return output


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, pathlib.Path]:
    directory = tmp_path_factory.mktemp("daemon-tls")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    paths = {
        "cert": directory / "server.pem",
        "key": directory / "server.key",
        "ca": directory / "ca.pem",
        "token": directory / "token",
    }
    cert.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    cert.private_key_pem.write_to_path(str(paths["key"]))
    ca.cert_pem.write_to_path(str(paths["ca"]))
    paths["token"].write_text(TOKEN + "\n")
    return paths


def test_a_secured_daemon_from_its_config(files, tmp_path) -> None:
    config = tmp_path / "server.toml"
    config.write_text(
        "port = 0\n"
        f'token_file = "{files["token"]}"\n'
        f'tls_cert_file = "{files["cert"]}"\n'
        f'tls_key_file = "{files["key"]}"\n'
    )
    process = run("--config", str(config))
    try:
        address, _ = address_of(process)
        client = reverb_py.Client(address, token=TOKEN, root_certificates=str(files["ca"]))
        assert set(client.server_info(timeout=20)) == {"my_table"}
        wrong = reverb_py.Client(address, token="other", root_certificates=str(files["ca"]))
        with pytest.raises(errors.UnauthenticatedError):
            wrong.server_info(timeout=20)
    finally:
        output = stop(process)
    assert process.returncode == 0
    assert TOKEN not in output and "PRIVATE KEY" not in output


def test_flags_give_the_token_file(files) -> None:
    process = run("--port", "0", "--token-file", str(files["token"]))
    try:
        address, _ = address_of(process)
        assert set(reverb_py.Client(address, token=TOKEN).server_info(timeout=20)) == {"my_table"}
        with pytest.raises(errors.UnauthenticatedError):
            reverb_py.Client(address, token="").server_info(timeout=20)
    finally:
        stop(process)


@pytest.mark.parametrize(
    "options, message",
    [
        (["--tls-cert-file", "CERT"], "tls_cert_file and tls_key_file"),
        (["--tls-client-ca-file", "CA"], "tls_client_ca_file: needs"),
        (["--token-file", "/no/such/token"], "cannot read token file '/no/such/token'"),
        (["--tls-cert-file", "/no/cert", "--tls-key-file", "KEY"], "cannot read '/no/cert'"),
    ],
)
def test_bad_credential_options_are_a_bad_config(files, options, message) -> None:
    options = [
        {"CERT": str(files["cert"]), "KEY": str(files["key"]), "CA": str(files["ca"])}.get(o, o)
        for o in options
    ]
    process = run("--port", "0", *options)
    try:
        output, _ = process.communicate(timeout=30)
    finally:
        stop(process)
    assert process.returncode == 2, output
    assert message in output


def test_check_config_reads_the_token_environment(files) -> None:
    env = {**os.environ, TOKEN_ENV: TOKEN, TOKEN_FILE_ENV: str(files["token"])}
    result = subprocess.run(
        [sys.executable, "-m", "reverb_py.server", "--check-config"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "not both" in result.stderr and TOKEN not in result.stderr
