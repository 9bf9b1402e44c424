"""The bearer token on every RPC, TLS and mutual TLS, with certificates made here."""

from __future__ import annotations

import logging
import pickle
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
import trustme

import reverb_py
from reverb_py import errors, rate_limiters, selectors, structured_writer
from reverb_py._client import mutations
from reverb_py._client.credentials import ClientCredentials
from reverb_py._secrets import TOKEN_ENV, TOKEN_FILE_ENV
from reverb_py.server import Server, ServerTLS, Table

TOKEN = "s3cret-Token_value"
WRONG = "not-the-token"
SERVICE = "/deepmind.reverb.ReverbService/"
TIMEOUT = 20


@pytest.fixture(autouse=True)
def no_token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.delenv(TOKEN_FILE_ENV, raising=False)


def tables() -> list[Table]:
    return [Table("t", selectors.Fifo(), selectors.Fifo(), 100, rate_limiters.MinSize(1))]


@pytest.fixture
def server() -> Iterator[Server]:
    with Server(tables(), port=0, token=TOKEN) as server:
        yield server


def metadata(token: str | None) -> list[tuple[str, str]]:
    return [] if token is None else [("authorization", f"Bearer {token}")]


# Every RPC with requests that a server without a token accepts (or refuses for another
# reason than credentials).
def call_rpc(channel: grpc.Channel, method: str, token: str | None) -> grpc.StatusCode:
    path = SERVICE + method
    md = metadata(token)
    try:
        if method in ("ServerInfo", "Reset", "MutatePriorities", "Checkpoint"):
            channel.unary_unary(path)(b"", metadata=md, timeout=TIMEOUT)
        elif method == "SampleStream":
            from reverb_py._proto import reverb_service_pb2 as pb

            request = pb.SampleStreamRequest(table="nope", num_samples=1).SerializeToString()
            list(channel.stream_stream(path)(iter([request]), metadata=md, timeout=TIMEOUT))
        elif method == "InsertStream":
            list(channel.stream_stream(path)(iter([b""]), metadata=md, timeout=TIMEOUT))
        elif method == "InitializeConnection":
            list(channel.stream_stream(path)(iter([b""]), metadata=md, timeout=TIMEOUT))
        elif method == "MutatePrioritiesStream":
            from reverb_py._client.channel import MUTATE_STREAM_PATH

            request = b"\n\x01t"  # MutatePrioritiesRequest(table="t")
            call = channel.stream_stream(MUTATE_STREAM_PATH)
            list(call(iter([request]), metadata=md, timeout=TIMEOUT))
        else:
            raise AssertionError(method)
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


RPCS = [
    "ServerInfo",
    "Reset",
    "MutatePriorities",
    "Checkpoint",
    "InsertStream",
    "SampleStream",
    "InitializeConnection",
    "MutatePrioritiesStream",
]


@pytest.mark.parametrize("method", RPCS)
def test_every_rpc_needs_the_token(server: Server, method: str) -> None:
    with grpc.insecure_channel(server.address) as channel:
        assert call_rpc(channel, method, None) == grpc.StatusCode.UNAUTHENTICATED
        assert call_rpc(channel, method, WRONG) == grpc.StatusCode.UNAUTHENTICATED
        assert call_rpc(channel, method, TOKEN[:-1]) == grpc.StatusCode.UNAUTHENTICATED
        assert call_rpc(channel, method, TOKEN) != grpc.StatusCode.UNAUTHENTICATED


def test_a_refused_insert_stream_inserts_nothing(server: Server) -> None:
    good = reverb_py.Client(server.address, token=TOKEN)
    bad = reverb_py.Client(server.address, token=WRONG)
    with pytest.raises(errors.UnauthenticatedError):
        bad.insert(np.zeros(3), {"t": 1.0})
    assert good.server_info(timeout=TIMEOUT)["t"].current_size == 0


