"""Reverb's ``reverb.server_executable.reverb_config_pb2``: :class:`ReverbServerConfig`
(generated in :mod:`reverb_py._proto.reverb_config_pb2`)."""

from reverb_py._proto.reverb_config_pb2 import DESCRIPTOR, ReverbServerConfig

__all__ = ["DESCRIPTOR", "ReverbServerConfig"]
