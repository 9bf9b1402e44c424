"""The standard gRPC health service: SERVING while the server serves, NOT_SERVING while
it stops; and the daemon's ``--check-config``."""

from __future__ import annotations

import logging
import pathlib
import re
import subprocess
import sys
import threading
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import reverb_py
from reverb_py import checkpointers, rate_limiters, selectors
from reverb_py._proto import reverb_service_pb2 as pb
from reverb_py.server import Server, Table

ROOT = pathlib.Path(__file__).parents[2]
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def table() -> Table:
    return Table("t", selectors.Fifo(), selectors.Fifo(), 10, rate_limiters.MinSize(1))


@pytest.mark.parametrize("service", ["", "deepmind.reverb.ReverbService"])
def test_a_serving_server_is_serving(service: str) -> None:
    with Server([table()], port=0) as server:
        with grpc.insecure_channel(server.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert response.status == SERVING


def test_an_unknown_service_is_not_found() -> None:
    with Server([table()], port=0) as server:
        with grpc.insecure_channel(server.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            with pytest.raises(grpc.RpcError) as raised:
                stub.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=10)
            assert raised.value.code() == grpc.StatusCode.NOT_FOUND


def test_health_needs_no_token_while_reverb_calls_do() -> None:
    with Server([table()], port=0, token="health-token") as server:
        with grpc.insecure_channel(server.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            assert stub.Check(health_pb2.HealthCheckRequest(), timeout=10).status == SERVING
        with pytest.raises(reverb_py.errors.UnauthenticatedError):
            reverb_py.Client(server.address, token="").server_info(timeout=10)


def test_a_stopping_server_is_not_serving() -> None:
    server = Server([table()], port=0)
    # The grace lasts until the watch below is cancelled (then no call is left).
    stopper = threading.Thread(target=server.stop, kwargs={"grace": 30.0})
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            watch = stub.Watch(health_pb2.HealthCheckRequest(), timeout=30)
            assert next(watch).status == SERVING
            stopper.start()
            assert next(watch).status == NOT_SERVING
            watch.cancel()
    finally:
        if stopper.is_alive():
            stopper.join(timeout=60)
        server.stop()


def check_config(path: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reverb_py.server", "--config", str(path), "--check-config"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_config_accepts_a_good_config(tmp_path: pathlib.Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text(
        "port = 8123\n"
        f'checkpoint_dir = "{tmp_path / "never-created"}"\n'
        '[[tables]]\nname = "a"\nmax_size = 5\nsampler = {kind = "uniform"}\n'
        'remover = {kind = "fifo"}\nrate_limiter = {kind = "min_size", min_size_to_sample = 1}\n'
    )
    result = check_config(config)
    assert result.returncode == 0, result.stderr
    assert "config OK (1 tables)" in result.stdout
    assert not (tmp_path / "never-created").exists()


@pytest.mark.parametrize(
    "text, message",
    [
        ("port = 70000\n", "config.port"),
        ("colour = 1\n", "config.colour: unknown field"),
        ('tls_cert_file = "/x.pem"\n', "tls_cert_file and tls_key_file"),
        ('[[tables]]\nname = "a"\n', "tables[0].max_size: missing"),
    ],
)
def test_check_config_refuses_a_bad_config(tmp_path: pathlib.Path, text: str, message: str) -> None:
    config = tmp_path / "server.toml"
    config.write_text(text)
    result = check_config(config)
    assert result.returncode == 2
    assert message in result.stderr


class HeldCheckpointer(checkpointers.DefaultCheckpointer):
    """Holds each load until the test lets it go."""

    def __init__(self, path: pathlib.Path) -> None:
        super().__init__(path)
        self.loading = threading.Event()
        self.release = threading.Event()

    def load(self, path: Any, chunk_factory: Any, progress: Any = None) -> Any:
        self.loading.set()
        if not self.release.wait(60):
            raise TimeoutError("the test never let the load go")
        return super().load(path, chunk_factory, progress)


def test_a_loading_server_is_bound_and_not_serving_until_the_checkpoint_is_loaded(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    with Server([table()], port=0, checkpointer=checkpointers.DefaultCheckpointer(tmp_path)) as s:
        s.localhost_client().insert([1.0], {"t": 1.0})
        s.localhost_client().checkpoint()
    caplog.set_level(logging.INFO, logger="reverb_py")
    held = HeldCheckpointer(tmp_path)
    started: list[Server] = []
    starter = threading.Thread(
        target=lambda: started.append(Server([table()], port=0, checkpointer=held))
    )
    starter.start()
    try:
        assert held.loading.wait(60)
        [message] = [
            r.getMessage()
            for r in caplog.records
            if r.getMessage().startswith("loading checkpoint")
        ]
        match = re.search(r"\(\d+\.\d MB\); (\S+) is NOT_SERVING until it is loaded$", message)
        assert match, message
        with grpc.insecure_channel(match.group(1)) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            assert stub.Check(health_pb2.HealthCheckRequest(), timeout=10).status == NOT_SERVING
            watch = stub.Watch(health_pb2.HealthCheckRequest(), timeout=60)
            assert next(watch).status == NOT_SERVING
            # Reverb's calls wait for the load, then see the loaded table.
            info = channel.unary_unary(
                "/deepmind.reverb.ReverbService/ServerInfo",
                request_serializer=pb.ServerInfoRequest.SerializeToString,
                response_deserializer=pb.ServerInfoResponse.FromString,
            ).future(pb.ServerInfoRequest(), timeout=60)
            assert not info.done()
            held.release.set()
            assert next(watch).status == SERVING
            [loaded] = info.result().table_info
            assert loaded.current_size == 1
            watch.cancel()
    finally:
        held.release.set()
        starter.join(timeout=60)
        for server in started:
            server.stop()
