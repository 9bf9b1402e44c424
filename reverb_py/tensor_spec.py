"""Framework-neutral tensor specs: :class:`TensorSpec` and :class:`BoundedTensorSpec`.

Reverb describes table signatures with ``tf.TensorSpec``; reverb_py uses these two
classes instead, with numpy dtypes, so that no framework is needed. ``tf.TensorSpec``-like
objects (anything with ``.shape``, ``.dtype`` and ``.name``) are accepted wherever a
spec is expected and converted with :meth:`TensorSpec.from_spec`.

Normal forms:

* ``shape`` is ``None`` (unknown rank) or a tuple whose items are ``int`` (>= 0) or
  ``None`` (unknown size). Lists, tuples, single ints and ``tf.TensorShape``-like objects
  (with ``.as_list()``) are accepted.
* ``dtype`` is a numpy dtype from :mod:`reverb_py._codec.dtypes`; strings are
  ``np.dtype(object)`` (the numpy type of ``tf.string``).
* ``name`` is a ``str`` or ``None``.

Specs are immutable, hashable and compare by value; a :class:`TensorSpec` never equals a
:class:`BoundedTensorSpec` (as in TensorFlow).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import numpy.typing as npt

from reverb_py._codec import dtypes as _dtypes

__all__ = [
    "BoundedTensorSpec",
    "Shape",
    "TensorSpec",
    "normalize_shape",
    "shapes_compatible",
    "tf_dtype_name",
]

Shape = tuple[int | None, ...] | None
"""A normalised shape: ``None`` for unknown rank, else one ``int | None`` per dim."""

tf_dtype_name = _dtypes.tf_dtype_name


def _normalize_dim(dim: object) -> int | None:
    if dim is None:
        return None
    if hasattr(dim, "value") and not isinstance(dim, (int, np.integer)):
        # TF1 `Dimension`.
        return _normalize_dim(dim.value)
    if isinstance(dim, (bool, np.bool_)):
        raise TypeError(f"Shape dimensions must be integers or None, got {dim!r}")
    try:
        size = operator.index(dim)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"Shape dimensions must be integers or None, got {dim!r}") from None
    if size < 0:
        raise ValueError(f"Shape dimensions must be >= 0 or None, got {size}")
    return size


def normalize_shape(shape: object) -> Shape:
    """Converts a shape-like value to the normal form.

    Args:
      shape: ``None`` (unknown rank), an int (rank 1), a sequence of ints / ``None``, or a
        ``tf.TensorShape``-like object with ``.as_list()`` (unknown rank when its
        ``.rank`` is ``None``).

    Returns:
      ``None`` or a tuple of ``int | None``.

    Raises:
      TypeError: not a shape.
      ValueError: a negative dimension.
    """
    if shape is None:
        return None
    if hasattr(shape, "as_list"):
        if getattr(shape, "rank", 0) is None or getattr(shape, "dims", ()) is None:
            return None
        shape = shape.as_list()
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, (bool, np.bool_)):
        return (_normalize_dim(shape),)
    if isinstance(shape, (str, bytes)):
        raise TypeError(f"Not a shape: {shape!r}")
    try:
        dims = list(shape)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"Not a shape: {shape!r}") from None
    return tuple(_normalize_dim(dim) for dim in dims)


def shapes_compatible(shape: Shape, other: Shape) -> bool:
    """Returns whether two normalised shapes can describe the same tensor.

    An unknown rank is compatible with every shape; otherwise the ranks must be equal and
    every pair of dims equal or one of them ``None``.
    """
    if shape is None or other is None:
        return True
    if len(shape) != len(other):
        return False
    return all(a is None or b is None or a == b for a, b in zip(shape, other))


def _shape_repr(shape: Shape) -> str:
    return repr(shape)


class TensorSpec:
    """Shape, dtype and optional name of a tensor.

    Attributes:
      shape: ``None`` or a tuple of ``int | None`` (see the module docstring).
      dtype: the numpy dtype (``np.dtype(object)`` for strings).
      name: the name, or ``None``.
    """

    __slots__ = ("_dtype", "_name", "_shape")

    def __init__(self, shape: object, dtype: object = np.float32, name: str | None = None):
        """Creates a spec.

        Args:
          shape: a shape-like value; see :func:`normalize_shape`.
          dtype: a dtype-like value; see :func:`reverb_py._codec.dtypes.normalize_dtype`.
          name: optional name.

        Raises:
          TypeError: invalid shape, dtype or name type.
          ValueError: a negative dimension.
        """
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {name!r}")
        self._shape: Shape = normalize_shape(shape)
        self._dtype: np.dtype[Any] = _dtypes.normalize_dtype(dtype)
        self._name: str | None = name

    @property
    def shape(self) -> Shape:
        """The shape: ``None`` for unknown rank, else a tuple of ``int | None``."""
        return self._shape

    @property
    def dtype(self) -> np.dtype[Any]:
        """The numpy dtype (``np.dtype(object)`` for strings)."""
        return self._dtype

    @property
    def name(self) -> str | None:
        """The name, or ``None``."""
        return self._name

    @classmethod
    def from_spec(cls, spec: object) -> TensorSpec:
        """Converts a spec-like object to a reverb_py spec.

        A reverb_py spec is returned as is. Any other object must have ``.shape`` and
        ``.dtype`` (``.name`` is optional); if it also has ``.minimum`` and ``.maximum``
        the result is a :class:`BoundedTensorSpec`.

        Args:
          spec: a reverb_py spec or a ``tf.TensorSpec`` / ``tf.BoundedTensorSpec``-like
            object.

        Returns:
          The equivalent :class:`TensorSpec` or :class:`BoundedTensorSpec`.

        Raises:
          TypeError: ``spec`` has no ``shape`` / ``dtype``, or they are invalid.
        """
        if isinstance(spec, TensorSpec):
            return spec
        shape, dtype, name = _spec_attributes(spec)
        if hasattr(spec, "minimum") and hasattr(spec, "maximum"):
            return BoundedTensorSpec(shape, dtype, spec.minimum, spec.maximum, name)
        return TensorSpec(shape, dtype, name)

    def is_compatible_with(self, spec_or_value: object) -> bool:
        """Returns whether a spec or a value matches this spec's dtype and shape.

        Names and bounds are ignored. Dtypes must be equal (after normalisation) and
        shapes compatible (``None`` dims match anything; an unknown rank matches every
        shape).

        Args:
          spec_or_value: a spec (reverb_py or TF-like), an array-like with ``.shape`` and
            ``.dtype``, or any value ``np.asarray`` accepts (Python floats thus become
            float64, ints int64).
        """
        if isinstance(spec_or_value, TensorSpec):
            shape, dtype = spec_or_value.shape, spec_or_value.dtype
        else:
            try:
                if hasattr(spec_or_value, "shape") and hasattr(spec_or_value, "dtype"):
                    raw_shape: object = spec_or_value.shape
                    raw_dtype: object = spec_or_value.dtype
                else:
                    array = np.asarray(spec_or_value)
                    raw_shape, raw_dtype = array.shape, array.dtype
                shape = normalize_shape(raw_shape)
                dtype = _dtypes.normalize_dtype(raw_dtype)
            except (TypeError, ValueError):
                return False
        return dtype == self._dtype and shapes_compatible(self._shape, shape)

    def _key(self) -> tuple[object, ...]:
        return (self._shape, self._dtype, self._name)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, TensorSpec)
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash((type(self).__name__, *self._key()))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(shape={_shape_repr(self._shape)}, "
            f"dtype={self._dtype.name}, name={self._name!r})"
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self._shape, self._dtype, self._name))


def _spec_attributes(spec: object) -> tuple[object, object, str | None]:
    try:
        shape: object = spec.shape  # type: ignore[attr-defined]
        dtype: object = spec.dtype  # type: ignore[attr-defined]
    except AttributeError:
        raise TypeError(f"Not a TensorSpec-like object: {spec!r}") from None
    name = getattr(spec, "name", None)
    return shape, dtype, name


def _bound_array(value: object, dtype: np.dtype[Any], what: str, shape: Shape) -> npt.NDArray[Any]:
    if dtype.kind in "iu":
        # numpy 2 refuses a Python integer out of the dtype's range (OverflowError); numpy
        # 1.x wraps it around with a DeprecationWarning. Refused here whatever the numpy.
        info = np.iinfo(dtype)
        outside = _int_outside(value, int(info.min), int(info.max))
        if outside is not None:
            raise ValueError(
                f"{what} {value!r} cannot be represented as {dtype}: "
                f"Python integer {outside} out of bounds"
            )
    try:
        array = np.array(value, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as error:
        raise ValueError(f"{what} {value!r} cannot be represented as {dtype}: {error}") from None
    if shape is not None:
        if array.ndim > len(shape) or any(
            size != 1 and dim is not None and size != dim
            for size, dim in zip(reversed(array.shape), reversed(shape))
        ):
            raise ValueError(f"{what} of shape {array.shape} is not broadcastable to shape {shape}")
    array.flags.writeable = False
    return array


def _int_outside(value: object, low: int, high: int) -> int | None:
    """The first Python integer in ``value`` (nested in lists and tuples) outside
    [``low``, ``high``], or None."""
    if type(value) is int:
        return None if low <= value <= high else value
    if isinstance(value, (list, tuple)):
        for item in value:
            outside = _int_outside(item, low, high)
            if outside is not None:
                return outside
    return None


def _dtype_limits(dtype: np.dtype[Any]) -> tuple[object, object]:
    if dtype.kind == "b":
        return False, True
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min, info.max
    if dtype.kind == "f":
        finfo = np.finfo(dtype)
        return finfo.min, finfo.max
    raise ValueError(f"dtype {dtype} has no default bounds")


def _array_key(array: npt.NDArray[Any]) -> tuple[object, ...]:
    return (array.shape, tuple(array.ravel().tolist()))


class BoundedTensorSpec(TensorSpec):
    """A :class:`TensorSpec` with inclusive element-wise bounds.

    ``minimum`` and ``maximum`` are read-only numpy arrays of the spec's dtype, kept in the
    shape they were given (they must broadcast to ``shape``).

    Attributes:
      minimum: the lower bound.
      maximum: the upper bound.
    """

    __slots__ = ("_maximum", "_minimum")

    def __init__(
        self,
        shape: object,
        dtype: object,
        minimum: object,
        maximum: object,
        name: str | None = None,
    ):
        """Creates a bounded spec.

        Args:
          shape: a shape-like value; see :func:`normalize_shape`.
          dtype: a dtype-like value.
          minimum: lower bound, convertible to ``dtype`` and broadcastable to ``shape``.
          maximum: upper bound, likewise.
          name: optional name.

        Raises:
          TypeError: invalid shape, dtype or name type.
          ValueError: a bound that cannot be converted to ``dtype`` or broadcast to
            ``shape``, bounds that do not broadcast together, or ``minimum > maximum``
            somewhere.
        """
        super().__init__(shape, dtype, name)
        self._minimum = _bound_array(minimum, self._dtype, "minimum", self._shape)
        self._maximum = _bound_array(maximum, self._dtype, "maximum", self._shape)
        try:
            low, high = np.broadcast_arrays(self._minimum, self._maximum)
        except ValueError:
            raise ValueError(
                f"minimum of shape {self._minimum.shape} and maximum of shape "
                f"{self._maximum.shape} do not broadcast together"
            ) from None
        try:
            with np.errstate(invalid="ignore"):
                inverted = bool(np.any(low > high))
        except TypeError:  # Unorderable objects: nothing to check.
            inverted = False
        if inverted:
            raise ValueError(f"minimum {self._minimum!r} is greater than maximum {self._maximum!r}")

    @property
    def minimum(self) -> npt.NDArray[Any]:
        """The lower bound (read-only array of ``dtype``)."""
        return self._minimum

    @property
    def maximum(self) -> npt.NDArray[Any]:
        """The upper bound (read-only array of ``dtype``)."""
        return self._maximum

    @classmethod
    def from_spec(cls, spec: object) -> BoundedTensorSpec:
        """Converts a spec-like object to a :class:`BoundedTensorSpec`.

        Objects with ``.minimum`` and ``.maximum`` keep their bounds; other specs get the
        limits of their dtype (``False``/``True`` for bool), as TensorFlow does.

        Args:
          spec: a reverb_py spec or a TF-like spec.

        Returns:
          The bounded spec.

        Raises:
          TypeError: ``spec`` has no ``shape`` / ``dtype``, or they are invalid.
          ValueError: no bounds given and the dtype has no limits (complex, string).
        """
        if isinstance(spec, BoundedTensorSpec):
            return spec
        shape, dtype, name = _spec_attributes(spec)
        if hasattr(spec, "minimum") and hasattr(spec, "maximum"):
            return BoundedTensorSpec(shape, dtype, spec.minimum, spec.maximum, name)
        low, high = _dtype_limits(_dtypes.normalize_dtype(dtype))
        return BoundedTensorSpec(shape, dtype, low, high, name)

    def _key(self) -> tuple[object, ...]:
        return (*super()._key(), _array_key(self._minimum), _array_key(self._maximum))

    def __repr__(self) -> str:
        return (
            f"BoundedTensorSpec(shape={_shape_repr(self._shape)}, dtype={self._dtype.name}, "
            f"name={self._name!r}, minimum={self._minimum!r}, maximum={self._maximum!r})"
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (
            type(self),
            (self._shape, self._dtype, self._minimum, self._maximum, self._name),
        )
