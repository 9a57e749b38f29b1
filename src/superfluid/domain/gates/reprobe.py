"""The re-probe schedule after a throughput loss (docs/contract.md §7, "Re-probe").

After the throughput gate decides for plain decoding at a lane count, speculation there is
measured again after `reprobe` finished requests; each further loss in a row doubles the wait, up
to `reprobe_max`; a win starts the doubling over. `reprobe` 0 makes the first loss final.

Requests are counted per model (every finished request of the model ticks every lane count's
clock): a request is not tied to one lane count, since lanes come and go while it decodes.

Invariant: every wait handed out lies in [reprobe, max(reprobe, reprobe_max)].
"""

from __future__ import annotations

import enum


class ReprobeOutcome(enum.Enum):
    WAIT = "wait"  # measure again after a number of requests
    FINAL = "final"  # never measure again (reprobe 0)


class ReprobeSchedule:
    """How many requests to wait after each throughput loss at one lane count."""

    def __init__(self, *, reprobe: int, reprobe_max: int) -> None:
        if reprobe < 0:
            raise ValueError("reprobe must be at least 0")
        self.reprobe = reprobe
        # A ceiling below the first wait would make "doubling up to the ceiling" shrink it.
        self.reprobe_max = max(reprobe, reprobe_max)
        self._next_wait = reprobe
        self.losses_in_a_row = 0

    @property
    def final(self) -> bool:
        return self.reprobe == 0

    def on_win(self) -> None:
        self.losses_in_a_row = 0
        self._next_wait = self.reprobe

    def on_loss(self) -> tuple[ReprobeOutcome, int]:
        """The outcome of a loss and, for WAIT, the number of requests to wait."""
        self.losses_in_a_row += 1
        if self.final:
            return ReprobeOutcome.FINAL, 0
        wait = self._next_wait
        self._next_wait = min(wait * 2, self.reprobe_max)
        return ReprobeOutcome.WAIT, wait
