"""The adoption tests: TF-Agents 0.19 and Acme 0.4 on reverb_py through ``import reverb``.

They run in ``.venv-adoption`` (``make test-adoption``, which installs the wheel of the
checkout beside TensorFlow 2.15, TF-Agents and Acme, and sets
``REVERB_PY_ADOPTION_TESTS``); every other run collects nothing here. Every test here is
marked ``adoption``. The programs they run are in ``programs/``; TF-Agents' and Acme's
own tests are run by ``upstream/run.py``, not by pytest here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

if not os.environ.get("REVERB_PY_ADOPTION_TESTS"):
    collect_ignore_glob = ["*"]
else:
    # Modules the adoption job runs by other means: the programs in subprocesses,
    # TF-Agents' and Acme's own tests through upstream/run.py.
    collect_ignore = ["programs", "stand_ins", "upstream"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.adoption)
