"""The replay daemon with checkpoints: write, checkpoint, stop, restart, read back.

Starts ``python -m reverb_py.server`` with the config of ``examples/server.toml``, moved
to a temporary directory and a free port; writes sequences into ``replay`` and episode
summaries into the ``episodes`` queue; asks for ``client.checkpoint()``; stops the
daemon with SIGTERM (which writes one more checkpoint: ``checkpoint_on_shutdown``);
starts it again on the same checkpoint directory and shows that the data came back.

    python examples/daemon_with_checkpoints.py
"""

from __future__ import annotations

import os
import pathlib
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # no GOAWAY chatter when a server stops

import numpy as np  # noqa: E402

import reverb_py as reverb  # noqa: E402

CONFIG = pathlib.Path(__file__).with_name("server.toml")
START_TIMEOUT = 30.0
NUM_ITEMS = 150  # the replay table's limiter lets 200 in before a learner must sample
NUM_EPISODES = 5
_OUTPUT = threading.Lock()  # the daemons' echoed lines and this script's, whole lines


def say(text: str) -> None:
    """Prints one line; never in the middle of a daemon's echoed line."""
    with _OUTPUT:
        print(text, flush=True)


class Daemon:
    """``python -m reverb_py.server --config PATH`` in a subprocess, its log echoed."""

    def __init__(self, config: pathlib.Path, name: str) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, "-m", "reverb_py.server", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            self.address = self._wait_for_address()
        except BaseException:
            self.kill()
            raise

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            say(f"    [{self.name}] {line.rstrip()}")
            self._lines.put(line)
        self._lines.put(None)

    def _wait_for_address(self) -> str:
        # The daemon logs "serving on HOST:PORT (implementation: ...)" once it listens;
        # with port = 0 that is where the free port it got is told.
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                line = self._lines.get(timeout=max(deadline - time.monotonic(), 0))
            except queue.Empty:
                raise RuntimeError(f"{self.name} did not start within {START_TIMEOUT} s") from None
            if line is None:
                raise RuntimeError(f"{self.name} exited with status {self.process.wait()}")
            match = re.search(r"serving on (\S+) \(implementation", line)
            if match:
                return match.group(1)

    def stop(self) -> int:
        """SIGTERM, then waits for the daemon to exit; returns its exit status."""
        self.process.send_signal(signal.SIGTERM)
        status = self.process.wait(timeout=60)
        self._reader.join()
        return status

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def write_config(directory: pathlib.Path) -> pathlib.Path:
    """server.toml with ``port = 0`` and the checkpoints under ``directory``."""
    text = CONFIG.read_text()
    text = re.sub(r"(?m)^port = .*$", "port = 0", text)
    checkpoints = (directory / "checkpoints").as_posix()
    text = re.sub(r"(?m)^checkpoint_dir = .*$", f'checkpoint_dir = "{checkpoints}"', text)
    path = directory / "server.toml"
    path.write_text(text)
    return path


def write_data(client: reverb.Client) -> None:
    with client.trajectory_writer(num_keep_alive_refs=3) as writer:
        for step in range(NUM_ITEMS + 2):
            writer.append(
                {"step": np.int64(step), "observation": np.full(4, step, dtype=np.float32)}
            )
            if step >= 2:
                writer.create_item(
                    "replay",
                    priority=1.0 + step % 7,
                    trajectory={
                        "step": writer.history["step"][-3:],
                        "observation": writer.history["observation"][-3:],
                    },
                )
        writer.flush()
    for episode in range(NUM_EPISODES):
        client.insert(
            {"episode": np.int32(episode), "return": np.float32(10 * episode)},
            priorities={"episodes": 1.0},
        )


def sizes(client: reverb.Client) -> dict[str, int]:
    return {name: info.current_size for name, info in client.server_info(timeout=30).items()}


def stopped(daemon: Daemon) -> bool:
    status = daemon.stop()
    say(f"stopped with SIGTERM: exit status {status}")
    return status == 0


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="reverb_py_example_") as tmp:
        config = write_config(pathlib.Path(tmp))
        say(f"config: {config}")
        daemons: list[Daemon] = []
        try:
            say("starting the daemon")
            daemons.append(Daemon(config, "daemon"))
            client = reverb.Client(daemons[-1].address)
            write_data(client)
            written = sizes(client)
            say(f"written: {written}")
            say(f"client.checkpoint() -> {client.checkpoint()}")
            if not stopped(daemons[-1]):
                return 1
            say(f"checkpoints: {sorted(os.listdir(pathlib.Path(tmp) / 'checkpoints'))}")

            say("starting the daemon again")
            daemons.append(Daemon(config, "restarted"))
            client = reverb.Client(daemons[-1].address)
            restored = sizes(client)
            say(f"restored: {restored}")
            if restored != written:
                print("the restored tables differ from the written ones", file=sys.stderr)
                return 1
            # Each replay item is three consecutive steps, its observations those steps.
            for sample in client.sample("replay", num_samples=3, emit_timesteps=False):
                observation, step = sample.data  # sorted key order: observation, step
                steps = step.tolist()
                if (
                    steps != list(range(steps[0], steps[0] + 3))
                    or not (observation == step[:, None]).all()
                ):
                    print(f"replay item {sample.info.key} is not as written", file=sys.stderr)
                    return 1
                say(
                    f"  replay item {sample.info.key}: steps {steps}, "
                    f"priority {sample.info.priority}"
                )
            # The queue comes back in its order.
            episodes = [
                int(sample.data[0][0])
                for sample in client.sample(
                    "episodes", num_samples=NUM_EPISODES, emit_timesteps=False
                )
            ]
            say(f"  episodes from the queue, in order: {episodes}")
            if episodes != list(range(NUM_EPISODES)):
                print("the queue did not come back in its order", file=sys.stderr)
                return 1
            if not stopped(daemons[-1]):
                return 1
        finally:
            for daemon in daemons:
                daemon.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
