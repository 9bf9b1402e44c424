"""Helpers of the packaging tests: running commands, fresh venvs, the source version."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENABLED = bool(os.environ.get("REVERB_PY_PACKAGING_TESTS"))

# A pip install of dependencies or a full compile takes minutes on a 2-core machine.
INSTALL_TIMEOUT = 600
QUICK_TIMEOUT = 120

# Paths of the repository that are never source: environments, build output, caches.
NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv*",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
)

# Stray build output planted in the copied tree: none of it may reach the sdist.
STRAY_FILES = (
    "_speedups/stray_annotation.html",
    "_speedups/stray_generated.cpp",
    "reverb_py/_pure/stray_generated.cpp",
    "reverb_py/_speedups/stray.cpython-311-x86_64-linux-gnu.so",
)


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for a build or install: none of reverb_py's switches, no venv."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("REVERB_PY_")
        and key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "CC", "CXX", "LDSHARED")
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.update(extra)
    return env


def run(
    command: list[str],
    *,
    timeout: float,
    env: dict[str, str] | None = None,
    cwd: pathlib.Path | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Runs `command`, output captured (stderr into stdout); fails the test on error."""
    result = subprocess.run(
        [str(part) for part in command],
        check=False,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        env=clean_env() if env is None else env,
        cwd=cwd,
    )
    if check and result.returncode != 0:
        pytest.fail(f"{command!r} exited with {result.returncode}:\n{result.stdout[-6000:]}")
    return result


def venv_python(venv: pathlib.Path) -> pathlib.Path:
    return venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def make_venv(path: pathlib.Path) -> pathlib.Path:
    """A fresh venv at `path` (from the interpreter running the tests); its python."""
    base = getattr(sys, "_base_executable", sys.executable)
    run([base, "-m", "venv", path], timeout=QUICK_TIMEOUT)
    return venv_python(path)


def static_version() -> str:
    """``reverb_py.__version__`` as written in the source (not imported)."""
    text = (ROOT / "reverb_py" / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE)
    assert match, "reverb_py/__init__.py defines no __version__"
    return match.group(1)


@dataclass(frozen=True)
class Sdist:
    path: pathlib.Path
    names: frozenset[str]  # member paths relative to the archive's top directory
    pkg_info: str
    build_output: str