def test_mutate_priorities_needs_the_token_on_either_road(server: Server) -> None:
    good = reverb_py.Client(server.address, token=TOKEN)
    good.insert(np.zeros(3), {"t": 1.0})
    [item] = server.tables[0].items()
    good.mutate_priorities("t", updates={item.key: 2.0})
    assert good._mutate_streams._idle and good._mutate is None  # on the stream
    # The stream the caller's thread drives carried the token.
    assert isinstance(good._mutate_streams._idle[0], mutations._PolledStream)
    bad = reverb_py.Client(server.address, token=WRONG)
    with pytest.raises(errors.UnauthenticatedError):
        bad.mutate_priorities("t", updates={item.key: 3.0})
    assert bad._mutate is not None  # the unary call was refused too
    assert server.tables[0].get(item.key).priority == 2.0


def test_refusals_are_logged_with_the_peer_and_never_the_token(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="reverb_py"):
        with grpc.insecure_channel(server.address) as channel:
            for token in (None, WRONG):
                assert call_rpc(channel, "ServerInfo", token) == grpc.StatusCode.UNAUTHENTICATED
    refusals = [r for r in caplog.records if "refused a call from" in r.getMessage()]
    assert len(refusals) == 2 and all(r.levelno == logging.WARNING for r in refusals)
    assert all("127.0.0.1" in r.getMessage() or "[::1]:" in r.getMessage() for r in refusals)
    text = caplog.text
    assert WRONG not in text and TOKEN not in text


def test_every_client_operation_with_the_token(server: Server) -> None:
    client = reverb_py.Client(server.address, token=TOKEN)
    client.insert(np.arange(3, dtype=np.float32), {"t": 1.0})
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        writer.append({"x": np.float32(1)})
        writer.create_item("t", 1.0, {"x": writer.history["x"][-1:]})
    with client.writer(max_sequence_length=1) as legacy:
        legacy.append(np.float32(2))
        legacy.create_item("t", 1, 1.0)
    ref = structured_writer.create_reference_step({"x": None})
    config = structured_writer.create_config({"x": ref["x"][-1]}, "t")
    with client.structured_writer([config]) as structured:
        structured.append({"x": np.float32(3)})
    assert client.server_info(timeout=TIMEOUT)["t"].current_size == 4
    [sample] = client.sample("t", 1, emit_timesteps=False)
    client.mutate_priorities("t", updates={sample.info.key: 2.0})
    client.checkpoint()
    client.reset("t")
    assert client.server_info(timeout=TIMEOUT)["t"].current_size == 0


def test_every_client_operation_without_the_token_is_refused(server: Server) -> None:
    for client in (reverb_py.Client(server.address), reverb_py.Client(server.address, WRONG)):
        with pytest.raises(errors.UnauthenticatedError):
            client.server_info(timeout=TIMEOUT)
        with pytest.raises(errors.UnauthenticatedError):
            client.mutate_priorities("t", updates={1: 1.0})
        with pytest.raises(errors.UnauthenticatedError):
            client.reset("t")
        with pytest.raises(errors.UnauthenticatedError):
            client.checkpoint()
        with pytest.raises(errors.UnauthenticatedError):
            next(iter(client.sample("t", 1)))
        writer = client.trajectory_writer(1, validate_items=False)
        writer.append({"x": np.float32(1)})
        writer.create_item("t", 1.0, {"x": writer.history["x"][-1:]})
        with pytest.raises(errors.UnauthenticatedError):
            writer.flush(timeout_ms=TIMEOUT * 1000)
        writer.close()


