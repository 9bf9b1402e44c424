"""dm-reverb's ``PatternDataset`` and reverb_py's pattern engine give the same items.

reverb_py's ``PatternDataset`` needs TensorFlow, which this environment does not have;
its engine (``reverb_py._writer.local_patterns``, the StructuredWriter's own, which the
dataset runs step by step) is compared here with dm-reverb's op on the same steps and
configs (serialised by reverb_py's ``structured_writer``). The dataset itself is tested
against a StructuredWriter in ``tests/frameworks/test_pattern_dataset.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from reverb_py import structured_writer as sw
from reverb_py._codec import nest
from reverb_py._writer.local_patterns import LocalPatterns, with_history_conditions

from ._sides import annotated_call

STEPS = 13
EPISODE = 5


def _ref() -> Any:
    return sw.create_reference_step({"index": None, "obs": None})


def _cases() -> dict[str, Any]:
    ref = _ref()
    return {
        "window3": sw.create_config({"index": ref["index"][-3:], "obs": ref["obs"][-3:]}, "t"),
        "every_other": sw.create_config(
            {"index": ref["index"][-1]}, "t", conditions=[sw.Condition.step_index() % 2 == 0]
        ),
        "episode_end": sw.create_config(
            {"index": ref["index"][-2:]}, "t", conditions=[sw.Condition.is_end_episode()]
        ),
        # A stride that divides the slice: dm-reverb's signature of x[-5::2] says 2
        # steps (floor division) and its dataset fails on the 3 it makes.
        "strided": sw.create_config({"index": ref["index"][-4::2]}, "t"),
        "since_applied": sw.create_config(
            {"obs": ref["obs"][-1]}, "t", conditions=[sw.Condition.steps_since_applied() >= 3]
        ),
    }


def ours(config: Any, respect: bool) -> list[Any]:
    pattern = sw.unpack_pattern(config)
    patterns = LocalPatterns(with_history_conditions([config]), respect)
    items = []
    for index in range(STEPS):
        step = [np.int64(index), np.full(2, index, np.float32)]  # flat: index, obs
        end = index % EPISODE == EPISODE - 1
        items.extend(nest.unflatten_as(pattern, columns) for columns in patterns.append(step, end))
    return items


@pytest.mark.parametrize("respect", [True, False], ids=["respect", "across"])
@pytest.mark.parametrize("case", sorted(_cases()))
def test_dm_reverbs_pattern_dataset_makes_the_same_items(
    dm_client: Any, case: str, respect: bool
) -> None:
    config = _cases()[case]
    where = f"[patterns] dm-reverb PatternDataset({case}, respect={respect})"
    theirs = annotated_call(
        where,
        dm_client,
        "pattern_dataset_items",
        configs=[config.SerializeToString()],
        num_steps=STEPS,
        episode_length=EPISODE,
        respect_episode_boundaries=respect,
    )
    mine = ours(config, respect)
    assert mine, f"{where}: reverb_py made no items"
    assert len(mine) == len(theirs), f"{where}: {len(mine)} items vs dm-reverb's {len(theirs)}"
    for index, (a, b) in enumerate(zip(mine, theirs)):
        assert sorted(a) == sorted(b), f"{where}: item {index} keys"
        for key in a:
            assert np.asarray(a[key]).dtype == np.asarray(b[key]).dtype, f"{where}: {key}"
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{where}: item {index}")
