"""A whole agent in one process, on reverb_py and on dm-reverb: environment steps/s.

Run from the project root::

    python -m benchmarks.agent [--quick] [--seeds 3] [--out benchmarks/results/agent.json]

The loop has the shape of an Acme single-process DQN agent (actor, n-step adder,
``make_reverb_dataset`` learner, priority updates), in this module's own code:

* an in-process server with one table: Prioritized(0.6) sampler, Fifo remover,
  ``SampleToInsertRatio`` (``SAMPLES_PER_INSERT`` per item, ``MIN_SIZE`` items first);
* the actor steps a Catch environment (10×5 board, numpy) with an epsilon-greedy linear
  Q-function and writes n-step transitions (``N_STEP``) through a ``TrajectoryWriter``;
* the learner input is Acme's: an interleave of ``INTERLEAVE`` ``TrajectoryDataset`` s
  (``from_table_signature``), ``batch(BATCH, drop_remainder=True)``, ``prefetch``, read
  by a thread into a queue of 2 batches (Acme's prefetching iterator);
* after each environment step the learner takes every ready batch: a TD step of the
  linear Q-function in numpy, then ``mutate_priorities`` with the new TD errors.

Each *side* is a process of its own (``dm``: ``import reverb`` in the interpreter
``REVERB_PY_DM_REVERB_PYTHON``, default ``.venv-adoption-dm/bin/python``; ``reverb_py``:
this tree's ``reverb_py`` in ``REVERB_PY_AGENT_PYTHON``, default
``.venv-adoption/bin/python``; both TensorFlow 2.15). A run times ``STEPS`` environment
steps after the table first allows sampling; seeds alternate the order of the sides.
Each side also reports the CPU time of the threads TensorFlow started, per batch: on
the reverb_py side they run its datasets' Python (the time they hold the GIL), on
dm-reverb's its C++ ops.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from benchmarks._common import machine_info, median, write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIDES = ("dm", "reverb_py")
BATCH = 32
N_STEP = 3
DISCOUNT = 0.99
SAMPLES_PER_INSERT = 8.0
MIN_SIZE = 500
INTERLEAVE = 4
EPSILON = 0.1
LEARNING_RATE = 1e-2


def _python(side: str) -> str:
    if side == "dm":
        default = os.path.join(ROOT, ".venv-adoption-dm/bin/python")
        return os.environ.get("REVERB_PY_DM_REVERB_PYTHON", default)
    return os.environ.get("REVERB_PY_AGENT_PYTHON", os.path.join(ROOT, ".venv-adoption/bin/python"))


# ---------------------------------------------------------------- one side, one process


class Catch:
    """DeepMind's Catch: a ball falls down a 10×5 board; the paddle must be under it."""

    ROWS, COLUMNS = 10, 5

    def __init__(self, rng: Any) -> None:
        self._rng = rng
        self.reset()

    def reset(self) -> Any:
        self._ball = [0, int(self._rng.integers(self.COLUMNS))]
        self._paddle = self.COLUMNS // 2
        return self._observation()

    def _observation(self) -> Any:
        import numpy as np

        board = np.zeros((self.ROWS, self.COLUMNS), np.float32)
        board[self._ball[0], self._ball[1]] = 1.0
        board[self.ROWS - 1, self._paddle] = 1.0
        return board

    def step(self, action: int) -> tuple[Any, float, bool]:
        self._paddle = min(max(self._paddle + action - 1, 0), self.COLUMNS - 1)
        self._ball[0] += 1
        done = self._ball[0] == self.ROWS - 1
        reward = (1.0 if self._ball[1] == self._paddle else -1.0) if done else 0.0
        return self._observation(), reward, done


