"""The yield floor (docs/contract.md §7, "Yield floor").

Yield is accepted draft tokens per verified round. Each request is judged once, when it has had
`yield_rounds` verified rounds: below `min_yield` it *fails* and drafts no more for the rest of
that request; at or above it *passes* and is not judged again. Only rounds in which something
was drafted count: a tick where the drafter had nothing to offer verified nothing.

The floor is written for drafts of the default depth (`full_depth`: the strategy's default, or
the operator's `--spec-draft-tokens`). A round the depth controller asked for k < full_depth
tokens needs min_yield × k / full_depth of them accepted, the same acceptance rate, so a lane
count where drafts are priced at one token does not hold a good drafter to a far higher
acceptance rate and give it up (ADR 0013). With adaptive depth off every round is asked for the
default depth, and the floor applies unscaled.

Per model, verdicts are read in the order they are reached. Two failures with no pass between
them abandon the strategy for good (until restart); a pass wipes the slate. A request that ends
before its verdict says nothing either way. `min_yield` 0 disables the floor: no request is
judged and the strategy is never abandoned by it.

Invariants: counters never go negative; once ABANDONED, always ABANDONED.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable


class RequestYield(enum.Enum):
    MEASURING = "measuring"  # fewer than yield_rounds verified rounds so far
    PASSED = "passed"
    FAILED = "failed"  # drafts no more for the rest of this request


class StrategyStanding(enum.Enum):
    ACTIVE = "active"
    ONE_STRIKE = "one-strike"  # one failure since the last pass
    ABANDONED = "abandoned"  # for good, until restart


class _RequestTally:
    __slots__ = ("accepted", "asked", "rounds", "verdict")

    def __init__(self) -> None:
        self.rounds = 0
        self.accepted = 0
        self.asked = 0.0  # rounds, each weighted by its asked depth over the full depth
        self.verdict = RequestYield.MEASURING


class YieldFloor:
    """Judges requests by their draft yield and abandons a strategy that keeps failing."""

    def __init__(self, *, min_yield: float, yield_rounds: int, full_depth: int = 1) -> None:
        if yield_rounds < 1:
            raise ValueError("yield_rounds must be at least 1")
        if full_depth < 1:
            raise ValueError("full_depth must be at least 1")
        self.min_yield = min_yield
        self.yield_rounds = yield_rounds
        self.full_depth = full_depth
        self._requests: dict[Hashable, _RequestTally] = {}
        self._standing = StrategyStanding.ACTIVE
        self.failures = 0  # requests that failed, ever (for /metrics)
        self.passes = 0

    @property
    def enabled(self) -> bool:
        return self.min_yield > 0.0

    @property
    def standing(self) -> StrategyStanding:
        return self._standing

    @property
    def abandoned(self) -> bool:
        return self._standing is StrategyStanding.ABANDONED

    @property
    def open_requests(self) -> int:
        return len(self._requests)

    def request_started(self, request_id: Hashable) -> None:
        self._requests[request_id] = _RequestTally()

    def request_finished(self, request_id: Hashable) -> None:
        self._requests.pop(request_id, None)

    def verdict(self, request_id: Hashable) -> RequestYield:
        tally = self._requests.get(request_id)
        return RequestYield.MEASURING if tally is None else tally.verdict

    def may_draft(self, request_id: Hashable) -> bool:
        """False once the strategy is abandoned or this request has failed."""
        if self.abandoned:
            return False
        return self.verdict(request_id) is not RequestYield.FAILED

    def record_round(
        self, request_id: Hashable, drafted: int, accepted: int, *, asked: int | None = None
    ) -> None:
        """One verified round of `request_id`; an unknown request is started on the fly.
        `asked`: the depth the draft was asked for (None: the full depth)."""
        if drafted < 0 or not 0 <= accepted <= drafted:
            raise ValueError(f"impossible round: {accepted} accepted of {drafted} drafted")
        if asked is not None and asked < 1:
            raise ValueError(f"a draft cannot be asked for {asked} tokens")
        if not self.enabled or self.abandoned or drafted == 0:
            return
        tally = self._requests.get(request_id)
        if tally is None:
            tally = self._requests[request_id] = _RequestTally()
        if tally.verdict is not RequestYield.MEASURING:
            return  # judged once; a failed request should not be drafting anyway
        tally.rounds += 1
        tally.accepted += accepted
        full = self.full_depth
        tally.asked += 1.0 if asked is None else min(asked, full) / full
        if tally.rounds >= self.yield_rounds:
            # accepted per (weighted) round < min_yield, as a product: no division needed
            failed = tally.accepted < self.min_yield * tally.asked
            tally.verdict = RequestYield.FAILED if failed else RequestYield.PASSED
            self._judge(failed)

    def _judge(self, failed: bool) -> None:
        if not failed:
            self.passes += 1
            if self._standing is StrategyStanding.ONE_STRIKE:
                self._standing = StrategyStanding.ACTIVE
            return
        self.failures += 1
        if self._standing is StrategyStanding.ACTIVE:
            self._standing = StrategyStanding.ONE_STRIKE
        elif self._standing is StrategyStanding.ONE_STRIKE:
            self._standing = StrategyStanding.ABANDONED
