"""``reverb-py run SCRIPT [ARGS]`` (``python -m reverb_py.run``): a program written for
dm-reverb, run on reverb_py without editing it.

The script (or ``-m MODULE``) runs as ``__main__``, as ``python SCRIPT ARGS`` would run it,
after :func:`reverb_py.install_as_reverb`; ``REVERB_PY_AS_REVERB=1`` is set in the
environment, so the processes it starts (multiprocessing and Launchpad children,
``DataLoader`` workers, Ray workers on this machine) answer ``import reverb`` with
reverb_py too. Exit status: the program's own; 2 for bad arguments.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Callable, Sequence

from reverb_py._as_reverb import ENV_VAR, install_as_reverb

__all__ = ["main"]

USAGE = "usage: reverb-py run [-m MODULE | SCRIPT] [ARGS ...]"


def main(argv: Sequence[str] | None = None) -> int:
    """Runs a script or module with the ``reverb`` alias; returns its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stdout if args else sys.stderr)
        if args:
            print(
                "\nRuns a program written for dm-reverb on reverb_py: `import reverb` gives "
                "reverb_py\nin it and in the processes it starts (REVERB_PY_AS_REVERB=1).",
            )
        return 0 if args else 2
    if args[0] == "-m":
        if len(args) < 2:
            print(f"reverb-py run: -m needs a module name\n{USAGE}", file=sys.stderr)
            return 2
        module, rest = args[1], args[2:]
        target = module
    else:
        target, rest = args[0], args[1:]
        module = None
        if not os.path.exists(target):
            print(f"reverb-py run: no such file: {target}", file=sys.stderr)
            return 2
    os.environ[ENV_VAR] = "1"
    install_as_reverb()
    if module is not None:
        sys.argv = [module, *rest]
        sys.path.insert(0, os.getcwd())
        return _run(lambda: runpy.run_module(module, run_name="__main__", alter_sys=True))
    sys.argv = [target, *rest]
    sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
    return _run(lambda: runpy.run_path(target, run_name="__main__"))


def _run(program: Callable[[], object]) -> int:
    try:
        program()
    except SystemExit as done:
        code = done.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
