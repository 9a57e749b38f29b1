"""Adaptive draft depth for one lane count (docs/contract.md §7, "Adaptive depth").

A round at depth k costs one verify step of k+1 rows and yields, on average,
1 + a_1 + … + a_k tokens, where a_i is the probability that draft position i is reached *and*
accepted. So the depth with the best goodput is

    k* = argmax over 1 ≤ k ≤ cap of (1 + a_1 + … + a_k) / c(k+1)

with c(r) the cost (seconds) of a verify step with r rows per lane at this lane count. Costs
come from a `StepCosts` table keyed by the step's total rows and shared by every lane count of
a model (`step_cost.py`): at N lanes, c(r) is the table's cost of N·r rows, so what one lane
count measured prices a draft at another. Plain ticks measure c(1).

Acceptance is learnt as a conditional rate per position, p_i = P(accept i | 1..i-1 accepted),
from exponentially decayed counts (recent traffic matters more than old traffic), and
a_i = p_1·…·p_i. A position never offered borrows its predecessor's rate (a geometric
extrapolation), which is what lets a deeper depth look worth a try at all.

**Match classes** (ADR 0013). A draft continuing a long prompt-lookup match is accepted far more
often than one following two tokens that happen to repeat, so acceptance is learnt, and k
picked, per match class (`match_class`); a drafter without a match length has one class. Step
costs stay shared.

**Candidate depths** (ADR 0013). A policy may restrict k to `candidates`: `power_of_two_rows`
keeps the depths whose verify step carries a power-of-two number of rows, because matrix kernels
work in tiles and a row count just past a tile can cost more than a larger one that fills it;
a controller exploring by ±1 from a cheap shape lands on a dear one. With `may_skip`, k = 0 (no
draft) is a candidate too, so a class whose drafts do not pay for their rows stops drafting.

**One depth per tick from `SHARED_DEPTH_FROM_LANES` lanes** (ADR 0014). A batched verify step
is as wide as its widest lane: on llama.cpp, lanes that feed different widths split the step
into passes that each read every weight again, or are padded with throwaway rows
(`adapters/llamacpp/runtime.py`). So from that lane count on, the classes that draft share the
depth that the mixture of their acceptance curves, weighted by how often each class drafted
lately, prices best. Whether a class drafts at all stays its own call, except in a tick where
another lane drafts: the step is padded to that width anyway, so the lane drafts too
(`TickPlan.fill`). Below that lane count a split pass costs less, and each class keeps its depth.

Every `EXPLORE_EVERY` recorded steps the controller proposes a neighbour of its best depth
(alternately deeper and shallower, among the candidates), so a depth whose measurements are stale
or missing gets measured. The schedule is a pure function of the step count: no randomness.

Invariant: `choose()` is always within 1..max_depth, or 0 when skipping is allowed.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence

from superfluid.domain.gates.step_cost import StepCosts

#: Acceptance counts decay by this factor per observation, a memory of about 64 rounds.
ACCEPTANCE_DECAY = 1.0 - 1.0 / 64.0

#: Weight (in pseudo-rounds) of the prior rate of a position; small, so data wins fast.
PRIOR_WEIGHT = 1.0

#: Prior conditional acceptance of the first position, before any round was seen.
FIRST_POSITION_PRIOR = 0.5

#: Rounds to observe before the model replaces the default depth.
ROUNDS_BEFORE_TUNING = 8

#: One recorded step in this many tries a neighbouring depth.
EXPLORE_EVERY = 16

#: Where each match class starts, in tokens of match length. Class 0 is everything shorter
#: (for prompt-lookup: only the two-token fallback matched) and every draft without a length.
#: No class of longer copies: it learns too slowly to beat class 8+ going deep (ADR 0014).
MATCH_CLASS_STARTS = (3, 8)

#: How many match classes a controller keeps.
MATCH_CLASSES = len(MATCH_CLASS_STARTS) + 1

#: From this many lanes on, the classes that draft share one depth per tick (`depths`); below
#: it each class keeps its own, since a split pass costs less there (ADR 0014).
SHARED_DEPTH_FROM_LANES = 4


def match_class(match_length: int | None) -> int:
    """The class of a draft with this match length (None: the drafter gives none)."""
    if match_length is None:
        return 0
    return sum(1 for start in MATCH_CLASS_STARTS if match_length >= start)


def power_of_two_rows(max_depth: int) -> tuple[int, ...]:
    """Depths whose verify step carries a power-of-two number of rows (k + 1 = 2, 4, 8, 16, …),
    and `max_depth` itself."""
    depths = {(1 << j) - 1 for j in range(1, max_depth.bit_length() + 1)}
    return tuple(sorted(d for d in depths | {max_depth} if 1 <= d <= max_depth))


class DepthMode(enum.Enum):
    FIXED = "fixed"  # adaptive depth is off: always the default depth
    LEARNING = "learning"  # too few rounds yet: the default depth
    TUNED = "tuned"  # the model-based argmax (with exploration)


def best_depth(
    cumulative_acceptance: Sequence[float],
    step_cost: Callable[[int], float],
    candidates: Sequence[int] | None = None,
    *,
    may_skip: bool = False,
) -> int:
    """argmax over k of (1 + a_1 + … + a_k) / c(k+1); ties go to the shallower depth.

    `cumulative_acceptance[i-1]` is a_i; its length is the depth cap (at least 1). `candidates`
    (default: every depth) limits k; with `may_skip`, k = 0 competes too, at 1 / c(1).
    """
    if not cumulative_acceptance:
        raise ValueError("at least one depth must be allowed")
    allowed = set(candidates) if candidates is not None else None
    best_k, best_value = (0, 1.0 / step_cost(1)) if may_skip else (1, -1.0)
    expected_tokens = 1.0
    for k, a_k in enumerate(cumulative_acceptance, start=1):
        expected_tokens += a_k
        if allowed is not None and k not in allowed:
            continue
        value = expected_tokens / step_cost(k + 1)
        if value > best_value:
            best_k, best_value = k, value
    return best_k


class AcceptanceModel:
    """Decayed per-position acceptance counts for each match class, with the rounds seen.

    One model serves every lane count of a served model (like `StepCosts`): how often a draft
    of a given match class is accepted is a property of the text and the drafter, not of how
    many other lanes share the step, so a lane count reached for the first time starts from
    what the others learnt instead of learning again at the starting depth (ADR 0014).
    """

    __slots__ = ("_accepted", "_offered", "_rounds", "max_depth")

    def __init__(self, max_depth: int, classes: int = MATCH_CLASSES) -> None:
        """`classes`: how many match classes to keep (a replay may try more than are served)."""
        if max_depth < 1:
            raise ValueError("max_depth must be at least 1")
        self.max_depth = max_depth
        self._offered = [[0.0] * max_depth for _ in range(classes)]
        self._accepted = [[0.0] * max_depth for _ in range(classes)]
        self._rounds = [0] * classes

    def rounds(self, klass: int) -> int:
        return self._rounds[klass]

    def recent_rounds(self, klass: int) -> float:
        """Rounds drafted from this class lately (decayed as the acceptance counts are)."""
        return self._offered[klass][0]

    def record(self, drafted: int, accepted: int, klass: int) -> None:
        """One verified round of a draft of match class `klass`."""
        if drafted < 0 or not 0 <= accepted <= drafted:
            raise ValueError(f"impossible round: {accepted} accepted of {drafted} drafted")
        if drafted == 0:
            return  # nothing was offered, nothing was learnt
        offered, kept = self._offered[klass], self._accepted[klass]
        # Positions 1..accepted were accepted; position accepted+1 (if drafted) was rejected;
        # later positions were never reached and say nothing about acceptance.
        reached = min(accepted + 1, drafted, self.max_depth)
        for index in range(reached):
            offered[index] = offered[index] * ACCEPTANCE_DECAY + 1.0
            hit = 1.0 if index < accepted else 0.0
            kept[index] = kept[index] * ACCEPTANCE_DECAY + hit
        self._rounds[klass] += 1

    def conditional(self, klass: int) -> list[float]:
        """p_1..p_cap, smoothed towards the previous position's rate where data is thin."""
        rates: list[float] = []
        prior = FIRST_POSITION_PRIOR
        for offered, accepted in zip(self._offered[klass], self._accepted[klass], strict=True):
            rate = (accepted + PRIOR_WEIGHT * prior) / (offered + PRIOR_WEIGHT)
            rates.append(rate)
            prior = rate
        return rates


