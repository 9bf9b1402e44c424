"""Assertions shared by the interop tests; each message starts with the caller's ``where``."""

from __future__ import annotations

from typing import Any

from . import _scenarios as S


def check_info(
    where: str,
    sample: dict,
    *,
    table_size: int,
    priority: float,
    times_sampled: int,
    probability: float = 1.0,
    key: int | None = None,
) -> None:
    info = sample["info"]
    expected = {
        "table_size": table_size,
        "priority": priority,
        "times_sampled": times_sampled,
    }
    got = {name: info[name] for name in expected}
    assert got == expected, f"{where}: SampleInfo {info}, expected {expected}"
    assert S.close(info["probability"], probability), (
        f"{where}: SampleInfo.probability {info['probability']!r}, expected {probability!r}"
    )
    if key is not None:
        assert info["key"] == key, f"{where}: SampleInfo.key {info['key']}, expected {key}"
    types = sample["info_types"]
    expected_types = {
        "key": "int",
        "probability": "float",
        "table_size": "int",
        "priority": "float",
        "times_sampled": "int",
    }
    assert types == expected_types, f"{where}: SampleInfo field types {types}"


def check_leaf_types(where: str, sample: dict, paths: list) -> None:
    """Every data leaf must be an ``np.ndarray``, as dm-reverb hands out."""
    types = S.flatten(sample["data_types"])
    wrong = {str(path): t for path, t in zip(paths, types) if t != "numpy.ndarray"}
    assert not wrong, f"{where}: data leaves that are not np.ndarray: {wrong}"


def check_nest(where: str, got: Any, expected: Any, list_type: type = list) -> None:
    """``got`` has the structure of the ``sig`` signature (``list_type``: what its list
    becomes; TF datasets turn lists into tuples) and ``expected``'s values."""
    assert isinstance(got, dict), f"{where}: data is {type(got).__name__}, expected dict"
    assert sorted(got) == sorted(expected), f"{where}: keys {sorted(got)}"
    assert isinstance(got["pair"], tuple) and not hasattr(got["pair"], "_fields"), (
        f"{where}: 'pair' is {type(got['pair']).__name__}, expected tuple"
    )
    assert type(got["text"]) is list_type, f"{where}: 'text' is {type(got['text']).__name__}"
    step = got["step"]
    assert type(step).__name__ == "Step" and step._fields == ("reward", "discount"), (
        f"{where}: 'step' is {type(step).__name__} {getattr(step, '_fields', None)}"
    )
    S.assert_flat_equal(where, S.flatten(got), S.flatten(expected), S.flat_paths(S.SIG_LAYOUT))
