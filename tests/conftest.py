"""Shared fixtures: the ``impl`` fixture runs structure (and record) tests over both twins."""

from __future__ import annotations

import asyncio
import importlib
import os
import types
from collections.abc import AsyncIterator

import pytest

STRUCTURE_MODULES = {
    "SumTree": "sum_tree",
    "IndexedHeap": "indexed_heap",
    "OrderedKeys": "ordered_keys",
    "IndexedSet": "indexed_set",
    "RateLimiterState": "rate_limiter_state",
    "Item": "records",
    "Chunk": "records",
    "LiveChunks": "records",
}

REQUIRE_SPEEDUPS = bool(os.environ.get("REVERB_PY_REQUIRE_SPEEDUPS"))

# The interop suite needs dm-reverb in its own environment; `make interop` provides it
# and runs that suite on its own.
collect_ignore = [] if os.environ.get("REVERB_PY_DM_REVERB_PYTHON") else ["interop"]
# TensorFlow, PyTorch and JAX live in their own environment (`make test-frameworks`).
if not os.environ.get("REVERB_PY_FRAMEWORKS_TESTS"):
    collect_ignore.append("frameworks")
# Ray lives in its own environment (`make test-ray`).
if not os.environ.get("REVERB_PY_RAY_TESTS"):
    collect_ignore.append("ray")
# Headless Chromium (`make test-browser`).
if not os.environ.get("REVERB_PY_BROWSER_TESTS"):
    collect_ignore.append("browser")
NO_EXTENSIONS = bool(os.environ.get("REVERB_PY_NO_EXTENSIONS"))


def load_impl(kind: str) -> types.SimpleNamespace:
    """Returns a namespace with every structure class of one implementation.

    Args:
      kind: ``"py"`` for the pure twins, ``"cy"`` for the compiled ones.

    Raises:
      ModuleNotFoundError: the compiled modules are not built (``cy`` only).
    """
    package = "reverb_py._pure" if kind == "py" else "reverb_py._speedups"
    namespace = types.SimpleNamespace(kind=kind)
    for class_name, module_name in STRUCTURE_MODULES.items():
        module = importlib.import_module(f"{package}.{module_name}")
        setattr(namespace, class_name, getattr(module, class_name))
    return namespace


@pytest.fixture(params=["py", "cy"])
def impl(request: pytest.FixtureRequest) -> types.SimpleNamespace:
    """Both implementations of the hot structures, with ids ``py`` and ``cy``.

    The ``cy`` case skips when the extensions are not built or are switched off with
    ``REVERB_PY_NO_EXTENSIONS``, and fails instead when ``REVERB_PY_REQUIRE_SPEEDUPS`` is
    set (as ``make test`` does for the compiled run).
    """
    if request.param == "cy":
        if NO_EXTENSIONS:
            pytest.skip("REVERB_PY_NO_EXTENSIONS is set: the compiled twins are off")
        try:
            return load_impl("cy")
        except ModuleNotFoundError as error:
            if REQUIRE_SPEEDUPS:
                pytest.fail(f"compiled structures required but not built: {error}")
            pytest.skip(f"compiled structures not built: {error}")
    return load_impl("py")


@pytest.fixture
async def loop_errors() -> AsyncIterator[list[dict[str, object]]]:
    """Fails the test when an exception reached the event loop's exception handler.

    Async tests that start background work request this fixture.
    """
    errors: list[dict[str, object]] = []
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    yield errors
    loop.set_exception_handler(previous)
    if errors:
        pytest.fail(f"unhandled errors in the event loop: {errors!r}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a pure run (``REVERB_PY_NO_EXTENSIONS``), the compiled cases are deselected.

    They ran in the compiled run; listing them as skipped would only add noise.
    """
    if not NO_EXTENSIONS:
        return
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("impl") == "cy":
            dropped.append(item)
        else:
            keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
