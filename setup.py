"""Build of reverb_py's compiled hot structures.

Every ``_speedups/<name>.pyx`` becomes the extension ``reverb_py._speedups.<name>``, and
every module named in ``COMPILED_AS_IS`` is compiled from its pure source
``reverb_py/_writer/<name>.py`` as it is (the same source, so the same behaviour) into
``reverb_py._speedups.<name>``.

Extensions are optional, all or nothing: when no C++ compiler is found, or any module
fails to compile, the build prints one line saying so, leaves every compiled module out
and the package installs and runs on its pure-Python twins
(``reverb_py._impl.IMPLEMENTATION`` says which one is live). Cython runs only when
extensions are built (not for an sdist or metadata).

Switches (environment variables, the same names at build and at run time):

* ``REVERB_PY_NO_EXTENSIONS=1``: build nothing, install the pure package only.
* ``REVERB_PY_REQUIRE_SPEEDUPS=1``: a missing compiler or a failed compile is an error
  instead of a fallback (wheel builds set it).
* ``REVERB_PY_DEBUG_BUILD=1``: bounds checks, wraparound and line tracing back on.
* ``REVERB_PY_ANNOTATE=1``: write Cython's HTML annotation next to each source.
* ``REVERB_PY_BUILD_JOBS=N``: compile N modules at a time (default: one per CPU).
"""

import os
import pathlib
import shutil
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.errors import BaseError, CCompilerError, CompileError

HERE = pathlib.Path(__file__).parent
COMPILED_AS_IS = ("internal_writer", "trajectory_writer")
COMPILED_AS_IS_DIR = "reverb_py/_writer"
AS_REVERB_PTH = "reverb_py/_as_reverb.pth"
PTH_NAME = "reverb_py-as-reverb.pth"
NO_EXTENSIONS = bool(os.environ.get("REVERB_PY_NO_EXTENSIONS"))
REQUIRE_EXTENSIONS = bool(os.environ.get("REVERB_PY_REQUIRE_SPEEDUPS"))
DEBUG = bool(os.environ.get("REVERB_PY_DEBUG_BUILD"))
ANNOTATE = bool(os.environ.get("REVERB_PY_ANNOTATE"))

DIRECTIVES = {
    "language_level": "3",
    "binding": True,
    "embedsignature": True,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "cdivision": True,
    "linetrace": DEBUG,
}
# Python source compiled as it is keeps Python's semantics: negative indices wrap,
# indices are checked, division is Python's, annotations are not C types.
AS_IS_DIRECTIVES = {
    **DIRECTIVES,
    "boundscheck": True,
    "wraparound": True,
    "cdivision": False,
    "annotation_typing": False,
}


def _extensions() -> list:
    if NO_EXTENSIONS:
        return []
    macros = [("CYTHON_TRACE_NOGIL", "1")] if DEBUG else []
    if sys.platform == "win32":
        compile_args = ["/O2", "/std:c++17"]
    else:
        # -g0: no debug information unless asked for (a third less compile time, a
        # fifth of the size); the interpreter's CFLAGS carry -g.
        compile_args = ["-O0", "-g", "-std=c++17"] if DEBUG else ["-O3", "-g0", "-std=c++17"]
    # No `optional=True`: cythonize() rebuilds every Extension from its own list of
    # settings and drops that flag. The fallback is BuildExt's, for all modules at once.
    sources = [str(path.relative_to(HERE)) for path in sorted((HERE / "_speedups").glob("*.pyx"))]
    sources += [f"{COMPILED_AS_IS_DIR}/{name}.py" for name in COMPILED_AS_IS]
    return [
        Extension(
            f"reverb_py._speedups.{pathlib.PurePath(source).stem}",
            [source],
            language="c++",
            extra_compile_args=compile_args,
            define_macros=macros,
        )
        for source in sources
    ]


