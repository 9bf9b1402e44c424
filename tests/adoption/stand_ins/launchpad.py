"""A stand-in for ``launchpad`` (dm-launchpad), for running Acme 0.4.0's adder tests.

``import acme`` imports ``acme.utils.signals``, which imports ``launchpad`` for its stop
handlers; dm-launchpad has no release for Python 3.11, and nothing the adder tests run
calls it. These two functions are the only names Acme's import path uses. The adoption
job puts this folder on ``PYTHONPATH`` for Acme's tests (``upstream/run.py``, against
reverb_py and for the dm-reverb list alike) and for the programs in ``programs/``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def register_stop_handler(handler: Callable[[], Any]) -> None:
    """Nothing stops these tests from outside: the handler is never called."""
    del handler


def unregister_stop_handler(handler: Callable[[], Any]) -> None:
    del handler
