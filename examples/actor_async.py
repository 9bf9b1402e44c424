"""Actors as asyncio coroutines sharing one ``reverb.aio.Client``.

Each actor runs episodes of a toy environment and writes them with its own trajectory
writer: an item of three consecutive steps into the ``replay`` table at every step, and
one summary per finished episode into the ``episodes`` queue. At the end the summaries
are read back from the queue.

    python examples/actor_async.py                          # starts its own server
    python examples/actor_async.py --address localhost:8000  # a running server with the
                                                            # tables of server.toml

The ``replay`` table of ``examples/server.toml`` has a SampleToInsertRatio limiter:
without a learner sampling, inserts wait once the actors are 200 items ahead, so keep
``actors * episodes * (steps - 2)`` below that or run ``examples/learner.py`` alongside.
"""

from __future__ import annotations

import argparse
import asyncio
import os

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # no GOAWAY chatter when a server stops

import numpy as np  # noqa: E402

import reverb_py as reverb  # noqa: E402

SEQUENCE_LENGTH = 3


def own_server() -> reverb.Server:
    """A server on a free port with the tables of server.toml, but with a MinSize limiter
    on ``replay``: with no learner sampling, a ratio limiter would make the actors wait."""
    return reverb.Server(
        tables=[
            reverb.Table(
                name="replay",
                sampler=reverb.selectors.Prioritized(priority_exponent=0.6),
                remover=reverb.selectors.Fifo(),
                max_size=100_000,
                rate_limiter=reverb.rate_limiters.MinSize(1),
            ),
            reverb.Table.queue(name="episodes", max_size=1000),
        ],
        port=None,
    )


async def actor(client: reverb.aio.Client, actor_id: int, episodes: int, steps: int) -> int:
    """Runs ``episodes`` episodes of ``steps`` steps; returns the number of items written."""
    rng = np.random.default_rng(actor_id)
    items = 0
    writer = await client.trajectory_writer(num_keep_alive_refs=SEQUENCE_LENGTH)
    try:
        for episode in range(episodes):
            observation = rng.normal(size=4).astype(np.float32)
            episode_return = 0.0
            for step in range(steps):
                action = int(rng.integers(2))
                reward = float(observation[action])
                episode_return += reward
                # append never blocks: the data goes out in the background.
                writer.append(
                    {
                        "observation": observation,
                        "action": np.int32(action),
                        "reward": np.float32(reward),
                    }
                )
                if step >= SEQUENCE_LENGTH - 1:
                    writer.create_item(
                        table="replay",
                        priority=1.0,
                        trajectory={
                            "observation": writer.history["observation"][-SEQUENCE_LENGTH:],
                            "action": writer.history["action"][-SEQUENCE_LENGTH:],
                            "reward": writer.history["reward"][-SEQUENCE_LENGTH:],
                        },
                    )
                    items += 1
                # A real actor would await its environment here; this one lets the other
                # actors run.
                await asyncio.sleep(0)
                observation = rng.normal(size=4).astype(np.float32)
            # Waits (without blocking the loop) until the server confirmed every item of
            # the episode, then starts a new episode.
            await writer.end_episode()
            await client.insert(
                {
                    "actor": np.int32(actor_id),
                    "episode": np.int32(episode),
                    "return": np.float32(episode_return),
                },
                priorities={"episodes": 1.0},
            )
    finally:
        await writer.close()
    return items


async def run(address: str, actors: int, episodes: int, steps: int) -> None:
    async with reverb.aio.Client(address) as client:
        written = await asyncio.gather(*(actor(client, i, episodes, steps) for i in range(actors)))
        print(f"{actors} actors wrote {sum(written)} items into 'replay'")
        info = await client.server_info()
        print(
            f"replay holds {info['replay'].current_size} items, "
            f"episodes holds {info['episodes'].current_size} summaries"
        )
        print("finished episodes (actor, episode, return):")
        # The queue hands each summary out once, oldest first.
        async for sample in client.sample(
            "episodes",
            num_samples=actors * episodes,
            emit_timesteps=False,
            rate_limiter_timeout_ms=5000,
        ):
            # Without a table signature the data is the flattened trajectory: the
            # columns of a dict in sorted key order (actor, episode, return).
            actor_id, episode, episode_return = (column[0] for column in sample.data)
            print(f"  {actor_id} {episode} {episode_return:+.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="a running server (default: start one here)")
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=2, help="episodes per actor")
    parser.add_argument("--steps", type=int, default=20, help="steps per episode")
    args = parser.parse_args()
    server = None if args.address else own_server()
    try:
        address = args.address or f"localhost:{server.port}"
        asyncio.run(run(address, args.actors, args.episodes, args.steps))
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
