"""The package's layers: every import points down (or sideways), and none closes a cycle.

Reads the sources (``reverb_py/**/*.py`` and ``_speedups/*.pyx``) with the ``ast`` module;
nothing is imported. The layers, lowest first, are the ones docs/architecture.md draws.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).parents[2]
PACKAGE = ROOT / "reverb_py"

# Lowest first. A module belongs to the first layer with a pattern that matches its name.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "leaves",
        (
            r"reverb_py\.errors",
            r"reverb_py\._proto(\..*)?",
            r"reverb_py\._status",
            r"reverb_py\._gc",
            r"reverb_py\._secrets",
            r"reverb_py\._loop_thread",
            r"reverb_py\._grpc_settings",
            r"reverb_py\.tensor_spec",
            r"reverb_py\.replay_sample",
            r"reverb_py\._codec",
            r"reverb_py\._codec\.(fields|dtypes|nest)",
            r"reverb_py\._pure\._common",
            r"reverb_py\.cc(\..*)?",
            r"reverb_py\._as_reverb",
        ),
    ),
    (
        "twins",
        (
            r"reverb_py\._pure(\..*)?",
            r"reverb_py\._speedups(\.(?!internal_writer|trajectory_writer).*)?",
        ),
    ),
    ("selection", (r"reverb_py\._impl",)),
    ("codec", (r"reverb_py\._codec\..*",)),
    ("engine parts", (r"reverb_py\.(item_selectors|selectors|rate_limiters|reverb_types)",)),
    ("table", (r"reverb_py\.table",)),
    ("table extensions", (r"reverb_py\.table_extensions",)),
    (
        "storage",
        (r"reverb_py\._storage(\..*)?", r"reverb_py\.checkpointers", r"reverb_py\.platform(\..*)?"),
    ),
    ("client transport", (r"reverb_py\._client(\..*)?",)),
    (
        "writers",
        (
            r"reverb_py\._writer(\..*)?",
            r"reverb_py\._speedups\.(internal_writer|trajectory_writer)",
            r"reverb_py\.trajectory_writer",
            r"reverb_py\.structured_writer",
        ),
    ),
    ("asyncio client", (r"reverb_py\.aio",)),
    ("blocking client", (r"reverb_py\.client",)),
    ("server", (r"reverb_py\.server(\..*)?", r"reverb_py\.server_executable(\..*)?")),
    ("datasets", (r"reverb_py\.data",)),
    (
        "framework adapters",
        (
            r"reverb_py\.(torch|jax|ray|_tf_data|tf_client|trajectory_dataset|timestep_dataset"
            r"|pattern_dataset)",
        ),
    ),
    ("Reverb's native names", (r"reverb_py\.(lib)?pybind",)),
    ("package", (r"reverb_py",)),
    ("command line", (r"reverb_py\.cli", r"reverb_py\.__main__", r"reverb_py\.run")),
]


def layer_of(module: str) -> int:
    for index, (_, patterns) in enumerate(LAYERS):
        if any(re.fullmatch(pattern, module) for pattern in patterns):
            return index
    raise AssertionError(f"{module} is in no layer: add it to LAYERS (and to the docs)")


def sources() -> dict[str, pathlib.Path]:
    found: dict[str, pathlib.Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "_proto" in path.parts and path.name != "__init__.py":
            continue  # generated
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    for path in sorted((ROOT / "_speedups").glob("*.pyx")):
        found[f"reverb_py._speedups.{path.stem}"] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


_PYX_IMPORT = re.compile(
    r"^[ \t]*from[ \t]+(reverb_py[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#]*)"
    r"|^[ \t]*import[ \t]+(reverb_py[\w.]*)",
    re.M,
)


def _pyx_imports(text: str) -> list[tuple[str, int]]:
    """Python-level imports of a .pyx file (``cimport`` of .pxd files is C, not counted)."""
    found = []
    for match in _PYX_IMPORT.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        if match.group(3):
            found.append((match.group(3), line))
            continue
        base = match.group(1)
        found.append((base, line))
        for name in re.split(r"[\s,()]+", match.group(2)):
            name = name.split(" as ")[0]
            if name and name != "as" and name.isidentifier():
                found.append((f"{base}.{name}", line))
    return found


def imports_of(module: str, path: pathlib.Path, known: set[str]) -> list[tuple[str, int, bool]]:
    """``(imported module, line, at import time)`` for each import of one of ours."""
    text = path.read_text()

    def longest_known(name: str) -> str:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name

    if path.suffix == ".pyx":
        # Taken as running at import time, wherever they stand.
        return [
            (target, line, True)
            for name, line in _pyx_imports(text)
            if (target := longest_known(name)) and target != module
        ]
    tree = ast.parse(text)
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, at_import_time: bool) -> None:
        for child in ast.iter_child_nodes(node):
            runs = at_import_time
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                runs = False
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for grandchild in child.body:
                    visit_one(grandchild, False)
                for grandchild in child.orelse:
                    visit_one(grandchild, runs)
                continue
            visit_one(child, runs)

    def visit_one(node: ast.AST, at_import_time: bool) -> None:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, path.name == "__init__.py", node)
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for name in names:
            target = longest_known(name)
            if target and target != module:
                found.append((target, getattr(node, "lineno", 0), at_import_time))
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            visit(node, at_import_time)

    visit(tree, True)
    return found


def graph() -> dict[str, list[tuple[str, int, bool]]]:
    files = sources()
    known = set(files)
    return {module: imports_of(module, path, known) for module, path in files.items()}


def test_every_module_is_in_a_layer() -> None:
    for module in sources():
        layer_of(module)


def test_imports_point_down() -> None:
    upward = []
    for module, imported in graph().items():
        for target, line, _ in imported:
            if target == "reverb_py" or module.startswith(target + "."):
                continue  # a package's own __init__ (a docstring) or a parent package
            if layer_of(target) > layer_of(module):
                upward.append(
                    f"{module}:{line} imports {target} "
                    f"({LAYERS[layer_of(module)][0]} -> {LAYERS[layer_of(target)][0]})"
                )
    assert not upward, "imports that point up:\n" + "\n".join(upward)


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                return stack[stack.index(target) :] + [target]
            if target not in state:
                found = walk(target)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = walk(node)
            if found:
                return found
    return None


def test_no_import_cycle_at_import_time() -> None:
    edges = {
        module: {
            target
            for target, _, at_import_time in imported
            if at_import_time and target != "reverb_py" and not module.startswith(target + ".")
        }
        for module, imported in graph().items()
    }
    cycle = _cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_checks_see_a_cycle_and_an_upward_import() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    assert layer_of("reverb_py.server._server") > layer_of("reverb_py.table")
    known = {"reverb_py.table", "reverb_py._codec.signature", "reverb_py._impl"}
    imported = imports_of("reverb_py.table", PACKAGE / "table.py", known)
    assert ("reverb_py._impl", True) in {(target, now) for target, _, now in imported}
    assert ("reverb_py._codec.signature", False) in {(t, now) for t, _, now in imported}


@pytest.mark.parametrize("module", ["reverb_py._codec.fields", "reverb_py._pure._common"])
def test_leaves_import_only_leaves(module: str) -> None:
    for target, line, _ in graph()[module]:
        if target != "reverb_py":  # the package itself, for `from reverb_py import errors`
            assert layer_of(target) == 0, f"{module}:{line} imports {target}"
