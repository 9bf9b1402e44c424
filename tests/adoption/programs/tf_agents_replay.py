"""A TF-Agents 0.19 program as its users write it, on whatever ``import reverb`` gives.

Nothing here names reverb_py: the test runs it with ``REVERB_PY_AS_REVERB=1`` in the
environment, or through ``reverb-py run``. A server with TF-Agents' usual tables (uniform
and a queue, both with the trajectory signature), a ``ReverbAddTrajectoryObserver``
writing two episodes step by step, and ``ReverbReplayBuffer.as_dataset`` reading them
back: every sampled value is checked against what was written. Prints a line per check
and exits non-zero at the first that fails.
"""

from __future__ import annotations

import sys

import numpy as np
import reverb
import tensorflow as tf
from tf_agents.replay_buffers import reverb_replay_buffer, reverb_utils
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step, trajectory

SEQUENCE_LENGTH = 2
EPISODE_LENGTHS = (6, 4)
# Steps of episode e are numbered from 100 * e: an observation names its episode and step.
EPISODE_BASE = 100


def data_spec() -> trajectory.Trajectory:
    return trajectory.Trajectory(
        step_type=tensor_spec.TensorSpec([], tf.int32, "step_type"),
        observation=tensor_spec.TensorSpec([2], tf.float32, "observation"),
        action=tensor_spec.BoundedTensorSpec([], tf.int64, 0, 3, "action"),
        policy_info=(),
        next_step_type=tensor_spec.TensorSpec([], tf.int32, "step_type"),
        reward=tensor_spec.TensorSpec([], tf.float32, "reward"),
        discount=tensor_spec.BoundedTensorSpec([], tf.float32, 0.0, 1.0, "discount"),
    )


def step(number: int, length: int) -> trajectory.Trajectory:
    """Step ``number`` (counted from the episode's base) of an episode of ``length``."""
    position = number % EPISODE_BASE
    if position == 0:
        kind = time_step.StepType.FIRST
    elif position == length - 1:
        kind = time_step.StepType.LAST
    else:
        kind = time_step.StepType.MID
    next_kind = (
        time_step.StepType.FIRST
        if kind == time_step.StepType.LAST
        else (time_step.StepType.LAST if position == length - 2 else time_step.StepType.MID)
    )
    return trajectory.Trajectory(
        step_type=np.int32(kind),
        observation=np.array([number, -number], dtype=np.float32),
        action=np.int64(number % 4),
        policy_info=(),
        next_step_type=np.int32(next_kind),
        reward=np.float32(number / 2),
        discount=np.float32(0.0 if kind == time_step.StepType.LAST else 1.0),
    )


def written_steps() -> list[trajectory.Trajectory]:
    return [
        step(EPISODE_BASE * episode + position, length)
        for episode, length in enumerate(EPISODE_LENGTHS)
        for position in range(length)
    ]


def expected_windows() -> list[list[int]]:
    """The step numbers of each item the observer writes (windows inside an episode)."""
    windows = []
    for episode, length in enumerate(EPISODE_LENGTHS):
        first = EPISODE_BASE * episode
        for start in range(length - SEQUENCE_LENGTH + 1):
            windows.append([first + start + offset for offset in range(SEQUENCE_LENGTH)])
    return windows


def check(condition: bool, message: str) -> None:
    if not condition:
        print(f"FAILED: {message}", file=sys.stderr)
        sys.exit(1)


