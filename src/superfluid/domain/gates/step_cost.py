"""What a step costs by the rows it carries, learnt once per model and shared by lane counts.

On a CPU the forward pass is compute-bound once a step carries more than a row or two, so its
cost follows the rows in the batch, whichever lanes they belong to: 2 lanes verifying 8 rows
each cost about what 1 lane verifying 16 does. Keying the measurements by the step's total rows
lets what one lane count measured price a draft at another, instead of each lane count starting
from the prior shape, whose slope can be far from the real one (ADR 0006).

Costs not yet measured: between two measured row counts, interpolated linearly; above the
largest, extended along the line through the smallest and the largest measurement (the widest
baseline, so one noisy point moves the slope least); below the smallest, or with fewer than two
points, the prior shape c(r) ≈ c(1)·(1 + 0.17·(r−1)) scaled from the nearest measurement. With
nothing measured the prior shape alone is returned: depth choices only compare costs, so the
scale does not matter.
"""

from __future__ import annotations

import math

#: Each extra verify row costs this fraction of a one-row step: a prior only (ADR 0006),
#: replaced by measurements as they come.
ROW_COST_SLOPE = 0.17

#: Weight of the newest measurement in a row count's cost average.
COST_SMOOTHING = 0.25


def prior_row_cost(rows: int) -> float:
    """The cost of an r-row step relative to a one-row step, before measuring."""
    return 1.0 + ROW_COST_SLOPE * (rows - 1)


class StepCosts:
    """Smoothed seconds per step, by total rows in the step."""

    __slots__ = ("_seconds",)

    def __init__(self) -> None:
        self._seconds: dict[int, float] = {}

    def record(self, rows: int, seconds: float) -> None:
        """One step of `rows` rows (all lanes together) took `seconds`."""
        if rows < 1 or not (math.isfinite(seconds) and seconds > 0.0):
            return  # a clock that did not advance tells nothing about cost
        previous = self._seconds.get(rows)
        self._seconds[rows] = (
            seconds if previous is None else previous + COST_SMOOTHING * (seconds - previous)
        )

    def measured(self) -> dict[int, float]:
        return dict(self._seconds)

    def cost(self, rows: int) -> float:
        """Measured cost of an r-row step, else the estimate the module docstring describes."""
        known = self._seconds
        measured = known.get(rows)
        if measured is not None:
            return measured
        if not known:
            return prior_row_cost(rows)
        below = max((r for r in known if r < rows), default=None)
        above = min((r for r in known if r > rows), default=None)
        if below is not None and above is not None:
            share = (rows - below) / (above - below)
            return known[below] + share * (known[above] - known[below])
        if below is not None and len(known) >= 2:
            smallest = min(known)
            slope = (known[below] - known[smallest]) / (below - smallest)
            if slope > 0.0:
                return known[below] + slope * (rows - below)
        nearest = below if below is not None else above
        assert nearest is not None  # known is not empty
        return known[nearest] * prior_row_cost(rows) / prior_row_cost(nearest)
