"""A learner with the blocking ``reverb.Client``: samples batches, updates priorities.

Each step samples a batch of three-step sequences from the prioritized ``replay`` table,
computes a stand-in for the TD errors of the batch and writes them back as the items'
new priorities with ``mutate_priorities``, so that the sampler favours the surprising
items next.

    python examples/learner.py                          # starts its own server and
                                                        # fills it with random sequences
    python examples/learner.py --address localhost:8000  # a running server with the
                                                        # tables of server.toml, fed by
                                                        # examples/actor_async.py

Against the daemon's ``replay`` table (a SampleToInsertRatio limiter) sampling waits
for the actors; when no batch comes within ``--timeout`` seconds the learner stops.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # no GOAWAY chatter when a server stops

import numpy as np  # noqa: E402

import reverb_py as reverb  # noqa: E402

SEQUENCE_LENGTH = 3


def own_server(num_items: int) -> reverb.Server:
    """A server on a free port with a ``replay`` table holding ``num_items`` random
    sequences. Its limiter is MinSize: with no actors inserting, a ratio limiter would
    stop the learner after a few batches."""
    server = reverb.Server(
        tables=[
            reverb.Table(
                name="replay",
                sampler=reverb.selectors.Prioritized(priority_exponent=0.6),
                remover=reverb.selectors.Fifo(),
                max_size=100_000,
                rate_limiter=reverb.rate_limiters.MinSize(100),
            )
        ],
        port=None,
    )
    rng = np.random.default_rng(0)
    client = server.localhost_client()
    with client.trajectory_writer(num_keep_alive_refs=SEQUENCE_LENGTH) as writer:
        for step in range(num_items + SEQUENCE_LENGTH - 1):
            writer.append(
                {
                    "observation": rng.normal(size=4).astype(np.float32),
                    "action": np.int32(rng.integers(2)),
                    "reward": np.float32(rng.normal()),
                }
            )
            if step >= SEQUENCE_LENGTH - 1:
                writer.create_item(
                    "replay",
                    1.0,
                    {
                        name: writer.history[name][-SEQUENCE_LENGTH:]
                        for name in ("observation", "action", "reward")
                    },
                )
        writer.flush()
    return server


def learn(address: str, steps: int, batch_size: int, timeout: float) -> None:
    client = reverb.Client(address)
    value = 0.0  # the "model": a running estimate of the return of a sequence
    for step in range(steps):
        try:
            batch = list(
                client.sample(
                    "replay",
                    num_samples=batch_size,
                    emit_timesteps=False,
                    rate_limiter_timeout_ms=int(timeout * 1000),
                )
            )
        except reverb.DeadlineExceededError:
            print(f"no batch within {timeout} s: stopping after {step} steps")
            return
        keys = [sample.info.key for sample in batch]
        # Without a table signature the data is the flattened trajectory: the columns of
        # the dict in sorted key order (action, observation, reward).
        returns = np.array([sample.data[2].sum() for sample in batch])
        probabilities = np.array([sample.info.probability for sample in batch])
        table_size = batch[0].info.table_size
        # Importance weights correct for the prioritized sampling.
        weights = (table_size * probabilities) ** -0.4
        weights /= weights.max()
        td_errors = returns - value
        value += 0.1 * float(np.mean(weights * td_errors))
        new_priorities = np.abs(td_errors) + 1e-3
        client.mutate_priorities("replay", updates=dict(zip(keys, new_priorities.tolist())))
        if step % 5 == 0 or step == steps - 1:
            mean_priority = np.mean([sample.info.priority for sample in batch])
            print(
                f"step {step:3d}: {len(batch)} samples from {table_size} items, "
                f"mean priority sampled {mean_priority:.3f}, value {value:+.3f}"
            )
    info = client.server_info()["replay"]
    print(f"done: {info.num_unique_samples} of {info.current_size} items sampled at least once")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="a running server (default: start one here)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for a batch before stopping"
    )
    args = parser.parse_args()
    server = None if args.address else own_server(num_items=500)
    try:
        address = args.address or f"localhost:{server.port}"
        learn(address, args.steps, args.batch_size, args.timeout)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