async def test_the_asyncio_client_sends_the_token(server: Server) -> None:
    async with reverb_py.aio.Client(server.address, token=TOKEN) as client:
        await client.insert(np.zeros(2), {"t": 1.0})
        async for sample in client.sample("t", 1, emit_timesteps=False):
            assert sample.data[0].shape == (1, 2)
        assert (await client.server_info(timeout=TIMEOUT))["t"].current_size == 1
    async with reverb_py.aio.Client(server.address, token=WRONG) as client:
        with pytest.raises(errors.UnauthenticatedError):
            await client.server_info(timeout=TIMEOUT)
        with pytest.raises(errors.UnauthenticatedError):
            async for _ in client.sample("t", 1):
                pass


def test_clients_and_servers_read_the_token_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with Server(tables(), port=0) as server:
        assert set(reverb_py.Client(server.address).server_info(timeout=TIMEOUT)) == {"t"}
        with pytest.raises(errors.UnauthenticatedError):
            reverb_py.Client(server.address, token="").server_info(timeout=TIMEOUT)
        monkeypatch.delenv(TOKEN_ENV)
        path = tmp_path / "token"
        path.write_text(TOKEN + "\n")
        monkeypatch.setenv(TOKEN_FILE_ENV, str(path))
        assert set(reverb_py.Client(server.address).server_info(timeout=TIMEOUT)) == {"t"}
        assert set(server.localhost_client().server_info(timeout=TIMEOUT)) == {"t"}


def test_both_token_variables_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    monkeypatch.setenv(TOKEN_FILE_ENV, "/nowhere")
    with pytest.raises(ValueError, match="not both"):
        reverb_py.Client("localhost:1")


@pytest.mark.parametrize("bad", ["with space", "tab\there", "é"])
def test_a_malformed_token_is_refused_without_being_shown(bad: str) -> None:
    with pytest.raises(ValueError) as raised:
        reverb_py.Client("localhost:1", token=bad)
    assert bad not in str(raised.value)


def test_reprs_never_show_the_token(server: Server) -> None:
    client = reverb_py.Client(server.address, token=TOKEN)
    for text in (
        repr(client),
        repr(client._client),
        repr(server),
        repr(client._client._credentials),
    ):
        assert TOKEN not in text


def test_a_pickled_client_keeps_its_credentials(server: Server) -> None:
    client = pickle.loads(pickle.dumps(reverb_py.Client(server.address, token=TOKEN)))
    assert set(client.server_info(timeout=TIMEOUT)) == {"t"}


# ---------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def server_tls_files(ca: trustme.CA, tmp_path_factory) -> dict[str, str]:
    directory = tmp_path_factory.mktemp("tls")
    cert = ca.issue_cert("localhost", "127.0.0.1")
    paths = {
        "cert": directory / "server.pem",
        "key": directory / "server.key",
        "ca": directory / "ca.pem",
    }
    cert.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    for blob in cert.cert_chain_pems[1:]:
        blob.write_to_path(str(paths["cert"]), append=True)
    cert.private_key_pem.write_to_path(str(paths["key"]))
    ca.cert_pem.write_to_path(str(paths["ca"]))
    return {name: str(path) for name, path in paths.items()}


def test_tls_with_a_token(ca: trustme.CA, server_tls_files: dict[str, str]) -> None:
    tls = ServerTLS(server_tls_files["cert"], server_tls_files["key"])
    with Server(tables(), port=0, token=TOKEN, tls=tls) as server:
        address = f"localhost:{server.port}"
        client = reverb_py.Client(address, token=TOKEN, root_certificates=ca.cert_pem.bytes())
        client.insert(np.zeros(2), {"t": 1.0})
        [sample] = client.sample("t", 1, emit_timesteps=False)
        client.mutate_priorities("t", updates={sample.info.key: 3.0})
        assert client._mutate is None  # on the stream, over TLS
        assert isinstance(client._mutate_streams._idle[0], mutations._PolledStream)
        assert server.tables[0].get(sample.info.key).priority == 3.0
        assert client.server_info(timeout=TIMEOUT)["t"].current_size == 1
        # The CA as a file path, through localhost_client.
        local = server.localhost_client(root_certificates=server_tls_files["ca"])
        assert local.server_info(timeout=TIMEOUT)["t"].current_size == 1
        # A plaintext client does not get through, nor one trusting another CA.
        with pytest.raises(errors.DeadlineExceededError):
            reverb_py.Client(address, token=TOKEN).server_info(timeout=1)
        other = trustme.CA().cert_pem.bytes()
        with pytest.raises(errors.DeadlineExceededError):
            reverb_py.Client(address, token=TOKEN, root_certificates=other).server_info(timeout=1)
    assert "PRIVATE" not in repr(tls)


