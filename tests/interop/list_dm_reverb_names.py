"""Lists every public module of the installed dm-reverb and the public names of each.

Run it with the Python of an environment holding dm-reverb (``make interop``'s
``.venv-reverb``)::

    .venv-reverb/bin/python tests/interop/list_dm_reverb_names.py > \\
        tests/unit/data/dm_reverb_0_14_names.json

A module is public when no part of its dotted name starts with ``_`` and it is not a
test (``*_test``). Compiled modules that Python cannot import (Reverb's protobuf and op
libraries, loaded by other means) are left out. A public name is one of ``dir(module)``
not starting with ``_``, except objects another package defines and the module merely
imported (``np``, ``tf``, ``typing.Optional``, ``from __future__ import annotations``):
Reverb's own classes, functions and values, and its own modules (recorded as
``"module <dotted name>"``). ``tests/unit/test_reverb_names.py`` walks the result;
``tests/interop/test_reverb_names.py`` regenerates it and compares.
"""

from __future__ import annotations
import __future__

import importlib
import inspect
import json
import pkgutil
import sys
import types
from typing import Any


def _kind(value: Any) -> str | None:
    """``class``, ``function``, ``value``, ``module <name>``, or None (not Reverb's)."""
    if isinstance(value, types.ModuleType):
        name = value.__name__
        return f"module {name}" if name.split(".")[0] == "reverb" else None
    if isinstance(value, __future__._Feature):
        return None
    home = getattr(value, "__module__", None)
    if inspect.isclass(value) or callable(value):
        if not (isinstance(home, str) and home.split(".")[0] == "reverb"):
            return None
        return "class" if inspect.isclass(value) else "function"
    if isinstance(value, types.GenericAlias) or str(type(value)).startswith("<class 'typing."):
        return None
    return "value"


def list_names() -> dict[str, dict[str, str]]:
    import reverb

    listing: dict[str, dict[str, str]] = {}
    names = ["reverb"] + [info.name for info in pkgutil.walk_packages(reverb.__path__, "reverb.")]
    for name in names:
        parts = name.split(".")
        if any(part.startswith("_") for part in parts) or parts[-1].endswith("_test"):
            continue
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue  # a compiled library that is not a Python module
        public = {}
        for attribute in sorted(dir(module)):
            if attribute.startswith("_"):
                continue
            kind = _kind(getattr(module, attribute))
            if kind is not None:
                public[attribute] = kind
        listing[name] = public
    return dict(sorted(listing.items()))


if __name__ == "__main__":
    json.dump(list_names(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
