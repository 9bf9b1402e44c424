"""Every ```python block of the READMEs and of the documentation's pages (``docs/``), and
every ``examples/*.py``, runs as its own script.

Each runs in a subprocess (this interpreter, a temporary working directory, this
checkout first on ``PYTHONPATH``, the environment passed through so that
``REVERB_PY_NO_EXTENSIONS`` / ``REVERB_PY_REQUIRE_SPEEDUPS`` select the same
implementation) and must exit 0 within ``TIMEOUT`` seconds, with no traceback on stderr
and with the output the docs promise. A script that does not exit in time (for example
one that hangs at interpreter exit) is killed with its whole process group.

Blocks that need TensorFlow, PyTorch or JAX are fenced ```py-tf, ```py-torch and
```py-jax (the site highlights them as Python): here they are compiled, and with
``REVERB_PY_FRAMEWORKS_TESTS`` set (in the frameworks' environment) they run as well.
"""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Sequence

import pytest

import reverb_py

ROOT = pathlib.Path(__file__).parents[2]
DOCS_DIR = ROOT / "docs"
DOCUMENTS = [ROOT / "README.md", ROOT / "examples" / "README.md", *sorted(DOCS_DIR.rglob("*.md"))]
EXAMPLES_DIR = ROOT / "examples"
TIMEOUT = 60.0

# Lower bounds, so that an extraction that finds nothing cannot pass silently: the python
# blocks of each document that has some, and the framework blocks of all.
MIN_BLOCKS = {
    "README.md": 1,
    "docs/getting-started.md": 1,
    "docs/concepts.md": 3,
    "docs/learners.md": 1,
    "docs/security.md": 1,
    "docs/migrating.md": 2,
}
MIN_FRAMEWORK_BLOCKS = 3
EXPECTED_EXAMPLES = {"actor_async.py", "learner.py", "daemon_with_checkpoints.py"}

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)")
_PYTHON_INFOS = frozenset({"python", "py", "python3"})
FRAMEWORK_INFOS = frozenset({"py-tf", "py-torch", "py-jax"})
FRAMEWORKS = bool(os.environ.get("REVERB_PY_FRAMEWORKS_TESTS"))


def python_blocks(text: str, infos: frozenset[str] = _PYTHON_INFOS) -> list[tuple[int, str]]:
    """The fenced code blocks of a Markdown text whose info string is one of ``infos``
    (python's by default): (first code line number, code).

    Raises:
      ValueError: a fence is never closed.
    """
    blocks = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence = opening.group("fence")
        start = index + 1
        end = start
        while end < len(lines):
            closing = _FENCE.match(lines[end])
            if (
                closing
                and closing.group("fence")[0] == fence[0]
                and len(closing.group("fence")) >= len(fence)
                and not closing.group("info")
            ):
                break
            end += 1
        else:
            raise ValueError(f"the fence opened on line {index + 1} is never closed")
        if opening.group("info").lower() in infos:
            # A block in a list item is indented with the item.
            blocks.append((start + 1, textwrap.dedent("\n".join(lines[start:end])) + "\n"))
        index = end + 1
    return blocks


def readme_blocks(infos: frozenset[str] = _PYTHON_INFOS) -> list[tuple[str, str]]:
    """(id, code) of every block of the documents with one of ``infos`` (python's by
    default), the id ``file:line``."""
    found = []
    for document in DOCUMENTS:
        if document.exists():
            name = document.relative_to(ROOT).as_posix()
            for line, code in python_blocks(document.read_text(encoding="utf-8"), infos):
                found.append((f"{name}:{line}", code))
    return found


def example_scripts() -> list[pathlib.Path]:
    return sorted(EXAMPLES_DIR.glob("*.py"))


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    env.pop("PYTHONSTARTUP", None)
    return env


