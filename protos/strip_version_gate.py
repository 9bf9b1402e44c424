"""Remove the protobuf runtime version gate from generated ``*_pb2.py`` modules.

protoc 26 and later make every generated module call
``runtime_version.ValidateProtobufRuntimeVersion(...)`` at import, which refuses any
protobuf runtime older than the generator (7.35 for the committed modules). Nothing else
in these modules needs a new runtime: they use the descriptor-pool builder that protobuf
has shipped since 3.20, so without the gate they import on protobuf 4.21 through 7.x
(`make test-protobuf-oldest` proves the oldest end). `make protos` runs this after protoc;
running it twice changes nothing.

Usage: ``python protos/strip_version_gate.py FILE_pb2.py ...``
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_IMPORT = "from google.protobuf import runtime_version as _runtime_version\n"
# The call spans several lines: ``_runtime_version.ValidateProtobufRuntimeVersion(`` up to
# the closing parenthesis alone on its line.
_CALL = re.compile(r"^_runtime_version\.ValidateProtobufRuntimeVersion\(\n(?:.*\n)*?\)\n", re.M)
_NOTE = (
    "# Runtime version gate removed by protos/strip_version_gate.py: runs on protobuf >= 4.21.\n"
)
_HEADER = re.compile(r"^# Protobuf Python Version: .*\n", re.M)


def strip(source: str) -> str:
    """Returns ``source`` without the version gate (unchanged if it has none)."""
    if _IMPORT not in source and _NOTE in source:
        return source
    if _IMPORT not in source or not _CALL.search(source):
        raise ValueError("no runtime version gate found: has protoc's output changed?")
    source = source.replace(_IMPORT, "")
    source = _CALL.sub("", source, count=1)
    header = _HEADER.search(source)
    if header is None:
        raise ValueError("no '# Protobuf Python Version' header found")
    return source[: header.end()] + _NOTE + source[header.end() :]


def main(paths: list[str]) -> int:
    for name in paths:
        path = Path(name)
        try:
            stripped = strip(path.read_text(encoding="utf-8"))
        except ValueError as error:
            print(f"{path}: {error}", file=sys.stderr)
            return 1
        path.write_text(stripped, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
