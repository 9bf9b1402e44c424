"""Sampled frequencies match the expected distributions (chi-square, fixed seeds).

Each test draws 100,000 samples with a seeded generator from the structure behind a
selector (both twins) and from a whole Table, and rejects at the 0.1% level. The seeds are
fixed, so each test gives the same answer on every run; a wrong distribution fails.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from scipy import stats

from reverb_py import rate_limiters, selectors
from reverb_py.table import Item, Table

DRAWS = 100_000
ALPHA = 1e-3


def chi_square_p(counts: dict[int, int], expected: dict[int, float]) -> float:
    keys = sorted(expected)
    observed = np.array([counts.get(k, 0) for k in keys], dtype=float)
    wanted = np.array([expected[k] for k in keys], dtype=float) * observed.sum()
    return float(stats.chisquare(observed, wanted).pvalue)


def draw(structure, seed: int, draws: int = DRAWS) -> tuple[dict[int, int], dict[int, float]]:
    rng = random.Random(seed)
    counts: dict[int, int] = {}
    reported: dict[int, float] = {}
    for _ in range(draws):
        key, probability = structure.sample(rng.random())
        counts[key] = counts.get(key, 0) + 1
        reported[key] = probability
    return counts, reported


@pytest.mark.slow
def test_uniform_frequencies(impl) -> None:
    structure = impl.IndexedSet()
    rng = random.Random(0)
    keys = list(dict.fromkeys(rng.getrandbits(64) for _ in range(50)))
    for key in keys:
        structure.insert(key, 123.0)
    # Delete a few to exercise swap-with-last.
    for key in keys[:5]:
        structure.delete(key)
    live = keys[5:]
    counts, reported = draw(structure, seed=1)
    assert set(counts) == set(live)
    assert all(p == 1 / len(live) for p in reported.values())
    assert chi_square_p(counts, {k: 1 / len(live) for k in live}) > ALPHA


@pytest.mark.slow
@pytest.mark.parametrize("exponent", [0.0, 0.5, 1.0, 2.0])
def test_prioritized_frequencies(impl, exponent: float) -> None:
    structure = impl.SumTree(exponent)
    priorities = {k: float(p) for k, p in enumerate([0.0, 1.0, 2.0, 3.0, 0.5, 0.0, 10.0, 4.0])}
    for key, priority in priorities.items():
        structure.insert(key, priority)
    weights = {k: (0.0 if p == 0.0 else p**exponent) for k, p in priorities.items()}
    total = sum(weights.values())
    expected = {k: w / total for k, w in weights.items() if w > 0}
    counts, reported = draw(structure, seed=2)
    assert set(counts) == set(expected)  # Zero priorities are never sampled.
    for key, probability in reported.items():
        assert probability == pytest.approx(expected[key], rel=1e-12)
    assert chi_square_p(counts, expected) > ALPHA


@pytest.mark.slow
def test_prioritized_all_zero_falls_back_to_uniform(impl) -> None:
    structure = impl.SumTree(1.0)
    for key in range(10):
        structure.insert(key, 0.0)
    counts, reported = draw(structure, seed=3)
    assert set(reported.values()) == {0.1}
    assert chi_square_p(counts, dict.fromkeys(range(10), 0.1)) > ALPHA


@pytest.mark.slow
def test_prioritized_after_updates_and_deletes(impl) -> None:
    structure = impl.SumTree(0.8)
    rng = random.Random(4)
    priorities: dict[int, float] = {}
    for key in range(3000):
        priorities[key] = rng.choice([0.0, rng.random() * 10])
        structure.insert(key, priorities[key])
    for key in range(0, 3000, 3):
        structure.delete(key)
        del priorities[key]
    for key in list(priorities)[::5]:
        priorities[key] = rng.random() * 100
        structure.update(key, priorities[key])
    # Bucket keys into 20 groups so every cell has a large expected count.
    weights = {k: (0.0 if p == 0.0 else p**0.8) for k, p in priorities.items()}
    total = sum(weights.values())
    counts, _ = draw(structure, seed=5)
    assert all(weights[k] > 0 for k in counts)
    groups = {k: i % 20 for i, k in enumerate(sorted(weights))}
    grouped_counts: dict[int, int] = {}
    grouped_expected: dict[int, float] = {}
    for key, weight in weights.items():
        grouped_expected[groups[key]] = grouped_expected.get(groups[key], 0.0) + weight / total
        grouped_counts[groups[key]] = grouped_counts.get(groups[key], 0) + counts.get(key, 0)
    assert chi_square_p(grouped_counts, grouped_expected) > ALPHA


@pytest.mark.slow
@pytest.mark.parametrize(
    "sampler, priorities",
    [
        (selectors.Uniform(), [1.0, 2.0, 3.0, 4.0]),
        (selectors.Prioritized(1.0), [1.0, 2.0, 3.0, 4.0]),
        (selectors.Prioritized(0.0), [0.0, 2.0, 8.0, 0.5]),
    ],
)
async def test_table_sampling_frequencies(sampler, priorities) -> None:
    table = Table("t", sampler, selectors.Fifo(), 100, rate_limiters.MinSize(1), seed=6)
    for key, priority in enumerate(priorities):
        await table.insert(Item(key, priority))
    counts: dict[int, int] = {}
    for _ in range(DRAWS // 1000):
        for record in await table.sample(1000):
            counts[record.item.key] = counts.get(record.item.key, 0) + 1
    if isinstance(sampler, selectors.Uniform):
        expected = {k: 1 / len(priorities) for k in range(len(priorities))}
    else:
        e = sampler.priority_exponent
        weights = [0.0 if p == 0 else p**e for p in priorities]
        expected = {k: w / sum(weights) for k, w in enumerate(weights) if w > 0}
    assert set(counts) == set(expected)
    assert chi_square_p(counts, expected) > ALPHA


@pytest.mark.slow
def test_the_check_rejects_a_wrong_distribution(impl) -> None:
    # Guards the guard: frequencies drawn with exponent 1.0 must fail a check that
    # expects exponent 0.8.
    structure = impl.SumTree(1.0)
    priorities = [1.0, 2.0, 3.0, 4.0]
    for key, priority in enumerate(priorities):
        structure.insert(key, priority)
    weights = [p**0.8 for p in priorities]
    counts, _ = draw(structure, seed=7)
    assert chi_square_p(counts, {k: w / sum(weights) for k, w in enumerate(weights)}) < ALPHA
