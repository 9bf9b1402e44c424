"""Programs whose tf.data pipelines still read reverb_py datasets end by themselves.

Each run is a new interpreter (``programs/live_pipeline_at_exit.py``) that acts, learns
on a thread that never stops, and ends without stopping anything. ``make test-exit``
runs it 50 times (``REVERB_PY_EXIT_RUNS``); the frameworks suite a few times.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

PROGRAM = Path(__file__).parent / "programs" / "live_pipeline_at_exit.py"
RUNS = int(os.environ.get("REVERB_PY_EXIT_RUNS", "4"))
LIMIT_S = 90.0

# TensorFlow's own start-up lines (absl logging before InitializeLog, oneDNN, CUDA).
_TF_NOISE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\)|[IWE]\d{4} .*"
    r"(port\.cc|cudart_stub\.cc|cpu_feature_guard\.cc|cuda_platform\.cc|cuda_executor\.cc|"
    r"generator_dataset_op\.cc|mlir_graph_optimization_pass\.cc)|"
    r"To enable the following instructions:)"
)


def _run(index: int) -> tuple[int, str]:
    try:
        done = subprocess.run(
            [sys.executable, str(PROGRAM)], capture_output=True, text=True, timeout=LIMIT_S
        )
    except subprocess.TimeoutExpired:
        return index, f"did not end within {LIMIT_S:.0f} s"
    if done.returncode != 0:
        return index, f"exit status {done.returncode}: {done.stderr[-2000:]}"
    if "acted" not in done.stdout:
        return index, f"did not act: {done.stdout!r}"
    logged = [line for line in done.stderr.splitlines() if line and not _TF_NOISE.match(line)]
    if logged:
        return index, "logged:\n" + "\n".join(logged[-20:])
    return index, ""


# Each run ends within LIMIT_S (or counts as a failure): the whole test is bounded by that.
@pytest.mark.timeout(RUNS * LIMIT_S)
def test_a_program_ends_by_itself_while_its_pipeline_reads() -> None:
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(_run, range(RUNS)))
    failed = [f"run {index}: {problem}" for index, problem in results if problem]
    assert not failed, f"{len(failed)} of {RUNS} runs:\n" + "\n\n".join(failed)
