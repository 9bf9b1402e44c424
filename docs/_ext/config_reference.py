"""An MkDocs hook: the daemon's configuration reference, inserted into its page.

``docs/configuration.md`` holds markers, one line each, ``<!-- config-reference: PART
-->``; the build replaces each with ``reverb_py.server._daemon.config_reference(PART)``,
rendered from the settings the daemon validates with, so the page cannot drift from
the daemon. The page must hold every part; an unknown part fails the build.
"""

from __future__ import annotations

import re
from typing import Any

MARKER = re.compile(r"^<!-- config-reference: (\w+) -->$", re.MULTILINE)
PAGE = "configuration.md"


def insert_reference(markdown: str, page: str) -> str:
    """``markdown`` with its markers replaced by the reference's parts.

    Raises:
      ValueError: an unknown part, or ``PAGE`` without every part once.
    """
    from reverb_py.server import _daemon

    found = MARKER.findall(markdown)
    if page == PAGE and sorted(found) != sorted(_daemon.REFERENCE_PARTS):
        raise ValueError(
            f"{page}: the markers name {found}; every part once is needed: "
            f"{list(_daemon.REFERENCE_PARTS)}"
        )
    return MARKER.sub(lambda match: _daemon.config_reference(match.group(1)), markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    try:
        return insert_reference(markdown, page.file.src_uri)
    except ValueError as error:
        from mkdocs.exceptions import PluginError

        raise PluginError(str(error)) from None
