"""Reverb's server executable (``reverb.server_executable``): a server configured by a
``ReverbServerConfig`` textproto.

:mod:`~reverb_py.server_executable.server_from_proto` builds tables from the config;
:mod:`~reverb_py.server_executable.server_main` is the executable (``python -m
reverb_py.server --config FILE.textproto`` does the same).
"""

from reverb_py.server_executable import reverb_config_pb2

__all__ = ["reverb_config_pb2"]
