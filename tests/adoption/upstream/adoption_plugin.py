"""pytest plugin for TF-Agents' and Acme's own tests run from site-packages (``run.py``).

Their modules end in ``tf.test.main()`` / ``absltest.main()`` (and TF-Agents' in
``handle_test_main``), which pytest never calls: this plugin does what those do before
the first test. absl's flags are marked parsed (their defaults; ``run.py`` sets
``TEST_TMPDIR``) and TF-Agents' multiprocessing is started in the mode its own test main
uses. It prints which ``reverb`` the tests will import, and with ``REVERB_PY_AS_REVERB``
set, stops the run unless that is reverb_py.

For ``run.py`` it also writes a line of JSON to ``$REVERB_PY_ADOPTION_RESULTS`` as each
test starts and as it ends (with its outcome), so that a test which ends the process (a
crash, or pytest-timeout's limit) is known, and skips the tests listed in
``$REVERB_PY_ADOPTION_DONE`` (those a previous process finished).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any

import pytest

RESULTS_VAR = "REVERB_PY_ADOPTION_RESULTS"
DONE_VAR = "REVERB_PY_ADOPTION_DONE"
# What a failure's report keeps of pytest's text (the JUnit report and the summary).
MESSAGE_LIMIT = 4000

_results: IO[str] | None = None
_reports: dict[str, list[pytest.TestReport]] = {}


def _write(line: dict[str, Any]) -> None:
    if _results is None:
        return
    _results.write(json.dumps(line) + "\n")
    _results.flush()
    os.fsync(_results.fileno())


def pytest_configure(config: pytest.Config) -> None:
    global _results
    from absl import flags

    flags.FLAGS.mark_as_parsed()
    from tf_agents.system import system_multiprocessing

    system_multiprocessing.enable_interactive_mode()

    import reverb

    where = getattr(reverb, "__file__", "?")
    print(f"adoption: `import reverb` gives {reverb.__name__} from {where}")
    as_reverb = os.environ.get("REVERB_PY_AS_REVERB", "").strip() not in ("", "0")
    if as_reverb and reverb.__name__ != "reverb_py":
        raise pytest.UsageError(
            f"REVERB_PY_AS_REVERB is set but `import reverb` gave {reverb.__name__} ({where})"
        )
    results = os.environ.get(RESULTS_VAR)
    if results:
        _results = open(results, "a", encoding="utf-8")  # closed at unconfigure


def pytest_unconfigure(config: pytest.Config) -> None:
    global _results
    if _results is not None:
        _results.close()
        _results = None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    done_file = os.environ.get(DONE_VAR)
    if not done_file:
        return
    done = set(Path(done_file).read_text(encoding="utf-8").splitlines())
    keep = [item for item in items if item.nodeid not in done]
    dropped = [item for item in items if item.nodeid in done]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _write(
            {
                "id": report.nodeid,
                "outcome": "failed",
                "duration": 0.0,
                "message": str(report.longrepr)[-MESSAGE_LIMIT:],
            }
        )


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _write({"start": nodeid})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    reports = _reports.setdefault(report.nodeid, [])
    reports.append(report)
    if report.when != "teardown":
        return
    del _reports[report.nodeid]
    failed = [each for each in reports if each.failed]
    if failed:
        outcome = "failed"
        message = "\n".join(f"[{each.when}] {each.longrepr}" for each in failed)
    elif any(each.skipped for each in reports):
        outcome = "skipped"
        message = "\n".join(str(each.longrepr) for each in reports if each.skipped)
    else:
        outcome = "passed"
        message = ""
    _write(
        {
            "id": report.nodeid,
            "outcome": outcome,
            "duration": sum(each.duration for each in reports),
            "message": message[-MESSAGE_LIMIT:],
        }
    )