def _tf_thread_cpu_s() -> float:
    """CPU seconds of the threads TensorFlow started (Linux): the threads named ``python``
    (as every thread of the interpreter) that are not Python's own threads.

    On the reverb_py side they run its datasets' Python, i.e. hold the GIL for most of
    that time; on dm-reverb's they run its C++ ops.
    """
    import threading

    # Python's own threads; TensorFlow's threads that ran Python are _DummyThread s.
    own = {
        thread.native_id
        for thread in threading.enumerate()
        if not isinstance(thread, threading._DummyThread)
    }
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for task in os.listdir("/proc/self/task"):
        if int(task) in own:
            continue
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                if comm.read().strip() != "python":
                    continue
            with open(f"/proc/self/task/{task}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def run_side(side: str, seed: int, steps: int) -> dict[str, Any]:
    if side == "reverb_py":
        sys.path.insert(0, ROOT)
        import reverb_py as reverb
    else:
        import reverb  # type: ignore[no-redef]
    import collections
    import queue
    import threading

    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    tf.random.set_seed(seed)
    features = Catch.ROWS * Catch.COLUMNS
    signature = {
        "observation": tf.TensorSpec([Catch.ROWS, Catch.COLUMNS], tf.float32),
        "action": tf.TensorSpec([], tf.int32),
        "reward": tf.TensorSpec([], tf.float32),
        "discount": tf.TensorSpec([], tf.float32),
        "next_observation": tf.TensorSpec([Catch.ROWS, Catch.COLUMNS], tf.float32),
    }
    table = reverb.Table(
        "priority_table",
        sampler=reverb.selectors.Prioritized(0.6),
        remover=reverb.selectors.Fifo(),
        max_size=100_000,
        rate_limiter=reverb.rate_limiters.SampleToInsertRatio(
            SAMPLES_PER_INSERT, MIN_SIZE, SAMPLES_PER_INSERT * BATCH * 4
        ),
        signature=signature,
    )
    server = reverb.Server([table], port=None)
    address = f"localhost:{server.port}"
    client = reverb.Client(address)

    def make_dataset(_: Any) -> Any:
        return reverb.TrajectoryDataset.from_table_signature(
            address, "priority_table", max_in_flight_samples_per_worker=2 * BATCH
        )

    dataset = (
        tf.data.Dataset.range(INTERLEAVE)
        .interleave(
            make_dataset,
            cycle_length=INTERLEAVE,
            num_parallel_calls=INTERLEAVE,
            deterministic=False,
        )
        .batch(BATCH, drop_remainder=True)
        .prefetch(2)
    )
    ready: queue.Queue[Any] = queue.Queue(maxsize=2)

    def prefetch() -> None:
        for batch in dataset.as_numpy_iterator():
            ready.put(batch)

    threading.Thread(target=prefetch, daemon=True).start()

    weights = np.zeros((features, 3), np.float32)
    env = Catch(rng)
    observation = env.reset()
    recent: collections.deque[tuple[Any, int, float, float]] = collections.deque(maxlen=N_STEP)
    returns: list[float] = []
    episode_return = 0.0
    started = None  # When the learner took its first batch: the timed part starts.
    env_steps = learner_steps = 0
    cpu_start = 0.0

    def transition(next_observation: Any) -> dict[str, Any]:
        """The n-step transition from the oldest step of ``recent`` to ``next_observation``."""
        total, scale = 0.0, 1.0
        for _, _, reward, discount in recent:
            total += scale * reward
            scale *= DISCOUNT * discount
        first_observation, first_action, _, _ = recent[0]
        return {
            "observation": first_observation,
            "action": np.int32(first_action),
            "reward": np.float32(total),
            "discount": np.float32(scale),
            "next_observation": next_observation,
        }

    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        while env_steps < steps:
            if rng.random() < EPSILON:
                action = int(rng.integers(3))
            else:
                action = int(np.argmax(observation.reshape(-1) @ weights))
            next_observation, reward, done = env.step(action)
            episode_return += reward
            recent.append((observation, action, reward, 0.0 if done else 1.0))
            if len(recent) == N_STEP or done:
                # As Acme's n-step adder: the transition is a step of its own.
                writer.append(transition(next_observation))
                writer.create_item(
                    "priority_table",
                    1.0,
                    {name: column[-1] for name, column in writer.history.items()},
                )
            observation = next_observation
            if done:
                writer.end_episode()
                recent.clear()
                returns.append(episode_return)
                episode_return = 0.0
                observation = env.reset()
            while not ready.empty():
                batch = ready.get()
                data = batch.data
                flat = data["observation"].reshape(BATCH, -1)
                target = data["reward"] + data["discount"] * (
                    data["next_observation"].reshape(BATCH, -1) @ weights
                ).max(axis=1)
                td = target - (flat @ weights)[np.arange(BATCH), data["action"]]
                gradient = np.zeros_like(weights)
                np.add.at(gradient.T, data["action"], td[:, None] * flat)
                weights += LEARNING_RATE / BATCH * gradient
                client.mutate_priorities(
                    "priority_table",
                    updates=dict(zip(batch.info.key.tolist(), (np.abs(td) + 1e-3).tolist())),
                )
                if started is None:
                    started = time.perf_counter()
                    cpu_start = _tf_thread_cpu_s()
                else:
                    learner_steps += 1
            if started is not None:
                env_steps += 1
    assert started is not None
    elapsed = time.perf_counter() - started
    tf_cpu = _tf_thread_cpu_s() - cpu_start
    return {
        "side": side,
        "seed": seed,
        "env_steps": env_steps,
        "seconds": elapsed,
        "env_steps_per_s": env_steps / elapsed,
        "learner_steps": learner_steps,
        "learner_steps_per_s": learner_steps / elapsed,
        "mean_return_last_100": float(np.mean(returns[-100:])) if returns else None,
        "tf_threads_cpu_ms_per_batch": 1e3 * tf_cpu / learner_steps if learner_steps else None,
    }


# ---------------------------------------------------------------- orchestration


def _measure(side: str, seed: int, steps: int) -> dict[str, Any]:
    done = subprocess.run(
        [_python(side), "-m", "benchmarks.agent", "--side", side, "--seed", str(seed)]
        + ["--steps", str(steps)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=1800,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{side} (seed {seed}) failed: {done.stderr[-3000:]}")
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--side", choices=SIDES)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2,000 steps, 1 seed")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks/results/agent.json"))
    args = parser.parse_args()
    if args.side:
        print(json.dumps(run_side(args.side, args.seed, args.steps)), flush=True)
        os._exit(0)  # The timed part is over; how each side's exit goes is not timed here.
    steps, seeds = (2_000, 1) if args.quick else (args.steps, args.seeds)
    runs = []
    for seed in range(seeds):
        order = SIDES if seed % 2 == 0 else tuple(reversed(SIDES))
        for side in order:
            result = _measure(side, seed, steps)
            print(json.dumps(result), flush=True)
            runs.append(result)
    summary = {}
    for side in SIDES:
        rates = [run["env_steps_per_s"] for run in runs if run["side"] == side]
        summary[side] = {"env_steps_per_s_median": median(rates), "runs": len(rates)}
    summary["ratio_reverb_py_to_dm"] = (
        summary["reverb_py"]["env_steps_per_s_median"] / summary["dm"]["env_steps_per_s_median"]
    )
    for side in SIDES:
        cpu = [run["tf_threads_cpu_ms_per_batch"] for run in runs if run["side"] == side]
        summary[side]["tf_threads_cpu_ms_per_batch_median"] = median(cpu)
    write_json(
        args.out,
        {
            "benchmark": "agent",
            "machine": machine_info(),
            "steps": steps,
            "batch": BATCH,
            "runs": runs,
            "summary": summary,
        },
    )
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