class DepthController:
    """Chooses the draft depth at one lane count; learns step costs and acceptance into the
    model's shared tables."""

    def __init__(
        self,
        *,
        default_depth: int,
        max_depth: int,
        adaptive: bool = True,
        lanes: int = 1,
        costs: StepCosts | None = None,
        acceptance: AcceptanceModel | None = None,
        candidates: Sequence[int] | None = None,
        may_skip: bool = False,
    ) -> None:
        """`lanes`: the lane count this controller serves; `costs` and `acceptance`: the
        model's shared tables (private ones when not given); `candidates`: the depths a tuned
        choice may take (default: all of 1..max_depth); `may_skip`: a tuned choice may be 0, no
        draft."""
        if max_depth < 1:
            raise ValueError("max_depth must be at least 1")
        if lanes < 1:
            raise ValueError("a lane count is at least 1")
        self.max_depth = max_depth
        self.default_depth = min(max(default_depth, 1), max_depth)
        self._adaptive = adaptive
        self._candidates = tuple(
            sorted({d for d in (candidates or range(1, max_depth + 1)) if 1 <= d <= max_depth})
            or (max_depth,)
        )
        self._may_skip = may_skip
        if acceptance is not None and acceptance.max_depth < max_depth:
            raise ValueError("the shared acceptance model is shallower than this controller")
        self._acceptance = acceptance if acceptance is not None else AcceptanceModel(max_depth)
        self._lanes = lanes
        self._costs = costs if costs is not None else StepCosts()
        self._steps = 0
        self._ticks = 0  # every recorded step, drafting or not: the exploration schedule

    def mode_of(self, klass: int = 0) -> DepthMode:
        if not self._adaptive:
            return DepthMode.FIXED
        if self._acceptance.rounds(klass) < ROUNDS_BEFORE_TUNING:
            return DepthMode.LEARNING
        return DepthMode.TUNED

    @property
    def mode(self) -> DepthMode:
        """The mode of class 0 (the only class of a drafter without match lengths)."""
        return self.mode_of(0)

    @property
    def rounds(self) -> int:
        """Rounds learnt from, over every class (and every lane count sharing the model)."""
        return sum(self._acceptance.rounds(klass) for klass in range(MATCH_CLASSES))

    @property
    def steps(self) -> int:
        return self._steps

    # -- what the controller sees -------------------------------------------------------------

    def record_round(self, drafted: int, accepted: int, *, klass: int = 0) -> None:
        """One lane's verified round: `drafted` tokens proposed, the first `accepted` kept,
        from a draft of match class `klass`."""
        self._acceptance.record(drafted, accepted, klass)

    def record_step(self, rows: int, seconds: float, *, total_rows: int | None = None) -> None:
        """One verify step with `rows` rows per lane (1 row = a plain step) took `seconds`;
        `total_rows`, when lanes drafted unequal lengths, is what the step really carried."""
        if rows < 1 or not (math.isfinite(seconds) and seconds > 0.0):
            return  # a clock that did not advance tells nothing about cost
        self._costs.record(total_rows if total_rows is not None else self._lanes * rows, seconds)
        self._ticks += 1
        if rows > 1:
            self._steps += 1

    # -- what the controller knows ------------------------------------------------------------

    def conditional_acceptance(self, klass: int = 0) -> list[float]:
        """p_1..p_cap, smoothed towards the previous position's rate where data is thin."""
        return self._acceptance.conditional(klass)[: self.max_depth]

    def cumulative_acceptance(self, klass: int = 0) -> list[float]:
        """a_1..a_cap: the probability each position is reached and accepted."""
        cumulative: list[float] = []
        running = 1.0
        for rate in self.conditional_acceptance(klass):
            running *= rate
            cumulative.append(running)
        return cumulative

    def step_cost(self, rows: int) -> float:
        """c(r): the cost of a step in which each of this lane count's lanes carries r rows."""
        return self._costs.cost(self._lanes * rows)

    def best(self, klass: int = 0) -> int:
        return best_depth(
            self.cumulative_acceptance(klass),
            self.step_cost,
            self._candidates,
            may_skip=self._may_skip,
        )

    def choose(self, klass: int = 0) -> int:
        """The depth for the next speculating step (pure: calling it changes nothing)."""
        mode = self.mode_of(klass)
        if mode is DepthMode.FIXED:
            return self.default_depth
        if mode is DepthMode.LEARNING:
            # The candidate nearest the default (the shallower on a tie): the first rounds also
            # feed the throughput gate's probe, which a dear row count would mislead.
            return min(self._candidates, key=lambda d: (abs(d - self.default_depth), d))
        best = self.best(klass)
        if self._ticks % EXPLORE_EVERY != EXPLORE_EVERY - 1:
            return best
        # Alternate deeper and shallower tries; at a bound, the only neighbour there is.
        choices = ((0,) if self._may_skip else ()) + self._candidates
        at = choices.index(best)
        deeper = (self._ticks // EXPLORE_EVERY) % 2 == 0
        neighbour = at + 1 if deeper else at - 1
        if not 0 <= neighbour < len(choices):
            neighbour = at - 1 if deeper else at + 1
        return choices[min(max(neighbour, 0), len(choices) - 1)]

    def depths(self, classes: int = MATCH_CLASSES) -> tuple[int, ...]:
        """The depth for each of the first `classes` match classes: what `choose` answers, except
        that from `SHARED_DEPTH_FROM_LANES` lanes on the tuned classes that draft share one depth
        (`shared_depth`)."""
        own = tuple(self.choose(klass) for klass in range(classes))
        drafting = [klass for klass in range(classes) if own[klass] > 0]
        if self._lanes < SHARED_DEPTH_FROM_LANES or len(drafting) < 2:
            return own
        if any(self.mode_of(klass) is not DepthMode.TUNED for klass in drafting):
            return own
        shared = self.shared_depth(drafting)
        return tuple(shared if klass in drafting else 0 for klass in range(classes))

    def shared_depth(self, classes: Sequence[int]) -> int:
        """The best depth for a tick whose lanes draft from `classes`: `best_depth` on their
        cumulative acceptance averaged by how often each class drafted lately (expected tokens
        are linear in acceptance, so this is the mixture's goodput)."""
        weights = [self._acceptance.recent_rounds(klass) for klass in classes]
        if sum(weights) <= 0.0:
            weights = [1.0] * len(classes)
        total = sum(weights)
        curves = [self.cumulative_acceptance(klass) for klass in classes]
        mixed = [
            sum(weight * curve[i] for weight, curve in zip(weights, curves, strict=True)) / total
            for i in range(self.max_depth)
        ]
        return best_depth(mixed, self.step_cost, self._candidates)
