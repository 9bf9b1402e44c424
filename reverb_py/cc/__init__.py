"""Reverb's ``reverb.cc`` module path: its generated protobuf modules.

The messages are reverb_py's own (``reverb_py._proto``): the same fields and numbers as
Reverb's, so bytes parse and serialise identically, under the ``reverb_py.proto``
package name (see ``protos/README.md``).
"""

from reverb_py.cc import checkpointing, patterns_pb2, schema_pb2

__all__ = ["checkpointing", "patterns_pb2", "schema_pb2"]
