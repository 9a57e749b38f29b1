"""Observers that combine other observers."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from superfluid.application.events import Committed, Observer, TickReport

log = logging.getLogger("superfluid")


class FanOut:
    """Forwards every report to several observers (the metrics and the monitor, say).

    The service calls its observer from the model's worker thread, outside any guard: an
    exception escaping here would end that worker and with it the model's serving. A broken
    observer costs a log line instead, and the others still get the report.
    """

    def __init__(self, observers: Iterable[Observer]) -> None:
        self._observers = tuple(observers)

    def tick(self, model: str, report: TickReport, active_lanes: int) -> None:
        for observer in self._observers:
            try:
                observer.tick(model, report, active_lanes)
            except Exception:
                log.exception("observer %r failed on a tick of %s", observer, model)

    def finished(self, model: str, event: Committed, generated: int) -> None:
        for observer in self._observers:
            try:
                observer.finished(model, event, generated)
            except Exception:
                log.exception("observer %r failed on a finished request of %s", observer, model)
