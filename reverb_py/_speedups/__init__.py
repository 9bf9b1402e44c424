"""Compiled twins of :mod:`reverb_py._pure`, built from the top-level ``_speedups/`` sources."""