def check_window(sample: trajectory.Trajectory, index: tuple[int, ...], where: str) -> int:
    """Checks one sampled window against the steps written; returns its first step."""
    observation = sample.observation.numpy()[index]
    numbers = observation[:, 0].astype(int).tolist()
    check(numbers in expected_windows(), f"{where}: steps {numbers} were never one item")
    lengths = dict(enumerate(EPISODE_LENGTHS))
    for offset, number in enumerate(numbers):
        written = step(number, lengths[number // EPISODE_BASE])
        at = (*index, offset)
        for field in ("step_type", "observation", "action", "next_step_type", "reward"):
            got = getattr(sample, field).numpy()[at]
            want = getattr(written, field)
            check(np.array_equal(got, want), f"{where}: {field} of step {number}: {got!r}")
        check(
            np.array_equal(sample.discount.numpy()[at], written.discount),
            f"{where}: discount of step {number}",
        )
    return numbers[0]


def main() -> None:
    print(f"reverb module: {reverb.__name__} {reverb.__file__}")
    spec = data_spec()
    signature = tensor_spec.add_outer_dim(tensor_spec.from_spec(spec), SEQUENCE_LENGTH)
    uniform = reverb.Table(
        "uniform",
        max_size=1000,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=signature,
    )
    queue = reverb.Table.queue("queue", max_size=1000, signature=signature)
    # No port: a free one (reverb_py binds port 0 on localhost, its default host).
    server = reverb.Server([uniform, queue], port=None)
    try:
        run(server, spec)
    finally:
        server.stop()
    print("ok: server stopped")


def run(server: reverb.Server, spec: trajectory.Trajectory) -> None:
    replay = reverb_replay_buffer.ReverbReplayBuffer(
        spec, table_name="uniform", sequence_length=SEQUENCE_LENGTH, local_server=server
    )
    # Once the queue is empty its samplers give up after the rate limiter's timeout and
    # the dataset ends (without it, a sampler would wait on the empty queue for ever).
    queue_replay = reverb_replay_buffer.ReverbReplayBuffer(
        spec,
        table_name="queue",
        sequence_length=SEQUENCE_LENGTH,
        local_server=server,
        rate_limiter_timeout_ms=500,
    )
    observer = reverb_utils.ReverbAddTrajectoryObserver(
        replay.py_client, ["uniform", "queue"], sequence_length=SEQUENCE_LENGTH, stride_length=1
    )
    # An actor's observer never flushes while it collects: the items of the first episode
    # must reach the server without flush(). A learner's dataset, which gives up after
    # 10 s without a sample (and then ends), finds one.
    steps = written_steps()
    first_episode = EPISODE_LENGTHS[0]
    waiting_replay = reverb_replay_buffer.ReverbReplayBuffer(
        spec,
        table_name="uniform",
        sequence_length=SEQUENCE_LENGTH,
        local_server=server,
        rate_limiter_timeout_ms=10_000,
    )
    try:
        for written in steps[:first_episode]:
            observer(written)
        dataset = waiting_replay.as_dataset(num_steps=SEQUENCE_LENGTH)
        samples = list(dataset.take(1))
        check(len(samples) == 1, "no item of the first episode reached the server before flush()")
        first = check_window(samples[0][0], (), "before flush()")
        check(first < EPISODE_BASE, f"sampled step {first} before it was written")
        print("ok: the first episode's items were sampled before the observer flushed")
        for written in steps[first_episode:]:
            observer(written)
        observer.flush()
    finally:
        observer.close()
    windows = expected_windows()
    check(replay.num_frames() == len(windows), f"uniform holds {replay.num_frames()} items")
    print(f"ok: the observer wrote {len(windows)} items of {SEQUENCE_LENGTH} steps to each table")

    # The queue gives the items back in the order they were written, once each, and the
    # dataset ends when it is empty.
    dataset = queue_replay.as_dataset(sample_batch_size=1, num_steps=SEQUENCE_LENGTH)
    firsts = []
    for sample, _ in dataset:
        firsts.append(check_window(sample, (0,), "queue"))
    check(firsts == [window[0] for window in windows], f"queue order {firsts}")
    print(f"ok: the queue table gave back the {len(windows)} items in order")

    # Uniform sampling in batches, as an agent's training loop reads them.
    batch_size = 4
    dataset = replay.as_dataset(
        sample_batch_size=batch_size, num_steps=SEQUENCE_LENGTH, num_parallel_calls=2
    ).prefetch(2)
    seen: set[int] = set()
    for sample, info in dataset.take(25):
        check(
            sample.observation.shape == (batch_size, SEQUENCE_LENGTH, 2),
            f"batch shape {sample.observation.shape}",
        )
        for row in range(batch_size):
            seen.add(check_window(sample, (row,), "uniform"))
        probabilities = info.probability.numpy()
        check(
            np.allclose(probabilities, 1 / len(windows)),
            f"sample probabilities {probabilities}",
        )
    check(len(seen) > len(windows) // 2, f"100 uniform samples saw only steps {sorted(seen)}")
    print(f"ok: 25 uniform batches of {batch_size}, {len(seen)} distinct items seen")

    # Single items, without a batch dimension, from a dataset made in a tf.function
    # (TF-Agents' learners build their iterators there).
    dataset = replay.as_dataset(num_steps=SEQUENCE_LENGTH, single_deterministic_pass=False)
    iterator = iter(dataset)

    @tf.function
    def next_observation() -> tf.Tensor:
        sample, _ = next(iterator)
        return sample.observation

    for _ in range(5):
        observation = next_observation().numpy()
        numbers = observation[:, 0].astype(int).tolist()
        check(numbers in windows, f"tf.function sample {numbers}")
        check(np.array_equal(observation[:, 1], -observation[:, 0]), f"{observation}")
    print("ok: 5 samples through a tf.function")


if __name__ == "__main__":
    main()
