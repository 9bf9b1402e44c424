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
    _alias_beside_dm_reverb(reverb.__file__)
    print("6 passed, 0 failed")


def _alias_beside_dm_reverb(dm_reverb_file: str) -> None:
    """``install_as_reverb()`` with dm-reverb installed: refused once dm-reverb is
    imported (naming both); before that, ``import reverb`` is reverb_py, also through
    ``REVERB_PY_AS_REVERB`` in a new process."""
    import os
    import subprocess

    import reverb_py

    try:
        reverb_py.install_as_reverb()
    except RuntimeError as error:
        _check(dm_reverb_file in str(error) and "reverb_py" in str(error), str(error))
    else:
        _check(False, "install_as_reverb() after dm-reverb was imported did not refuse")
    print("ok: install_as_reverb() after dm-reverb refused")
    code = (
        "import reverb, reverb.trajectory_writer, reverb_py; "
        "assert reverb is reverb_py, reverb.__file__; "
        "assert reverb.trajectory_writer is reverb_py.trajectory_writer; print('reverb_py')"
    )
    env = dict(os.environ, REVERB_PY_AS_REVERB="1")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    _check(done.returncode == 0 and done.stdout.strip() == "reverb_py", done.stderr[-3000:])
    print("ok: REVERB_PY_AS_REVERB=1 beside dm-reverb")


if __name__ == "__main__":
    main()
