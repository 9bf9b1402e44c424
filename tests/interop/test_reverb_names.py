"""The committed listing of dm-reverb's public names is the real package's.

Regenerates ``tests/unit/data/dm_reverb_0_14_names.json`` with
``list_dm_reverb_names.py`` in the dm-reverb environment (a child process: TensorFlow
is never imported here) and compares; ``tests/unit/test_reverb_names.py`` walks it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from . import _procs

HERE = Path(__file__).resolve().parent
LISTING = HERE.parent / "unit" / "data" / "dm_reverb_0_14_names.json"


def test_listing_matches_the_installed_dm_reverb(dm_python: str, tmp_path: Path) -> None:
    env = _procs.child_env()
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    result = subprocess.run(
        [dm_python, str(HERE / "list_dm_reverb_names.py")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=_procs.STARTUP_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    regenerated = json.loads(result.stdout)
    committed = json.loads(LISTING.read_text(encoding="utf-8"))
    assert regenerated == committed, (
        "the listing differs from the installed dm-reverb: regenerate it with "
        f"`{dm_python} tests/interop/list_dm_reverb_names.py > {LISTING}`"
    )
