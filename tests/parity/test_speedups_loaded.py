"""The implementation that is live is the one the run asked for."""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from reverb_py import _impl

STRUCTURES = ("SumTree", "IndexedHeap", "OrderedKeys", "IndexedSet", "RateLimiterState")
RECORDS = ("Item", "Chunk", "LiveChunks")
ROOT = pathlib.Path(__file__).parents[2]
MODULES = ("wire", "checkpoint_records", "mutations", "sample_wire")


def _live_trajectory_writer_module() -> str:
    """The twin the public ``reverb_py.trajectory_writer`` re-exports (its code's module)."""
    from reverb_py.trajectory_writer import TrajectoryWriter

    return str(TrajectoryWriter.append.__module__)


def live_module_names() -> dict[str, str]:
    """Name of what `_impl` (or the writer layer, keyed on it) selected -> its module."""
    from reverb_py._writer import engine

    names = {name: getattr(_impl, name).__module__ for name in STRUCTURES + RECORDS}
    names.update({name: getattr(_impl, name).__name__ for name in MODULES})
    names["internal_writer"] = engine.module.__name__
    names["trajectory_writer"] = _live_trajectory_writer_module()
    return names


def _setup_constant(name: str) -> object:
    """A constant of setup.py, such as ``COMPILED_AS_IS`` (sources compiled as they are)."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == name:
            return ast.literal_eval(node.value)
    raise AssertionError(f"setup.py has no {name}")


def _compiled_as_is() -> tuple[str, ...]:
    value = _setup_constant("COMPILED_AS_IS")
    assert isinstance(value, tuple)
    return value


def test_every_compiled_module_is_selected_by_impl() -> None:
    built = {path.stem for path in (ROOT / "_speedups").glob("*.pyx")}
    as_is = set(_compiled_as_is())
    assert not built & as_is
    assert sorted(built | as_is) == sorted(_impl.COMPILED_MODULES)
    for name in built:
        assert (ROOT / "reverb_py" / "_pure" / f"{name}.py").exists(), name
    as_is_dir = _setup_constant("COMPILED_AS_IS_DIR")
    assert as_is_dir == "reverb_py/_writer"
    for name in as_is:
        assert (ROOT / as_is_dir / f"{name}.py").exists(), name
        assert not (ROOT / "reverb_py" / "_pure" / f"{name}.py").exists(), name


def test_writer_modules_are_the_selected_twins() -> None:
    import reverb_py
    from reverb_py import trajectory_writer
    from reverb_py._writer import engine

    live = {"cython": "reverb_py._speedups", "python": "reverb_py._writer"}[_impl.IMPLEMENTATION]
    assert engine.module is sys.modules[f"{live}.internal_writer"]
    assert engine.InternalTrajectoryWriter is engine.module.InternalTrajectoryWriter
    source = sys.modules[f"{live}.trajectory_writer"]
    assert _live_trajectory_writer_module() == source.__name__
    for name in trajectory_writer.__all__:
        assert getattr(trajectory_writer, name) is getattr(source, name), name
        assert getattr(trajectory_writer, name).__module__ == "reverb_py.trajectory_writer"
    assert reverb_py.TrajectoryWriter is source.TrajectoryWriter
    assert reverb_py.TrajectoryColumn is source.TrajectoryColumn
    # The compiled Python writers run on the compiled engine, the pure ones on the pure.
    assert source.ConstantChunkerOptions is engine.ConstantChunkerOptions
    assert "reverb_py._internal_writer" not in sys.modules


def test_compiled_code_is_live_when_required() -> None:
    if not os.environ.get("REVERB_PY_REQUIRE_SPEEDUPS"):
        pytest.skip("this run does not require the compiled structures")
    assert _impl.IMPLEMENTATION == "cython"
    for name, module in live_module_names().items():
        assert module.startswith("reverb_py._speedups."), (name, module)
        module_file = sys.modules[module].__file__ or ""
        assert module_file.endswith((".so", ".pyd")), module_file


def test_compiled_engine_has_typed_fields() -> None:
    """The engine compiled as it is reads its declarations (reverb_py/_speedups/*.pxd):
    its classes are extension types whose fields are typed, not slots."""
    if not os.environ.get("REVERB_PY_REQUIRE_SPEEDUPS"):
        pytest.skip("this run does not require the compiled structures")
    from reverb_py._writer import engine

    module = engine.module
    for name, field in (
        ("CellRef", "_chunk"),
        ("_Chunk", "live_refs"),
        ("_Column", "buffer"),
        ("_Item", "chunks"),
        ("_AutoTuner", "length"),
        ("InternalTrajectoryWriter", "_queue"),
    ):
        descriptor = vars(getattr(module, name))[field]
        assert type(descriptor).__name__ == "getset_descriptor", (name, field)
    with pytest.raises(AttributeError):
        engine.CellRef.__new__(engine.CellRef).undeclared = 1  # type: ignore[attr-defined]


def test_a_compiled_process_imports_no_pure_twin() -> None:
    """The compiled twins reach their pure twins only for unusual input, on first use."""
    if not os.environ.get("REVERB_PY_REQUIRE_SPEEDUPS"):
        pytest.skip("this run does not require the compiled structures")
    script = (
        "import sys, reverb_py, reverb_py.server, reverb_py.checkpointers\n"
        "print(sorted(m for m in sys.modules if m.startswith('reverb_py._pure')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "['reverb_py._pure', 'reverb_py._pure._common']"


def test_kill_switch_gives_pure_code() -> None:
    if not os.environ.get("REVERB_PY_NO_EXTENSIONS"):
        pytest.skip("this run does not set REVERB_PY_NO_EXTENSIONS")
    assert _impl.IMPLEMENTATION == "python"
    for name, module in live_module_names().items():
        assert module.startswith(("reverb_py._pure.", "reverb_py._writer.")), (name, module)


def test_implementation_is_all_or_nothing() -> None:
    # The pure writer sources live in _writer, the other pure twins in _pure.
    packages = {
        {"_writer": "_pure"}.get(part, part)
        for part in (module.split(".")[1] for module in live_module_names().values())
    }
    assert len(packages) == 1
    assert _impl.IMPLEMENTATION == {"_speedups": "cython", "_pure": "python"}[packages.pop()]


def test_codec_uses_the_selected_wire_module(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from reverb_py._codec import chunk, tensor

    # The codec keeps no encoders of its own: it calls the wire module _impl selected.
    for module in (chunk, tensor):
        for name in (
            "encode_varint",
            "encode_varints",
            "length_delimited",
            "encode_item",
            "encode_column",
            "encode_tensor",
            "encode_chunk_data",
        ):
            assert not hasattr(module, name), (module.__name__, name)
    calls: list[str] = []
    real = _impl.wire

    class CountingWire:
        def __getattr__(self, name: str) -> object:
            calls.append(name)
            return getattr(real, name)

    columns = [np.array([[1, 2], [300, 4]]), np.array([b"a", b"b" * 200])]
    expected = chunk.encode_chunk(3, 1, 0, 1, columns)
    monkeypatch.setattr(_impl, "wire", CountingWire())
    assert chunk.encode_chunk(3, 1, 0, 1, columns) == expected
    assert chunk.encode_column_chunk(3, 1, 0, 1, columns[0]) == chunk.encode_chunk(
        3, 1, 0, 1, columns[:1]
    )
    assert {"encode_tensor", "encode_chunk_data"} <= set(calls)


def test_a_missing_compiled_module_selects_every_pure_twin() -> None:
    code = textwrap.dedent(
        """
        import importlib.util
        real = importlib.util.find_spec
        importlib.util.find_spec = lambda name, *args: (
            None if name == "reverb_py._speedups.mutations" else real(name, *args))
        import reverb_py
        from reverb_py import _impl
        from reverb_py._writer import engine
        print(reverb_py.IMPLEMENTATION, _impl.wire.encode_varint.__module__,
              _impl.SumTree.__module__, _impl.checkpoint_records.__name__,
              engine.module.__name__, reverb_py.TrajectoryWriter.append.__module__)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "REVERB_PY_NO_EXTENSIONS"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [
        "python",
        "reverb_py._pure.wire",
        "reverb_py._pure.sum_tree",
        "reverb_py._pure.checkpoint_records",
        "reverb_py._writer.internal_writer",
        "reverb_py._writer.trajectory_writer",
    ]


def test_top_level_reports_the_implementation() -> None:
    import reverb_py

    assert reverb_py.IMPLEMENTATION == _impl.IMPLEMENTATION
