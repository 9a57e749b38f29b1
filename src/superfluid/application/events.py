"""What the executor reports: committed tokens per request, and what each tick did.

These are the application's outbound events. Adapters that watch the server (metrics, the
monitor) import them from here, with the `Observer` protocol they implement, and from nowhere
else in the application but its ports (an import-linter contract holds them to it).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from superfluid.domain.logprobs import TokenLogprob


class Finish(enum.Enum):
    STOP = "stop"  # an end-of-generation or stop token, or a stop string (service level)
    LENGTH = "length"  # max_tokens or the context window
    CANCELLED = "cancelled"  # the client went away
    ERROR = "error"  # the runtime failed this lane's step


@dataclass(frozen=True, slots=True)
class SpecStats:
    proposed: int = 0
    accepted: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0


@dataclass(frozen=True, slots=True)
class Committed:
    """Tokens committed for one request in one tick: an accepted draft is one event.

    `tokens` never includes the stop token that ended the lane. `finish` is set on the
    lane's last event; `error` explains a Finish.ERROR. For a lane that asked for logprobs,
    `logprobs[i]` belongs to `tokens[i]` (the stop token gets none, as it is not emitted);
    for other lanes it is empty.
    """

    request_id: int
    tokens: tuple[int, ...]
    spec: SpecStats
    finish: Finish | None = None
    error: str | None = None
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True, slots=True)
class TickReport:
    """What one tick did, for metrics and the monitor."""

    lanes: int
    decoding: int
    prefill_tokens: int
    committed: int
    drafted: int
    accepted: int
    seconds: float
    #: accepted_at[i]: lanes whose draft token at position i (0-based) was accepted this tick.
    accepted_at: tuple[int, ...] = ()
    #: Prompt tokens that lanes admitted this tick found in a parked sequence's KV.
    reused_tokens: int = 0


class Observer(Protocol):
    """Where ticks and finished requests are reported (metrics, the monitor)."""

    def tick(self, model: str, report: TickReport, active_lanes: int) -> None: ...

    def finished(self, model: str, event: Committed, generated: int) -> None: ...
