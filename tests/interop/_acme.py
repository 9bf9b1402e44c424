"""Acme's use of the StructuredWriter, written once for dm-reverb and reverb_py.

DeepMind Acme's ``StructuredAdder`` (``acme/adders/reverb/structured.py``) builds its
configs with ``create_n_step_transition_config`` and ``create_sequence_config`` and
writes an episode as: the first observation as a partial step; per transition the
action, reward, discount and extras completing the open step, then the next observation
as a new partial step; at the last transition a step of zeros completing the open step,
then ``end_episode``. The functions here do the same, taking the ``structured_writer``
module (``sw``) of either implementation; only the standard library and numpy are
imported, so the dm-reverb worker can use them too.

:func:`expected_n_step_items` and :func:`expected_sequence_items` give the items Acme's
adders stand for, worked out from the episode (not from the configs): the oracle of
the tests.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

# Acme's `reverb_base.Step` (and `Trajectory`, the same fields).
Step = collections.namedtuple(
    "Step", ["observation", "action", "reward", "discount", "start_of_episode", "extras"]
)

STEP_SPEC = Step(
    observation=np.zeros([2], np.float32),
    action=np.zeros([], np.int32),
    reward=np.zeros([], np.float32),
    discount=np.zeros([], np.float32),
    start_of_episode=np.zeros([], np.bool_),
    extras={"logp": np.zeros([], np.float64)},
)


def _map(fn: Any, structure: Any) -> Any:
    if isinstance(structure, Step):
        return Step(*[_map(fn, value) for value in structure])
    if isinstance(structure, dict):
        return {key: _map(fn, value) for key, value in structure.items()}
    return fn(structure)


# ------------------------------------------------------------------ configs (Acme's)


def create_sequence_config(
    sw: Any, step_spec: Any, sequence_length: int, period: int, table: str
) -> list[Any]:
    """Acme's ``create_sequence_config`` with ``EndBehavior.TRUNCATE``."""
    if sequence_length <= 0:
        raise ValueError(f"sequence_length must be > 0 but got {sequence_length}.")

    def pattern(n: int) -> Any:
        return sw.pattern_from_transform(
            step_spec, lambda step: Step(*_map(lambda x: x[-n:], step))
        )

    condition = sw.Condition
    base_config = sw.create_config(
        pattern=pattern(sequence_length),
        table=table,
        conditions=[
            condition.step_index() >= sequence_length - 1,
            condition.step_index() % period == (sequence_length - 1) % period,
        ],
    )
    end_of_episode_configs = []
    target = (sequence_length - 1) % period
    for x in range(period):
        if x == target:
            continue
        num_pad_steps = (target - x) % period
        unpadded_length = sequence_length - num_pad_steps
        end_of_episode_configs.append(
            sw.create_config(
                pattern=pattern(unpadded_length),
                table=table,
                conditions=[
                    condition.is_end_episode(),
                    condition.step_index() % period == x,
                    condition.step_index() >= sequence_length,
                ],
            )
        )
    for x in range(1, sequence_length):
        end_of_episode_configs.append(
            sw.create_config(
                pattern=pattern(x),
                table=table,
                conditions=[condition.is_end_episode(), condition.step_index() == x - 1],
            )
        )
    return [base_config, *end_of_episode_configs]


def create_n_step_transition_config(sw: Any, step_spec: Any, n_step: int, table: str) -> list[Any]:
    """Acme's ``create_n_step_transition_config``."""

    def make_pattern(n: int) -> Any:
        ref_step = sw.create_reference_step(step_spec)

        def get_first(x: Any) -> Any:
            return x[-(n + 1) : -n]

        def get_all(x: Any) -> Any:
            return x[-(n + 1) : -1]

        def get_first_and_last(x: Any) -> Any:
            return x[-(n + 1) :: n]

        return Step(
            observation=_map(get_first_and_last, ref_step.observation),
            action=_map(get_first, ref_step.action),
            reward=_map(get_all, ref_step.reward),
            discount=_map(get_all, ref_step.discount),
            start_of_episode=_map(get_first, ref_step.start_of_episode),
            extras=_map(get_first, ref_step.extras),
        )

    condition = sw.Condition
    start_of_episode_configs = [
        sw.create_config(
            pattern=make_pattern(n), table=table, conditions=[condition.step_index() == n]
        )
        for n in range(1, n_step)
    ]
    base_config = sw.create_config(pattern=make_pattern(n_step), table=table)
    end_of_episode_configs = [
        sw.create_config(
            pattern=make_pattern(n),
            table=table,
            conditions=[condition.is_end_episode(), condition.step_index() != n],
        )
        for n in range(n_step - 1, 0, -1)
    ]
    return [*start_of_episode_configs, base_config, *end_of_episode_configs]


def build_configs(sw: Any, kind: str, table: str, **params: int) -> list[Any]:
    """``kind`` ``"n_step"`` (``n_step=``) or ``"sequence"`` (``sequence_length=``,
    ``period=``), over :data:`STEP_SPEC`."""
    if kind == "n_step":
        return create_n_step_transition_config(sw, STEP_SPEC, params["n_step"], table)
    if kind == "sequence":
        return create_sequence_config(
            sw, STEP_SPEC, params["sequence_length"], params["period"], table
        )
    raise ValueError(f"unknown config kind {kind!r}")


# ------------------------------------------------------------------ episodes


