# ruff: noqa: E402 (the alias is installed before anything imports reverb)
"""An Acme 0.4 program as its users write it, made to run on reverb_py by its first lines.

``reverb_py.install_as_reverb()`` at the top, then Acme and ``import reverb`` as usual (the
test runs it without ``REVERB_PY_AS_REVERB`` in the environment). A server with a table
of Acme's ``NStepTransitionAdder.signature``; two episodes of n-step transitions are
written into it, and ``acme.datasets.make_reverb_dataset`` samples them in batches: every
value is checked against transitions computed here from the episodes' steps.

``python acme_replay.py adder`` has Acme's ``NStepTransitionAdder`` write them, from the
timesteps (Acme 0.4.0's adders ask ``Client.trajectory_writer`` for
``get_signature_timeout_ms``, which Reverb dropped in 0.10); ``python acme_replay.py
writer`` writes the same transitions with ``reverb.Client.trajectory_writer`` and checks
the reading side alone. Prints a line per check and exits non-zero at the first failure.
"""

from __future__ import annotations

import reverb_py

reverb_py.install_as_reverb()

import sys
from typing import Any

import dm_env
import numpy as np
import reverb
import tree
from acme import datasets, specs, types
from acme.adders import reverb as adders

TABLE = "transitions"
N_STEP = 2
DISCOUNT = 0.5
EPISODE_LENGTHS = (5, 3)  # actions per episode
BATCH_SIZE = 3
BATCHES = 60


def environment_spec() -> specs.EnvironmentSpec:
    return specs.EnvironmentSpec(
        observations=specs.Array((2,), np.float32, "observation"),
        actions=specs.DiscreteArray(4, name="action"),
        rewards=specs.Array((), np.float32, "reward"),
        discounts=specs.BoundedArray((), np.float32, 0.0, 1.0, "discount"),
    )


def episode(number: int, length: int) -> list[dm_env.TimeStep]:
    """The ``length + 1`` timesteps of an episode; observations name episode and step."""
    steps = []
    for index in range(length + 1):
        observation = np.array([100 * number + index, -index], dtype=np.float32)
        if index == 0:
            steps.append(dm_env.restart(observation))
            continue
        # The spec's float32 reward and discount (dm_env's helpers give Python floats).
        last = index == length
        steps.append(
            dm_env.TimeStep(
                step_type=dm_env.StepType.LAST if last else dm_env.StepType.MID,
                reward=np.float32(index),
                discount=np.float32(0.0 if last else 1.0),
                observation=observation,
            )
        )
    return steps


def action(number: int, index: int) -> np.ndarray:
    return np.array((number + index) % 4, dtype=np.int32)


def expected_transitions(number: int, length: int) -> list[types.Transition]:
    """Acme's n-step transitions of an episode, from their definition.

    After the ``k``-th action the adder writes the window of actions ``max(0, k - n)`` to
    ``k``; at the episode's end, the shorter windows that end at its last step. Over the
    window's actions ``f .. l - 1``, the return sums ``r_{i+1}`` times ``DISCOUNT`` and the
    environment's discounts ``d_{f+1} .. d_i`` before it; the discount is the product of
    ``DISCOUNT ** (l - f - 1)`` and ``d_{f+1} .. d_l``.
    """
    steps = episode(number, length)
    windows = [(max(0, last - N_STEP), last) for last in range(1, length + 1)]
    windows += [(first, length) for first in range(length - N_STEP + 1, length)]
    transitions = []
    for first, last in windows:
        total, factor = 0.0, 1.0
        for index in range(first, last):
            total += factor * float(steps[index + 1].reward)
            factor *= DISCOUNT * float(steps[index + 1].discount)
        discount = DISCOUNT ** (last - first - 1)
        for index in range(first + 1, last + 1):
            discount *= float(steps[index].discount)
        transitions.append(
            types.Transition(
                observation=steps[first].observation,
                action=action(number, first),
                reward=np.float32(total),
                discount=np.float32(discount),
                next_observation=steps[last].observation,
                extras=(),
            )
        )
    return transitions


def all_expected() -> list[types.Transition]:
    return [
        transition
        for number, length in enumerate(EPISODE_LENGTHS)
        for transition in expected_transitions(number, length)
    ]


def check(condition: bool, message: str) -> None:
    if not condition:
        print(f"FAILED: {message}", file=sys.stderr)
        sys.exit(1)


def write_with_adder(client: reverb.Client) -> None:
    adder = adders.NStepTransitionAdder(
        client, n_step=N_STEP, discount=DISCOUNT, priority_fns={TABLE: None}
    )
    for number, length in enumerate(EPISODE_LENGTHS):
        steps = episode(number, length)
        adder.add_first(steps[0])
        for index in range(length):
            adder.add(action(number, index), steps[index + 1])
    adder.reset()


def write_with_writer(client: reverb.Client) -> None:
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for transition in all_expected():
            writer.append(transition)
            item: Any = tree.map_structure(lambda column: column[-1], writer.history)
            writer.create_item(TABLE, priority=1.0, trajectory=item)
        writer.flush()


def read_back(address: str) -> None:
    """Uniform batches until every transition was seen; each must be one written."""
    expected = {
        (float(want.observation[0]), float(want.next_observation[0])): want
        for want in all_expected()
    }
    dataset = datasets.make_reverb_dataset(
        server_address=address, batch_size=BATCH_SIZE, table=TABLE, num_parallel_calls=2
    )
    seen = set()
    # 180 uniform samples of 10 transitions: all are seen but with odds under 1e-7.
    for sample in dataset.take(BATCHES).as_numpy_iterator():
        check(isinstance(sample, reverb.ReplaySample), f"sample of type {type(sample)}")
        data = sample.data
        # The table's signature gives a namedtuple of Transition's name and fields.
        check(
            type(data).__name__ == "Transition" and data._fields == types.Transition._fields,
            f"data of type {type(data)}",
        )
        check(data.observation.shape == (BATCH_SIZE, 2), f"{data.observation.shape}")
        for row in range(BATCH_SIZE):
            key = (float(data.observation[row, 0]), float(data.next_observation[row, 0]))
            check(key in expected, f"a transition from {key[0]} to {key[1]} was never written")
            seen.add(key)
            want = expected[key]
            for field in types.Transition._fields:
                if field == "extras":
                    continue
                value, wanted = getattr(data, field)[row], getattr(want, field)
                check(
                    value.dtype == np.asarray(wanted).dtype and np.allclose(value, wanted),
                    f"transition {key}: {field} {value!r}, expected {wanted!r}",
                )
    check(len(seen) == len(expected), f"only {sorted(seen)} of {len(expected)} were sampled")
    print(f"ok: {BATCHES} batches of {BATCH_SIZE} read back, all {len(seen)} transitions seen")


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "adder"
    check(mode in ("adder", "writer"), f"unknown mode {mode!r}")
    print(f"reverb module: {reverb.__name__} {reverb.__file__}")
    signature = adders.NStepTransitionAdder.signature(environment_spec())
    table = reverb.Table(
        TABLE,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=100,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=signature,
    )
    # No port: a free one (reverb_py binds port 0 on localhost, its default host).
    server = reverb.Server([table], port=None)
    try:
        address = f"localhost:{server.port}"
        client = reverb.Client(address)
        if mode == "adder":
            write_with_adder(client)
        else:
            write_with_writer(client)
        size = client.server_info()[TABLE].current_size
        check(size == len(all_expected()), f"the table holds {size} items")
        print(f"ok: {size} transitions written ({mode})")
        read_back(address)
    finally:
        server.stop()
    print("ok: server stopped")


if __name__ == "__main__":
    main()
