"""Admission: how many requests one served model holds at once, decoding or waiting.

A model decodes `lanes` requests at once; up to `queue` more wait for a lane. A request past
that is refused at once (the HTTP layer answers 429 with `Retry-After`) instead of joining a
queue that only grows: under overload a client learns in milliseconds that it should retry,
and the requests already accepted keep their pace. A request holds its place from the moment it
is accepted until its last event is delivered (finished, failed or cancelled), so a client that
walks away while queued gives its place back as soon as the worker drops the request.

Thread-safe: the event loop enters, the model's worker thread leaves.
"""

from __future__ import annotations

import threading


class Admission:
    """`lanes + queue` places for one model; `queue` None means no bound (tests, embedders)."""

    def __init__(self, lanes: int, queue: int | None = None) -> None:
        if lanes < 1 or (queue is not None and queue < 0):
            raise ValueError("an admission has at least one lane and a non-negative queue")
        self.lanes = lanes
        self.queue = queue
        self._lock = threading.Lock()
        self._held = 0
        self._rejected = 0

    @property
    def capacity(self) -> int | None:
        return None if self.queue is None else self.lanes + self.queue

    @property
    def held(self) -> int:
        """Requests accepted and not yet ended: decoding, waiting, or about to be dropped."""
        with self._lock:
            return self._held

    @property
    def rejected(self) -> int:
        """Requests refused because every place was taken, over the server's life."""
        with self._lock:
            return self._rejected

    def queued(self, active_lanes: int) -> int:
        """Requests waiting for a lane, given how many lanes are busy."""
        return max(0, self.held - active_lanes)

    def enter(self) -> bool:
        """Take a place; False (and counted as a rejection) when none is free."""
        with self._lock:
            capacity = self.capacity
            if capacity is not None and self._held >= capacity:
                self._rejected += 1
                return False
            self._held += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self._held = max(0, self._held - 1)
