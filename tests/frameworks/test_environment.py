"""reverb_py beside TensorFlow, PyTorch and JAX: imports stay lazy, one process holds all."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import reverb_py

FRAMEWORK_MODULES = ("tensorflow", "torch", "jax")


def test_importing_reverb_py_imports_no_framework() -> None:
    code = (
        "import sys, reverb_py\n"
        f"loaded = [m for m in {FRAMEWORK_MODULES!r} if m in sys.modules]\n"
        "print(','.join(loaded))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("framework", FRAMEWORK_MODULES)
def test_round_trip_with_framework_loaded(framework: str) -> None:
    # The framework's own protobuf and gRPC must not disturb reverb_py's in one process.
    code = f"""
import {framework}
import numpy as np
import reverb_py

server = reverb_py.Server([reverb_py.Table.queue("q", 10)], port=0)
try:
    client = server.localhost_client()
    client.insert(np.arange(3, dtype=np.int32), {{"q": 1.0}})
    (sample,) = list(client.sample("q", num_samples=1))
    print(sample[0].data[0].tolist())
finally:
    server.stop()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[0, 1, 2]"


def test_implementation_matches_the_run() -> None:
    # Both runs of `make test-frameworks` test what they say they test.
    if os.environ.get("REVERB_PY_NO_EXTENSIONS"):
        assert reverb_py.IMPLEMENTATION == "python"
    if os.environ.get("REVERB_PY_REQUIRE_SPEEDUPS"):
        assert reverb_py.IMPLEMENTATION == "cython"
