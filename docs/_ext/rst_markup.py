"""A griffe extension for the API reference: reverb_py's docstrings in Markdown.

The docstrings are Google style with Sphinx's cross-reference roles
(``:class:`reverb_py.aio.Client```, ``:meth:`sample```) and ``::`` before literal blocks.
mkdocstrings renders docstrings as Markdown, where a role would show as its raw text: each
becomes an optional cross-reference (``<autoref ... optional>``), a link where the target
is on the site and plain code where it is not (a private module, say), and ``text::``
becomes ``text:`` (the indented block after it is a code block in Markdown too).

``markdown_from_rst`` does the rewriting and needs nothing beyond the standard library
(the tests call it without griffe); ``RstMarkup`` applies it to every object griffe loads,
resolving a role's name from the object's scope (``:meth:`wait``` in a class is that
class's method).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any

_ROLE = re.compile(r":(?:py:)?(?:class|func|mod|meth|data|attr|exc|obj|const):`(?P<target>[^`]+)`")
_LITERAL_MARKER = re.compile(r"(?<=\S)::$", re.MULTILINE)
_LONE_MARKER = re.compile(r"^(?P<indent>[ \t]*)::$", re.MULTILINE)


def _identity(name: str) -> str:
    return name


def markdown_from_rst(text: str, resolve: Callable[[str], str] = _identity) -> str:
    """``text`` with Sphinx roles as optional cross-references and ``::`` as ``:``.

    Args:
      text: A docstring.
      resolve: Maps a role's name (``~`` and a leading ``.`` removed) to the full
        identifier to link to; the name itself by default.

    Returns:
      The docstring in Markdown.
    """

    def role(match: re.Match[str]) -> str:
        target = match["target"].strip()
        if target.startswith("!"):
            return f"<code>{html.escape(target[1:])}</code>"
        short = target.startswith("~")
        name = target.lstrip("~").lstrip(".")
        if not name:
            return f"<code>{html.escape(target)}</code>"
        title = name.rsplit(".", 1)[-1] if short else name
        identifier = resolve(name)
        return (
            f'<autoref identifier="{html.escape(identifier)}" optional>'
            f"<code>{html.escape(title)}</code></autoref>"
        )

    text = _ROLE.sub(role, text)
    text = _LONE_MARKER.sub("", text)
    return _LITERAL_MARKER.sub(":", text)


try:
    import griffe
except ImportError:  # Outside the docs environment only the function above is used.
    griffe = None

if griffe is not None:

    class RstMarkup(griffe.Extension):  # type: ignore[misc]
        """Rewrites the docstring of every object griffe loads (see the module docstring)."""

        def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
            if obj.docstring is None:
                return

            def resolve(name: str) -> str:
                head, _, rest = name.partition(".")
                try:
                    full = obj.resolve(head)
                except Exception:  # noqa: BLE001 - unresolved: link by the name as written.
                    return name
                return f"{full}.{rest}" if rest else full

            obj.docstring.value = markdown_from_rst(obj.docstring.value, resolve)
