"""What a stream whose write failed ended with: the call's own status, or, when gRPC's
core failed the write (the call then says only "Internal error from Core"), what a probe
of the channel tells: a refused credential or a stream that broke."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import grpc
import numpy as np
import pytest

import reverb_py as reverb
from reverb_py import errors
from reverb_py._client import insert_transport, polled_insert
from reverb_py._client.credentials import BROKEN_STREAM, failed_write_status, write_or_raise
from reverb_py._proto import reverb_service_pb2

CORE = "Internal error from Core"


class BrokenCall:
    """A stream call whose write fails as gRPC's does: the call keeps ``status``."""

    def __init__(self, code: grpc.StatusCode | None, details: str = CORE) -> None:
        self._code = code
        self._details = details
        self.cancelled = False

    async def write(self, request: object) -> None:
        raise grpc.aio.AioRpcError(
            grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata(), details=CORE
        )

    async def code(self) -> grpc.StatusCode | None:
        return self._code

    async def details(self) -> str:
        return self._details

    def cancel(self) -> bool:
        self.cancelled = True
        return True


class SilentCall(BrokenCall):
    """A call whose status never comes."""

    async def code(self) -> grpc.StatusCode | None:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def tables() -> list[reverb.Table]:
    return [reverb.Table.queue("q", 100)]


@pytest.fixture(scope="module")
def server() -> Iterator[reverb.Server]:
    with reverb.Server(tables(), port=0) as server:
        yield server


@pytest.fixture(scope="module")
def token_server() -> Iterator[reverb.Server]:
    with reverb.Server(tables(), port=0, token="s3cret-Token_value") as server:
        yield server


def status(target: str, call: BrokenCall) -> tuple[grpc.StatusCode, str]:
    async def run() -> tuple[grpc.StatusCode, str]:
        async with grpc.aio.insecure_channel(target) as channel:
            return await failed_write_status(channel, call)

    return asyncio.run(run())


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (grpc.StatusCode.CANCELLED, grpc.StatusCode.CANCELLED),
        (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.NOT_FOUND),
        (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.INVALID_ARGUMENT),
        (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAVAILABLE),
    ],
)
def test_a_status_the_server_sent_is_kept(server: reverb.Server, code, expected) -> None:
    assert status(f"localhost:{server.port}", BrokenCall(code, "why")) == (expected, "why")


def test_an_internal_error_of_the_server_is_kept(server: reverb.Server) -> None:
    call = BrokenCall(grpc.StatusCode.INTERNAL, "the server's own")
    assert status(f"localhost:{server.port}", call) == (
        grpc.StatusCode.INTERNAL,
        "the server's own",
    )


@pytest.mark.parametrize("code", [grpc.StatusCode.OK, None])
def test_a_stream_ended_with_ok_while_writing_is_unavailable(server: reverb.Server, code) -> None:
    got, _ = status(f"localhost:{server.port}", BrokenCall(code, ""))
    assert got == grpc.StatusCode.UNAVAILABLE


def test_a_core_failure_with_no_server_is_unavailable() -> None:
    code, details = status("localhost:1", BrokenCall(grpc.StatusCode.INTERNAL))
    assert code == grpc.StatusCode.UNAVAILABLE
    assert details != BROKEN_STREAM


def test_a_core_failure_with_a_server_reachable_is_a_broken_stream(server: reverb.Server) -> None:
    code, details = status(f"localhost:{server.port}", BrokenCall(grpc.StatusCode.INTERNAL))
    assert (code, details) == (grpc.StatusCode.UNAVAILABLE, BROKEN_STREAM)


def test_a_core_failure_on_a_refused_credential_is_unauthenticated(
    token_server: reverb.Server,
) -> None:
    code, _ = status(f"localhost:{token_server.port}", BrokenCall(grpc.StatusCode.INTERNAL))
    assert code == grpc.StatusCode.UNAUTHENTICATED


def test_a_status_that_never_comes_is_unavailable_and_cancels(monkeypatch) -> None:
    from reverb_py._client import credentials

    monkeypatch.setattr(credentials, "_STATUS_WAIT_SECONDS", 0.01)
    call = SilentCall(None)
    code, _ = status("localhost:1", call)
    assert code == grpc.StatusCode.UNAVAILABLE
    assert call.cancelled


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (grpc.StatusCode.INTERNAL, errors.UnavailableError),
        (grpc.StatusCode.CANCELLED, errors.CancelledOperationError),
        (grpc.StatusCode.OK, errors.UnavailableError),
        (grpc.StatusCode.NOT_FOUND, errors.NotFoundError),
    ],
)
def test_a_stream_write_that_fails_raises_what_the_stream_ended_with(code, error) -> None:
    request = reverb_service_pb2.SampleStreamRequest(table="t", num_samples=1)

    async def run() -> None:
        async with grpc.aio.insecure_channel("localhost:1") as channel:
            await write_or_raise(channel, BrokenCall(code), request)

    with pytest.raises(error):
        asyncio.run(run())


def test_a_writer_whose_streams_keep_breaking_fails(server: reverb.Server, monkeypatch) -> None:
    opened = []

    async def broken(self: insert_transport.InsertTransport) -> None:
        opened.append(1)
        raise insert_transport._StreamEnded(grpc.StatusCode.UNAVAILABLE, BROKEN_STREAM)

    monkeypatch.setattr(insert_transport.InsertTransport, "_stream", broken)
    monkeypatch.setattr(polled_insert, "ENABLED", False)  # The asyncio transport's rule.
    client = reverb.Client(f"localhost:{server.port}")
    writer = client.trajectory_writer(1)
    try:
        writer.append({"x": np.float32(1)})
        writer.create_item("q", 1.0, writer.history["x"][-1:])
        with pytest.raises(errors.InternalError, match="broke 3 times in a row"):
            writer.flush(timeout_ms=60_000)
    finally:
        writer.close()  # The error was the flush's to report.
    assert len(opened) == insert_transport._MAX_BROKEN_STREAMS
