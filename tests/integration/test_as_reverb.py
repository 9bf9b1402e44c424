"""``import reverb`` answered by reverb_py: ``install_as_reverb()``, the environment
variable honoured at interpreter start, and ``reverb-py run``.

Each case runs in a fresh interpreter: the alias changes ``sys.modules`` and
``sys.meta_path`` for the rest of a process.
"""

from __future__ import annotations

import os
import pathlib
import pkgutil
import subprocess
import sys
import sysconfig
import textwrap

import pytest

import reverb_py
from reverb_py._as_reverb import ENV_VAR

ROOT = pathlib.Path(__file__).parents[2]
PTH_SOURCE = ROOT / "reverb_py" / "_as_reverb.pth"
PTH_INSTALLED = pathlib.Path(sysconfig.get_paths()["purelib"]) / "reverb_py-as-reverb.pth"


def _env(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != ENV_VAR}
    env.update(extra)
    return env


def _python(code: str, *, cwd: pathlib.Path | None = None, **env: str) -> str:
    """Runs ``code`` in a fresh interpreter of this environment; returns its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(**env),
        cwd=cwd,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _importable_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(reverb_py.__path__, "reverb_py."):
        if "._speedups." in info.name or info.name.endswith(
            ".__main__"
        ):  # runs a command when imported
            continue
        if info.name.startswith("reverb_py._proto.") and not info.name.endswith("_pb2"):
            continue
        names.append(info.name)
    return names


def test_every_module_is_the_same_object_under_both_names() -> None:
    modules = _importable_modules()
    assert "reverb_py.item_selectors" in modules and "reverb_py.server" in modules
    out = _python(
        f"""
        import importlib, sys
        import reverb_py
        reverb_py.install_as_reverb()
        import reverb
        assert reverb is reverb_py, reverb
        bad, unavailable = [], 0
        for real in {modules!r}:
            alias = "reverb" + real[len("reverb_py"):]
            try:
                importlib.import_module(real)
            except ImportError:  # needs an optional framework: the same error both ways
                unavailable += 1
                try:
                    importlib.import_module(alias)
                    bad.append(alias + " imported")
                except ImportError:
                    pass
                continue
            module = importlib.import_module(alias)
            if module is not sys.modules[real] or sys.modules[alias] is not module:
                bad.append(alias)
            if module.__spec__.name != real:
                bad.append(alias + " spec " + module.__spec__.name)
        assert not bad, bad
        print(len({modules!r}) - unavailable)
        """
    )
    # Without TensorFlow, PyTorch, JAX and Ray only their adapters are unavailable.
    assert int(out) >= len(modules) - 10


def test_reverb_programs_run_on_the_alias() -> None:
    """The failure of a plain ``sys.modules['reverb'] = reverb_py``: a selector from
    ``reverb.item_selectors`` must be one of reverb_py's for ``Table``."""
    out = _python(
        """
        import reverb_py
        reverb_py.install_as_reverb()
        import numpy as np
        import reverb
        import reverb.item_selectors
        from reverb import rate_limiters
        from reverb.item_selectors import Fifo
        table = reverb.Table(
            "t", reverb.item_selectors.Uniform(), Fifo(), 10, rate_limiters.MinSize(1)
        )
        assert type(table) is reverb_py.Table and isinstance(table, reverb.Table)
        with reverb.Server([table], port=0) as server:
            client = reverb.Client(f"localhost:{server.port}")
            client.insert(np.arange(3), {"t": 1.0})
            (sample,) = client.sample("t", num_samples=1)
            print(type(sample[0]).__module__, sample[0].data[0].tolist())
        """
    )
    assert out.split() == ["reverb_py.replay_sample", "[0,", "1,", "2]"]


def test_a_second_call_changes_nothing() -> None:
    out = _python(
        """
        import sys
        import reverb_py
        reverb_py.install_as_reverb()
        import reverb.rate_limiters as first
        finders = list(sys.meta_path)
        reverb_py.install_as_reverb()
        import reverb.rate_limiters as second
        assert sys.meta_path == finders and first is second
        print(sum(1 for f in sys.meta_path if getattr(f, "reverb_py_as_reverb", False)))
        """
    )
    assert out.strip() == "1"