class BuildExt(build_ext):
    """Cythonizes when extensions are built, and falls back to the pure package.

    The fallback is all or nothing (reverb_py._impl uses the compiled modules only when
    every one is present): on a missing compiler or a failed compile, whatever was built
    is removed and the build goes on without extensions.
    """

    def finalize_options(self) -> None:
        super().finalize_options()
        # Compile in parallel unless told otherwise (`--parallel N` / `-j N`). Not on
        # Windows, where MSVC's set-up is not safe to run from several threads.
        if self.parallel is None and sys.platform != "win32":
            self.parallel = int(os.environ.get("REVERB_PY_BUILD_JOBS") or os.cpu_count() or 1)

    def build_extensions(self) -> None:
        problem = self._missing_compiler()
        if problem is not None:
            self._fall_back(f"no C++ compiler found ({problem})")
            return
        # Cython's Extensions replace the sources (.pyx/.py by .cpp) and add the
        # dependencies; the originals keep what setuptools' finalize_options() set.
        cythonized = {ext.name: ext for ext in _cythonize(self.extensions)}
        for ext in self.extensions:
            for key, value in vars(cythonized[ext.name]).items():
                if not key.startswith("_"):
                    setattr(ext, key, value)
        try:
            super().build_extensions()
        except (BaseError, CCompilerError, CompileError, OSError) as error:
            self._fall_back(
                f"compiling the extension modules failed ({' '.join(str(error).split())})"
            )

    def _missing_compiler(self):
        """The compiler or linker command that cannot be found, or None.

        Only compilers that run a command line (Unix, MinGW) are probed; MSVC's lookup
        fails at the first compile instead, with an error that _fall_back() reports.
        """
        compiler = self.compiler
        commands = [
            getattr(compiler, "compiler_so_cxx", None) or getattr(compiler, "compiler_cxx", None),
            getattr(compiler, "linker_so_cxx", None) or getattr(compiler, "linker_so", None),
        ]
        for command in commands:
            if isinstance(command, str):
                command = command.split()
            if command and shutil.which(command[0]) is None:
                return command[0]
        return None

    def _fall_back(self, reason: str) -> None:
        if REQUIRE_EXTENSIONS:
            raise CompileError(f"reverb_py: {reason}; REVERB_PY_REQUIRE_SPEEDUPS is set")
        for ext in self.extensions:
            built = pathlib.Path(self.get_ext_fullpath(ext.name))
            if built.exists():
                built.unlink()
        self.extensions[:] = []
        print(
            f"reverb_py: {reason}; installing the pure-Python implementation",
            file=sys.stderr,
            flush=True,
        )


class BuildPy(build_py):
    """Also puts ``reverb_py-as-reverb.pth`` at the top of the build, so that it lands in
    site-packages: with ``REVERB_PY_AS_REVERB=1`` set, every Python process of the
    environment answers ``import reverb`` with reverb_py (``reverb_py/_as_reverb.py``)."""

    def run(self) -> None:
        super().run()
        self.copy_file(str(HERE / AS_REVERB_PTH), str(pathlib.Path(self.build_lib, PTH_NAME)))

    def get_outputs(self, include_bytecode: bool = True) -> list:
        return [*super().get_outputs(include_bytecode), str(pathlib.Path(self.build_lib, PTH_NAME))]


def _cythonize(extensions: list) -> list:
    from Cython.Build import cythonize

    speedups = [ext for ext in extensions if ext.sources[0].endswith(".pyx")]
    as_is = [ext for ext in extensions if not ext.sources[0].endswith(".pyx")]
    return cythonize(
        speedups,
        compiler_directives=DIRECTIVES,
        annotate=ANNOTATE,
        include_path=[str(HERE / "_speedups")],
    ) + cythonize(as_is, compiler_directives=AS_IS_DIRECTIVES, annotate=ANNOTATE)


setup(ext_modules=_extensions(), cmdclass={"build_ext": BuildExt, "build_py": BuildPy})
