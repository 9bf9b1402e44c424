"""The operations of :mod:`_ops` with ``reverb_py.aio`` (coroutines, test process only).

Same arguments and results as :mod:`_ops`, so a test can run one scenario through the
dm-reverb client, the blocking reverb_py client and the asyncio one. The asyncio client
has no legacy ``Writer`` (dm-reverb has no asyncio API at all), so there is no
``write_legacy`` here.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

import reverb_py

from . import _acme
from ._ops import _after, info_to_json, sample_to_json, trajectory_from_history


async def write_trajectory(
    address: str,
    steps: list,
    items: list,
    num_keep_alive_refs: int | None = None,
    validate_items: bool = True,
    end_episode: bool = False,
) -> dict:
    async with reverb_py.aio.Client(address) as client:
        keep = num_keep_alive_refs or len(steps)
        writer = await client.trajectory_writer(keep, validate_items=validate_items)
        try:
            async with writer:
                for index, step in enumerate(steps):
                    writer.append(step)
                    for item in items:
                        if _after(item, len(steps)) == index:
                            writer.create_item(
                                item["table"],
                                item["priority"],
                                trajectory_from_history(writer.history, item["layout"]),
                            )
                await writer.flush()
                episode_steps = writer.episode_steps
                if end_episode:
                    await writer.end_episode()
        finally:
            await writer.close()
    return {"episode_steps": episode_steps}


async def write_shared(address: str, writers: int, steps: int, table: str) -> dict:
    """``writers`` writers of one client, all on one shared insert stream, each append
    ``steps`` int64 steps ``index * 1000 + step`` and, from its third step on, a length-3
    item of its last three, all interleaved; returns how many streams they shared and
    how many writers went on alone (after the shared stream failed)."""
    from reverb_py._client import shared_insert

    async with reverb_py.aio.Client(address) as client:
        before = shared_insert.STREAMS_BEFORE_SHARING
        shared_insert.STREAMS_BEFORE_SHARING = 1  # from the second writer on, share
        try:
            made = [await client.trajectory_writer(3, validate_items=False) for _ in range(writers)]
        finally:
            shared_insert.STREAMS_BEFORE_SHARING = before
        groups = {id(writer._async_transport.group) for writer in made}

        async def actor(index: int, writer: Any) -> None:
            try:
                for step in range(steps):
                    writer.append({"v": np.int64(index * 1000 + step)})
                    if step >= 2:
                        writer.create_item(table, 1.0, {"v": writer.history["v"][-3:]})
                    await asyncio.sleep(0)
                    await writer.flush(block_until_num_items=2)
                await writer.flush()
            finally:
                await writer.close()

        await asyncio.gather(*(actor(index, writer) for index, writer in enumerate(made)))
        # A writer alone: the shared stream ended with an error and was given up.
        alone = sum(writer._async_transport.alone for writer in made)
    return {"streams": len(groups), "alone": alone}


async def insert(address: str, data: Any, priorities: dict) -> None:
    async with reverb_py.aio.Client(address) as client:
        await client.insert(data, priorities=priorities)


async def server_info(address: str, timeout: Any = None) -> dict:
    async with reverb_py.aio.Client(address) as client:
        infos = await client.server_info(timeout)
    return {name: info_to_json(info) for name, info in infos.items()}


async def sample(
    address: str,
    table: str,
    num_samples: int = 1,
    emit_timesteps: bool = False,
    unpack_as_table_signature: bool = False,
    rate_limiter_timeout_ms: int | None = None,
) -> list:
    results = []
    async with reverb_py.aio.Client(address) as client:
        async for result in client.sample(
            table,
            num_samples,
            emit_timesteps=emit_timesteps,
            unpack_as_table_signature=unpack_as_table_signature,
            rate_limiter_timeout_ms=rate_limiter_timeout_ms,
        ):
            if emit_timesteps:
                results.append([sample_to_json(step) for step in result])
            else:
                results.append(sample_to_json(result))
    return results


async def mutate_priorities(
    address: str, table: str, updates: list | None = None, deletes: list | None = None
) -> None:
    async with reverb_py.aio.Client(address) as client:
        await client.mutate_priorities(
            table, updates={int(k): float(p) for k, p in updates or []}, deletes=deletes or []
        )


async def reset(address: str, table: str) -> None:
    async with reverb_py.aio.Client(address) as client:
        await client.reset(table)


async def checkpoint(address: str) -> str:
    async with reverb_py.aio.Client(address) as client:
        return await client.checkpoint()


async def structured_write(address: str, configs: list, episodes: list) -> None:
    parsed = [reverb_py.structured_writer.Config.FromString(bytes(c)) for c in configs]
    async with reverb_py.aio.Client(address) as client:
        writer = await client.structured_writer(parsed)
        try:
            for episode, length in enumerate(episodes):
                await _acme.write_episode_async(writer, episode, length)
            await writer.flush()
        finally:
            await writer.close()
