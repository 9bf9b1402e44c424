"""The replay server: tables served over gRPC with Reverb's protocol.

Run it as a daemon with ``python -m reverb_py.server`` (``__main__.py`` here; the daemon
itself is :mod:`reverb_py.server._daemon`). ``Table`` is re-exported as Reverb's
``reverb.server.Table``. :func:`configure_logging` sets up a server process's log lines
(text or JSON), as the daemon does.
"""

from reverb_py.server._auth import ServerTLS
from reverb_py.server._limits import ServerLimits
from reverb_py.server._logs import configure_logging
from reverb_py.server._server import Server
from reverb_py.table import Table, TableExtensionBase

__all__ = [
    "Server",
    "ServerLimits",
    "ServerTLS",
    "Table",
    "TableExtensionBase",
    "configure_logging",
]
