"""The same ``ReverbServerConfig`` textproto builds the same tables in dm-reverb
(``reverb/server_executable/server_from_proto.py``, in a child process) and in
reverb_py (``reverb_py.server_executable.server_from_proto``), and both refuse the same
bad settings."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from reverb_py._proto import schema_pb2
from reverb_py.errors import ConfigError
from reverb_py.server_executable import server_from_proto
from tests.integration.test_daemon_textproto import REVERB_EXAMPLE

from . import _procs

HERE = Path(__file__).resolve().parent

HEAP_AND_LIFO = """
tables {
  table_name: "heap"
  sampler { heap { min_heap: false } }
  remover { lifo: true }
  max_size: 7
  rate_limiter { samples_per_insert: 0.5 min_size_to_sample: 3 min_diff: -2 max_diff: 9 }
}
tables {
  table_name: "uniform"
  sampler { uniform: true }
  remover { heap { min_heap: true } }
  max_size: 1
  max_times_sampled: 1
  rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 min_diff: -1 max_diff: 1 }
}
"""


# Not here: min_size_to_sample 0, which dm-reverb's rate limiter meets with a failed
# CHECK that aborts the process (reverb_py refuses it with the line; see the daemon tests).
BAD_CONFIGS = {
    "fifo-false": 'tables { table_name: "a" sampler { fifo: false } remover { fifo: true } '
    "max_size: 3 rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 min_diff: -1 "
    "max_diff: 1 } }",
    "unknown-field": 'tables { table_name: "a" nonsense: 1 }',
}
GOOD_CONFIGS = {"reverb-example": REVERB_EXAMPLE, "heaps": HEAP_AND_LIFO}


@pytest.fixture(scope="module")
def dm_answers(dm_python: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """dm-reverb's answer for every config, from one child process (one TensorFlow import)."""
    configs = {**GOOD_CONFIGS, **BAD_CONFIGS}
    env = _procs.child_env()
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    result = subprocess.run(
        [dm_python, str(HERE / "dm_tables_from_textproto.py")],
        input=json.dumps(list(configs.values())),
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path_factory.mktemp("textproto"),
        timeout=_procs.STARTUP_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return dict(zip(configs, json.loads(result.stdout)))


def _settings(info: schema_pb2.TableInfo) -> tuple[object, ...]:
    limiter = info.rate_limiter_info
    return (
        info.name,
        info.sampler_options.SerializeToString(deterministic=True),
        info.remover_options.SerializeToString(deterministic=True),
        info.max_size,
        info.max_times_sampled,
        (
            limiter.samples_per_insert,
            limiter.min_size_to_sample,
            limiter.min_diff,
            limiter.max_diff,
        ),
    )


@pytest.mark.parametrize("name", sorted(GOOD_CONFIGS))
def test_the_same_textproto_builds_the_same_tables(dm_answers: dict[str, Any], name: str) -> None:
    dm_infos = []
    for encoded in dm_answers[name]:
        info = schema_pb2.TableInfo()
        info.ParseFromString(base64.b64decode(encoded))
        dm_infos.append(_settings(info))
    config = server_from_proto.parse_config(GOOD_CONFIGS[name])
    tables = server_from_proto.tables_from_proto(config.tables)
    assert [_settings(table.info_proto()) for table in tables] == dm_infos


@pytest.mark.parametrize("name", sorted(BAD_CONFIGS))
def test_both_refuse_the_same_bad_configs(dm_answers: dict[str, Any], name: str) -> None:
    answer = dm_answers[name]
    assert isinstance(answer, str) and answer.startswith("refused: "), answer
    with pytest.raises(ConfigError):
        server_from_proto.parse_config(BAD_CONFIGS[name])
