"""Signatures from ``server_info`` without TensorFlow: reverb_py's specs, and TensorFlow
never imported (its specs come back only where TensorFlow is already imported:
tests/frameworks/test_tf_signatures.py)."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import reverb_py
from reverb_py import rate_limiters, selectors
from reverb_py._codec.signature import decode_signature_for_caller, encode_signature

SIGNATURE = {
    "observation": reverb_py.TensorSpec([2, None], np.float32, "observation"),
    "action": reverb_py.BoundedTensorSpec([], np.int32, 0, 3, "action"),
}


def test_server_info_gives_reverb_py_specs_and_never_imports_tensorflow() -> None:
    assert "tensorflow" not in sys.modules
    table = reverb_py.Table(
        "t",
        selectors.Uniform(),
        selectors.Fifo(),
        10,
        rate_limiters.MinSize(1),
        signature=SIGNATURE,
    )
    server = reverb_py.Server([table], port=0)
    try:
        signature = server.localhost_client().server_info()["t"].signature
    finally:
        server.stop()
    assert signature == SIGNATURE
    assert type(signature["observation"]) is reverb_py.TensorSpec
    assert type(signature["action"]) is reverb_py.BoundedTensorSpec
    assert "tensorflow" not in sys.modules


def test_a_tensorflow_module_without_its_structure_coder_is_not_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Something called tensorflow is imported, but not TensorFlow's coder: reverb_py's
    # decoding is used, nothing fails.
    monkeypatch.setitem(sys.modules, "tensorflow", types.ModuleType("tensorflow"))
    assert decode_signature_for_caller(encode_signature(SIGNATURE)) == SIGNATURE
