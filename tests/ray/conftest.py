"""The Ray tests: reverb_py servers as Ray actors on a local Ray cluster.

They run in `.venv-ray` (``make test-ray``, which sets ``REVERB_PY_RAY_TESTS``); every
other run does not collect this folder. Every test here is marked ``ray``. One local
cluster of 2 CPUs serves the session and is always shut down.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

#: Warnings Ray raises about itself at import or first use; the suite otherwise turns
#: every warning into an error.
RAY_WARNINGS = (
    "ignore::DeprecationWarning:ray.*",
    "ignore::FutureWarning:ray.*",
)


def pytest_configure(config: pytest.Config) -> None:
    for line in RAY_WARNINGS:
        config.addinivalue_line("filterwarnings", line)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.ray)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    """A local Ray cluster of 2 CPUs for the session, shut down at its end."""
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        yield
    finally:
        ray.shutdown()
