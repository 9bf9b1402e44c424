"""Client side of ``SampleStream``: requests, reassembly of entries, decoding.

One request asks for all the samples wanted; the server answers with many samples per
response. Chunks are decoded once per stream and kept in a small cache
(:class:`reverb_py._codec.chunk.ChunkCache`), because overlapping sequence items share chunks.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import grpc
import numpy as np

from reverb_py import errors
from reverb_py._client.channel import SAMPLE_STREAM_PATH
from reverb_py._client.credentials import explain_internal_error
from reverb_py._codec.chunk import ChunkCache, unpack_trajectory
from reverb_py._proto import reverb_service_pb2, schema_pb2
from reverb_py._status import error_for_status, error_from_rpc
from reverb_py.replay_sample import ReplaySample, SampleInfo

__all__ = ["sample_stream", "to_replay_samples"]


def _info(message: schema_pb2.SampleInfo) -> SampleInfo:
    item = message.item
    return SampleInfo(
        key=int(item.key),
        probability=float(message.probability),
        table_size=int(message.table_size),
        priority=float(item.priority),
        times_sampled=int(item.times_sampled),
    )


async def sample_stream(
    channel: grpc.aio.Channel,
    table: str,
    num_samples: int,
    rate_limiter_timeout_ms: int | None = None,
) -> AsyncIterator[tuple[SampleInfo, list[np.ndarray]]]:
    """Yields ``(info, columns)`` for ``num_samples`` samples of ``table``.

    Raises:
      InvalidArgumentError: ``num_samples < 1``.
      ReverbError: the server refused or the stream failed (mapped from its status).
    """
    if num_samples < 1:
        raise errors.InvalidArgumentError(f"num_samples must be >= 1, got {num_samples}.")
    request = reverb_service_pb2.SampleStreamRequest(table=table, num_samples=num_samples)
    if rate_limiter_timeout_ms is not None and rate_limiter_timeout_ms >= 0:
        # 0 would mean "forever" on the wire; a zero timeout is asked as 1 ms.
        request.rate_limiter_timeout.milliseconds = max(1, rate_limiter_timeout_ms)
    call = channel.stream_stream(
        SAMPLE_STREAM_PATH,
        request_serializer=reverb_service_pb2.SampleStreamRequest.SerializeToString,
        response_deserializer=reverb_service_pb2.SampleStreamResponse.FromString,
    )()
    cache = ChunkCache()
    produced = 0
    info: schema_pb2.SampleInfo | None = None
    chunks: dict[int, list[np.ndarray]] = {}
    try:
        await call.write(request)
        while produced < num_samples:
            response = await call.read()
            if response is grpc.aio.EOF:
                code = await call.code()
                raise errors.UnavailableError(
                    f"Sample stream ended after {produced} of {num_samples} samples ({code})."
                )
            # The stubs type read() as `object` (EOF or a message); past EOF it is a message.
            for entry in cast(reverb_service_pb2.SampleStreamResponse, response).entries:
                if entry.HasField("info"):
                    info = entry.info
                    chunks = {}
                for chunk in entry.data:
                    chunks[chunk.chunk_key] = cache.decode(chunk)
                if entry.end_of_sequence:
                    if info is None:
                        raise errors.InternalError("Sample entry without info.")
                    columns = unpack_trajectory(info.item.flat_trajectory, chunks)
                    produced += 1
                    yield _info(info), columns
                    info = None
    except grpc.aio.AioRpcError as error:
        failure = error_from_rpc(error)
        if produced == 0:
            failure = await explain_internal_error(channel, failure)
        raise failure from None
    except asyncio.InvalidStateError:
        # The call already ended (e.g. the server went away): report its status.
        raise error_for_status(await call.code(), await call.details() or "") from None
    finally:
        call.cancel()


def to_replay_samples(
    info: SampleInfo,
    columns: list[np.ndarray],
    *,
    emit_timesteps: bool,
    signature: Any = None,
) -> ReplaySample | list[ReplaySample]:
    """Shapes one sample as Reverb's ``Client.sample`` does.

    Args:
      info: The sample's info.
      columns: The item's columns, each with its time axis (unless squeezed).
      emit_timesteps: Split into one :class:`ReplaySample` per time step.
      signature: A signature nest to unflatten the data into, or None for flat lists.

    Raises:
      ValueError: ``emit_timesteps`` with columns of different lengths.
      TypeError: ``emit_timesteps`` with a squeezed scalar column.
    """
    pack = _packer(signature)
    if not emit_timesteps:
        return ReplaySample(info=info, data=pack(columns))
    lengths = set()
    for column in columns:
        if column.ndim == 0:
            raise TypeError(
                "Can't split a squeezed scalar column into timesteps; use emit_timesteps=False."
            )
        lengths.add(len(column))
    if len(lengths) > 1:
        raise ValueError("Can't split non timestep trajectory into timesteps.")
    steps = lengths.pop() if lengths else 0
    return [
        ReplaySample(
            info=info,
            data=pack([np.asarray(column[step], column.dtype) for column in columns]),
        )
        for step in range(steps)
    ]


def _packer(signature: Any) -> Any:
    if signature is None:
        return list
    from reverb_py._codec.nest import unflatten_as

    def pack(values: Sequence[Any]) -> Any:
        return unflatten_as(signature, list(values))

    return pack
