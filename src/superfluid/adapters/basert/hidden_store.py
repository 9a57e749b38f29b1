"""One sequence's target hidden states at the tap layers drafters read, row for row with its KV.

Row p holds, for the token at KV position p, the residual stream at each required tap (tap i =
the stream entering layer i, see model.py), in the runtime's tap order. The store is written by
the same step that writes the KV and never trusted past the KV's length, so cutting the KV cuts
the store too: rows past the cut are never read, and the next feed writes over them, exactly as
with the KV cache itself.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]

#: The store grows by this many rows at a time (and never past its limit), as the KV does.
ROW_CHUNK = 256


class HiddenStore:
    """Rows [capacity, taps, hidden]; the owner says how many are valid (the KV length)."""

    __slots__ = ("_rows", "limit")

    def __init__(self, taps: int, hidden: int, limit: int) -> None:
        self._rows: F32 = np.zeros((0, taps, hidden), dtype=np.float32)
        self.limit = limit

    def write(self, start: int, rows: F32) -> None:
        """Put `rows` [n, taps, hidden] at positions start..start+n-1."""
        end = start + rows.shape[0]
        if end > self._rows.shape[0]:
            if end > self.limit:
                raise ValueError(f"{end} rows pass this store's limit of {self.limit}")
            grown = min(self.limit, -(-end // ROW_CHUNK) * ROW_CHUNK)
            bigger = np.zeros((grown, *self._rows.shape[1:]), dtype=np.float32)
            keep = min(start, self._rows.shape[0])
            bigger[:keep] = self._rows[:keep]
            self._rows = bigger
        self._rows[start:end] = rows

    def read(self, start: int, end: int, columns: list[int]) -> F32:
        """A copy of rows start..end-1 at the given tap columns: [end - start, len(columns), hidden]."""
        out: F32 = self._rows[start:end][:, columns]  # fancy indexing copies
        return out
