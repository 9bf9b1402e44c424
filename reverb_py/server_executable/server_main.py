"""Reverb's ``reverb_server`` executable: serves the tables of a ``ReverbServerConfig``.

``--config`` takes the textproto itself, as Reverb's does
(``--config='port: 8000 tables { ... }'``), or the name of a file holding it; ``--port``
and ``--host`` override. It runs :func:`reverb_py.server._daemon.main` (signals,
checkpoint options and exit statuses as documented there).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from reverb_py.server import _daemon

__all__ = ["app_run_main", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the server until SIGINT or SIGTERM; returns the exit status."""
    return _daemon.main(argv)


def app_run_main() -> None:
    """The console entry point: :func:`main` of ``sys.argv``, then exit with its status."""
    sys.exit(main(sys.argv[1:]))


if __name__ == "__main__":
    app_run_main()