def test_mutual_tls(ca: trustme.CA, server_tls_files: dict[str, str]) -> None:
    client_ca = trustme.CA()
    client_cert = client_ca.issue_cert("actor-1@example.org")
    tls = ServerTLS(
        server_tls_files["cert"], server_tls_files["key"], client_ca=client_ca.cert_pem.bytes()
    )
    with Server(tables(), port=0, tls=tls) as server:
        address = f"localhost:{server.port}"
        key = client_cert.private_key_pem.bytes()
        chain = b"".join(blob.bytes() for blob in client_cert.cert_chain_pems)
        client = reverb_py.Client(
            address,
            root_certificates=ca.cert_pem.bytes(),
            private_key=key,
            certificate_chain=chain,
        )
        client.insert(np.zeros(2), {"t": 1.0})
        with client.trajectory_writer(1) as writer:
            writer.append({"x": np.float32(1)})
            writer.create_item("t", 1.0, {"x": writer.history["x"][-1:]})
        assert client.server_info(timeout=TIMEOUT)["t"].current_size == 2
        # Without a client certificate the handshake fails.
        bare = reverb_py.Client(address, root_certificates=ca.cert_pem.bytes())
        with pytest.raises(errors.DeadlineExceededError):
            bare.server_info(timeout=1)
        # A certificate of another CA neither.
        stranger = trustme.CA().issue_cert("stranger@example.org")
        with pytest.raises(errors.DeadlineExceededError):
            reverb_py.Client(
                address,
                root_certificates=ca.cert_pem.bytes(),
                private_key=stranger.private_key_pem.bytes(),
                certificate_chain=stranger.cert_chain_pems[0].bytes(),
            ).server_info(timeout=1)


def test_half_a_client_certificate_is_refused() -> None:
    with pytest.raises(ValueError, match="together"):
        ClientCredentials("", private_key=b"key")


def test_an_unreadable_pem_file_is_named(tmp_path) -> None:
    with pytest.raises(ValueError, match="missing.pem"):
        ServerTLS(str(tmp_path / "missing.pem"), b"key")


# ---------------------------------------------------------------- datasets


def _fill(server: Server, n: int) -> None:
    client = reverb_py.Client(f"localhost:{server.port}", token=TOKEN)
    for step in range(n):
        client.insert(np.float32(step), {"t": 1.0})


def test_a_dataset_with_the_token_samples(server: Server) -> None:
    from reverb_py import data

    _fill(server, 4)
    with data.TrajectoryIterator(
        f"localhost:{server.port}", "t", None, None, 2, max_samples=4, token=TOKEN
    ) as samples:
        assert len(list(samples)) == 4


def test_a_dataset_reads_the_token_from_the_environment(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reverb_py import data

    _fill(server, 2)
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with data.TrajectoryIterator(
        f"localhost:{server.port}", "t", None, None, 2, max_samples=2
    ) as samples:
        assert len(list(samples)) == 2


@pytest.mark.parametrize("token", [None, WRONG])
def test_a_dataset_without_the_right_token_is_refused(server: Server, token: str | None) -> None:
    from reverb_py import data

    _fill(server, 2)
    with data.TrajectoryIterator(
        f"localhost:{server.port}", "t", None, None, 2, max_samples=2, token=token
    ) as samples:
        with pytest.raises(errors.UnauthenticatedError):
            list(samples)
