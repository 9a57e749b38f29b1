"""Properties of the speculation gates under arbitrary event sequences."""

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from superfluid.domain.gates.depth import (
    MATCH_CLASSES,
    SHARED_DEPTH_FROM_LANES,
    AcceptanceModel,
    DepthController,
    DepthMode,
    power_of_two_rows,
)
from superfluid.domain.gates.policy import PLAIN, SpecPolicy
from superfluid.domain.gates.reprobe import ReprobeOutcome, ReprobeSchedule
from superfluid.domain.gates.throughput import GateTuning, ThroughputGate
from superfluid.domain.spec_settings import SpecSettings

LANE_COUNTS = (1, 2, 3)
lanes = st.sampled_from(LANE_COUNTS)
request_ids = st.integers(0, 5)
valid_seconds = st.floats(min_value=1e-4, max_value=0.1)
# Mostly real timings, now and then a clock that did not advance (or worse).
seconds = st.one_of(
    valid_seconds,
    valid_seconds,
    valid_seconds,
    st.sampled_from([0.0, -0.01, float("nan"), float("inf")]),
)
tunings = st.builds(
    GateTuning,
    probe_ticks=st.integers(1, 3),
    window_ticks=st.integers(1, 6),
    early_stop_ticks=st.integers(1, 4),
    early_stop_ratio=st.sampled_from([0.5, 0.9, 1.0]),
)


@st.composite
def spec_settings(draw, min_yield=None):
    reprobe = draw(st.one_of(st.just(0), st.integers(1, 8)))
    return SpecSettings(
        adaptive=draw(st.booleans()),
        min_yield=draw(st.sampled_from([0.0, 0.5, 0.75, 2.0])) if min_yield is None else min_yield,
        yield_rounds=draw(st.integers(1, 4)),
        throughput_gate=draw(st.booleans()),
        min_speedup=draw(st.sampled_from([1.0, 1.08, 1.5])),
        reprobe=reprobe,
        reprobe_max=draw(st.integers(reprobe, 64)),
    )


@st.composite
def rounds(draw):
    drafted = draw(st.integers(0, 15))
    return drafted, draw(st.integers(0, drafted))


class PolicyMachine(RuleBasedStateMachine):
    """Drive one model's policy with any interleaving of ticks, rounds and requests."""

    @initialize(
        settings=spec_settings(),
        default_depth=st.integers(1, 15),
        depth_cap=st.integers(1, 15),
        tuning=tunings,
    )
    def start(self, settings, default_depth, depth_cap, tuning):
        self.settings = settings
        self.cap = depth_cap
        self.policy = SpecPolicy(
            settings, default_depth=default_depth, depth_cap=depth_cap, tuning=tuning
        )
        self.was_abandoned = False

    @rule(lane_count=lanes, tokens=st.integers(0, 40), took=seconds, drafted=st.integers(0, 30))
    def any_tick(self, lane_count, tokens, took, drafted):
        """A tick whatever the plan said (drafted 0 is a plain tick)."""
        rows = min(drafted, 15) + 1
        self.policy.record_spec_tick(
            lane_count, drafted=drafted, committed=tokens, seconds=took, rows=rows
        )

    @rule(request_id=request_ids, lane_count=lanes, outcome=rounds())
    def any_round(self, request_id, lane_count, outcome):
        """A round of any request, started or not."""
        drafted, accepted = outcome
        self.policy.record_round(request_id, lane_count, drafted=drafted, accepted=accepted)

    @rule(
        lane_count=lanes,
        spec=st.tuples(st.integers(0, 40), seconds),
        plain=st.tuples(st.integers(0, 10), seconds),
        ticks=st.integers(1, 24),
        drafts=st.booleans(),
    )
    def serve_ticks(self, lane_count, spec, plain, ticks, drafts):
        """Decode as an executor would: follow each tick's plan, at fixed timings."""
        for _ in range(ticks):
            plan = self.policy.plan(lane_count)
            if plan.speculate:
                self.policy.record_spec_tick(
                    lane_count,
                    drafted=plan.depth * lane_count if drafts else 0,
                    committed=spec[0],
                    seconds=spec[1],
                    rows=plan.depth + 1,
                )
            else:
                self.policy.record_plain_tick(lane_count, committed=plain[0], seconds=plain[1])

    @rule(
        request_id=request_ids,
        lane_count=lanes,
        accepted=st.integers(0, 3),
        count=st.integers(0, 6),
    )
    def serve_request(self, request_id, lane_count, accepted, count):
        """A whole request: `count` rounds of 3 drafts with `accepted` kept, then done."""
        self.policy.request_started(request_id)
        for _ in range(count):
            if self.policy.may_draft(request_id):
                self.policy.record_round(request_id, lane_count, drafted=3, accepted=accepted)
        self.policy.request_finished(request_id)

    @invariant()
    def an_abandoned_strategy_proposes_nothing_and_stays_abandoned(self):
        if self.was_abandoned:
            assert self.policy.abandoned
        self.was_abandoned = self.policy.abandoned
        if self.policy.abandoned:
            assert all(self.policy.plan(n) == PLAIN for n in LANE_COUNTS)
            assert not any(self.policy.may_draft(r) for r in range(6))

    @invariant()
    def a_speculative_plan_is_within_the_depth_cap(self):
        for n in LANE_COUNTS:
            plan = self.policy.plan(n)
            assert plan.depth == 0 or 1 <= plan.depth <= self.cap

    @invariant()
    def counters_never_go_negative(self):
        assert self.policy.finished_requests >= 0
        for n in self.policy.lane_counts():
            gate = self.policy.gate(n)
            if gate is None:
                continue
            for sample in (gate.spec_sample, gate.plain_sample, gate.window_sample):
                assert sample.ticks >= 0 and sample.tokens >= 0 and sample.seconds >= 0.0
            if gate.reprobe_at is not None:
                assert gate.reprobe_at > self.policy.finished_requests

    @invariant()
    def every_reprobe_wait_is_within_reprobe_and_reprobe_max(self):
        for n in self.policy.lane_counts():
            gate = self.policy.gate(n)
            if gate is not None and gate.last_wait is not None:
                assert self.settings.reprobe <= gate.last_wait <= self.settings.reprobe_max


