"""The terminal monitor: what each served model is doing, at a glance (docs/contract.md §9).

On a terminal it is a live table on stderr (rich, refreshed twice a second); elsewhere (a log
file, a service manager's journal) it is one summary line per model on the `superfluid` logger
every `interval` seconds, and only for models that did something since the previous line, so an
idle server's log stays quiet:

    superfluid: gemma.gguf: lanes 2/4, decode 61.2 tok/s, prefill 410 tok/s, spec accept 73%

A rate is shown only when that work happened within the window: a line never claims
`prefill 0 tok/s` while nothing prefilled (the line then leaves prefill out), and a model that
only finished requests since its last line says `idle`. The logger adds the `superfluid:`
prefix; the line itself does not carry one. `spec accept` is accepted over proposed draft
tokens over the server's life, `-` before anything was proposed. Rates are tokens per
tick-second over a recent window (see adapters.rates): the interval for summary lines, a few
seconds for the live view.

The monitor is a service Observer, fed from the worker threads; it keeps its own small tallies
under one lock. Rendering is pure (a list of `ModelView` in, text or a rich table out) and the
time comes from an injected clock, so both are testable without a terminal or a sleep.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table

from superfluid.adapters.rates import RateWindow
from superfluid.application.events import Committed, TickReport

#: Seconds between summary lines when not on a terminal.
DEFAULT_INTERVAL = 10.0

#: Seconds of recent ticks the live view's rates cover: short, so the view follows the load.
LIVE_RATE_WINDOW = 3.0

#: Live view refreshes per second.
LIVE_REFRESH_PER_SECOND = 2.0


@dataclass(frozen=True, slots=True)
class ModelView:
    """One model's line or row, as of one moment."""

    name: str
    lanes: int
    capacity: int | None  # most lanes the model runs at once, when known
    decode_rate: float | None  # tokens per tick-second; None: no decoding within the window
    prefill_rate: float | None  # None: nothing prefilled within the window
    proposed: int  # draft tokens over the server's life
    accepted: int
    #: Share of prompt tokens (over the server's life) found in a finished request's KV.
    reused_share: float | None = None


def acceptance_text(proposed: int, accepted: int) -> str:
    """`73%`, or `-` before anything was proposed (0% would claim drafts were rejected)."""
    if proposed <= 0:
        return "-"
    return f"{100.0 * accepted / proposed:.0f}%"


def lanes_text(view: ModelView) -> str:
    return f"{view.lanes}/{view.capacity}" if view.capacity is not None else str(view.lanes)


def rate_text(rate: float | None, digits: int) -> str:
    return "-" if rate is None else f"{rate:.{digits}f}"


def summary_line(view: ModelView) -> str:
    """One model's line, without the logger's `superfluid:` prefix; only true rates in it."""
    parts = [f"lanes {lanes_text(view)}"]
    if view.decode_rate is not None:
        parts.append(f"decode {view.decode_rate:.1f} tok/s")
    if view.prefill_rate is not None:
        parts.append(f"prefill {view.prefill_rate:.0f} tok/s")
    if view.decode_rate is None and view.prefill_rate is None:
        parts.append("idle")
    parts.append(f"spec accept {acceptance_text(view.proposed, view.accepted)}")
    if view.reused_share is not None:
        parts.append(f"prompt reused {100.0 * view.reused_share:.0f}%")
    return f"{view.name}: " + ", ".join(parts)


def render_table(views: Sequence[ModelView]) -> Table:
    table = Table(title="superfluid", title_justify="left", expand=False)
    table.add_column("model", no_wrap=True)
    table.add_column("lanes", justify="right")
    table.add_column("decode tok/s", justify="right")
    table.add_column("prefill tok/s", justify="right")
    table.add_column("spec accept", justify="right")
    table.add_column("prompt reused", justify="right")
    for view in views:
        table.add_row(
            view.name,
            lanes_text(view),
            rate_text(view.decode_rate, 1),
            rate_text(view.prefill_rate, 0),
            acceptance_text(view.proposed, view.accepted),
            "-" if view.reused_share is None else f"{100.0 * view.reused_share:.0f}%",
        )
    return table


class _Tally:
    """What the monitor keeps per model."""

    __slots__ = ("accepted", "decode", "events", "fed", "lanes", "prefill", "proposed", "reused")

    def __init__(self, window: float) -> None:
        self.lanes = 0
        self.proposed = 0
        self.accepted = 0
        self.events = 0  # ticks and finished requests seen: tells "something happened"
        self.fed = 0  # prompt tokens prefilled
        self.reused = 0  # prompt tokens found in a parked KV
        self.decode = RateWindow(window)
        self.prefill = RateWindow(window)


