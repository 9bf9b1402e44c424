"""TF-Agents 0.19 and Acme 0.4 programs run on reverb_py, switched on as a user would.

Each program in ``programs/`` runs in a fresh Python of this environment (the installed
wheel, no dm-reverb), with the alias switched on the way the test names: the
``REVERB_PY_AS_REVERB=1`` environment variable, ``reverb-py run``, or
``reverb_py.install_as_reverb()`` in the program's first lines. The programs check the
values they read back themselves and exit non-zero at the first wrong one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE / "programs"
# The programs start TensorFlow and a server, and stop it: well under a minute each.
PROGRAM_TIMEOUT = 240

pytestmark = pytest.mark.timeout(PROGRAM_TIMEOUT + 30)


def run_program(args: list[str], cwd: Path, *, as_reverb: bool) -> subprocess.CompletedProcess[str]:
    """Runs ``python ARGS`` from ``cwd``; ``as_reverb`` sets ``REVERB_PY_AS_REVERB=1``."""
    env = dict(os.environ)
    env.pop("REVERB_PY_AS_REVERB", None)
    if as_reverb:
        env["REVERB_PY_AS_REVERB"] = "1"
    # Acme imports launchpad, which has no Python 3.11 release (see stand_ins/).
    env["PYTHONPATH"] = str(HERE / "stand_ins")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # cwd is not the checkout, which would shadow the installed reverb_py on sys.path.
    result = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=PROGRAM_TIMEOUT,
    )
    print(result.stdout)
    print(result.stderr, file=sys.stderr)
    return result


def assert_ran_on_installed_reverb_py(result: subprocess.CompletedProcess[str]) -> None:
    """The program's ``reverb`` was the reverb_py installed here (the wheel), and it ran
    clean: exit status 0, and no traceback logged on the way (by a thread or the loop)."""
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("reverb module:")]
    _, _, name, path = line.split(" ", 3)
    assert name == "reverb_py", line
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert site in Path(path).resolve().parents, line


TF_AGENTS_CHECKS = (
    "ok: the observer wrote 8 items of 2 steps to each table",
    "ok: the queue table gave back the 8 items in order",
    "ok: 25 uniform batches of 4",
    "ok: 5 samples through a tf.function",
    "ok: server stopped",
)


def test_tf_agents_program_with_the_environment_variable(tmp_path: Path) -> None:
    result = run_program([str(PROGRAMS / "tf_agents_replay.py")], tmp_path, as_reverb=True)
    assert_ran_on_installed_reverb_py(result)
    for check in TF_AGENTS_CHECKS:
        assert check in result.stdout


def test_tf_agents_program_through_reverb_py_run(tmp_path: Path) -> None:
    result = run_program(
        ["-m", "reverb_py", "run", str(PROGRAMS / "tf_agents_replay.py")],
        tmp_path,
        as_reverb=False,
    )
    assert_ran_on_installed_reverb_py(result)
    for check in TF_AGENTS_CHECKS:
        assert check in result.stdout


def test_tf_agents_program_needs_the_alias(tmp_path: Path) -> None:
    """Without the alias nothing answers ``import reverb`` here: dm-reverb is absent."""
    result = run_program([str(PROGRAMS / "tf_agents_replay.py")], tmp_path, as_reverb=False)
    assert result.returncode != 0
    assert "No module named 'reverb'" in result.stderr


# "adder": Acme 0.4.0's adders, which pass `get_signature_timeout_ms` to
# `trajectory_writer`; "writer": a TrajectoryWriter.
@pytest.mark.parametrize("writer", ["writer", "adder"])
def test_acme_dataset_reads_what_acme_wrote(tmp_path: Path, writer: str) -> None:
    result = run_program([str(PROGRAMS / "acme_replay.py"), writer], tmp_path, as_reverb=False)
    assert_ran_on_installed_reverb_py(result)
    assert f"ok: 10 transitions written ({writer})" in result.stdout
    assert "ok: 60 batches of 3 read back, all 10 transitions seen" in result.stdout
    assert "ok: server stopped" in result.stdout
