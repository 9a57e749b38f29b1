"""Tokens per second over a sliding window of recent ticks (for /metrics and the monitor).

A rate is tokens over *tick-seconds* — the time the executor spent in the ticks that did that
kind of work — not over wall time, so a server that idles between requests still reports the
speed it decodes at while it works. The window is wall-clock (the owner's clock), so once the
server goes quiet the ticks age out and the rate falls to 0 instead of freezing at its last value.

Not thread-safe: each owner guards its windows with its own lock.
"""

from __future__ import annotations

import collections
import math


class RateWindow:
    """Tokens and tick-seconds of the ticks recorded in the last `span` seconds."""

    def __init__(self, span: float) -> None:
        if not (math.isfinite(span) and span > 0.0):
            raise ValueError(f"a rate window spans a positive number of seconds, not {span}")
        self.span = span
        self._ticks: collections.deque[tuple[float, int, float]] = collections.deque()

    def add(self, at: float, tokens: int, seconds: float) -> None:
        """A tick seen at clock time `at` did `tokens` of this work in `seconds`."""
        if tokens <= 0 or not (math.isfinite(seconds) and seconds > 0.0):
            return  # a tick that did none of this work says nothing about its speed
        self._ticks.append((at, tokens, seconds))
        self._expire(at)

    def rate(self, now: float) -> float:
        """Tokens per tick-second over the window ending at `now`; 0 when it is empty."""
        self._expire(now)
        # Summed afresh on each read (a few thousand ticks at most): running sums would drift.
        seconds = sum(tick[2] for tick in self._ticks)
        if seconds <= 0.0:
            return 0.0
        return sum(tick[1] for tick in self._ticks) / seconds

    def active(self, now: float) -> bool:
        """Whether any tick in the window ending at `now` did this work."""
        self._expire(now)
        return bool(self._ticks)

    def _expire(self, now: float) -> None:
        horizon = now - self.span
        while self._ticks and self._ticks[0][0] <= horizon:
            self._ticks.popleft()
