"""A learner that ends while its tf.data pipeline still reads reverb_py datasets.

As Acme's single-process agents: an in-process server, an actor writing n-step
transitions, ``make_reverb_dataset``'s shape (an interleave of TrajectoryDatasets,
batched and prefetched) read by a thread that keeps pulling, and priority updates.
Nothing is stopped or closed: the interpreter's own exit must end the program, with
nothing logged.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import tensorflow as tf

import reverb_py as reverb

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 300

signature = {
    "observation": tf.TensorSpec([3], tf.float32),
    "reward": tf.TensorSpec([], tf.float32),
}
server = reverb.Server(
    [
        reverb.Table(
            "priority_table",
            reverb.selectors.Prioritized(0.6),
            reverb.selectors.Fifo(),
            max_size=1000,
            rate_limiter=reverb.rate_limiters.SampleToInsertRatio(4.0, 16, 100.0),
            signature=signature,
        )
    ],
    port=0,
)
address = f"localhost:{server.port}"
client = reverb.Client(address)


def make_dataset(_: tf.Tensor) -> tf.data.Dataset:
    return reverb.TrajectoryDataset.from_table_signature(
        address, "priority_table", max_in_flight_samples_per_worker=16
    )


dataset = (
    tf.data.Dataset.range(4)
    .interleave(make_dataset, cycle_length=4, num_parallel_calls=4, deterministic=False)
    .batch(8, drop_remainder=True)
    .prefetch(4)
)
batches = dataset.as_numpy_iterator()


def learn() -> None:
    # As Acme's learner on its prefetching thread: it keeps reading and updating
    # priorities, and is never told to stop.
    for batch in batches:
        keys = batch.info.key.tolist()
        client.mutate_priorities("priority_table", updates=dict.fromkeys(keys, 2.0))


threading.Thread(target=learn, daemon=True).start()

with client.trajectory_writer(num_keep_alive_refs=3) as writer:
    for step in range(STEPS):
        writer.append({"observation": np.full([3], step, np.float32), "reward": np.float32(1)})
        if step >= 2:
            writer.create_item(
                "priority_table",
                1.0,
                {
                    "observation": writer.history["observation"][-3],
                    "reward": writer.history["reward"][-3],
                },
            )
print("acted", STEPS, "steps")