class TerminalMonitor:
    """A service Observer that shows the served models on the terminal or in the log.

    `lane_capacity` maps model names to their lane limit (shown as `lanes 2/4`; without it,
    `lanes 2`), and lists the models the live view shows before their first request.
    `live` None picks the live view exactly when `stream` (default stderr) is a terminal.
    """

    def __init__(
        self,
        lane_capacity: Mapping[str, int] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        interval: float = DEFAULT_INTERVAL,
        live: bool | None = None,
        stream: TextIO | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        if not interval > 0.0:
            raise ValueError(f"the summary interval must be positive, not {interval}")
        self._stream = stream if stream is not None else sys.stderr
        self.live = _is_terminal(self._stream) if live is None else live
        self._capacity = dict(lane_capacity or {})
        self._clock = clock
        self.interval = interval
        self._log = logger or logging.getLogger("superfluid")
        self._window = LIVE_RATE_WINDOW if self.live else interval
        self._lock = threading.Lock()
        self._tallies = {name: _Tally(self._window) for name in self._capacity}
        self._reported: dict[str, int] = {}  # model -> its events count at its latest line
        self._last_line = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._display: Live | None = None

    # -- the Observer protocol (worker threads) -----------------------------------------------

    def tick(self, model: str, report: TickReport, active_lanes: int) -> None:
        now = self._clock()
        with self._lock:
            tally = self._tally(model)
            tally.lanes = active_lanes
            tally.proposed += report.drafted
            tally.accepted += report.accepted
            tally.events += 1
            # A tick's time counts towards each kind of work it did: a prefill-only tick does
            # not dilute the decode rate, and a decode-only tick not the prefill rate.
            tally.decode.add(now, report.committed, report.seconds)
            tally.prefill.add(now, report.prefill_tokens, report.seconds)
            tally.fed += report.prefill_tokens
            tally.reused += report.reused_tokens

    def finished(self, model: str, event: Committed, generated: int) -> None:
        with self._lock:
            self._tally(model).events += 1

    # -- what is shown ------------------------------------------------------------------------

    def snapshot(self) -> list[ModelView]:
        """Every model known so far, in the order they became known."""
        now = self._clock()
        with self._lock:
            return [self._view(name, tally, now) for name, tally in self._tallies.items()]

    def renderable(self) -> Table:
        return render_table(self.snapshot())

    def due_lines(self) -> list[str]:
        """The summary lines owed now: none before `interval` has passed since the previous
        check that was due, and then one per model that did something since its last line."""
        now = self._clock()
        with self._lock:
            if now - self._last_line < self.interval:
                return []
            self._last_line = now
            lines = []
            for name, tally in self._tallies.items():
                if self._reported.get(name, 0) == tally.events:
                    continue
                self._reported[name] = tally.events
                lines.append(summary_line(self._view(name, tally, now)))
            return lines

    def emit_due(self) -> None:
        for line in self.due_lines():
            self._log.info("%s", line)

    # -- running ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the live view, or the thread that writes summary lines."""
        if self._thread is not None or self._display is not None:
            return
        self._stop.clear()
        if self.live:
            # rich's own refresh thread (a daemon) calls back for a fresh table each time.
            self._display = Live(
                console=Console(file=self._stream),
                get_renderable=self.renderable,
                refresh_per_second=LIVE_REFRESH_PER_SECOND,
            )
            self._display.start()
            return
        self._thread = threading.Thread(
            target=self._write_lines, name="superfluid-monitor", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._display is not None:
            self._display.stop()  # draws the table a last time and leaves it on screen
            self._display = None
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def _write_lines(self) -> None:
        # Wake often enough that a line is at most a second late, whatever the interval.
        pause = min(1.0, self.interval)
        while not self._stop.wait(pause):
            try:
                self.emit_due()
            except Exception:  # the monitor must never take the server down with it
                self._log.exception("the terminal monitor failed")

    # -- internals ----------------------------------------------------------------------------

    def _tally(self, model: str) -> _Tally:
        tally = self._tallies.get(model)
        if tally is None:
            tally = self._tallies[model] = _Tally(self._window)
        return tally

    def _view(self, name: str, tally: _Tally, now: float) -> ModelView:
        return ModelView(
            name=name,
            lanes=tally.lanes,
            capacity=self._capacity.get(name),
            decode_rate=tally.decode.rate(now) if tally.decode.active(now) else None,
            prefill_rate=tally.prefill.rate(now) if tally.prefill.active(now) else None,
            proposed=tally.proposed,
            accepted=tally.accepted,
            reused_share=tally.reused / (tally.reused + tally.fed) if tally.reused else None,
        )


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
