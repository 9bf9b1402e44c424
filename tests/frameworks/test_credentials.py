"""The PyTorch, JAX and tf.data datasets take the clients' token and TLS arguments."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import trustme

import reverb_py as reverb
from reverb_py import errors
from reverb_py._secrets import TOKEN_ENV, TOKEN_FILE_ENV

TOKEN = "frameworks-Token_1"
WRONG = "not-the-token"
ITEMS = 6


@pytest.fixture(autouse=True)
def no_token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.delenv(TOKEN_FILE_ENV, raising=False)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def address(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server asking for TOKEN over TLS, its table ``t`` holding ITEMS float32 pairs."""
    directory: Path = tmp_path_factory.mktemp("tls")
    issued = ca.issue_cert("localhost", "127.0.0.1")
    cert, key = directory / "server.pem", directory / "server.key"
    cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
    key.write_bytes(issued.private_key_pem.bytes())
    table = reverb.Table(
        "t",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        100,
        reverb.rate_limiters.MinSize(1),
        signature=reverb.TensorSpec((2,), np.float32),
    )
    tls = reverb.server.ServerTLS(str(cert), str(key))
    with reverb.Server([table], port=0, token=TOKEN, tls=tls) as server:
        client = server.localhost_client(root_certificates=ca.cert_pem.bytes())
        with client.trajectory_writer(1) as writer:
            for step in range(ITEMS):
                writer.append(np.full(2, step, np.float32))
                writer.create_item("t", 1.0, writer.history[-1])  # squeezed: shape (2,)
        yield f"localhost:{server.port}"


def credentials(ca: trustme.CA, token: str | None = TOKEN) -> dict[str, object]:
    return {"token": token, "root_certificates": ca.cert_pem.bytes()}


def test_torch_datasets_take_the_token_and_ca(address: str, ca: trustme.CA) -> None:
    torch = pytest.importorskip("torch")
    reverb_torch = pytest.importorskip("reverb_py.torch")
    plain = reverb_torch.TrajectoryDataset(
        address, "t", np.float32, (2,), 2, max_samples=4, batch_size=2, **credentials(ca)
    )
    batches = list(plain)
    assert [tuple(batch.data.shape) for batch in batches] == [(2, 2), (2, 2)]
    assert batches[0].data.dtype == torch.float32
    signed = reverb_torch.TimestepDataset.from_table_signature(
        address, "t", 2, max_samples=3, **credentials(ca)
    )
    assert len(list(signed)) == 3


def test_torch_datasets_without_the_right_token_are_refused(address: str, ca: trustme.CA) -> None:
    pytest.importorskip("torch")
    reverb_torch = pytest.importorskip("reverb_py.torch")
    for token in (None, WRONG):
        dataset = reverb_torch.TrajectoryDataset(
            address, "t", np.float32, (2,), 2, max_samples=2, **credentials(ca, token)
        )
        with pytest.raises(errors.UnauthenticatedError):
            list(dataset)


def test_torch_datasets_read_the_token_from_the_environment(
    address: str, ca: trustme.CA, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    reverb_torch = pytest.importorskip("reverb_py.torch")
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    dataset = reverb_torch.TrajectoryDataset(
        address, "t", np.float32, (2,), 2, max_samples=2, root_certificates=ca.cert_pem.bytes()
    )
    assert len(list(dataset)) == 2


def test_jax_iterators_take_the_token_and_ca(address: str, ca: trustme.CA) -> None:
    jax = pytest.importorskip("jax")
    reverb_jax = pytest.importorskip("reverb_py.jax")
    with reverb_jax.TrajectoryIterator.from_table_signature(
        address, "t", 4, max_samples=4, batch_size=4, **credentials(ca)
    ) as it:
        [batch] = list(it)
    assert isinstance(batch.data, jax.Array) and batch.data.shape == (4, 2)
    with reverb_jax.TimestepIterator(
        address, "t", np.float32, (2,), 2, max_samples=2, **credentials(ca, WRONG)
    ) as it:
        with pytest.raises(errors.UnauthenticatedError):
            list(it)


def test_tf_datasets_take_the_token_and_ca(address: str, ca: trustme.CA) -> None:
    tf = pytest.importorskip("tensorflow")
    signed = reverb.TrajectoryDataset.from_table_signature(
        address, "t", 4, max_samples=5, **credentials(ca)
    )
    samples = list(signed.as_numpy_iterator())
    assert len(samples) == 5
    assert samples[0].data.shape == (2,)
    steps = reverb.TimestepDataset(
        address, "t", tf.float32, tf.TensorShape([2]), 2, max_samples=3, **credentials(ca)
    )
    assert len(list(steps)) == 3


def test_tf_datasets_without_the_right_token_are_refused(address: str, ca: trustme.CA) -> None:
    tf = pytest.importorskip("tensorflow")
    dataset = reverb.TrajectoryDataset(
        address, "t", tf.float32, tf.TensorShape([2]), 2, max_samples=2, **credentials(ca, WRONG)
    )
    # TensorFlow reports the generator's error as its own, with the message kept.
    with pytest.raises(tf.errors.OpError, match="UnauthenticatedError|token"):
        list(dataset)
    with pytest.raises(errors.UnauthenticatedError):
        reverb.TrajectoryDataset.from_table_signature(
            address, "t", 2, max_samples=2, **credentials(ca, WRONG)
        )
