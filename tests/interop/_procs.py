"""Child processes running dm-reverb: the client worker and servers.

Both speak JSON lines on their stdin/stdout (see ``dm_worker.py`` and ``dm_server.py``);
their stderr (TensorFlow's logs, tracebacks) goes to a log file whose tail is quoted in
every failure. Every wait is bounded; :meth:`close` always reaps the child (closing its
stdin, then killing it if it does not exit in time).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from . import _wire

HERE = Path(__file__).resolve().parent
STARTUP_TIMEOUT = 180.0  # importing TensorFlow on a cold disk cache can be slow
CALL_TIMEOUT = 60.0
EXIT_TIMEOUT = 15.0


def child_env() -> dict[str, str]:
    """The environment for dm-reverb children: nothing pointing into reverb_py's venv."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
    }
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as error:
        return f"<cannot read {path}: {error}>"
    return "\n".join(text.splitlines()[-lines:])


class ChildProcess:
    """A child with JSON lines on stdout read by a thread into a queue."""

    def __init__(self, argv: list[str], log_path: Path, label: str) -> None:
        self.label = label
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=child_env(),
            cwd=str(HERE),
        )
        self._lines: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._reader = threading.Thread(target=self._read, name=f"{label}-reader", daemon=True)
        self._reader.start()
        self._closed = False

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                self._lines.put(json.loads(raw))
            except json.JSONDecodeError:
                self._lines.put({"garbage": raw.decode(errors="replace")})
        self._lines.put(None)  # EOF

    def next_line(self, timeout: float) -> Any:
        """The next JSON line; fails with the log tail on EOF or timeout."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"{self.label}: no output within {timeout:.0f} s "
                f"(alive: {self.proc.poll() is None}); log tail:\n{tail(self.log_path)}"
            ) from None
        if line is None:
            raise AssertionError(
                f"{self.label}: exited (code {self.proc.wait(EXIT_TIMEOUT)}) before "
                f"answering; log tail:\n{tail(self.log_path)}"
            )
        return line

    def close(self) -> None:
        """Closes stdin (the child's signal to stop), then waits; kills if needed."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.proc.stdin is not None:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass
            try:
                self.proc.wait(EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(EXIT_TIMEOUT)
        finally:
            self._reader.join(EXIT_TIMEOUT)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self._log.close()


class DmCallError(Exception):
    """A call in the dm-reverb worker raised; carries the exception's class names."""

    def __init__(self, op: str, reply: dict) -> None:
        self.op = op
        self.error_type = reply["error_type"]
        self.error_mro = reply["error_mro"]
        self.message = reply["message"]
        self.remote_traceback = reply["traceback"]
        super().__init__(
            f"dm-reverb {op}() raised {self.error_type}: {self.message}\n"
            f"--- traceback in the dm-reverb worker ---\n{self.remote_traceback}"
        )


class DmWorker:
    """The dm-reverb client worker (see ``dm_worker.py``): ``call`` / ``submit`` ops."""

    def __init__(self, python: str, scratch: Path) -> None:
        scratch.mkdir(parents=True, exist_ok=True)
        self.scratch = scratch
        self.child = ChildProcess(
            [python, str(HERE / "dm_worker.py"), str(scratch)],
            scratch / "dm_worker.log",
            "dm-reverb worker",
        )
        self._ids = itertools.count()
        self._pending: dict[int, tuple[str, concurrent.futures.Future[Any]]] = {}
        self._lock = threading.Lock()
        self._dispatcher: threading.Thread | None = None
        self.info: dict[str, Any] = {}

    def wait_ready(self) -> None:
        self.info = self.child.next_line(STARTUP_TIMEOUT)
        if not self.info.get("ready"):
            raise AssertionError(f"dm-reverb worker did not start: {self.info}")
        self._dispatcher = threading.Thread(
            target=self._dispatch, name="dm-worker-dispatch", daemon=True
        )
        self._dispatcher.start()

    def _dispatch(self) -> None:
        while True:
            line = self.child._lines.get()
            if line is None:
                break
            with self._lock:
                op, future = self._pending.pop(line["id"], (None, None))
            if future is None:
                continue
            if line["ok"]:
                try:
                    future.set_result(_wire.from_message(line["result"]))
                except Exception as error:  # noqa: BLE001 - decoding failure.
                    future.set_exception(error)
            else:
                future.set_exception(DmCallError(op, line))
        with self._lock:
            pending, self._pending = self._pending, {}
        for op, future in pending.values():
            future.set_exception(
                AssertionError(
                    f"dm-reverb worker exited during {op}(); log tail:\n{tail(self.child.log_path)}"
                )
            )

    def submit(self, op: str, **args: Any) -> concurrent.futures.Future[Any]:
        """Starts ``op(**args)`` in the worker; returns a future of its result."""
        request_id = next(self._ids)
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        message = _wire.to_message(args, str(self.scratch / f"args-{request_id}.npz"))
        with self._lock:
            self._pending[request_id] = (op, future)
        line = json.dumps({"id": request_id, "op": op, "args": message}) + "\n"
        assert self.child.proc.stdin is not None
        try:
            self.child.proc.stdin.write(line.encode())
            self.child.proc.stdin.flush()
        except OSError as error:
            with self._lock:
                self._pending.pop(request_id, None)
            raise AssertionError(
                f"dm-reverb worker is gone ({error}); log tail:\n{tail(self.child.log_path)}"
            ) from None
        return future

    def call(self, op: str, timeout: float = CALL_TIMEOUT, **args: Any) -> Any:
        """Runs ``op(**args)`` in the worker and returns its result (bounded wait)."""
        return wait_for(self.submit(op, **args), timeout, f"dm-reverb {op}()", self)

    def log_tail(self) -> str:
        return tail(self.child.log_path)

    def close(self) -> None:
        self.child.close()
        if self._dispatcher is not None:
            self._dispatcher.join(EXIT_TIMEOUT)


def wait_for(
    future: concurrent.futures.Future[Any], timeout: float, what: str, worker: Any = None
) -> Any:
    """``future.result(timeout)`` with a failure message naming ``what``."""
    # Not ``future.result(timeout)``: a call that raises a TimeoutError subclass (e.g.
    # reverb_py's DeadlineExceededError) must not look like a timeout of the wait.
    done, _ = concurrent.futures.wait([future], timeout)
    if not done:
        extra = f"; worker log tail:\n{worker.log_tail()}" if worker is not None else ""
        raise AssertionError(f"{what} did not finish within {timeout:.0f} s{extra}")
    return future.result()


class DmServer:
    """A dm-reverb ``reverb.Server`` in a child process (see ``dm_server.py``)."""

    def __init__(
        self,
        python: str,
        tables: list[dict],
        log_path: Path,
        checkpoint_dir: str | None = None,
    ) -> None:
        config = {"tables": tables, "checkpoint_dir": checkpoint_dir}
        self.child = ChildProcess(
            [python, str(HERE / "dm_server.py"), json.dumps(config)],
            log_path,
            "dm-reverb server",
        )
        self.port: int | None = None
        self.startup_error: dict[str, Any] | None = None

    def wait_ready(self) -> None:
        """Waits for the port; a failed start is recorded in ``startup_error``."""
        line = self.child.next_line(STARTUP_TIMEOUT)
        if "port" in line:
            self.port = int(line["port"])
        else:
            self.startup_error = line

    def require_ready(self) -> None:
        if self.port is None:
            raise AssertionError(f"dm-reverb server failed to start: {self.startup_error}")

    @property
    def address(self) -> str:
        self.require_ready()
        return f"localhost:{self.port}"

    def log_tail(self) -> str:
        return tail(self.child.log_path)

    def close(self) -> None:
        self.child.close()


def dm_python() -> str | None:
    path = os.environ.get("REVERB_PY_DM_REVERB_PYTHON")
    return path or None


def assert_no_tensorflow_here() -> None:
    """The test process must never import dm-reverb or TensorFlow."""
    for name in ("reverb", "tensorflow"):
        assert name not in sys.modules, f"{name} was imported into the reverb_py test process"