TestPolicyMachine = PolicyMachine.TestCase
# Fewer steps per run than Hypothesis' default of 50 keep the CI profile's 500 runs quick; the
# gates' tunings are drawn small, so 15 steps still reach losses, re-probes and abandonment.
TestPolicyMachine.settings = settings(stateful_step_count=15)


# -- lane counts are independent ----------------------------------------------------------

timings = st.tuples(st.integers(0, 20), valid_seconds)
events = st.lists(
    st.one_of(
        st.tuples(st.just("serve"), st.sampled_from([1, 2]), timings, timings, st.integers(1, 12)),
        st.tuples(
            st.just("spec"), st.sampled_from([1, 2]), st.integers(0, 20), seconds, st.integers(0, 8)
        ),
        st.tuples(st.just("round"), st.sampled_from([1, 2]), rounds()),
        st.tuples(st.just("finish"), st.integers(1, 8)),
    ),
    max_size=30,
)


def apply(policy, event):
    match event:
        case ("serve", lane_count, (spec_tokens, spec_seconds), (tokens, took), ticks):
            # Follow the policy's verdicts, drafting one token per round. (The depth, down to
            # whether a class drafts at all, is priced by shared costs, so it is not followed.)
            for _ in range(ticks):
                gate = policy.gate(lane_count)
                if not policy.abandoned and (gate is None or gate.speculate):
                    policy.record_round("r", lane_count, drafted=1, accepted=1)
                    policy.record_spec_tick(
                        lane_count, drafted=1, committed=spec_tokens, seconds=spec_seconds, rows=2
                    )
                else:
                    policy.record_plain_tick(lane_count, committed=tokens, seconds=took)
        case ("spec", lane_count, tokens, took, drafted):
            policy.record_spec_tick(
                lane_count, drafted=drafted, committed=tokens, seconds=took, rows=drafted + 1
            )
        case ("round", lane_count, (drafted, accepted)):
            policy.record_round("r", lane_count, drafted=drafted, accepted=accepted)
        case ("finish", count):
            for _ in range(count):
                policy.request_started("done")
                policy.request_finished("done")


def lane_state(policy, lane_count):
    """Everything the policy holds about one lane count."""
    gate, depth = policy.gate(lane_count), policy.depth(lane_count)
    gate_state = None
    if gate is not None:
        gate_state = (
            gate.phase,
            gate.spec_sample,
            gate.plain_sample,
            gate.window_sample,
            gate.reprobe_at,
            gate.last_wait,
            gate.last_verdict,
        )
    # Step costs and acceptance (and so the depth, down to whether a match class drafts at all)
    # are shared by lane counts on purpose: costs are priced by a step's total rows
    # (gates/step_cost.py), and acceptance is the text's and the drafter's, not the lane
    # count's (gates/depth.py, AcceptanceModel). The gate's samples and verdicts are not.
    verdict = not policy.abandoned and (gate is None or gate.speculate)
    return verdict, gate_state, depth.default_depth


