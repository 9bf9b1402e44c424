"""TF-Agents' and Acme's own Reverb tests, as they ship, against whatever ``reverb`` is.

``make test-adoption`` runs this script with the Python of ``.venv-adoption`` and
``REVERB_PY_AS_REVERB=1``: the test modules below run unchanged from site-packages, in
one pytest process (settings from ``upstream.ini``; this folder and ``../stand_ins`` on
``PYTHONPATH`` for ``adoption_plugin`` and the ``launchpad`` stand-in), a JUnit report is
written, and each test that the committed list says passes on dm-reverb 0.14 must pass
here too::

    python tests/adoption/upstream/run.py --junit build/adoption/upstream.xml \\
        --expect tests/adoption/upstream/passing_on_dm_reverb.txt

A test that ends its process (a crash, or a test stuck past ``upstream.ini``'s limit,
which pytest-timeout ends with every thread's stack) is failed with the process's exit
status, whatever that process started is ended, and a new process runs the tests not yet
run. The list is made by the same script with ``--record`` in an environment of the same
packages with dm-reverb 0.14.0 in place of reverb_py (``make adoption-dm-list``).
Tests that pass here but are not on the list are named and fail nothing. Arguments after
``--`` go to pytest. Exits 0 when every listed test passed, 1 when one did not (each is
named) or a test process crashed after its tests, 2 when no test ran.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
STAND_INS = HERE.parent / "stand_ins"

#: The test modules, by path inside site-packages: every module of TF-Agents 0.19.0 and
#: Acme 0.4.0 whose tests run a Reverb server or client.
MODULES = (
    "tf_agents/replay_buffers/reverb_replay_buffer_test.py",
    "tf_agents/replay_buffers/reverb_utils_test.py",
    "tf_agents/replay_buffers/rlds_to_reverb_test.py",
    "tf_agents/experimental/distributed/reverb_variable_container_test.py",
    "tf_agents/train/actor_test.py",
    "tf_agents/train/utils/replay_buffer_utils_test.py",
    "tf_agents/train/utils/train_utils_test.py",
    "tf_agents/utils/batched_observer_unbatching_test.py",
    "acme/adders/reverb/episode_test.py",
    "acme/adders/reverb/sequence_test.py",
    "acme/adders/reverb/transition_test.py",
)

#: All the pytest processes together may take this long (seconds).
RUN_LIMIT = 1800
#: At most this many processes: one, and one more after each test that ended its process.
MAX_PROCESSES = 20


def _run_once(command: list[str], env: dict[str, str], cwd: Path, limit: float) -> int:
    """Runs pytest in a session of its own; ends what it left behind. Its exit status."""
    # The working directory is not the checkout: `python -m pytest` puts it first on
    # sys.path, where it would shadow the installed reverb_py.
    process = subprocess.Popen(command, cwd=cwd, env=env, start_new_session=True)
    try:
        status = process.wait(timeout=max(limit, 1.0))
    except subprocess.TimeoutExpired:
        print(f"adoption: the tests ran past {RUN_LIMIT} s and were stopped", file=sys.stderr)
        status = -signal.SIGKILL
    # Processes the tests forked (TF-Agents' parallel environments) outlive a test
    # process that crashed; they are in its session's process group.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
    return status


def _read_results(path: Path) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The finished tests by ID, and the IDs of tests that started and never finished."""
    finished: dict[str, dict[str, Any]] = {}
    started: list[str] = []
    if not path.is_file():
        return finished, started
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue  # the last line of a process that died while writing it
        if "start" in entry:
            started.append(entry["start"])
        else:
            finished[entry["id"]] = entry
    return finished, [test_id for test_id in started if test_id not in finished]


