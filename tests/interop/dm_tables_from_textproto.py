"""Builds dm-reverb's tables from ``ReverbServerConfig`` textprotos, as
``reverb_server --config`` does. Reads a JSON list of textprotos on stdin; writes a JSON
list with, for each, the ``TableInfo`` of every table (base64) or ``"refused: <error>"``.
Run in the dm-reverb environment by ``test_textproto_config.py``."""

from __future__ import annotations

import base64
import json
import sys

from google.protobuf import text_format
from reverb.server_executable import reverb_config_pb2, server_from_proto


def tables_of(text: str) -> list[str] | str:
    config = reverb_config_pb2.ReverbServerConfig()
    try:
        text_format.Parse(text, config)
        tables = server_from_proto.tables_from_proto(config.tables)
    except Exception as error:  # noqa: BLE001 - what dm-reverb refuses is the answer
        return f"refused: {type(error).__name__}: {error}"
    return [base64.b64encode(table.internal_table.info()).decode() for table in tables]


if __name__ == "__main__":
    json.dump([tables_of(text) for text in json.load(sys.stdin)], sys.stdout)
