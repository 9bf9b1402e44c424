"""Small helpers shared by tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


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
