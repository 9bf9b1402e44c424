"""Small helpers shared by tests."""

from __future__ import annotations

import asyncio
import importlib
import os
import types
from collections.abc import Callable

import pytest


async def until(condition: Callable[[], bool], max_turns: int = 1000) -> None:
    """Lets other tasks run until ``condition()`` holds; fails after ``max_turns`` turns.

    Each turn is one pass of the event loop, so this waits for work that is ready to run,
    never for wall-clock time.
    """
    for _ in range(max_turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"condition still false after {max_turns} loop turns")


def compiled_module(name: str) -> types.ModuleType:
    """``reverb_py._speedups.<name>``, the compiled twin.

    Skips the test when the run turned the compiled twins off
    (``REVERB_PY_NO_EXTENSIONS``) or the module was not built; fails instead when the
    run requires them (``REVERB_PY_REQUIRE_SPEEDUPS``).
    """
    if os.environ.get("REVERB_PY_NO_EXTENSIONS"):
        pytest.skip("REVERB_PY_NO_EXTENSIONS is set: the compiled twins are off")
    full_name = f"reverb_py._speedups.{name}"
    try:
        return importlib.import_module(full_name)
    except ModuleNotFoundError as error:
        if error.name != full_name:
            raise
        if os.environ.get("REVERB_PY_REQUIRE_SPEEDUPS"):
            pytest.fail(f"compiled module required but not built: {full_name}")
        pytest.skip(f"compiled module not built: {full_name}")