def run_script(args: Sequence[str], cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    """Runs ``python *args``; kills its process group when it outlives ``TIMEOUT``."""
    process = subprocess.Popen(
        [sys.executable, *args],
        cwd=cwd,
        env=subprocess_env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(
            f"{' '.join(args)} did not exit within {TIMEOUT:.0f} s (killed)\n"
            f"--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
        )
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def check_run(result: subprocess.CompletedProcess[str], expected: Sequence[str]) -> None:
    report = f"\n--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    assert result.returncode == 0, f"exit status {result.returncode}{report}"
    for marker in ("Traceback (most recent call last)", "Exception ignored in"):
        assert marker not in result.stderr, f"{marker!r} on stderr{report}"
    for pattern in expected:
        assert re.search(pattern, result.stdout, re.MULTILINE), (
            f"no match for {pattern!r} in the output{report}"
        )


# What a block or script must print, beyond exiting 0. A README block is recognised by a
# piece of its code; every entry must match exactly one block or script.
BLOCK_OUTPUT = {
    # Migrating: the item inserted under `import reverb_py as reverb`, sampled back.
    'client.insert(np.arange(3, dtype=np.int32), {"queue": 1.0})': [r"^\[0 1 2\]$"],
    # Getting started: the queue's two items, in the order they were written.
    "print(obs.tolist(), reward)": [
        r"\A\[\[0\.0, 0\.0\], \[1\.0, 1\.0\]\] 0\.1\n\[\[1\.0, 1\.0\], \[2\.0, 2\.0\]\] 0\.2\n\Z"
    ],
    # Security: an item over mutual TLS with the token, and a wrong token refused.
    "ServerTLS(": [r"^sampled over mutual TLS: \[0 1 2 3\]$", r"^refused: invalid bearer token"],
    # The quickstart: the sampled trajectory, one ReplaySample per step, as written.
    "server.localhost_client()": [
        r"table_size=1\b",
        r"data=\[array\(2\), array\(12\)\].*data=\[array\(3\), array\(13\)\].*"
        r"data=\[array\(4\), array\(14\)\]",
    ],
    # The table engine: the ratio limiter's numbers the comments state.
    "from reverb_py.table import Item": [
        r"^396$",
        r"^the next sample waits for an insert$",
        r"^4 1001$",
    ],
    # The StructuredWriter: three transitions, in insertion order.
    "client.structured_writer(": [
        r"^10 \[0\.0, 1\.0\]\n11 \[1\.0, 2\.0\]\n12 \[2\.0, 3\.0\]$",
    ],
    # The asyncio client: 32 samples of observations written by 4 actors.
    "reverb.aio.Client(": [r"\A(\d+ \[.*\]\n){32}\Z"],
    # Learner input: three batches of 32 stacked samples.
    "data.TrajectoryIterator.from_table_signature(": [r"\A(\(32,\) \(32, 2, 3\)\n){3}\Z"],
    # The frameworks' blocks (learners): four batches of 16 each, as tensors or arrays.
    "reverb_torch.TrajectoryDataset.from_table_signature(": [r"\A(Tensor \(16, 3\)\n){4}\Z"],
    "reverb_jax.TrajectoryIterator.from_table_signature(": [r"\A(ArrayImpl \(16, 3\)\n){4}\Z"],
    "reverb.TrajectoryDataset.from_table_signature(": [r"(^EagerTensor \(16, 3\)\n){4}"],
}
SCRIPT_OUTPUT = {
    "actor_async.py": [
        r"^4 actors wrote 144 items into 'replay'$",
        r"^replay holds 144 items, episodes holds 8 summaries$",
        r"finished episodes.*:\n(  [0-3] [01] [+-]\d+\.\d+\n){8}",
    ],
    "learner.py": [r"^step  29: 32 samples from 500 items", r"^done: \d+ of 500 items"],
    "daemon_with_checkpoints.py": [
        r"^written: \{'replay': 150, 'episodes': 5\}$",
        r"^client\.checkpoint\(\) -> \S+",
        r"^restored: \{'replay': 150, 'episodes': 5\}$",
        r"^  episodes from the queue, in order: \[0, 1, 2, 3, 4\]$",
    ],
}


def expected_block_output(code: str) -> list[str]:
    return [
        pattern
        for marker, patterns in BLOCK_OUTPUT.items()
        if marker in code
        for pattern in patterns
    ]


BLOCKS = readme_blocks()
FRAMEWORK_BLOCKS = readme_blocks(FRAMEWORK_INFOS)
SCRIPTS = example_scripts()


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("code", [code for _, code in BLOCKS], ids=[i for i, _ in BLOCKS])
def test_readme_python_block_runs_as_a_script(code: str, tmp_path: pathlib.Path) -> None:
    script = tmp_path / "block.py"
    script.write_text(code, encoding="utf-8")
    check_run(run_script([str(script)], tmp_path), expected_block_output(code))


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("script", SCRIPTS, ids=[script.name for script in SCRIPTS])
def test_example_runs_to_completion(script: pathlib.Path, tmp_path: pathlib.Path) -> None:
    check_run(run_script([str(script)], tmp_path), SCRIPT_OUTPUT.get(script.name, []))


if FRAMEWORKS:

    @pytest.mark.frameworks
    @pytest.mark.timeout(TIMEOUT + 30)
    @pytest.mark.parametrize(
        "code", [code for _, code in FRAMEWORK_BLOCKS], ids=[i for i, _ in FRAMEWORK_BLOCKS]
    )
    def test_framework_block_runs_as_a_script(code: str, tmp_path: pathlib.Path) -> None:
        script = tmp_path / "block.py"
        script.write_text(code, encoding="utf-8")
        check_run(run_script([str(script)], tmp_path), expected_block_output(code))


@pytest.mark.parametrize(
    "code", [code for _, code in FRAMEWORK_BLOCKS], ids=[i for i, _ in FRAMEWORK_BLOCKS]
)
def test_framework_block_compiles(code: str) -> None:
    compile(code, "<block>", "exec")


def test_every_block_and_example_is_found() -> None:
    for document, least in MIN_BLOCKS.items():
        found = [block_id for block_id, _ in BLOCKS if block_id.startswith(f"{document}:")]
        assert len(found) >= least, (document, found)
    assert len(FRAMEWORK_BLOCKS) >= MIN_FRAMEWORK_BLOCKS, FRAMEWORK_BLOCKS
    assert EXPECTED_EXAMPLES <= {script.name for script in SCRIPTS}
    assert set(SCRIPT_OUTPUT) <= {script.name for script in SCRIPTS}
    for marker in BLOCK_OUTPUT:
        matching = [block_id for block_id, code in BLOCKS + FRAMEWORK_BLOCKS if marker in code]
        assert len(matching) == 1, (marker, matching)


def test_subprocesses_get_the_same_implementation(tmp_path: pathlib.Path) -> None:
    result = run_script(
        ["-c", "import reverb_py; print(reverb_py.__file__); print(reverb_py.IMPLEMENTATION)"],
        tmp_path,
    )
    check_run(result, [])
    path, implementation = result.stdout.split()
    assert pathlib.Path(path).resolve() == pathlib.Path(reverb_py.__file__).resolve()
    assert implementation == reverb_py.IMPLEMENTATION


def test_python_blocks_extraction() -> None:
    text = (
        "# Title\n"
        "```bash\nmake run\n```\n"
        "text\n"
        "```python\nprint(1)\n```\n"
        "````python\nx = '''\n```\n'''\n````\n"
        "~~~py\nprint(2)\n~~~\n"
        "```\nplain\n```\n"
        "```pycon\n>>> 1\n```\n"
        "```py-torch\nimport torch\n```\n"
    )
    assert python_blocks(text) == [
        (7, "print(1)\n"),
        (10, "x = '''\n```\n'''\n"),
        (15, "print(2)\n"),
    ]
    assert python_blocks(text, frozenset({"py-torch"})) == [(24, "import torch\n")]
    with pytest.raises(ValueError, match="line 1"):
        python_blocks("```python\nprint(1)\n")
