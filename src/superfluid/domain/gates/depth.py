"""Adaptive draft depth for one lane count (docs/contract.md §7, "Adaptive depth").

A round at depth k costs one verify step of k+1 rows and yields, on average,
1 + a_1 + … + a_k tokens, where a_i is the probability that draft position i is reached *and*
accepted. So the depth with the best goodput is

    k* = argmax over 1 ≤ k ≤ cap of (1 + a_1 + … + a_k) / c(k+1)

with c(r) the cost (seconds) of a verify step with r rows per lane at this lane count. Costs
come from a `StepCosts` table keyed by the step's total rows and shared by every lane count of
a model (see `step_cost.py`): at N lanes, c(r) is the table's cost of N·r rows, so what one lane
count measured prices a draft at another.

Acceptance is learnt as a conditional rate per position, p_i = P(accept i | 1..i-1 accepted),
from exponentially decayed counts (recent traffic matters more than old traffic), and
a_i = p_1·…·p_i. A position never offered borrows its predecessor's rate (a geometric
extrapolation), which is what lets a deeper depth look worth a try at all.

Plain ticks measure c(1).

Every `EXPLORE_EVERY` recorded steps the controller proposes a neighbour of its best depth
(alternately deeper and shallower), so a depth whose measurements are stale or missing gets
measured. The schedule is a pure function of the step count: no randomness.

Invariant: `choose()` is always within 1..max_depth.
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


class DepthMode(enum.Enum):
    FIXED = "fixed"  # adaptive depth is off: always the default depth
    LEARNING = "learning"  # too few rounds yet: the default depth
    TUNED = "tuned"  # the model-based argmax (with exploration)


def best_depth(cumulative_acceptance: Sequence[float], step_cost: Callable[[int], float]) -> int:
    """argmax over k of (1 + a_1 + … + a_k) / c(k+1); ties go to the shallower depth.

    `cumulative_acceptance[i-1]` is a_i; its length is the depth cap (at least 1).
    """
    if not cumulative_acceptance:
        raise ValueError("at least one depth must be allowed")
    best_k, best_value = 1, -1.0
    expected_tokens = 1.0
    for k, a_k in enumerate(cumulative_acceptance, start=1):
        expected_tokens += a_k
        value = expected_tokens / step_cost(k + 1)
        if value > best_value:
            best_k, best_value = k, value
    return best_k


class DepthController:
    """Chooses the draft depth at one lane count and learns from what it sees there."""

    def __init__(
        self,
        *,
        default_depth: int,
        max_depth: int,
        adaptive: bool = True,
        lanes: int = 1,
        costs: StepCosts | None = None,
    ) -> None:
        """`lanes`: the lane count this controller serves; `costs`: the model's shared table
        (a private one when not given)."""
        if max_depth < 1:
            raise ValueError("max_depth must be at least 1")
        if lanes < 1:
            raise ValueError("a lane count is at least 1")
        self.max_depth = max_depth
        self.default_depth = min(max(default_depth, 1), max_depth)
        self._adaptive = adaptive
        self._offered = [0.0] * max_depth
        self._accepted = [0.0] * max_depth
        self._rounds = 0
        self._lanes = lanes
        self._costs = costs if costs is not None else StepCosts()
        self._steps = 0

    @property
    def mode(self) -> DepthMode:
        if not self._adaptive:
            return DepthMode.FIXED
        if self._rounds < ROUNDS_BEFORE_TUNING:
            return DepthMode.LEARNING
        return DepthMode.TUNED

    @property
    def rounds(self) -> int:
        return self._rounds

    @property
    def steps(self) -> int:
        return self._steps

    # -- what the controller sees -------------------------------------------------------------

    def record_round(self, drafted: int, accepted: int) -> None:
        """One lane's verified round: `drafted` tokens proposed, the first `accepted` kept."""
        if drafted < 0 or not 0 <= accepted <= drafted:
            raise ValueError(f"impossible round: {accepted} accepted of {drafted} drafted")
        if drafted == 0:
            return  # nothing was offered, nothing was learnt
        # Positions 1..accepted were accepted; position accepted+1 (if drafted) was rejected;
        # later positions were never reached and say nothing about acceptance.
        reached = min(accepted + 1, drafted, self.max_depth)
        for index in range(reached):
            self._offered[index] = self._offered[index] * ACCEPTANCE_DECAY + 1.0
            hit = 1.0 if index < accepted else 0.0
            self._accepted[index] = self._accepted[index] * ACCEPTANCE_DECAY + hit
        self._rounds += 1

    def record_step(self, rows: int, seconds: float, *, total_rows: int | None = None) -> None:
        """One verify step with `rows` rows per lane (1 row = a plain step) took `seconds`;
        `total_rows`, when lanes drafted unequal lengths, is what the step really carried."""
        if rows < 1 or not (math.isfinite(seconds) and seconds > 0.0):
            return  # a clock that did not advance tells nothing about cost
        self._costs.record(total_rows if total_rows is not None else self._lanes * rows, seconds)
        if rows > 1:
            self._steps += 1

    # -- what the controller knows ------------------------------------------------------------

    def conditional_acceptance(self) -> list[float]:
        """p_1..p_cap, smoothed towards the previous position's rate where data is thin."""
        rates: list[float] = []
        prior = FIRST_POSITION_PRIOR
        for offered, accepted in zip(self._offered, self._accepted, strict=True):
            rate = (accepted + PRIOR_WEIGHT * prior) / (offered + PRIOR_WEIGHT)
            rates.append(rate)
            prior = rate
        return rates

    def cumulative_acceptance(self) -> list[float]:
        """a_1..a_cap: the probability each position is reached and accepted."""
        cumulative: list[float] = []
        running = 1.0
        for rate in self.conditional_acceptance():
            running *= rate
            cumulative.append(running)
        return cumulative

    def step_cost(self, rows: int) -> float:
        """c(r): the cost of a step in which each of this lane count's lanes carries r rows."""
        return self._costs.cost(self._lanes * rows)

    def best(self) -> int:
        return best_depth(self.cumulative_acceptance(), self.step_cost)

    def choose(self) -> int:
        """The depth for the next speculating step (pure: calling it changes nothing)."""
        if self.mode is not DepthMode.TUNED:
            return self.default_depth
        best = self.best()
        if self._steps % EXPLORE_EVERY != EXPLORE_EVERY - 1:
            return best
        # Alternate deeper and shallower tries; at a bound, the only neighbour there is.
        deeper = (self._steps // EXPLORE_EVERY) % 2 == 0
        neighbour = best + 1 if deeper else best - 1
        if not 1 <= neighbour <= self.max_depth:
            neighbour = best - 1 if deeper else best + 1
        return min(max(neighbour, 1), self.max_depth)
