"""Protocol buffer modules generated from ``protos/reverb_py/_proto/*.proto``.

Do not edit the ``*_pb2.py`` / ``*_pb2.pyi`` files: regenerate them with ``make protos``
(see ``protos/README.md``). The messages are wire-compatible with Reverb's
``deepmind.reverb`` and TensorFlow's ``tensorflow`` messages but live in the
``reverb_py.proto`` and ``reverb_py.tensorflow`` proto packages.

:data:`SERVICE` is the gRPC service name both ends use: Reverb's, not the one the
``.proto`` declaration would give, so that Reverb's clients and servers interoperate.
"""

SERVICE = "deepmind.reverb.ReverbService"
"""The gRPC service of every RPC: methods are at ``/deepmind.reverb.ReverbService/<Method>``."""

EXTENSION_SERVICE = "reverb_py.ReverbPyService"
"""The service of the methods a reverb_py server adds to Reverb's (its clients fall back
to Reverb's methods where a server answers UNIMPLEMENTED)."""