def test_a_path_reverb_py_lacks_is_a_missing_module(tmp_path: pathlib.Path) -> None:
    """Never loaded from elsewhere, even with another ``reverb`` on the path."""
    fake = tmp_path / "reverb"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "only_in_dm_reverb.py").write_text("raise AssertionError('loaded')\n")
    out = _python(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import reverb_py
        reverb_py.install_as_reverb()
        try:
            import reverb.only_in_dm_reverb
        except ModuleNotFoundError as error:
            print(error.name)
        """
    )
    assert out.strip() == "reverb.only_in_dm_reverb"


def test_after_another_reverb_was_imported_it_refuses(tmp_path: pathlib.Path) -> None:
    fake = tmp_path / "reverb"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    out = _python(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import reverb
        import reverb_py
        try:
            reverb_py.install_as_reverb()
        except RuntimeError as error:
            print(error)
        assert sys.modules["reverb"] is not reverb_py
        assert not any(getattr(f, "reverb_py_as_reverb", False) for f in sys.meta_path)
        """
    )
    assert str(fake / "__init__.py") in out
    assert "dm-reverb" in out and "reverb_py" in out and "install_as_reverb" in out


def test_the_environment_variable_at_interpreter_start() -> None:
    """The hook the package installs in site-packages: nothing when unset; when set, a
    finder, and reverb_py imported only by ``import reverb``."""
    assert PTH_INSTALLED.exists(), (
        f"{PTH_INSTALLED} is missing: an editable install leaves it out "
        "(`make` environments copy it; see the Makefile)"
    )
    assert PTH_INSTALLED.read_text() == PTH_SOURCE.read_text()
    probe = """
        import sys
        finder = any(getattr(f, "reverb_py_as_reverb", False) for f in sys.meta_path)
        print(finder, "reverb_py" in sys.modules)
        try:
            import reverb
            print(reverb.__name__, reverb.Table.__module__)
        except ModuleNotFoundError as error:
            print("missing", error.name)
        """
    assert _python(probe).split() == ["False", "False", "missing", "reverb"]
    assert _python(probe, **{ENV_VAR: "0"}).split() == ["False", "False", "missing", "reverb"]
    assert _python(probe, **{ENV_VAR: "1"}).split() == [
        "True",
        "False",
        "reverb_py",
        "reverb_py.table",
    ]


_CHILDREN = """
    import multiprocessing
    import sys

    import reverb
    import reverb.item_selectors


    def child(_):
        import reverb
        import reverb_py
        return reverb.__name__, reverb.item_selectors.Uniform is reverb_py.selectors.Uniform


    if __name__ == "__main__":
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            print(*pool.map(child, [0])[0], sys.argv[1:])
        sys.exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize("command", [["-m", "reverb_py.run"], ["-m", "reverb_py", "run"]])
def test_run_a_script_and_its_spawned_children(tmp_path: pathlib.Path, command: list[str]) -> None:
    script = tmp_path / "dm_reverb_program.py"
    script.write_text(textwrap.dedent(_CHILDREN))
    done = subprocess.run(
        [sys.executable, *command, str(script), "3", "--flag"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
        cwd=tmp_path,
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout.strip() == "reverb_py True ['3', '--flag']", done.stderr


def test_run_a_module(tmp_path: pathlib.Path) -> None:
    (tmp_path / "learner_main.py").write_text(
        "import os, sys, reverb\n"
        "print(reverb.__name__, __name__, os.path.basename(sys.argv[0]), sys.argv[1:])\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "reverb_py", "run", "-m", "learner_main", "x"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    # As `python -m learner_main x` would: argv[0] is the module's file.
    assert done.stdout.split() == ["reverb_py", "__main__", "learner_main.py", "['x']"]


def test_run_with_bad_arguments(tmp_path: pathlib.Path) -> None:
    for args, message in [
        ([str(tmp_path / "missing.py")], "no such file"),
        (["-m"], "-m needs a module name"),
        ([], "usage: reverb-py run"),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "reverb_py.run", *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=_env(),
        )
        assert done.returncode == 2 and message in done.stderr, (args, done.stderr)
