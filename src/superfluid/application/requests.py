"""What the executor is asked to do, and what it reports back."""

from __future__ import annotations

import enum
import itertools
import threading
from dataclasses import dataclass, field

from superfluid.application.ports import TokenConstraint
from superfluid.domain.logprobs import MAX_TOP_LOGPROBS, TokenLogprob
from superfluid.domain.sampling import SamplingParams

_ids = itertools.count(1)


class Finish(enum.Enum):
    STOP = "stop"  # an end-of-generation or stop token, or a stop string (service level)
    LENGTH = "length"  # max_tokens or the context window
    CANCELLED = "cancelled"  # the client went away
    ERROR = "error"  # the runtime failed this lane's step


@dataclass(eq=False)
class GenerationRequest:
    """One completion to run. `speculate` is False for lanes that must never draft
    (grammar, logit_bias, logprobs): they decode plainly whatever the gates say."""

    prompt: list[int]
    params: SamplingParams
    max_tokens: int
    stop_tokens: frozenset[int] = frozenset()
    speculate: bool = True
    #: A grammar lane's constraint (JSON mode); such lanes never speculate.
    constraint: TokenConstraint | None = None
    #: None: no log-probabilities; n: each committed token's, with the n most likely (0..20).
    #: Such lanes never speculate either (docs/contract.md §8).
    logprobs: int | None = None
    id: int = field(default_factory=lambda: next(_ids))
    _cancelled: threading.Event = field(default_factory=threading.Event, repr=False)

    def __post_init__(self) -> None:
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(
                f"logprobs asks for the top {self.logprobs} tokens; ask for 0 to {MAX_TOP_LOGPROBS}"
            )

    def cancel(self) -> None:
        """Ask for the lane to be freed; honoured at the start of the next tick."""
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()


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
