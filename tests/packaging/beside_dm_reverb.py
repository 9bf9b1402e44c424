"""reverb_py installed where Reverb users are: beside TensorFlow 2.15 and dm-reverb 0.14.

``make test-beside-reverb`` installs reverb_py with pip into an environment that already
holds ``tensorflow==2.15.1`` and ``dm-reverb==0.14.0`` (and so protobuf < 5), then runs
this script there: both packages import in one process, the protobuf runtime is still
the one TensorFlow pinned, and a small server/client round trip works with each (and
across them). Exits non-zero on the first failure.
"""

from __future__ import annotations

import sys
from importlib import metadata


def _check(condition: bool, message: str) -> None:
    if not condition:
        print(f"FAILED: {message}", file=sys.stderr)
        sys.exit(1)


def _round_trip(name: str, module: object, client_of: object) -> None:
    """A server of ``module``, one item written by a client of ``client_of``, sampled back."""
    import numpy as np

    server = module.Server(tables=[module.Table.queue("queue", 10)], port=None)  # type: ignore[attr-defined]
    try:
        client = client_of.Client(f"localhost:{server.port}")  # type: ignore[attr-defined]
        with client.trajectory_writer(num_keep_alive_refs=1) as writer:
            writer.append({"x": np.arange(3, dtype=np.int32)})
            writer.create_item("queue", 1.0, {"x": writer.history["x"][-1]})
            writer.flush()
        (sample,) = client.sample("queue", num_samples=1, emit_timesteps=False)
        # Without a table signature dm-reverb returns the flat list of columns.
        data = sample.data
        values = np.asarray(data[0] if isinstance(data, list) else data["x"])
        _check(values.tolist() == [0, 1, 2], f"{name}: sampled {values!r}")
        print(f"ok: {name}")
    finally:
        server.stop()


def main() -> None:
    import reverb
    import tensorflow as tf

    import reverb_py

    versions = {name: metadata.version(name) for name in ("tensorflow", "dm-reverb", "protobuf")}
    print("versions:", versions, "grpcio", metadata.version("grpcio"))
    _check(tf.__version__.startswith("2.15."), f"TensorFlow {tf.__version__}, expected 2.15")
    _check(versions["dm-reverb"] == "0.14.0", f"dm-reverb {versions['dm-reverb']}")
    _check(
        int(versions["protobuf"].split(".")[0]) < 5,
        f"protobuf {versions['protobuf']}: TensorFlow 2.15 pins protobuf < 5",
    )
    print("reverb_py", reverb_py.__version__, reverb_py.IMPLEMENTATION, reverb_py.__file__)
    _check("site-packages" in reverb_py.__file__, "reverb_py is not the installed one")
    _round_trip("dm-reverb server, dm-reverb client", reverb, reverb)
    _round_trip("reverb_py server, reverb_py client", reverb_py, reverb_py)
    _round_trip("reverb_py server, dm-reverb client", reverb_py, reverb)
    _round_trip("dm-reverb server, reverb_py client", reverb, reverb_py)
    print("4 passed, 0 failed")


if __name__ == "__main__":
    main()
