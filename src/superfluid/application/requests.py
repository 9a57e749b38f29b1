"""What the executor is asked to do, and what it reports back."""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

from superfluid.application.ports import TokenConstraint
from superfluid.domain.logprobs import MAX_TOP_LOGPROBS
from superfluid.domain.sampling import SamplingParams

_ids = itertools.count(1)


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

    @property
    def may_draft(self) -> bool:
        """The one rule for which lanes may speculate (docs/contract.md §8): never a grammar
        lane, a lane with a logit bias or one that reports logprobs, nor one told not to."""
        return (
            self.speculate
            and self.constraint is None
            and self.logprobs is None
            and not self.params.logit_bias
        )