def run_tests(pytest_args: list[str]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Runs the modules: each test's result (``outcome``, ``duration``, ``message``) by ID,
    and what went wrong besides the tests (pytest's own errors, a crash after the last
    test of a process)."""
    site = Path(sysconfig.get_paths()["purelib"])
    missing = [module for module in MODULES if not (site / module).is_file()]
    if missing:
        return {}, [f"not installed in {site}: {', '.join(missing)}"]
    with tempfile.TemporaryDirectory(prefix="reverb-py-adoption-") as work_name:
        work = Path(work_name)
        results_file = work / "results.jsonl"
        done_file = work / "done.txt"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(HERE), str(STAND_INS), env.get("PYTHONPATH")])
        )
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env["TEST_TMPDIR"] = str(work)
        env["REVERB_PY_ADOPTION_RESULTS"] = str(results_file)
        env["REVERB_PY_ADOPTION_DONE"] = str(done_file)
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(HERE / "upstream.ini"),
            "--rootdir",
            str(site),
            "-p",
            "no:cacheprovider",
            "-p",
            "adoption_plugin",
            "-q",
            "--disable-warnings",
            *pytest_args,
            *(str(site / module) for module in MODULES),
        ]
        results: dict[str, dict[str, Any]] = {}
        troubles: list[str] = []
        deadline = time.monotonic() + RUN_LIMIT
        for _ in range(MAX_PROCESSES):
            done_file.write_text("\n".join(sorted(results)) + "\n", encoding="utf-8")
            results_file.unlink(missing_ok=True)
            status = _run_once(command, env, work, deadline - time.monotonic())
            finished, unfinished = _read_results(results_file)
            results.update(finished)
            for test_id in unfinished:
                results[test_id] = {
                    "id": test_id,
                    "outcome": "failed",
                    "duration": 0.0,
                    "message": f"the test process ended with status {status} while this "
                    "test ran (a crash, or upstream.ini's time limit: see the log)",
                }
                print(f"adoption: {test_id} ended its process (status {status})")
            if not unfinished:
                # 0: all passed, 1: some failed, 5: none left to run. A negative status
                # is a signal (a crash at exit); others are pytest's own errors.
                if status not in (0, 1, 5):
                    troubles.append(f"the test process exited with status {status} after its tests")
                return results, troubles
            if time.monotonic() >= deadline:
                troubles.append(f"the tests ran past {RUN_LIMIT} s")
                return results, troubles
        troubles.append(f"{MAX_PROCESSES} test processes ended early")
        return results, troubles


def _classname(test_id: str) -> tuple[str, str]:
    """JUnit's classname and name of a pytest node ID."""
    path, _, rest = test_id.partition("::")
    module = path.removesuffix(".py").replace("/", ".")
    *classes, name = rest.split("::") if rest else [path]
    return ".".join([module, *classes]), name


def write_junit(results: dict[str, dict[str, Any]], path: Path) -> None:
    counts = collections.Counter(result["outcome"] for result in results.values())
    suite = ElementTree.Element(
        "testsuite",
        name="adoption-upstream",
        tests=str(len(results)),
        failures=str(counts["failed"]),
        skipped=str(counts["skipped"]),
        errors="0",
        time=f"{sum(result['duration'] for result in results.values()):.3f}",
    )
    for test_id in sorted(results):
        result = results[test_id]
        classname, name = _classname(test_id)
        case = ElementTree.SubElement(
            suite, "testcase", classname=classname, name=name, time=f"{result['duration']:.3f}"
        )
        message = result["message"]
        if result["outcome"] == "failed":
            failure = ElementTree.SubElement(
                case, "failure", message=(message.splitlines() or [""])[-1][:500]
            )
            failure.text = message
        elif result["outcome"] == "skipped":
            ElementTree.SubElement(case, "skipped", message=message[:500])
    root = ElementTree.Element("testsuites")
    root.append(suite)
    path.parent.mkdir(parents=True, exist_ok=True)
    ElementTree.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def _summary(results: dict[str, dict[str, Any]]) -> str:
    by_package: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for test_id, result in results.items():
        by_package[test_id.split("/", 1)[0]][result["outcome"]] += 1
    return "; ".join(
        f"{package}: "
        + ", ".join(f"{counts[kind]} {kind}" for kind in ("passed", "failed", "skipped"))
        for package, counts in sorted(by_package.items())
    )


def _installed(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def record(results: dict[str, dict[str, Any]], path: Path) -> None:
    passing = sorted(
        test_id for test_id, result in results.items() if result["outcome"] == "passed"
    )
    versions = ", ".join(
        f"{name} {_installed(name)}"
        for name in ("dm-reverb", "tensorflow", "tf-agents", "dm-acme", "jax")
        if _installed(name)
    )
    header = [
        "# The tests of TF-Agents and Acme (tests/adoption/upstream/run.py) that passed on",
        f"# {versions}:",
        f"# {_summary(results)}.",
        "# `make test-adoption` fails when one of them does not pass on reverb_py.",
    ]
    path.write_text("\n".join(header + passing) + "\n", encoding="utf-8")
    print(f"adoption: {len(passing)} passing tests recorded in {path}")


def check(results: dict[str, dict[str, Any]], expected_file: Path) -> int:
    expected = [
        line.strip()
        for line in expected_file.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    expected_set = set(expected)
    for test_id in sorted(results):
        if results[test_id]["outcome"] == "passed" and test_id not in expected_set:
            print(f"adoption: passes here, not on dm-reverb 0.14: {test_id}")
    not_passing = [
        test_id
        for test_id in expected
        if results.get(test_id, {"outcome": "not run"})["outcome"] != "passed"
    ]
    for test_id in not_passing:
        outcome = results.get(test_id, {"outcome": "not run"})["outcome"]
        print(f"adoption: passes on dm-reverb 0.14, {outcome} here: {test_id}", file=sys.stderr)
    print(f"adoption: {_summary(results)}")
    print(
        f"adoption: {len(expected) - len(not_passing)} of the {len(expected)} tests "
        "that pass on dm-reverb 0.14 passed"
    )
    return 1 if not_passing else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--junit", type=Path, required=True, help="the JUnit XML report")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--expect", type=Path, help="the list of tests that must pass")
    mode.add_argument("--record", type=Path, help="write the passing tests to this list")
    parser.add_argument("pytest_args", nargs="*", help="after --: more arguments to pytest")
    args = parser.parse_args(argv)
    started = time.monotonic()
    results, troubles = run_tests(args.pytest_args)
    print(f"adoption: the tests took {time.monotonic() - started:.0f} s")
    for trouble in troubles:
        print(f"adoption: {trouble}", file=sys.stderr)
    if not results:
        print("adoption: no test ran", file=sys.stderr)
        return 2
    write_junit(results, args.junit)
    slowest = sorted(results.values(), key=lambda result: -result["duration"])[:5]
    for result in slowest:
        print(f"adoption: {result['duration']:6.1f} s {result['id']}")
    if args.record is not None:
        record(results, args.record)
        return 1 if troubles else 0
    return 1 if check(results, args.expect) or troubles else 0


if __name__ == "__main__":
    sys.exit(main())
