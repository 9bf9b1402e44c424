"""``import reverb`` answered by reverb_py: the alias behind :func:`install_as_reverb`.

After :func:`install_as_reverb`, ``import reverb``, ``import reverb.X`` and
``from reverb import X`` give the reverb_py module of the same path (``reverb_py.X``): one
module object under both names, so ``isinstance`` and ``type`` checks agree whichever name
a library used. A finder placed first on ``sys.meta_path`` maps every ``reverb`` and
``reverb.*`` import to ``reverb_py`` and ``reverb_py.*``, so an installed dm-reverb is never
loaded, and a path reverb_py does not provide fails as any missing module does.

Processes started by a program get the same through the environment variable
``REVERB_PY_AS_REVERB=1``, honoured at interpreter start by the ``reverb_py-as-reverb.pth``
file the package installs (a dictionary look-up when the variable is unset). That file
runs this module's source without importing the package: the finder imports reverb_py on
the first ``import reverb``. This module therefore imports only what the interpreter has
loaded at start (the finder and loader are plain classes, not ``importlib.abc``'s).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType

ENV_VAR = "REVERB_PY_AS_REVERB"
ALIAS = "reverb"
PACKAGE = "reverb_py"
# Set on the finder; the .pth hook and the package may each define the class once.
_MARK = "reverb_py_as_reverb"


def requested(environ: dict[str, str] | os._Environ[str] | None = None) -> bool:
    """Whether the environment asks for the alias (set, and not empty or ``0``)."""
    value = (os.environ if environ is None else environ).get(ENV_VAR, "")
    return value.strip() not in ("", "0")


def _real_name(fullname: str) -> str | None:
    if fullname == ALIAS:
        return PACKAGE
    if fullname.startswith(ALIAS + "."):
        return PACKAGE + fullname[len(ALIAS) :]
    return None


class _AliasLoader:
    """Loads ``reverb.X`` as the module object ``reverb_py.X`` itself."""

    def __init__(self, real_name: str) -> None:
        self._real_name = real_name
        self._real_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self._real_name)
        self._real_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system gave the module the alias's spec; it keeps its own.
        module.__spec__ = self._real_spec


class _AliasFinder:
    """Finds ``reverb`` and ``reverb.*`` as the reverb_py modules of the same path."""

    reverb_py_as_reverb = True

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        real_name = _real_name(fullname)
        if real_name is None:
            return None
        real = sys.modules.get(real_name)
        if real is not None:
            is_package = hasattr(real, "__path__")
        else:
            real_spec = importlib.util.find_spec(real_name)
            if real_spec is None:
                # Not a reverb_py module: a missing module, never dm-reverb's.
                raise ModuleNotFoundError(
                    f"No module named {fullname!r} (reverb_py answers `import {ALIAS}` and "
                    f"has no module {real_name!r})",
                    name=fullname,
                )
            is_package = real_spec.submodule_search_locations is not None
        loader = _AliasLoader(real_name)
        # A loader by protocol (create_module, exec_module), not an importlib.abc.Loader.
        return importlib.machinery.ModuleSpec(fullname, loader, is_package=is_package)  # type: ignore[arg-type]


def install_finder() -> None:
    """Puts the alias finder first on ``sys.meta_path`` (once)."""
    if not any(getattr(finder, _MARK, False) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())


def _foreign_reverb() -> ModuleType | None:
    """A ``reverb`` module already imported that is not reverb_py (dm-reverb's)."""
    package = sys.modules.get(PACKAGE)
    for name, module in list(sys.modules.items()):
        if name != ALIAS and not name.startswith(ALIAS + "."):
            continue
        real = sys.modules.get(_real_name(name) or "")
        if module is None or (package is not None and module is real):
            continue
        return sys.modules.get(ALIAS) or module
    return None


def install_as_reverb() -> None:
    """Makes ``import reverb`` (and every ``reverb.X``) give reverb_py's modules.

    Call it before anything imports ``reverb``: at the top of a program, or let the
    environment do it for every Python process (``REVERB_PY_AS_REVERB=1``), or run a
    script that cannot be edited with ``reverb-py run SCRIPT [ARGS]``. Calling it again
    changes nothing.

    Raises:
      RuntimeError: another ``reverb`` (dm-reverb) was imported already; its modules
        and reverb_py's cannot be mixed in one process.
    """
    foreign = _foreign_reverb()
    if foreign is not None:
        where = getattr(foreign, "__file__", None) or repr(foreign)
        raise RuntimeError(
            f"reverb_py.install_as_reverb(): `reverb` is already imported from {where} "
            "(dm-reverb). reverb_py cannot stand in for it in this process: call "
            "install_as_reverb() before anything imports reverb, set REVERB_PY_AS_REVERB=1 "
            "in the environment, or start the program with `reverb-py run`."
        )
    install_finder()
    sys.modules.setdefault(ALIAS, importlib.import_module(PACKAGE))


if __name__ == "reverb_py-as-reverb.pth":
    # Run from the .pth file at interpreter start (see the module docstring).
    if requested():
        install_finder()
