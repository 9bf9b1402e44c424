"""Reverb's name for :mod:`reverb_py.item_selectors` (``reverb.selectors``)."""

from reverb_py.item_selectors import (
    Fifo,
    HeapSelector,
    ItemSelector,
    Lifo,
    MaxHeap,
    MinHeap,
    Prioritized,
    Uniform,
    selector_from_options,
)

__all__ = [
    "ItemSelector",
    "Uniform",
    "Prioritized",
    "Fifo",
    "Lifo",
    "HeapSelector",
    "MinHeap",
    "MaxHeap",
    "selector_from_options",
]
