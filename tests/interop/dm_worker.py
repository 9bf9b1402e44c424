"""dm-reverb client worker: runs in dm-reverb's venv, never imports reverb_py.

Usage: ``python dm_worker.py <scratch dir>``. Protocol (one JSON object per line):

* stdout, first line: ``{"ready": true, "pid": ..., "reverb": <path>}``.
* stdin: ``{"id": n, "op": name, "args": <_wire message>}``; each request runs in its own
  thread, so a blocked call (e.g. an insert into a full queue) does not hold up others.
* stdout: ``{"id": n, "ok": true, "result": <_wire message>}`` or ``{"id": n, "ok": false,
  "error_type": ..., "error_mro": [...], "message": ..., "traceback": ...}``.

``op`` names a function of :mod:`dm_ops` or else of :mod:`_ops` (called with ``reverb``).
The worker exits when stdin closes. Everything else printed (TensorFlow's logs) goes to
stderr.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import traceback

# Keep the protocol channel clean: fd 1 becomes stderr, replies go to a private copy.
_replies = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _ops  # noqa: E402
import _wire  # noqa: E402
import dm_ops  # noqa: E402
import reverb  # noqa: E402

_lock = threading.Lock()


def _send(message: dict) -> None:
    text = json.dumps(message)
    with _lock:
        _replies.write(text + "\n")
        _replies.flush()


def _function(op: str):
    if hasattr(dm_ops, op) and not op.startswith("_"):
        return getattr(dm_ops, op)
    if hasattr(_ops, op) and not op.startswith("_"):
        return functools.partial(getattr(_ops, op), reverb)
    raise AttributeError(f"unknown op {op!r}")


def _handle(request: dict, scratch: str) -> None:
    request_id = request["id"]
    try:
        args = _wire.from_message(request["args"])
        result = _function(request["op"])(**args)
        reply = {
            "id": request_id,
            "ok": True,
            "result": _wire.to_message(result, os.path.join(scratch, f"result-{request_id}.npz")),
        }
    except BaseException as error:  # noqa: BLE001 - reported to the test process.
        reply = {
            "id": request_id,
            "ok": False,
            "error_type": type(error).__name__,
            "error_mro": [cls.__name__ for cls in type(error).__mro__],
            "message": str(error),
            "traceback": traceback.format_exc(),
        }
    _send(reply)


def main() -> None:
    scratch = sys.argv[1]
    assert "reverb_py" not in sys.modules, "the dm-reverb worker must not import reverb_py"
    _send({"ready": True, "pid": os.getpid(), "reverb": reverb.__file__})
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        threading.Thread(target=_handle, args=(request, scratch), daemon=True).start()
    # stdin closed: leave at once, even if a call is still blocked in native code.
    _replies.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
