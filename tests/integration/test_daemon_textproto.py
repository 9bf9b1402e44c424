"""``python -m reverb_py.server --config`` with Reverb's ``ReverbServerConfig`` textproto,
and per-table signatures in the TOML config."""

from __future__ import annotations

import signal

import grpc
import numpy as np
import pytest
from google.protobuf import text_format

import reverb_py
from reverb_py._codec.signature import encode_signature
from reverb_py._proto import reverb_service_pb2 as pb
from reverb_py.errors import ConfigError
from reverb_py.server import _daemon
from reverb_py.server_executable import server_from_proto, server_main
from tests.integration.test_daemon import read_address, start

# The shape of the example in Reverb's server-executable documentation (port, one FIFO
# table with an unbounded rate limiter), with a second, prioritized table.
REVERB_EXAMPLE = """\
port: 0
tables: {
  table_name: "my_table"
  sampler: { fifo: true }
  remover: { fifo: true }
  max_size: 200
  max_times_sampled: 5
  rate_limiter: {
    min_size_to_sample: 1
    samples_per_insert: 1
    min_diff: -1.7976931348623157e+308
    max_diff: 1.7976931348623157e+308
  }
}
tables {
  # a comment, as textprotos allow
  table_name: 'prioritized'
  sampler { prioritized { priority_exponent: 0.8 } }
  remover { heap { min_heap: true } }
  max_size: 1000
  rate_limiter { samples_per_insert: 4 min_size_to_sample: 10 min_diff: -40 max_diff: 40 }
}
"""


def _server_info(address: str) -> pb.ServerInfoResponse:
    with grpc.insecure_channel(address) as channel:
        response: pb.ServerInfoResponse = channel.unary_unary(
            "/deepmind.reverb.ReverbService/ServerInfo",
            request_serializer=pb.ServerInfoRequest.SerializeToString,
            response_deserializer=pb.ServerInfoResponse.FromString,
        )(pb.ServerInfoRequest(), timeout=30)
    return response


def _serve_and_stop(*args: str) -> pb.ServerInfoResponse:
    process = start(*args)
    try:
        info = _server_info(read_address(process))
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
        assert process.returncode == 0, output
        return info
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def _check_example_tables(info: pb.ServerInfoResponse) -> None:
    tables = {table.name: table for table in info.table_info}
    assert sorted(tables) == ["my_table", "prioritized"]
    fifo = tables["my_table"]
    assert fifo.sampler_options.fifo and fifo.remover_options.fifo
    assert fifo.max_size == 200 and fifo.max_times_sampled == 5
    assert fifo.rate_limiter_info.min_diff == -1.7976931348623157e308
    prioritized = tables["prioritized"]
    assert prioritized.sampler_options.prioritized.priority_exponent == pytest.approx(0.8)
    assert prioritized.remover_options.heap.min_heap
    assert prioritized.rate_limiter_info.samples_per_insert == 4
    assert prioritized.rate_limiter_info.min_size_to_sample == 10


def test_daemon_serves_a_textproto_file(tmp_path) -> None:
    config = tmp_path / "reverb.textproto"
    config.write_text(REVERB_EXAMPLE)
    _check_example_tables(_serve_and_stop("--config", str(config)))


def test_daemon_takes_the_textproto_itself_as_reverb_server_does() -> None:
    _check_example_tables(_serve_and_stop("--config", REVERB_EXAMPLE))


def test_checkpoint_dir_from_the_command_line(tmp_path) -> None:
    directory = tmp_path / "checkpoints"
    process = start("--config", REVERB_EXAMPLE, "--checkpoint_dir", str(directory))
    try:
        address = read_address(process)
        with grpc.insecure_channel(address) as channel:
            response = channel.unary_unary(
                "/deepmind.reverb.ReverbService/Checkpoint",
                request_serializer=pb.CheckpointRequest.SerializeToString,
                response_deserializer=pb.CheckpointResponse.FromString,
            )(pb.CheckpointRequest(), timeout=30)
        assert response.checkpoint_path.startswith(str(directory))
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
        assert process.returncode == 0, output
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


