"""An MkDocs hook: the benchmark charts of ``benchmarks/results/`` as site files.

The performance page shows ``benchmarks/compare.png`` and
``benchmarks/writers_window.png``; the charts stay where the benchmarks write them (one
copy in the repository), and the build adds them to the site under ``benchmarks/``.
"""

from __future__ import annotations

import pathlib
from typing import Any

from mkdocs.structure.files import File, Files

CHARTS = ("compare.png", "writers_window.png")


def on_files(files: Files, config: Any) -> Files:
    results = pathlib.Path(config.config_file_path).parent / "benchmarks" / "results"
    for name in CHARTS:
        files.append(File.generated(config, f"benchmarks/{name}", abs_src_path=str(results / name)))
    return files
