"""A `llama_batch` whose arrays are numpy arrays we own.

`llama_batch_init` allocates one seq-id array per token, so filling it costs several ctypes
stores per token from Python. Here every token belongs to exactly one sequence: its seq-id
pointer points into one int32 array, fixed when the batch is allocated, and a packed step fills
tokens, positions, sequence ids and output flags with numpy slice assignments, one per feed.
"""

from __future__ import annotations

import ctypes
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

_I32 = ctypes.POINTER(ctypes.c_int32)
_I32_PP = ctypes.POINTER(ctypes.POINTER(ctypes.c_int32))
_I8 = ctypes.POINTER(ctypes.c_int8)


class PackedBatch:
    """Token rows for one or more `llama_decode` calls, grown on demand."""

    tokens: npt.NDArray[np.int32]
    positions: npt.NDArray[np.int32]
    seq_ids: npt.NDArray[np.int32]
    outputs: npt.NDArray[np.int8]

    def __init__(self, lib: ModuleType, capacity: int) -> None:
        self._lib = lib
        self._allocate(max(1, capacity))

    @property
    def capacity(self) -> int:
        return int(self.tokens.shape[0])

    def reserve(self, count: int) -> None:
        if count > self.capacity:
            self._allocate(max(count, 2 * self.capacity))

    def _allocate(self, capacity: int) -> None:
        self.tokens = np.zeros(capacity, np.int32)
        self.positions = np.zeros(capacity, np.int32)
        self.seq_ids = np.zeros(capacity, np.int32)
        self.outputs = np.zeros(capacity, np.int8)
        self._n_seq_id = np.ones(capacity, np.int32)
        item = self.seq_ids.itemsize
        self._seq_id_ptrs = self.seq_ids.ctypes.data + item * np.arange(capacity, dtype=np.uintp)

    def view(self, start: int, count: int) -> Any:
        """A `llama_batch` over rows [start, start + count); valid until the next `reserve`."""
        b = self._lib.llama_batch()
        b.n_tokens = count
        b.token = ctypes.cast(self.tokens.ctypes.data + 4 * start, _I32)
        b.embd = None
        b.pos = ctypes.cast(self.positions.ctypes.data + 4 * start, _I32)
        b.n_seq_id = ctypes.cast(self._n_seq_id.ctypes.data + 4 * start, _I32)
        ptr_size = self._seq_id_ptrs.itemsize
        b.seq_id = ctypes.cast(self._seq_id_ptrs.ctypes.data + ptr_size * start, _I32_PP)
        b.logits = ctypes.cast(self.outputs.ctypes.data + start, _I8)
        return b
