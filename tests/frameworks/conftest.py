"""The framework tests: TensorFlow, PyTorch and JAX beside reverb_py.

They run in `.venv-frameworks` (``make test-frameworks``, which sets
``REVERB_PY_FRAMEWORKS_TESTS``); every other run does not collect this folder. Every test
here is marked ``frameworks``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

#: Warnings the frameworks raise about themselves at import or first use; the suite
#: otherwise turns every warning into an error.
FRAMEWORK_WARNINGS = (
    "ignore::DeprecationWarning:tensorflow.*",
    "ignore::DeprecationWarning:keras.*",
    "ignore::DeprecationWarning:jax.*",
    "ignore::DeprecationWarning:torch.*",
    "ignore::FutureWarning:tensorflow.*",
)


def pytest_configure(config: pytest.Config) -> None:
    for line in FRAMEWORK_WARNINGS:
        config.addinivalue_line("filterwarnings", line)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.frameworks)