@pytest.mark.parametrize(
    "text, expected",
    [
        ('tables {\n  table_name: "a"\n  max_sise: 3\n}', 'line 3: .*no field named "max_sise"'),
        ('port: "x"', "line 1: .*port"),
        ("tables {\n  table_name: 'a'\n", "line 2: Expected"),  # never closed
        (
            REVERB_EXAMPLE.replace("max_size: 1000", "max_size: 0"),
            "line 20: tables\\[1\\].max_size: must be positive, got 0",
        ),
        (
            REVERB_EXAMPLE.replace("sampler: { fifo: true }", "sampler: { fifo: false }"),
            "line 4: tables\\[0\\]\\.sampler: distribution=fifo but the associated boolean",
        ),
        (
            REVERB_EXAMPLE.replace("min_size_to_sample: 10", "min_size_to_sample: 0"),
            "line 21: tables\\[1\\]\\.rate_limiter: .*min_size_to_sample",
        ),
        (
            REVERB_EXAMPLE.replace("table_name: 'prioritized'", "table_name: 'my_table'"),
            "line 17: tables\\[1\\]\\.table_name: duplicate table name 'my_table'",
        ),
        (
            'tables { table_name: "a" sampler { uniform: true } }',
            "line 1: tables\\[0\\]\\.remover: missing",
        ),
        (
            REVERB_EXAMPLE.replace("priority_exponent: 0.8", "priority_exponent: -1"),
            "line 18: tables\\[1\\]\\.sampler: .*exponent",
        ),
        ("port: 70000", "line 1: port: must be in 0..65535"),
    ],
)
def test_a_bad_textproto_names_the_field_and_line(tmp_path, text, expected) -> None:
    with pytest.raises(ConfigError, match=expected):
        server_from_proto.parse_config(text, "reverb.textproto")
    config = tmp_path / "reverb.textproto"
    config.write_text(text)
    process = start("--config", str(config))
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 2, output
    assert "bad config" in output and str(config) in output


def test_a_config_that_is_neither_file_nor_textproto_is_refused(tmp_path) -> None:
    missing = str(tmp_path / "missing.textproto")
    assert server_main.main(["--config", missing]) == 2
    with pytest.raises(ConfigError, match="cannot read config"):
        _daemon.read_config(str(tmp_path / "missing.toml"))


def test_textproto_tables_carry_their_signature() -> None:
    signature = {
        "observation": reverb_py.TensorSpec([2, None], np.float32, "observation"),
        "action": reverb_py.TensorSpec([], np.int64),
    }
    text = (
        'tables { table_name: "t" sampler { uniform: true } remover { fifo: true } '
        "max_size: 10 rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 "
        "min_diff: -1 max_diff: 1 } signature { "
        + text_format.MessageToString(encode_signature(signature), as_one_line=True)
        + " } }"
    )
    config = server_from_proto.parse_config(text)
    [table] = server_from_proto.tables_from_proto(config.tables)
    assert table.info.signature == signature
    assert isinstance(
        server_from_proto.selector_from_proto(config.tables[0].sampler), reverb_py.selectors.Uniform
    )
    limiter = server_from_proto.rate_limiter_from_proto(config.tables[0].rate_limiter)
    assert isinstance(limiter, reverb_py.rate_limiters.RateLimiter)


def test_toml_tables_carry_their_signature() -> None:
    config = {
        "tables": [
            {
                "name": "t",
                "max_size": 10,
                "sampler": {"kind": "uniform"},
                "remover": {"kind": "fifo"},
                "rate_limiter": {"kind": "min_size", "min_size_to_sample": 1},
                "signature": {
                    "observation": {"dtype": "float32", "shape": [84, -1], "name": "obs"},
                    "steps": [{"dtype": "int32"}, {"dtype": "bool", "shape": [3]}],
                },
            }
        ]
    }
    [table] = _daemon.tables_from_config(config)
    assert table.info.signature == {
        "observation": reverb_py.TensorSpec([84, None], np.float32, "obs"),
        "steps": [reverb_py.TensorSpec([], np.int32), reverb_py.TensorSpec([3], np.bool_)],
    }


@pytest.mark.parametrize(
    "signature, field",
    [
        ({"x": {"dtype": "float32", "shape": ["a"]}}, "tables[0].signature.x.shape"),
        ({"x": {"dtype": "no_such_type"}}, "tables[0].signature.x.dtype"),
        ({"x": {"dtype": "int8", "size": 3}}, "tables[0].signature.x.size"),
        ({"x": 3}, "tables[0].signature.x"),
        ({"x": [{"dtype": "int8", "shape": [-2]}]}, "tables[0].signature.x[0].shape"),
    ],
)
def test_a_bad_toml_signature_names_the_field(signature, field) -> None:
    entry = {
        "name": "t",
        "max_size": 10,
        "sampler": {"kind": "uniform"},
        "remover": {"kind": "fifo"},
        "rate_limiter": {"kind": "min_size", "min_size_to_sample": 1},
        "signature": signature,
    }
    with pytest.raises(ConfigError) as raised:
        _daemon.tables_from_config({"tables": [entry]})
    assert str(raised.value).startswith(field), str(raised.value)
