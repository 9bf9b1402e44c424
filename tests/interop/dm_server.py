"""A dm-reverb server in its own process: runs in dm-reverb's venv, never imports reverb_py.

Usage: ``python dm_server.py '<json>'`` where the JSON is ``{"tables": [<table
description, see _tables.py>], "checkpoint_dir": <path or null>}``.

Prints one JSON line on stdout: ``{"port": P, "pid": ...}`` once serving, or ``{"error":
..., "error_type": ...}`` if the server could not be built (e.g. a checkpoint failed to
load), then serves until stdin closes, stops the server and exits.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

_replies = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _tables  # noqa: E402
import numpy as np  # noqa: E402
import reverb  # noqa: E402
import tensorflow as tf  # noqa: E402


def make_spec(kind, shape, dtype, name, minimum, maximum):
    """A ``tf.TensorSpec`` / ``tf.BoundedTensorSpec`` for a table signature."""
    tf_dtype = tf.string if dtype == "string" else tf.as_dtype(np.dtype(dtype))
    if kind == "bounded":
        from tensorflow.python.framework import tensor_spec  # noqa: PLC0415

        return tensor_spec.BoundedTensorSpec(shape, tf_dtype, minimum, maximum, name)
    return tf.TensorSpec(shape, tf_dtype, name)


def main() -> None:
    config = json.loads(sys.argv[1])
    assert "reverb_py" not in sys.modules
    try:
        tables = _tables.build_tables(config["tables"], reverb, make_spec)
        checkpointer = None
        if config.get("checkpoint_dir"):
            checkpointer = reverb.checkpointers.DefaultCheckpointer(config["checkpoint_dir"])
        server = reverb.Server(tables=tables, port=None, checkpointer=checkpointer)
    except BaseException as error:  # noqa: BLE001 - reported to the test process.
        _replies.write(
            json.dumps(
                {
                    "error": str(error),
                    "error_type": type(error).__name__,
                    "traceback": traceback.format_exc(),
                }
            )
            + "\n"
        )
        _replies.flush()
        os._exit(1)
    _replies.write(json.dumps({"port": server.port, "pid": os.getpid()}) + "\n")
    _replies.flush()
    sys.stdin.read()  # until the test process closes our stdin
    server.stop()
    _replies.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