@given(spec_settings(min_yield=0.0), tunings, events)
def test_what_happens_at_one_lane_count_never_changes_another_gate(settings, tuning, seq):
    # The yield floor is per model by design (it abandons the whole strategy), so it is off here;
    # the per-model request count is shared too, as the clock re-probes are timed by. With
    # adaptive depth on, shared acceptance prices every lane count's drafts, so which ticks
    # draft is shared; with it off, the gates are wholly apart.
    settings = dataclasses.replace(settings, adaptive=False)
    everything = SpecPolicy(settings, default_depth=4, tuning=tuning)
    lane_two_only = SpecPolicy(settings, default_depth=4, tuning=tuning)
    for event in seq:
        apply(everything, event)
        if event[0] == "finish" or event[1] == 2:
            apply(lane_two_only, event)
        assert lane_state(everything, 2) == lane_state(lane_two_only, 2)


@given(spec_settings(min_yield=0.0), tunings, events)
def test_acceptance_learnt_at_any_lane_count_is_the_same_at_every_lane_count(settings, tuning, seq):
    policy = SpecPolicy(settings, default_depth=4, tuning=tuning)
    for event in seq:
        apply(policy, event)
    seen = [policy.depth(lanes) for lanes in (1, 2, 3, 8)]
    for klass in range(MATCH_CLASSES):
        rates = {tuple(depth.conditional_acceptance(klass)) for depth in seen}
        assert len(rates) == 1


# -- the re-probe schedule -----------------------------------------------------------------


@given(
    st.integers(0, 64),
    st.integers(0, 4096),
    st.lists(st.booleans(), max_size=24),
)
def test_reprobe_waits_double_per_loss_in_a_row_and_stay_in_bounds(reprobe, ceiling, outcomes):
    schedule = ReprobeSchedule(reprobe=reprobe, reprobe_max=ceiling)
    cap = max(reprobe, ceiling)
    in_a_row = 0
    for lost in outcomes:
        if not lost:
            schedule.on_win()
            in_a_row = 0
            continue
        in_a_row += 1
        outcome, wait = schedule.on_loss()
        if reprobe == 0:
            assert outcome is ReprobeOutcome.FINAL
            continue
        assert outcome is ReprobeOutcome.WAIT
        assert reprobe <= wait <= cap
        assert wait == min(reprobe * 2 ** (in_a_row - 1), cap)


# -- the depth controller ------------------------------------------------------------------


@given(
    st.integers(1, 15),
    st.integers(1, 15),
    st.booleans(),
    st.lists(
        st.one_of(
            st.tuples(st.just("round"), rounds()),
            st.tuples(st.just("step"), st.integers(1, 16), seconds),
        ),
        max_size=40,
    ),
)
def test_the_depth_is_always_within_one_and_the_cap(default, cap, adaptive, seq):
    controller = DepthController(default_depth=default, max_depth=cap, adaptive=adaptive)
    for kind, *args in seq:
        if kind == "round":
            controller.record_round(*args[0])
        else:
            controller.record_step(*args)
        assert 1 <= controller.choose() <= cap
        assert all(0.0 <= p <= 1.0 for p in controller.conditional_acceptance())
        assert all(controller.step_cost(rows) > 0.0 for rows in range(1, cap + 2))


@given(
    st.integers(2, 8),
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 15)), min_size=3, max_size=3),
    st.lists(st.tuples(st.integers(1, 16), valid_seconds), max_size=10),
)
def test_from_four_lanes_the_classes_that_draft_share_one_depth(lane_count, classes, steps):
    # Each class drafts 15 tokens some number of times, with its own run accepted each time.
    # Below SHARED_DEPTH_FROM_LANES each class its own depth; from it a tick's lanes feed one
    # width (gates/depth.py).
    candidates = power_of_two_rows(15)
    shared = AcceptanceModel(15)
    one = DepthController(
        default_depth=4, max_depth=15, acceptance=shared, candidates=candidates, may_skip=True
    )
    many = DepthController(
        default_depth=4,
        max_depth=15,
        lanes=lane_count,
        acceptance=shared,
        candidates=candidates,
        may_skip=True,
    )
    for klass, (count, accepted) in enumerate(classes):
        for _ in range(count):
            shared.record(15, accepted, klass)
    for rows, took in steps:
        many.record_step(rows, took)
    assert one.depths() == tuple(one.choose(klass) for klass in range(MATCH_CLASSES))
    depths = many.depths()
    drafting = {depth for depth in depths if depth > 0}
    if lane_count < SHARED_DEPTH_FROM_LANES:
        assert depths == tuple(many.choose(klass) for klass in range(MATCH_CLASSES))
    elif all(many.mode_of(k) is DepthMode.TUNED for k, d in enumerate(depths) if d > 0):
        assert len(drafting) <= 1
    assert drafting <= set(candidates)
    # Whether a class drafts at all stays its own call.
    assert [d > 0 for d in depths] == [many.choose(k) > 0 for k in range(MATCH_CLASSES)]


