"""Reverb's TensorFlow datasets, ``tf.data.Dataset`` s over the sampling core (imports TF).

``reverb_py.TrajectoryDataset`` and ``reverb_py.TimestepDataset`` resolve here on first
use (``reverb_py.__getattr__``), so importing reverb_py never imports TensorFlow. Each is
a real ``tf.data.Dataset`` with Reverb's constructor and ``from_table_signature``: it
works eagerly, inside ``tf.data`` functions (``interleave``, as Acme builds its learner
input), with ``.batch``, ``.prefetch`` and ``.as_numpy_iterator()``.

Every iterator of a dataset opens its own sampler (:mod:`reverb_py._client.datasets`).
TensorFlow is handed whole blocks of samples, stacked once in numpy (every sample the
buffer holds, up to ``BLOCK`` at a time), through ``from_generator``; ``unbatch`` splits
them inside TensorFlow, so no per-sample Python runs on TensorFlow's side. ``batch``
called on the dataset itself (with a Python int) hands TensorFlow the batches as the
sampler stacks them, with no ``unbatch`` and re-``batch`` in between.
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import numpy as np

try:
    import tensorflow as tf
except ImportError as _error:
    raise ImportError(
        "reverb_py.TrajectoryDataset and TimestepDataset need TensorFlow: "
        "pip install 'reverb_py[tf]'"
    ) from _error

from tensorflow.python.ops import gen_experimental_dataset_ops

from reverb_py import data
from reverb_py._client import datasets
from reverb_py._client.credentials import ClientCredentials
from reverb_py._codec import nest
from reverb_py.replay_sample import ReplaySample, SampleInfo

__all__ = [
    "BLOCK",
    "PatternDataset",
    "TimestepDataset",
    "TrajectoryDataset",
    "pattern_dataset_with_info",
]

BLOCK = 256
"""Most samples (timesteps: items) handed to TensorFlow in one block."""


_F = TypeVar("_F", bound=Callable[..., Any])


def _plain(function: _F) -> _F:
    """Keeps AutoGraph out: inside ``interleave`` it would try to convert the clients'
    asyncio code (and warn that it cannot)."""
    return cast(_F, tf.autograph.experimental.do_not_convert(function))


def _text(value: Any, what: str) -> str:
    if isinstance(value, str):
        return value
    numpy = getattr(value, "numpy", None)
    if numpy is not None:
        value = numpy()
    if isinstance(value, bytes):
        return value.decode()
    raise TypeError(f"{what} must be a string (or an eager string tensor), got {value!r}")


def _tf_dtype(dtype: np.dtype[Any]) -> Any:
    return tf.string if dtype.kind == "O" else tf.as_dtype(dtype)


def _tf_shape(shape: Any) -> Any:
    return tf.TensorShape(None if shape is None else list(shape))


class _Exit:
    """Ends the passes over reverb_py datasets when the interpreter exits.

    TensorFlow runs ``from_generator``'s Python on its own threads, and destroys a
    pipeline's iterators while the interpreter finalizes, waiting for those threads: a
    thread then in (or entering) a pass would wait for the interpreter for good. So,
    before that (at exit), every sampler of a pass is closed (its pass ends at its next
    pull), a pass that starts later ends at once, and the exit waits until no
    TensorFlow thread is in a pass (10 s at most), then until TensorFlow has released
    every pass (1 s more at most: a pass nothing pulls stays). Servers are not stopped:
    what else of the program still calls them ends with the process.
    """

    _WAIT_S = 10.0
    _RELEASE_WAIT_S = 1.0

    def __init__(self) -> None:
        self._state = threading.Condition()
        self._samplers: weakref.WeakSet[datasets.Sampler] = weakref.WeakSet()
        self._running = 0  # Calls into passes now.
        self._open = 0  # Passes not yet released.
        self._exiting = False
        atexit.register(self._end)

    def start(self) -> bool:
        """Whether a new pass may start (False once the interpreter exits)."""
        with self._state:
            return not self._exiting

    def add(self, sampler: datasets.Sampler) -> None:
        with self._state:
            exiting = self._exiting
            self._samplers.add(sampler)
        if exiting:
            sampler.close(wait=False)

    def count(self, running: int = 0, opened: int = 0) -> None:
        with self._state:
            self._running += running
            self._open += opened
            if self._running == 0 or self._open == 0:
                self._state.notify_all()

    def _end(self) -> None:
        with self._state:
            self._exiting = True
            samplers = list(self._samplers)
        for sampler in samplers:
            sampler.close(wait=False)
        deadline = time.monotonic() + self._WAIT_S
        with self._state:
            if self._state.wait_for(lambda: self._running == 0, deadline - time.monotonic()):
                deadline = min(deadline, time.monotonic() + self._RELEASE_WAIT_S)
                self._state.wait_for(
                    lambda: self._open == 0 and self._running == 0,
                    deadline - time.monotonic(),
                )


_exit = _Exit()


class _Pass:
    """One pass of ``from_generator`` over a dataset, counted by :class:`_Exit`."""

    __slots__ = ("_generator",)

    def __init__(self, generator: Iterator[Any]) -> None:
        self._generator = generator
        _exit.count(opened=1)

    def __iter__(self) -> _Pass:
        return self

    def __next__(self) -> Any:
        # The frame holds no `self`: TensorFlow may keep the traceback of what is raised
        # here (StopIteration too), which must not keep the pass from being released.
        generator = self._generator
        del self
        _exit.count(running=1)
        try:
            return next(generator)
        finally:
            _exit.count(running=-1)

    def __del__(self) -> None:
        _exit.count(opened=-1)


class _OwnThreadDataset(tf.data.Dataset):  # type: ignore[misc]
    """``input_dataset`` computed on a thread pool of one thread of its own."""

    def __init__(self, input_dataset: Any) -> None:
        self._input = input_dataset
        variant = gen_experimental_dataset_ops.private_thread_pool_dataset(
            input_dataset._variant_tensor,
            num_threads=1,
            **input_dataset._flat_structure,
        )
        super().__init__(variant)

    def _inputs(self) -> list[Any]:
        return [self._input]

    @property
    def element_spec(self) -> Any:
        return self._input.element_spec


class _ReverbDataset(tf.data.Dataset):  # type: ignore[misc]
    _timesteps = False

    @_plain
    def __init__(
        self,
        server_address: Any,
        table: Any,
        dtypes: Any,
        shapes: Any,
        max_in_flight_samples_per_worker: int,
        num_workers_per_iterator: int = -1,
        max_samples_per_stream: int = -1,
        rate_limiter_timeout_ms: int = -1,
        max_samples: int = -1,
        *,
        token: str | None = None,
        root_certificates: bytes | str | None = None,
        private_key: bytes | str | None = None,
        certificate_chain: bytes | str | None = None,
    ) -> None:
        # As a Client's: None reads REVERB_PY_TOKEN / REVERB_PY_TOKEN_FILE.
        self._credential_args = (token, root_certificates, private_key, certificate_chain)
        self._credentials = ClientCredentials(*self._credential_args)
        specs = data.flat_specs(dtypes, shapes)
        options = datasets.SamplerOptions(
            max_in_flight_samples_per_worker,
            num_workers_per_iterator,
            max_samples_per_stream,
            rate_limiter_timeout_ms,
            max_samples,
        )
        self._server_address = _text(server_address, "server_address")
        self._table = _text(table, "table")
        self._options = options
        self._specs = specs
        self._structure = data.lists_to_tuples(dtypes)
        self._build(None)

    @_plain
    def _build(self, batch: tuple[int, bool] | None) -> None:
        """The pipeline: blocks of samples from the generator, split by ``unbatch``; or,
        with ``batch`` (``batch_size``, ``drop_remainder``), the batches themselves."""
        self._batch = batch
        leaves = [tf.TensorSpec(_tf_shape(shape), _tf_dtype(dtype)) for dtype, shape in self._specs]
        info = SampleInfo(*(tf.TensorSpec([], tf.as_dtype(dtype)) for dtype in SampleInfo.dtypes()))
        sample_spec = ReplaySample(info, nest.unflatten_as(self._structure, leaves))
        size = None if batch is None or not batch[1] else batch[0]
        blocks = tf.nest.map_structure(
            lambda spec: tf.TensorSpec(tf.TensorShape([size]).concatenate(spec.shape), spec.dtype),
            sample_spec,
        )
        dataset = tf.data.Dataset.from_generator(self._blocks, output_signature=blocks)
        if batch is None:
            self._element_spec = sample_spec
            dataset = dataset.unbatch()
        else:
            self._element_spec = blocks
        # The generator runs on a thread of its own, not on TensorFlow's inter-op pool (as
        # many threads as cores): waiting there for samples, the generators of several
        # datasets (an interleave) could hold every thread, and the one whose samples
        # had come would never run.
        self._dataset = _OwnThreadDataset(dataset)
        super().__init__(self._dataset._variant_tensor)

    def batch(
        self,
        batch_size: Any,
        drop_remainder: Any = False,
        num_parallel_calls: Any = None,
        deterministic: Any = None,
        name: Any = None,
    ) -> Any:
        """``tf.data.Dataset.batch``; with a Python int ``batch_size`` (and bool
        ``drop_remainder``) the batches come stacked from the sampler, as
        ``unbatch().batch(...)`` would make them, without splitting and restacking each
        sample in TensorFlow (PERF(tf-batch))."""
        plain_size = isinstance(batch_size, int) and not isinstance(batch_size, bool)
        if (
            self._batch is not None
            or not plain_size
            or batch_size < 1
            or not isinstance(drop_remainder, bool)
            or name is not None
        ):
            return super().batch(
                batch_size, drop_remainder, num_parallel_calls, deterministic, name
            )
        batched = type(self).__new__(type(self))
        for attribute in (
            "_credential_args",
            "_credentials",
            "_server_address",
            "_table",
            "_options",
            "_specs",
            "_structure",
        ):
            setattr(batched, attribute, getattr(self, attribute))
        batched._build((batch_size, drop_remainder))
        return batched

    @classmethod
    @_plain
    def from_table_signature(
        cls,
        server_address: str,
        table: str,
        max_in_flight_samples_per_worker: int,
        num_workers_per_iterator: int = -1,
        max_samples_per_stream: int = -1,
        rate_limiter_timeout_ms: int = -1,
        get_signature_timeout_secs: int | None = None,
        max_samples: int = -1,
        *,
        token: str | None = None,
        root_certificates: bytes | str | None = None,
        private_key: bytes | str | None = None,
        certificate_chain: bytes | str | None = None,
    ) -> Any:
        """A dataset whose dtypes and shapes are the table's signature.

        Raises:
          ValueError: no table of that name, or a table without a signature.
          DeadlineExceededError: the server did not answer within
            ``get_signature_timeout_secs``.
        """
        address = _text(server_address, "server_address")
        name = _text(table, "table")
        credentials = (token, root_certificates, private_key, certificate_chain)
        _, dtypes, shapes = data.table_specs(
            address, name, get_signature_timeout_secs, credentials=credentials
        )
        return cls(
            address,
            name,
            dtypes,
            shapes,
            max_in_flight_samples_per_worker,
            num_workers_per_iterator,
            max_samples_per_stream,
            rate_limiter_timeout_ms,
            max_samples,
            token=token,
            root_certificates=root_certificates,
            private_key=private_key,
            certificate_chain=certificate_chain,
        )

    @_plain
    def _blocks(self) -> Iterator[Any]:
        """The iterator ``from_generator`` reads, one per pass over the dataset."""
        return _Pass(self._generate())

    def _generate(self) -> Iterator[Any]:
        if not _exit.start():
            return
        data.validate_against_table(
            self._server_address, self._table, self._specs, credentials=self._credential_args
        )
        sampler = datasets.Sampler(
            self._server_address,
            self._table,
            self._options,
            copy=False,
            credentials=self._credentials,
            batch=None if self._timesteps else (BLOCK if self._batch is None else self._batch[0]),
        )
        _exit.add(sampler)
        shape = datasets.timesteps if self._timesteps else datasets.trajectories
        try:
            if self._batch is None:
                yield from shape(
                    sampler,
                    specs=self._specs,
                    structure=self._structure,
                    batch_size=BLOCK,
                    flexible=True,
                )
            else:
                yield from shape(
                    sampler,
                    specs=self._specs,
                    structure=self._structure,
                    batch_size=self._batch[0],
                    drop_remainder=self._batch[1],
                )
        finally:
            sampler.close()

    def _inputs(self) -> list[Any]:
        return []

    @property
    def element_spec(self) -> Any:
        return self._element_spec


class TrajectoryDataset(_ReverbDataset):
    """A ``tf.data.Dataset`` of whole items of a Reverb table (Reverb's arguments).

    Elements are ``ReplaySample(info, data)``: ``info`` scalars, ``data`` with the
    structure of ``dtypes`` and ``shapes`` (lists become tuples).
    """


class TimestepDataset(_ReverbDataset):
    """A ``tf.data.Dataset`` of the time steps of a Reverb table's items."""

    _timesteps = True


class PatternDataset(tf.data.Dataset):  # type: ignore[misc]
    """A ``tf.data.Dataset`` of the trajectories StructuredWriter ``configs`` make of the
    steps of ``input_dataset``, as if the steps were written with those configs and the
    items then read back (Reverb's ``PatternDataset``; eager mode).

    Args:
      input_dataset: a dataset of steps (flat: one element per step).
      configs: the patterns (``StructuredWriterConfig`` s, of one pattern structure).
        Each gets a ``buffer_length`` condition for the history it needs, unless it has
        one (the given messages are not changed).
      respect_episode_boundaries: no trajectory spans two episodes.
      is_end_of_episode: a function of a step returning a scalar bool: whether it is
        the last step of its episode.

    Raises:
      ValueError: ``is_end_of_episode`` does not return a scalar bool, or the configs are
        invalid or do not fit the steps.
    """

    @_plain
    def __init__(
        self,
        input_dataset: Any,
        configs: Any,
        respect_episode_boundaries: bool,
        is_end_of_episode: Callable[..., Any],
    ) -> None:
        from reverb_py import structured_writer
        from reverb_py._writer import local_patterns
        from reverb_py._writer.structured_writer import as_configs

        self._configs = local_patterns.with_history_conditions(as_configs(configs))
        local_patterns.LocalPatterns(self._configs, respect_episode_boundaries)  # checks them
        self._clear = bool(respect_episode_boundaries)
        step_spec = input_dataset.element_spec
        signature = data.lists_to_tuples(
            structured_writer.infer_signature(self._configs, step_spec)
        )
        self._structure = signature
        self._element_spec = tf.nest.map_structure(
            lambda spec: tf.TensorSpec(_tf_shape(spec.shape), _tf_dtype(np.dtype(spec.dtype))),
            signature,
        )

        def step_and_end(*components: Any) -> Any:
            step = tf.nest.pack_sequence_as(step_spec, tf.nest.flatten(components))
            return step, is_end_of_episode(*components)

        self._steps = input_dataset.map(step_and_end)
        end_spec = self._steps.element_spec[1]
        if not tf.TensorSpec([], tf.bool).is_compatible_with(end_spec):
            raise ValueError(
                "Invalid `is_end_of_episode`. `is_end_of_episode` must return `bool`, but "
                f"its return type is {end_spec}."
            )
        self._dataset = tf.data.Dataset.from_generator(
            self._trajectories, output_signature=self._element_spec
        )
        super().__init__(self._dataset._variant_tensor)

    @_plain
    def _trajectories(self) -> Iterator[Any]:
        from reverb_py._writer.local_patterns import LocalPatterns

        patterns = LocalPatterns(self._configs, self._clear)
        for step, end in self._steps:
            flat = [leaf.numpy() for leaf in tf.nest.flatten(step)]
            for columns in patterns.append(flat, bool(end.numpy())):
                yield nest.unflatten_as(self._structure, columns)

    def _inputs(self) -> list[Any]:
        return []

    @property
    def element_spec(self) -> Any:
        return self._element_spec


def pattern_dataset_with_info(
    input_dataset: Any,
    configs: Any,
    respect_episode_boundaries: bool,
    is_end_of_episode: Callable[..., Any],
) -> Any:
    """A :class:`PatternDataset` whose elements are ``ReplaySample`` s with an info of
    zeros (Reverb's ``pattern_dataset_with_info``)."""
    patterns = PatternDataset(input_dataset, configs, respect_episode_boundaries, is_end_of_episode)
    zeros = SampleInfo(*(tf.zeros([], tf.as_dtype(dtype)) for dtype in SampleInfo.dtypes()))
    return patterns.map(lambda trajectory: ReplaySample(info=zeros, data=trajectory))
