"""One model's speculation policy: the gates of §7 bundled behind one small surface.

The executor asks, once per tick, `plan(lane_count)`: speculate or not, and how deep. It then
reports what happened: each lane's verified round (`record_round`), the tick as a whole
(`record_spec_tick` / `record_plain_tick`), and request lifetimes (`request_started` /
`request_finished`). Per lane, `may_draft(request_id)` says whether the yield floor still lets
that request draft.

Who decides what:
- the yield floor (per model, per request) can abandon the strategy for good: every plan is
  then plain;
- the throughput gate (per lane count) decides plain or speculative for that lane count;
- the depth controller (per lane count) picks the depth per match class when speculating, or
  no draft for a class whose drafts do not pay (`gates/depth.py`); it prices drafts with one
  step-cost table per model (`gates/step_cost.py`) and learns acceptance once per model
  (`AcceptanceModel`), so a new lane count starts from what the others learnt.

Settling: a probe decides within the gate's `settle_ticks` once it has a full probe's ticks
each way, and is undecided (measuring on) until then. A lane count where no match class
drafts (every class tuned to 0) plans plain ticks while its gate stays in its probe: the
depth controller's exploration still drafts now and then, so a class that starts paying (an
agent's edit after its prose) is found and measured, not shut out for a re-probe's wait. The
executor reports no tick on which no lane could draft: such a tick says nothing about
speculation.

Invariants: an abandoned policy always plans plain; a speculative plan's depth lies in
1..depth_cap; what is recorded at one lane count never changes another's throughput verdict (the
per-model request count only times re-probes; the shared step costs and acceptance only price
depths, down to whether a match class drafts at all, which can end a probe as a loss).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from superfluid.domain.gates.depth import (
    MATCH_CLASSES,
    SHARED_DEPTH_FROM_LANES,
    AcceptanceModel,
    DepthController,
    DepthMode,
    power_of_two_rows,
)
from superfluid.domain.gates.step_cost import StepCosts
from superfluid.domain.gates.throughput import (
    GateTuning,
    Phase,
    ThroughputGate,
    ThroughputVerdict,
)
from superfluid.domain.gates.yield_floor import RequestYield, StrategyStanding, YieldFloor
from superfluid.domain.spec_settings import MAX_DRAFT_TOKENS, SpecSettings


@dataclass(frozen=True, slots=True)
class TickPlan:
    """What one tick should do: `depth` 0 means the plain path, not speculation idling.

    `by_class` holds the depth for each match class (`gates/depth.py`), 0 for a class that does
    not draft; `depth` is the deepest of them. Empty: every class drafts at `depth`.

    `fill`: a lane whose class does not draft still drafts, up to the widest draft of its tick,
    when another lane of the tick drafts. The step is that wide anyway (the runtime pads the
    narrower feeds, `adapters/llamacpp/runtime.py`), so such a lane's draft costs only its logits
    rows, not the weights a pass reads nor the layers a padding row runs (ADR 0014, "One depth
    per tick from 4 lanes").
    """

    depth: int
    by_class: tuple[int, ...] = ()
    fill: bool = False

    @property
    def speculate(self) -> bool:
        return self.depth > 0

    def depth_for(self, klass: int) -> int:
        """The depth for a lane whose draft is of match class `klass`."""
        if 0 <= klass < len(self.by_class):
            return min(self.by_class[klass], self.depth)
        return self.depth


PLAIN = TickPlan(0)


@dataclass(frozen=True, slots=True)
class LaneCountState:
    """A read-only view of one lane count's gates (for /metrics and the log)."""

    lane_count: int
    depth: int
    phase: Phase | None  # None when the throughput gate is switched off
    speculating: bool


class SpecPolicy:
    """The gates for one served model."""

    def __init__(
        self,
        settings: SpecSettings,
        *,
        default_depth: int,
        depth_cap: int = MAX_DRAFT_TOKENS,
        tuning: GateTuning | None = None,
        match_classes: int = 1,
    ) -> None:
        """`depth_cap` is the runtime's limit (its verify-row cap minus one), at most
        `MAX_DRAFT_TOKENS`;
        `match_classes` is how many match classes the drafter's drafts fall in (1: it gives
        no match lengths; prompt-lookup: `depth.MATCH_CLASSES`)."""
        if not 1 <= match_classes <= MATCH_CLASSES:
            raise ValueError(f"a drafter has 1..{MATCH_CLASSES} match classes, not {match_classes}")
        self.match_classes = match_classes
        self.settings = settings.validate()
        self.depth_cap = max(1, min(depth_cap, MAX_DRAFT_TOKENS))
        self.default_depth = min(max(default_depth, 1), self.depth_cap)
        self._tuning = tuning
        self._floor = YieldFloor(
            min_yield=settings.min_yield,
            yield_rounds=settings.yield_rounds,
            full_depth=self.default_depth,
        )
        self._gates: dict[int, ThroughputGate] = {}
        self._depths: dict[int, DepthController] = {}
        self._costs = StepCosts()
        self._acceptance = AcceptanceModel(self.depth_cap)
        self._finished_requests = 0
        # Lane counts whose current tick drafted from a match class still learning its depth.
        self._learning_ticks: set[int] = set()

    # -- questions -----------------------------------------------------------------------------

    @property
    def abandoned(self) -> bool:
        """The yield floor gave the strategy up for good (until restart)."""
        return self._floor.abandoned

    @property
    def standing(self) -> StrategyStanding:
        return self._floor.standing

    @property
    def finished_requests(self) -> int:
        return self._finished_requests

    def plan(self, lane_count: int) -> TickPlan:
        """Whether this tick, with `lane_count` lanes decoding, speculates, and how deep."""
        if self.abandoned:
            return PLAIN
        gate = self.gate(lane_count)
        if gate is not None and not gate.speculate:
            return PLAIN
        depths = self.depth(lane_count).depths(self.match_classes)
        deepest = max(depths)
        if deepest == 0:
            return PLAIN  # no class drafts at this lane count (until exploration tries one)
        if len(set(depths)) == 1:
            return TickPlan(deepest)
        # Where the classes that draft share one depth, a tick's drafting lanes feed one width
        # and the others are padded to it: their rows are there anyway, so they draft too.
        return TickPlan(deepest, depths, fill=lane_count >= SHARED_DEPTH_FROM_LANES)

    def may_draft(self, request_id: Hashable) -> bool:
        return self._floor.may_draft(request_id)

    def request_verdict(self, request_id: Hashable) -> RequestYield:
        return self._floor.verdict(request_id)

    def gate(self, lane_count: int) -> ThroughputGate | None:
        """The throughput gate at this lane count, or None when the gate is switched off."""
        _check_lane_count(lane_count)
        if not self.settings.throughput_gate:
            return None
        gate = self._gates.get(lane_count)
        if gate is None:
            gate = self._gates[lane_count] = ThroughputGate(
                min_speedup=self.settings.min_speedup,
                reprobe=self.settings.reprobe,
                reprobe_max=self.settings.reprobe_max,
                tuning=self._tuning,
                requests_seen=self._finished_requests,
            )
        return gate

    def depth(self, lane_count: int) -> DepthController:
        _check_lane_count(lane_count)
        controller = self._depths.get(lane_count)
        if controller is None:
            controller = self._depths[lane_count] = DepthController(
                default_depth=self.default_depth,
                max_depth=self.depth_cap,
                adaptive=self.settings.adaptive,
                lanes=lane_count,
                costs=self._costs,
                acceptance=self._acceptance,
                candidates=power_of_two_rows(self.depth_cap),
                may_skip=True,
            )
        return controller

    def states(self) -> list[LaneCountState]:
        """Every lane count's state, read without creating any (safe from another thread)."""
        gates, depths = dict(self._gates), dict(self._depths)
        views = []
        for lane_count in sorted(set(gates) | set(depths)):
            gate, depth = gates.get(lane_count), depths.get(lane_count)
            views.append(
                LaneCountState(
                    lane_count,
                    max(depth.depths(self.match_classes))
                    if depth is not None
                    else self.default_depth,
                    gate.phase if gate is not None else None,
                    gate.speculate if gate is not None else True,
                )
            )
        return views

    def verdicts(self) -> dict[int, ThroughputVerdict]:
        """Each lane count's latest throughput verdict (read without creating any state)."""
        gates = dict(self._gates)
        return {
            lane_count: gate.last_verdict
            for lane_count, gate in sorted(gates.items())
            if gate.last_verdict is not None
        }

    def lane_counts(self) -> list[int]:
        """Lane counts that have state (for /metrics and the log)."""
        return sorted(set(self._gates) | set(self._depths))

    # -- reports -------------------------------------------------------------------------------

    def request_started(self, request_id: Hashable) -> None:
        self._floor.request_started(request_id)

    def request_finished(self, request_id: Hashable) -> None:
        self._floor.request_finished(request_id)
        self._finished_requests += 1
        for gate in self._gates.values():
            gate.requests_finished(self._finished_requests)

    def record_round(
        self,
        request_id: Hashable,
        lane_count: int,
        *,
        drafted: int,
        accepted: int,
        klass: int = 0,
        asked: int | None = None,
    ) -> None:
        """One lane's verified round in a tick with `lane_count` lanes, from a draft of match
        class `klass` that the tick's plan asked `asked` tokens of (None: the default depth).
        The yield floor holds a round asked for fewer than the default depth to the floor in
        proportion (`yield_floor`).

        A round drafted while its class still learns its depth (once per model) teaches the
        depth controller only: like its tick for the throughput gate, it is not counted by the
        yield floor, which would otherwise judge the drafter by the starting depth, and give it
        up for good, every time a new lane count starts learning (ADR 0013).
        """
        controller = self.depth(lane_count)
        if drafted and controller.mode_of(klass) is DepthMode.LEARNING:
            self._learning_ticks.add(lane_count)
        else:
            self._floor.record_round(request_id, drafted, accepted, asked=asked)
        controller.record_round(drafted, accepted, klass=klass)

    def record_spec_tick(
        self, lane_count: int, *, drafted: int, committed: int, seconds: float, rows: int
    ) -> None:
        """A speculating tick: `drafted` draft tokens over all lanes, `committed` tokens kept,
        `seconds` of decode time, `rows` verify rows per lane (the widest lane's drafts + 1).

        A tick that drafted nothing is a plain tick (§7) and is recorded as one. A tick whose
        drafts came from a match class still learning its depth is not shown to the throughput
        gate: it drafted at a starting depth, not at the one the gate would be judging (ADR 0013).
        """
        if drafted < 0:
            raise ValueError(f"a tick cannot draft {drafted} tokens")
        learning = lane_count in self._learning_ticks
        self._learning_ticks.discard(lane_count)
        if drafted == 0:
            self.record_plain_tick(lane_count, committed=committed, seconds=seconds)
            return
        gate = self.gate(lane_count)
        if gate is not None:
            if learning:
                gate.record_unmeasured_tick()
            else:
                gate.record_spec_tick(committed, seconds)
        # Each decoding lane fed its pending token and its draft: the step's real row count.
        self.depth(lane_count).record_step(rows, seconds, total_rows=lane_count + drafted)

    def record_plain_tick(self, lane_count: int, *, committed: int, seconds: float) -> None:
        """A tick on the plain path (one row per lane), committing `committed` tokens."""
        self._learning_ticks.discard(lane_count)
        if committed < 0:
            raise ValueError(f"a tick cannot commit {committed} tokens")
        gate = self.gate(lane_count)
        depth = self.depth(lane_count)
        if gate is not None:
            gate.record_plain_tick(committed, seconds)
        # A plain step is the one-row verify step: it measures c(1) for the depth model.
        depth.record_step(1, seconds)


def _check_lane_count(lane_count: int) -> None:
    if lane_count < 1:
        raise ValueError(f"a tick decodes at least one lane, not {lane_count}")