# -- one throughput gate, ticks of any shape ---------------------------------------------------

gate_ticks = st.lists(
    st.tuples(st.booleans(), st.integers(0, 40), valid_seconds), min_size=1, max_size=400
)


@given(
    st.builds(
        GateTuning,
        probe_ticks=st.integers(1, 8),
        early_stop_ticks=st.integers(1, 16),
        settle_ticks=st.integers(1, 120),
        evidence=st.sampled_from([0.0, 1.0, 2.0, 3.0]),
    ),
    gate_ticks,
)
def test_a_probe_settles_by_its_deadline_and_every_verdict_rests_on_a_full_probe(tuning, ticks):
    gate = ThroughputGate(min_speedup=1.08, reprobe=32, reprobe_max=1024, tuning=tuning)
    verdicts = []
    for probe_ticks, (drafted, committed, took) in enumerate(ticks, start=1):
        if not gate.probing:
            break
        if drafted:
            gate.record_spec_tick(committed, took)
        else:
            gate.record_plain_tick(committed, took)
        last = gate.last_verdict
        if last is not None and (not verdicts or verdicts[-1] is not last):
            verdicts.append(last)
        if probe_ticks == tuning.settle_ticks:  # the deadline holds: decided, or undecided
            assert not gate.probing or (last is not None and last.undecided)
    for verdict in verdicts:
        if verdict.undecided:
            # Undecided only for want of a full probe one way or the other, and never plain.
            assert min(verdict.spec_ticks, verdict.plain_ticks) < tuning.probe_ticks
            assert verdict.speculate
            continue
        # Every verdict, at the deadline or before it, rests on a full probe each way; a loss
        # before the deadline also on the early stop's count of speculating ticks.
        assert min(verdict.spec_ticks, verdict.plain_ticks) >= tuning.probe_ticks
        if not verdict.speculate and not verdict.at_deadline:
            assert verdict.spec_ticks >= tuning.early_stop_ticks


@given(
    st.builds(
        GateTuning,
        probe_ticks=st.integers(1, 8),
        settle_ticks=st.integers(1, 120),
        undecided_wait=st.integers(1, 6),
    ),
    st.lists(
        st.one_of(
            st.tuples(st.just("plain"), st.integers(0, 40), valid_seconds),
            st.tuples(st.just("unmeasured"), st.just(0), st.just(0.0)),
            st.tuples(st.just("finished"), st.integers(1, 3), st.just(0.0)),
        ),
        max_size=600,
    ),
)
def test_a_stream_of_ticks_that_draft_nothing_never_yields_plain(tuning, events):
    # Ticks that draft nothing (and learning ticks) say nothing about speculation: however many
    # there are, and whatever requests finish between them, the gate never decides for plain.
    gate = ThroughputGate(min_speedup=1.08, reprobe=32, reprobe_max=1024, tuning=tuning)
    finished = 0
    for kind, amount, took in events:
        if kind == "plain":
            gate.record_plain_tick(amount, took)
        elif kind == "unmeasured":
            gate.record_unmeasured_tick()
        else:
            finished += amount
            gate.requests_finished(finished)
        assert gate.speculate and gate.probing
        verdict = gate.last_verdict
        assert verdict is None or (verdict.undecided and verdict.speculate)


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("tick"), st.integers(1, 8), st.integers(0, 40), valid_seconds),
            st.tuples(st.just("finished"), st.just(0), st.just(0), st.just(0.0)),
        ),
        max_size=400,
    )
)
def test_a_policy_shown_only_ticks_that_draft_nothing_never_plans_plain(events):
    policy = SpecPolicy(SpecSettings(), default_depth=4, match_classes=MATCH_CLASSES)
    ended = 0
    for kind, lanes, committed, took in events:
        if kind == "tick":
            policy.record_plain_tick(lanes, committed=committed, seconds=took)
            assert policy.plan(lanes).speculate
        else:
            ended += 1
            policy.request_started(ended)
            policy.request_finished(ended)
    for verdict in policy.verdicts().values():
        assert verdict.undecided and verdict.speculate