def row(episode: int, t: int) -> Step:
    """The full row ``t`` of ``episode`` (its observation and the transition after it)."""
    return Step(
        observation=np.array([episode * 100 + t, -t], np.float32),
        action=np.int32(episode * 100 + t),
        reward=np.float32(t + 0.5),
        discount=np.float32(0.5 if t % 3 == 2 else 1.0),
        start_of_episode=np.bool_(t == 0),
        extras={"logp": np.float64(t / 10)},
    )


#: The adder's ``max_in_flight_items``: it flushes down to this many after each step.
MAX_IN_FLIGHT_ITEMS = 2


def _none_extras() -> dict:
    return {"logp": None}


def write_episode(writer: Any, episode: int, num_transitions: int) -> None:
    """Writes one episode of ``num_transitions`` transitions as Acme's adder does."""
    first = row(episode, 0)
    writer.append(
        Step(first.observation, None, None, None, first.start_of_episode, _none_extras()),
        partial_step=True,
    )
    current = None
    for t in range(num_transitions):
        data = row(episode, t)
        current = Step(None, data.action, data.reward, data.discount, None, data.extras)
        writer.append(current)
        following = row(episode, t + 1)
        writer.append(
            Step(following.observation, None, None, None, np.bool_(False), _none_extras()),
            partial_step=True,
        )
        writer.flush(MAX_IN_FLIGHT_ITEMS)
    if current is not None:
        writer.append(_map(lambda x: None if x is None else np.zeros_like(x), current))
    writer.end_episode(clear_buffers=True)


async def write_episode_async(writer: Any, episode: int, num_transitions: int) -> None:
    """:func:`write_episode` for an asyncio writer."""
    first = row(episode, 0)
    writer.append(
        Step(first.observation, None, None, None, first.start_of_episode, _none_extras()),
        partial_step=True,
    )
    current = None
    for t in range(num_transitions):
        data = row(episode, t)
        current = Step(None, data.action, data.reward, data.discount, None, data.extras)
        writer.append(current)
        following = row(episode, t + 1)
        writer.append(
            Step(following.observation, None, None, None, np.bool_(False), _none_extras()),
            partial_step=True,
        )
        await writer.flush(MAX_IN_FLIGHT_ITEMS)
    if current is not None:
        writer.append(_map(lambda x: None if x is None else np.zeros_like(x), current))
    await writer.end_episode(clear_buffers=True)


# ------------------------------------------------------------------ the oracle


def _written_row(episode: int, t: int, num_transitions: int) -> Step:
    """Row ``t`` as written: the last row has zeros for the transition fields."""
    data = row(episode, t)
    if t < num_transitions:
        return data
    zero = row(episode, 0)
    return Step(
        data.observation,
        np.zeros_like(zero.action),
        np.zeros_like(zero.reward),
        np.zeros_like(zero.discount),
        np.bool_(False),
        {"logp": np.zeros_like(zero.extras["logp"])},
    )


def _stack(rows: list[Step]) -> Step:
    return Step(
        observation=np.stack([r.observation for r in rows]),
        action=np.stack([r.action for r in rows]),
        reward=np.stack([r.reward for r in rows]),
        discount=np.stack([r.discount for r in rows]),
        start_of_episode=np.stack([r.start_of_episode for r in rows]),
        extras={"logp": np.stack([r.extras["logp"] for r in rows])},
    )


def _transition(episode: int, start: int, n: int, num_transitions: int) -> Step:
    rows = [_written_row(episode, t, num_transitions) for t in range(start, start + n + 1)]
    stacked = _stack(rows)
    return Step(
        observation=stacked.observation[[0, n]],
        action=stacked.action[:1],
        reward=stacked.reward[:n],
        discount=stacked.discount[:n],
        start_of_episode=stacked.start_of_episode[:1],
        extras={"logp": stacked.extras["logp"][:1]},
    )


def expected_n_step_items(n_step: int, episodes: list[int]) -> list[Step]:
    """The n-step transitions of the episodes, in insertion order (Acme's
    NStepTransitionAdder: a shorter transition from the first row while fewer than
    ``n_step`` transitions are available, and at the end the shorter transitions up to
    the last observation)."""
    result = []
    for episode, length in enumerate(episodes):
        for t in range(1, length + 1):
            n = min(t, n_step)
            result.append(_transition(episode, t - n, n, length))
        for n in range(n_step - 1, 0, -1):
            if n != length and length - n >= 0:
                result.append(_transition(episode, length - n, n, length))
    return result


def expected_sequence_items(sequence_length: int, period: int, episodes: list[int]) -> list[Step]:
    """The sequences of the episodes, in insertion order (Acme's SequenceAdder with
    TRUNCATE: one every ``period`` rows once ``sequence_length`` rows are there, then
    the truncated sequence that would have been next)."""
    result = []
    first = sequence_length - 1
    for episode, length in enumerate(episodes):
        rows = [_written_row(episode, t, length) for t in range(length + 1)]
        last = length  # The index of the last row.
        for t in range(first, last + 1, period):
            result.append(_stack(rows[t - first : t + 1]))
        if last < first or (last - first) % period:
            following = first if last < first else last + period - (last - first) % period
            result.append(_stack(rows[following - first : last + 1]))
    return result


def flat_item(item: Step) -> list[np.ndarray]:
    """An item's columns in flattened order (fields in order, dict keys sorted)."""
    return [
        item.observation,
        item.action,
        item.reward,
        item.discount,
        item.start_of_episode,
        item.extras["logp"],
    ]
