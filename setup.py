"""Build of reverb_py's compiled hot structures.

Every ``_speedups/<name>.pyx`` becomes the extension ``reverb_py._speedups.<name>``, and
every module named in ``COMPILED_AS_IS`` is compiled from its pure source
``reverb_py/_writer/<name>.py`` as it is (the same source, so the same behaviour) into
``reverb_py._speedups.<name>``.
Extensions are optional: when no compiler is available the package installs and runs
on its pure-Python twins (``reverb_py._impl.IMPLEMENTATION`` says which one is live).

Switches (environment variables, the same names at build and at run time):

* ``REVERB_PY_NO_EXTENSIONS=1``: build nothing, install the pure package only.
* ``REVERB_PY_DEBUG_BUILD=1``: bounds checks, wraparound and line tracing back on.
* ``REVERB_PY_ANNOTATE=1``: write Cython's HTML annotation next to each source.
"""

import os
import pathlib
import sys

from setuptools import Extension, setup

HERE = pathlib.Path(__file__).parent
COMPILED_AS_IS = ("internal_writer", "trajectory_writer")
COMPILED_AS_IS_DIR = "reverb_py/_writer"
NO_EXTENSIONS = bool(os.environ.get("REVERB_PY_NO_EXTENSIONS"))
DEBUG = bool(os.environ.get("REVERB_PY_DEBUG_BUILD"))
ANNOTATE = bool(os.environ.get("REVERB_PY_ANNOTATE"))


def _extensions() -> list:
    if NO_EXTENSIONS:
        return []
    from Cython.Build import cythonize

    directives = {
        "language_level": "3",
        "binding": True,
        "embedsignature": True,
        "boundscheck": DEBUG,
        "wraparound": DEBUG,
        "initializedcheck": DEBUG,
        "cdivision": True,
        "linetrace": DEBUG,
    }
    macros = [("CYTHON_TRACE_NOGIL", "1")] if DEBUG else []
    if sys.platform == "win32":
        compile_args = ["/O2", "/std:c++17"]
    else:
        compile_args = ["-O3" if not DEBUG else "-O0", "-std=c++17"]
    extensions = [
        Extension(
            f"reverb_py._speedups.{source.stem}",
            [str(source.relative_to(HERE))],
            language="c++",
            extra_compile_args=compile_args,
            define_macros=macros,
            optional=True,
        )
        for source in sorted((HERE / "_speedups").glob("*.pyx"))
    ]
    as_is = [
        Extension(
            f"reverb_py._speedups.{name}",
            [f"{COMPILED_AS_IS_DIR}/{name}.py"],
            language="c++",
            extra_compile_args=compile_args,
            define_macros=macros,
            optional=True,
        )
        for name in COMPILED_AS_IS
    ]
    # Python source compiled as it is keeps Python's semantics: negative indices wrap,
    # indices are checked, division is Python's, annotations are not C types.
    as_is_directives = {
        **directives,
        "boundscheck": True,
        "wraparound": True,
        "cdivision": False,
        "annotation_typing": False,
    }
    return cythonize(
        extensions,
        compiler_directives=directives,
        annotate=ANNOTATE,
        include_path=[str(HERE / "_speedups")],
    ) + cythonize(as_is, compiler_directives=as_is_directives, annotate=ANNOTATE)


setup(ext_modules=_extensions())
