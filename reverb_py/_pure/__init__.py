"""Pure-Python twins of the compiled structures built from ``_speedups/``.

Each module here has the same basename, classes, method names and signatures as its
compiled twin, and gives bit-identical results for the same inputs (randomness is passed
in as a float ``u`` in ``[0, 1)``). These are the reference for behaviour and for types.
"""
