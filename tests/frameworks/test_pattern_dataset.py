"""reverb_py.PatternDataset: StructuredWriter patterns over a tf.data dataset of steps,
checked against what a StructuredWriter writing the same steps puts in a table."""

from __future__ import annotations

import numpy as np
import pytest

import reverb_py as reverb
from reverb_py import structured_writer as sw

tf = pytest.importorskip("tensorflow")

EPISODE = 5
STEPS = 12


def steps_dataset() -> tf.data.Dataset:
    def step(index: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"obs": tf.cast(tf.fill([2], index), tf.float32), "index": index}

    return tf.data.Dataset.range(STEPS).map(step)


def is_last(step: dict[str, tf.Tensor]) -> tf.Tensor:
    return tf.equal(step["index"] % EPISODE, EPISODE - 1)


def window_config(table: str = "t", *conditions: object) -> object:
    ref = sw.create_reference_step({"obs": None, "index": None})
    pattern = {"obs": ref["obs"][-3:], "index": ref["index"][-3:]}
    return sw.create_config(pattern, table, conditions=list(conditions))


def test_windows_within_episodes() -> None:
    dataset = reverb.PatternDataset(steps_dataset(), [window_config()], True, is_last)
    assert dataset.element_spec["obs"] == tf.TensorSpec([3, 2], tf.float32)
    assert dataset.element_spec["index"] == tf.TensorSpec([3], tf.int64)
    windows = [item["index"].tolist() for item in dataset.as_numpy_iterator()]
    # Episodes of 5 steps (0-4, 5-9, 10-11): windows of 3 never cross them.
    assert windows == [[0, 1, 2], [1, 2, 3], [2, 3, 4], [5, 6, 7], [6, 7, 8], [7, 8, 9],
                       ]  # fmt: skip
    obs = [item["obs"] for item in dataset.as_numpy_iterator()]
    np.testing.assert_array_equal(obs[0], [[0, 0], [1, 1], [2, 2]])


def test_windows_across_episodes_when_not_respected() -> None:
    dataset = reverb.PatternDataset(steps_dataset(), [window_config()], False, is_last)
    windows = [item["index"].tolist() for item in dataset.as_numpy_iterator()]
    assert windows == [[i, i + 1, i + 2] for i in range(STEPS - 2)]


def test_conditions_and_the_end_of_episode() -> None:
    ref = sw.create_reference_step({"obs": None, "index": None})
    every_other = sw.create_config(
        {"index": ref["index"][-1]}, "t", conditions=[sw.Condition.step_index() % 2 == 0]
    )
    dataset = reverb.PatternDataset(steps_dataset(), [every_other], True, is_last)
    assert dataset.element_spec["index"] == tf.TensorSpec([], tf.int64)
    got = [int(item["index"]) for item in dataset.as_numpy_iterator()]
    # Step indices restart with each episode: 0, 2, 4 of each.
    assert got == [0, 2, 4, 5, 7, 9, 10]
    at_end = sw.create_config(
        {"index": ref["index"][-1]}, "t", conditions=[sw.Condition.is_end_episode()]
    )
    ends = reverb.PatternDataset(steps_dataset(), [at_end], True, is_last)
    assert [int(item["index"]) for item in ends.as_numpy_iterator()] == [4, 9]


def test_the_same_items_as_a_structured_writer_writes() -> None:
    configs = [window_config()]
    table = reverb.Table.queue("t", 100)  # each item read once, in order
    with reverb.Server([table], port=0) as server:
        client = server.localhost_client()
        with client.structured_writer(configs) as writer:
            for step in steps_dataset().as_numpy_iterator():
                writer.append(step)
                if step["index"] % EPISODE == EPISODE - 1:
                    writer.end_episode(clear_buffers=True)
            writer.flush()
        count = server.localhost_client().server_info()["t"].current_size
        written = [
            sample.data[0].tolist()  # flat columns: index, obs
            for sample in client.sample("t", count, emit_timesteps=False)
        ]
    dataset = reverb.PatternDataset(steps_dataset(), configs, True, is_last)
    assert [item["index"].tolist() for item in dataset.as_numpy_iterator()] == written


def test_with_info_and_bad_arguments() -> None:
    from reverb_py import pattern_dataset

    samples = pattern_dataset.pattern_dataset_with_info(
        steps_dataset(), [window_config()], True, is_last
    )
    first = next(iter(samples.as_numpy_iterator()))
    assert isinstance(first, reverb.ReplaySample)
    assert first.info.key == 0 and first.info.probability == 0
    assert first.data["index"].tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="is_end_of_episode"):
        reverb.PatternDataset(steps_dataset(), [window_config()], True, lambda step: step["obs"])
    with pytest.raises(ValueError, match="config"):
        reverb.PatternDataset(steps_dataset(), [], True, is_last)
    config = window_config()
    reverb.PatternDataset(steps_dataset(), [config], True, is_last)
    assert not config.conditions  # the caller's config is left as it was
