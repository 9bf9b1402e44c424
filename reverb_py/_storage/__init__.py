"""The checkpoint format and directory protocol: TFRecord files, directory layout, save and load.

Callers import the submodules; this package re-exports nothing.
"""
