"""gRPC's core settings, chosen before gRPC is first imported: each case in a fresh
interpreter, as gRPC reads them once per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from reverb_py import _grpc_settings

REPORT = """
import json, os, sys
{before}
import reverb_py
from reverb_py import _grpc_settings as settings
print(json.dumps({{
    "applied": settings.experiments_applied(),
    "env": os.environ.get("GRPC_EXPERIMENTS"),
    "verbosity": os.environ.get("GRPC_VERBOSITY"),
    "child": __import__("subprocess").run(
        [sys.executable, "-c", "import os; print(os.environ.get('GRPC_EXPERIMENTS'))"],
        capture_output=True, text=True).stdout.strip(),
}}))
"""


def run(before: str = "", **env: str | None) -> tuple[dict[str, object], str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_")}
    for key, value in env.items():
        if value is not None:
            environ[key] = value
    done = subprocess.run(
        [sys.executable, "-c", REPORT.format(before=before)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_the_experiments_are_set_while_grpc_is_imported_only() -> None:
    report, _ = run()
    assert report["applied"] is True
    assert report["env"] is None  # removed again once gRPC had read it
    assert report["child"] == "None"  # so subprocesses do not inherit it
    assert report["verbosity"] == "ERROR"


def test_the_users_own_setting_wins_even_empty() -> None:
    report, _ = run(GRPC_EXPERIMENTS="")
    assert report == {"applied": False, "env": "", "verbosity": "ERROR", "child": ""}
    report, _ = run(GRPC_EXPERIMENTS="-event_engine_client", GRPC_VERBOSITY="INFO")
    assert report["applied"] is False
    assert report["env"] == "-event_engine_client"
    assert report["verbosity"] == "INFO"


def test_nothing_is_set_when_grpc_was_imported_first() -> None:
    report, _ = run(before="import grpc")
    assert report["applied"] is False
    assert report["env"] is None


def test_the_installed_grpc_knows_every_experiment() -> None:
    # gRPC logs "Unknown experiment: <name>" (at ERROR) for a name its core lacks.
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_")}
    environ["GRPC_VERBOSITY"] = "ERROR"
    environ["GRPC_EXPERIMENTS"] = _grpc_settings.EXPERIMENTS + ",-no_such_experiment_here"
    done = subprocess.run(
        [sys.executable, "-c", "import grpc; grpc.insecure_channel('localhost:1').close()"],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )
    assert "Unknown experiment: no_such_experiment_here" in done.stderr  # the check works
    for name in _grpc_settings.EXPERIMENTS.split(","):
        assert f"Unknown experiment: {name.lstrip('-')}" not in done.stderr


@pytest.mark.parametrize("version", ["1.64.3", "0.9", "x"])
def test_an_unknown_grpcio_version_is_left_alone(monkeypatch, version) -> None:
    from importlib import metadata

    monkeypatch.setattr(metadata, "version", lambda name: version)
    assert not _grpc_settings._known_grpcio()


def test_a_server_and_client_work_with_the_settings() -> None:
    code = """
import reverb_py as reverb
from reverb_py import _grpc_settings
assert _grpc_settings.experiments_applied()
with reverb.Server([reverb.Table.queue("q", 10)], port=0) as server:
    client = reverb.Client(f"localhost:{server.port}")
    client.insert([1.0], {"q": 1.0})
    got = [float(s.data[0][0]) for s in client.sample("q", 1, emit_timesteps=False)]
    assert got == [1.0], got
print("ok")
"""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environ, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
