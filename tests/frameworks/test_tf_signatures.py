"""With TensorFlow imported, ``server_info`` gives ``tf.TensorSpec`` nests, as dm-reverb
does; with TensorFlow installed but not imported, reverb_py's specs (and TensorFlow stays
unimported)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import reverb_py
from reverb_py import rate_limiters, selectors

tf = pytest.importorskip("tensorflow")
from tensorflow.python.framework import tensor_spec as tf_tensor_spec  # noqa: E402


def _serve(signature: object) -> reverb_py.Server:
    table = reverb_py.Table(
        "t",
        selectors.Uniform(),
        selectors.Fifo(),
        10,
        rate_limiters.MinSize(1),
        signature=signature,
    )
    return reverb_py.Server([table], port=0)


def test_server_info_gives_tensorflow_specs_when_tensorflow_is_imported() -> None:
    signature = {
        "observation": tf.TensorSpec([2, None], tf.float32, "observation"),
        "action": tf_tensor_spec.BoundedTensorSpec([], tf.int32, 0, 3, "action"),
        "steps": (tf.TensorSpec([], tf.int64), tf.TensorSpec([3], tf.bool)),
    }
    server = _serve(signature)
    try:
        info = server.localhost_client().server_info()["t"]
    finally:
        server.stop()
    got = info.signature
    assert type(got["observation"]) is tf.TensorSpec
    assert got["observation"] == signature["observation"]
    assert type(got["action"]) is tf_tensor_spec.BoundedTensorSpec
    assert got["action"] == signature["action"]
    assert int(got["action"].maximum) == 3
    assert got["steps"] == signature["steps"]
    assert tf.nest.flatten(got) == tf.nest.flatten(signature)


async def test_the_asyncio_client_gives_them_too() -> None:
    server = _serve({"x": reverb_py.TensorSpec([4], np.float64, "x")})
    try:
        async with reverb_py.aio.Client(f"localhost:{server.port}") as client:
            info = await client.server_info()
    finally:
        server.stop()
    assert info["t"].signature == {"x": tf.TensorSpec([4], tf.float64, "x")}
    assert type(info["t"].signature["x"]) is tf.TensorSpec


def test_tensorflow_installed_but_not_imported_gives_reverb_py_specs() -> None:
    code = """
import sys
import numpy as np
import reverb_py
from reverb_py import rate_limiters, selectors

table = reverb_py.Table("t", selectors.Uniform(), selectors.Fifo(), 10,
                        rate_limiters.MinSize(1),
                        signature={"x": reverb_py.TensorSpec([2], np.int32)})
server = reverb_py.Server([table], port=0)
try:
    spec = server.localhost_client().server_info()["t"].signature["x"]
finally:
    server.stop()
print(type(spec).__module__, type(spec).__name__, "tensorflow" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["reverb_py.tensor_spec", "TensorSpec", "False"]
