"""Operations only dm-reverb (with TensorFlow) can do; run in the dm-reverb worker.

Never imported by the test process.
"""

from __future__ import annotations

import glob
import os
from typing import Any

import _ops
import numpy as np
import reverb
import tensorflow as tf
from google.protobuf import json_format
from reverb.cc import schema_pb2
from reverb.cc.checkpointing import checkpoint_pb2


def _to_numpy(tensor: Any) -> np.ndarray:
    """A tensor as numpy; strings as object arrays of bytes (also 0-d ones)."""
    if tensor.dtype == tf.string:
        return np.asarray(tensor.numpy(), dtype=object)
    return tensor.numpy()


def _tensor_sample_to_json(sample: Any) -> dict:
    info = sample.info
    return {
        "info": {field: getattr(info, field).numpy().item() for field in info._fields},
        "info_dtypes": {field: getattr(info, field).dtype.name for field in info._fields},
        "data": tf.nest.map_structure(_to_numpy, sample.data),
    }


def dataset_sample(
    address: str,
    table: str,
    num_samples: int,
    max_in_flight_samples_per_worker: int = 1,
    kind: str = "trajectory",
    rate_limiter_timeout_ms: int = -1,
    max_samples: int = -1,
    num_workers_per_iterator: int = -1,
) -> list:
    """Takes up to ``num_samples`` from ``reverb.{Trajectory,Timestep}Dataset``
    built with ``from_table_signature``; fewer if the dataset ends."""
    cls = reverb.TrajectoryDataset if kind == "trajectory" else reverb.TimestepDataset
    dataset = cls.from_table_signature(
        server_address=address,
        table=table,
        max_in_flight_samples_per_worker=max_in_flight_samples_per_worker,
        num_workers_per_iterator=num_workers_per_iterator,
        rate_limiter_timeout_ms=rate_limiter_timeout_ms,
        get_signature_timeout_secs=30,
        max_samples=max_samples,
    )
    return [_tensor_sample_to_json(sample) for sample in dataset.take(num_samples)]


def dataset_sample_with_types(
    address: str,
    table: str,
    dtypes: list,
    shapes: list,
    num_samples: int,
    rate_limiter_timeout_ms: int = -1,
) -> list:
    """``reverb.TrajectoryDataset`` with explicit flat dtypes / shapes (no signature)."""
    dataset = reverb.TrajectoryDataset(
        server_address=address,
        table=table,
        dtypes=tuple(tf.as_dtype(d) for d in dtypes),
        shapes=tuple(tf.TensorShape(s) for s in shapes),
        max_in_flight_samples_per_worker=1,
        rate_limiter_timeout_ms=rate_limiter_timeout_ms,
    )
    return [_tensor_sample_to_json(sample) for sample in dataset.take(num_samples)]


def _records(path: str) -> list[bytes]:
    """The records of a TFRecord file, ZLIB first, then uncompressed (as Reverb loads)."""
    for compression in ("ZLIB", ""):
        try:
            return [
                record.numpy()
                for record in tf.data.TFRecordDataset(path, compression_type=compression)
            ]
        except tf.errors.DataLossError:
            continue
    raise ValueError(f"{path} is neither a ZLIB nor an uncompressed TFRecord file")


def parse_checkpoint(root: str) -> dict:
    """Reads the newest complete checkpoint under ``root`` with TensorFlow's reader and
    dm-reverb's protos: tables, items and chunk keys, as plain JSON."""
    candidates = sorted(
        path
        for path in glob.glob(os.path.join(root, "*"))
        if os.path.exists(os.path.join(path, "DONE"))
    )
    if not candidates:
        raise FileNotFoundError(f"no complete checkpoint under {root}: {os.listdir(root)}")
    directory = candidates[-1]
    files = sorted(os.listdir(directory))
    tables = []
    for record in _records(os.path.join(directory, "tables.tfrecord")):
        message = checkpoint_pb2.PriorityTableCheckpoint.FromString(record)
        tables.append(
            {
                "table_name": message.table_name,
                "max_size": int(message.max_size),
                "max_times_sampled": int(message.max_times_sampled),
                "rate_limiter": {
                    "samples_per_insert": message.rate_limiter.samples_per_insert,
                    "min_diff": message.rate_limiter.min_diff,
                    "max_diff": message.rate_limiter.max_diff,
                    "min_size_to_sample": int(message.rate_limiter.min_size_to_sample),
                    "sample_count": int(message.rate_limiter.sample_count),
                    "insert_count": int(message.rate_limiter.insert_count),
                    "delete_count": int(message.rate_limiter.delete_count),
                },
                "sampler": _ops.options_to_json(message.sampler),
                "remover": _ops.options_to_json(message.remover),
                "num_deleted_episodes": int(message.num_deleted_episodes),
                "num_unique_samples": int(message.num_unique_samples),
                "has_signature": message.HasField("signature"),
                "num_deprecated_items": len(message.deprecated_items),
            }
        )
    items = []
    for record in _records(os.path.join(directory, "items.tfrecord")):
        item = schema_pb2.PrioritizedItem.FromString(record)
        items.append(
            {
                "key": int(item.key),
                "table": item.table,
                "priority": item.priority,
                "times_sampled": int(item.times_sampled),
                "inserted_at_ns": item.inserted_at.seconds * 10**9 + item.inserted_at.nanos,
                "flat_trajectory": json_format.MessageToDict(
                    item.flat_trajectory, preserving_proto_field_name=True
                ),
            }
        )
    chunks = []
    for record in _records(os.path.join(directory, "chunks.tfrecord")):
        chunk = schema_pb2.ChunkData.FromString(record)
        chunks.append(
            {
                "chunk_key": int(chunk.chunk_key),
                "episode_id": int(chunk.sequence_range.episode_id),
                "start": int(chunk.sequence_range.start),
                "end": int(chunk.sequence_range.end),
                "num_tensors": len(chunk.data.tensors),
                "dtypes": [tf.dtypes.as_dtype(t.dtype).name for t in chunk.data.tensors],
            }
        )
    return {
        "directory": directory,
        "files": files,
        "tables": tables,
        "items": items,
        "chunks": chunks,
    }


def pattern_dataset_items(
    configs: list, num_steps: int, episode_length: int, respect_episode_boundaries: bool
) -> list:
    """dm-reverb's ``PatternDataset`` over steps ``{"index": i, "obs": [i, i]}``
    (episodes of ``episode_length``) with the serialised ``configs``: every item."""
    from reverb import pattern_dataset, structured_writer

    steps = tf.data.Dataset.range(num_steps).map(
        lambda i: {"index": i, "obs": tf.cast(tf.fill([2], i), tf.float32)}
    )
    dataset = pattern_dataset.PatternDataset(
        input_dataset=steps,
        configs=[structured_writer.Config.FromString(bytes(config)) for config in configs],
        respect_episode_boundaries=respect_episode_boundaries,
        is_end_of_episode=lambda step: tf.equal(step["index"] % episode_length, episode_length - 1),
    )
    return [tf.nest.map_structure(_to_numpy, item) for item in dataset]
