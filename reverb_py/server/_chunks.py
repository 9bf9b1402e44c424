"""The chunks a server holds: each the exact bytes of a ``ChunkData`` that arrived.

The server never decodes tensors: of a chunk it reads only the key and the episode id.
"""

from __future__ import annotations

from reverb_py import _impl

__all__ = ["Chunk", "parse_chunk"]


class Chunk:
    """A chunk as the server keeps it: the serialised ``ChunkData`` and two of its fields."""

    __slots__ = ("key", "episode_id", "data", "__weakref__")

    def __init__(self, key: int, episode_id: int, data: bytes) -> None:
        self.key = key
        self.episode_id = episode_id
        self.data = data


def parse_chunk(data: bytes) -> Chunk:
    """Reads a ``ChunkData``'s key and episode id and keeps its bytes as they are."""
    key, episode_id = _impl.checkpoint_records.chunk_key_and_episode(data)
    return Chunk(key, episode_id, data)
