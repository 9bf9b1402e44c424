"""A loopback server with sequence and step tables, shared by the framework tests."""

from __future__ import annotations

import numpy as np

import reverb_py as reverb

SEQUENCE = 3
STEPS = 100

SIGNATURE = {
    "obs": reverb.TensorSpec((SEQUENCE, 2), np.float32),
    "step": reverb.TensorSpec((SEQUENCE,), np.int64),
}
STEP_SIGNATURE = {
    "obs": reverb.TensorSpec((2,), np.float32),
    "step": reverb.TensorSpec((), np.int64),
}


def _uniform(name: str, signature: object) -> reverb.Table:
    return reverb.Table(
        name=name,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=10_000,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=signature,
    )


def filled_server() -> reverb.Server:
    """A server (port 0) whose ``seq`` items (``plain``: the same, no signature) are 3
    steps and ``steps`` items one step;
    every step's ``obs`` is its ``step`` twice. The caller stops it."""
    server = reverb.Server(
        [
            _uniform("seq", SIGNATURE),
            _uniform("plain", None),
            _uniform("steps", STEP_SIGNATURE),
            _uniform("empty", None),
        ],
        port=0,
    )
    try:
        with server.localhost_client().trajectory_writer(SEQUENCE) as writer:
            for step in range(STEPS):
                writer.append({"obs": np.full(2, step, np.float32), "step": np.int64(step)})
                last = {"obs": writer.history["obs"][-1], "step": writer.history["step"][-1]}
                writer.create_item("steps", 1.0, last)
                if step + 1 >= SEQUENCE:
                    item = {
                        "obs": writer.history["obs"][-SEQUENCE:],
                        "step": writer.history["step"][-SEQUENCE:],
                    }
                    writer.create_item("seq", 1.0, item)
                    writer.create_item("plain", 1.0, item)
            writer.flush()
    except BaseException:
        server.stop()
        raise
    return server
