"""The documentation site's sources: ``mkdocs.yml``'s nav, the API reference's coverage of
the public names, the README's shape, and the docstring markup rewriting of the API
reference (``docs/_ext/rst_markup.py``).

``make docs`` builds the site itself (strictly: a broken link or docstring fails it); these
checks need no MkDocs.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re
import types
from typing import Any

import pytest
import yaml

import reverb_py

ROOT = pathlib.Path(__file__).parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"


def mkdocs_config() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    return config


def nav_pages(nav: Any) -> list[str]:
    """Every page a MkDocs nav names, in order."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for entry in nav for page in nav_pages(entry)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    raise TypeError(f"unexpected nav entry {nav!r}")


def excluded(path: str, config: dict[str, Any]) -> bool:
    """Whether ``exclude_docs`` (folder patterns such as ``/_ext/``) leaves out ``path``."""
    patterns = (config.get("exclude_docs") or "").split()
    return any(path.startswith(pattern.strip("/") + "/") for pattern in patterns)


def test_nav_lists_every_page_and_only_pages_that_exist() -> None:
    config = mkdocs_config()
    assert config["docs_dir"] == "docs"
    pages = nav_pages(config["nav"])
    assert len(pages) == len(set(pages)), "a page is listed twice"
    on_disk = {
        path.relative_to(DOCS).as_posix()
        for path in DOCS.rglob("*.md")
        if not excluded(path.relative_to(DOCS).as_posix(), config)
    }
    assert sorted(on_disk - set(pages)) == [], "pages under docs/ missing from the nav"
    assert sorted(set(pages) - on_disk) == [], "nav entries without a page"


def test_nav_has_the_user_pages() -> None:
    pages = set(nav_pages(mkdocs_config()["nav"]))
    assert {
        "index.md",
        "getting-started.md",
        "concepts.md",
        "configuration.md",
        "operations.md",
        "security.md",
        "learners.md",
        "migrating.md",
        "troubleshooting.md",
        "architecture.md",
        "compatibility.md",
        "reliability.md",
        "api/index.md",
    } <= pages


def api_directives() -> set[str]:
    """The objects the API reference renders (``::: path`` lines of ``docs/api/``)."""
    return {
        match.group(1)
        for page in (DOCS / "api").glob("*.md")
        for match in re.finditer(r"^::: (\S+)", page.read_text(encoding="utf-8"), re.MULTILINE)
    }


# Modules of reverb_py.__all__ that are Reverb's module paths only (re-exports), listed on
# the package's page rather than rendered.
REVERB_MODULE_PATHS = {"cc", "libpybind", "platform", "pybind", "reverb_types", "server_executable"}


def test_the_api_reference_covers_the_public_names() -> None:
    directives = api_directives()
    for module in (
        "reverb_py.aio",
        "reverb_py.checkpointers",
        "reverb_py.client",
        "reverb_py.data",
        "reverb_py.errors",
        "reverb_py.item_selectors",
        "reverb_py.jax",
        "reverb_py.rate_limiters",
        "reverb_py.server",
        "reverb_py.structured_writer",
        "reverb_py.table",
        "reverb_py.torch",
        "reverb_py.trajectory_writer",
    ):
        assert module in directives, module
    package_page = (DOCS / "api" / "reverb_py.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"`(?:reverb_py\.)?([A-Za-z_]+)`", package_page))
    for name in reverb_py.__all__:
        if name.startswith("__"):
            continue
        assert name in listed, f"reverb_py.{name} is not on docs/api/reverb_py.md"
        value = getattr(reverb_py, name)
        if isinstance(value, types.ModuleType) and name not in REVERB_MODULE_PATHS:
            # item_selectors is rendered for selectors, structured_writer for structured.
            rendered = {value.__name__, value.__name__.replace(".selectors", ".item_selectors")}
            assert rendered & directives, f"module reverb_py.{name} has no API page"


def section(text: str, heading: str) -> list[str]:
    """The lines of a ``## heading`` section (up to the next ``## ``), blank ends dropped."""
    lines = text.splitlines()
    start = lines.index(f"## {heading}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    body = lines[start:end]
    while body and not body[-1].strip():
        body.pop()
    return body


def test_readme_is_short_and_starts_with_the_install() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    headings = re.findall(r"^## (.+)$", text, re.MULTILINE)
    assert headings[0] == "Install", headings
    assert len(section(text, "Quickstart")) <= 40
    performance = section(text, "Performance")
    assert len(performance) <= 20
    assert any("benchmarks/results/compare.png" in line for line in performance)
    assert any("benchmarks/README.md" in line for line in performance)
    # The two commands for working on the project stay.
    assert re.search(r"^make run\b", text, re.MULTILINE)
    assert re.search(r"^make test\b", text, re.MULTILINE)


def test_readme_links_resolve() -> None:
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    assert local, "no relative links found"
    for link in local:
        assert (ROOT / link).exists(), link


def load_rst_markup() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("rst_markup", DOCS / "_ext" / "rst_markup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def markdown_from_rst() -> Any:
    return load_rst_markup().markdown_from_rst


def test_roles_become_optional_cross_references(markdown_from_rst: Any) -> None:
    assert markdown_from_rst("See :class:`reverb_py.aio.Client`.") == (
        'See <autoref identifier="reverb_py.aio.Client" optional>'
        "<code>reverb_py.aio.Client</code></autoref>."
    )
    # A ~ shows the last name only; a leading dot is dropped.
    assert markdown_from_rst(":meth:`~reverb_py.Client.sample`") == (
        '<autoref identifier="reverb_py.Client.sample" optional><code>sample</code></autoref>'
    )
    assert 'identifier="_status_page"' in markdown_from_rst(":mod:`._status_page`")
    # Every role Sphinx's Python domain has, and none left behind.
    for role in ("class", "func", "mod", "meth", "data", "attr", "exc", "obj", "py:class"):
        assert ":" + role + ":" not in markdown_from_rst(f":{role}:`x`")


def test_names_resolve_from_the_objects_scope(markdown_from_rst: Any) -> None:
    scope = {"Table": "reverb_py.table.Table"}
    text = markdown_from_rst(":meth:`Table.sample`", lambda name: scope.get(name, name))
    assert 'identifier="Table.sample"' in text  # the resolver gets the whole name
    text = markdown_from_rst(":class:`Table`", lambda name: scope.get(name.partition(".")[0], name))
    assert 'identifier="reverb_py.table.Table"' in text and "<code>Table</code>" in text


def test_literal_block_markers_become_colons(markdown_from_rst: Any) -> None:
    assert markdown_from_rst("Example::\n\n    x = 1\n") == "Example:\n\n    x = 1\n"
    assert markdown_from_rst("Text.\n\n::\n\n    x = 1\n") == "Text.\n\n\n\n    x = 1\n"
    # Double colons inside a line, or inside code, stay.
    assert markdown_from_rst("a :: b, ``x::y``") == "a :: b, ``x::y``"


def test_markup_of_html_is_escaped(markdown_from_rst: Any) -> None:
    assert "<code>a&lt;b</code>" in markdown_from_rst(":class:`!a<b`")
