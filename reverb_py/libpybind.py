"""Reverb's ``reverb.libpybind`` (the compiled module behind ``reverb.pybind``): the
same names as :mod:`reverb_py.pybind`."""

from reverb_py.pybind import *  # noqa: F403 - the same names, by design
from reverb_py.pybind import __all__  # noqa: F401
