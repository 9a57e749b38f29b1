import pytest

from superfluid.domain.errors import SettingsError
from superfluid.domain.gates.depth import ROUNDS_BEFORE_TUNING, SHARED_DEPTH_FROM_LANES
from superfluid.domain.gates.policy import PLAIN, SpecPolicy, TickPlan
from superfluid.domain.gates.throughput import GateTuning, Phase
from superfluid.domain.gates.yield_floor import RequestYield
from superfluid.domain.spec_settings import SpecSettings

TUNING = GateTuning(probe_ticks=3, window_ticks=10, early_stop_ticks=5)


def make_policy(settings=None, **kwargs):
    kwargs.setdefault("default_depth", 4)
    kwargs.setdefault("tuning", TUNING)
    return SpecPolicy(settings or SpecSettings(), **kwargs)


def lose_at(policy, lanes):
    """Drive one lane count's gate to a loss: speculation at half the plain rate."""
    # A loss rests on at least the early stop's count of speculating ticks; + the warm-up tick.
    for _ in range(max(TUNING.probe_ticks, TUNING.early_stop_ticks) + 1):
        policy.record_spec_tick(lanes, drafted=4 * lanes, committed=lanes, seconds=0.02, rows=5)
    for _ in range(TUNING.probe_ticks):
        policy.record_plain_tick(lanes, committed=lanes, seconds=0.01)


def win_at(policy, lanes):
    for _ in range(TUNING.probe_ticks + 1):
        policy.record_spec_tick(
            lanes, drafted=4 * lanes, committed=4 * lanes, seconds=0.012, rows=5
        )
    for _ in range(TUNING.probe_ticks):
        policy.record_plain_tick(lanes, committed=lanes, seconds=0.01)


def tune(policy, lanes=1):
    """Finish the depth's learning rounds at `lanes`, which the yield floor does not count."""
    for _ in range(ROUNDS_BEFORE_TUNING):
        policy.record_round("learning", lanes, drafted=4, accepted=0)


def fail_request(policy, request_id, rounds=24):
    tune(policy)
    policy.request_started(request_id)
    for _ in range(rounds):
        policy.record_round(request_id, 1, drafted=4, accepted=0)
    policy.request_finished(request_id)


def test_a_fresh_policy_speculates_at_the_power_of_two_row_depth_nearest_the_default():
    # Default 4 would verify 5 rows; 3 verifies 4 (docs/adr/0013).
    assert make_policy().plan(1) == TickPlan(3)
    assert make_policy().plan(1).speculate
    assert make_policy(default_depth=6).plan(1) == TickPlan(7)


def test_the_plain_plan_has_no_depth():
    assert TickPlan(0) == PLAIN
    assert not PLAIN.speculate


def test_a_throughput_loss_at_one_lane_count_leaves_the_others_speculating():
    policy = make_policy()
    win_at(policy, 1)
    lose_at(policy, 4)
    assert policy.plan(4) == PLAIN
    assert policy.plan(1).speculate
    assert policy.plan(2).speculate  # never measured: still probing
    assert policy.gate(1).phase is Phase.SPECULATE


def test_with_the_throughput_gate_off_the_policy_always_speculates():
    policy = make_policy(SpecSettings(throughput_gate=False))
    lose_at(policy, 1)
    assert policy.gate(1) is None
    assert policy.plan(1) == TickPlan(3)


def test_an_abandoned_strategy_plans_plain_everywhere():
    policy = make_policy()
    fail_request(policy, "a")
    assert not policy.abandoned
    fail_request(policy, "b")
    assert policy.abandoned
    assert all(policy.plan(lanes) == PLAIN for lanes in range(1, 9))
    policy.request_started("c")
    assert not policy.may_draft("c")


def test_a_failed_request_may_no_longer_draft_but_others_may():
    policy = make_policy()
    policy.request_started("bad")
    policy.request_started("fresh")
    tune(policy, 2)
    for _ in range(24):
        policy.record_round("bad", 2, drafted=4, accepted=0)
    assert policy.request_verdict("bad") is RequestYield.FAILED
    assert not policy.may_draft("bad")
    assert policy.may_draft("fresh")
    assert not policy.abandoned
    # Acceptance is learnt once per model: drafts that fail at 2 lanes price drafts at 1 too.
    assert policy.plan(1) == PLAIN


def test_a_speculating_tick_that_drafted_nothing_is_recorded_as_plain():
    policy = make_policy()
    policy.record_spec_tick(2, drafted=0, committed=2, seconds=0.01, rows=1)
    gate = policy.gate(2)
    assert gate.phase is Phase.WARM_UP  # the warm-up waits for a tick that drafted
    assert gate.plain_sample.ticks == 1
    assert policy.depth(2).step_cost(1) == 0.01


def test_finished_requests_time_the_reprobe_of_every_lane_count():
    policy = make_policy(SpecSettings(reprobe=2, reprobe_max=8))
    lose_at(policy, 3)
    assert policy.plan(3) == PLAIN
    policy.request_started("a")
    policy.request_finished("a")
    assert policy.plan(3) == PLAIN
    policy.request_started("b")
    policy.request_finished("b")
    assert policy.plan(3).speculate
    assert policy.gate(3).phase is Phase.WARM_UP


def test_a_gate_born_late_counts_requests_from_its_birth():
    policy = make_policy(SpecSettings(reprobe=2, reprobe_max=8))
    for request_id in range(10):
        policy.request_started(request_id)
        policy.request_finished(request_id)
    lose_at(policy, 5)
    assert policy.gate(5).reprobe_at == 12


def test_the_depth_is_clamped_to_the_runtimes_cap():
    policy = make_policy(default_depth=8, depth_cap=3)
    assert policy.plan(1) == TickPlan(3)


def test_adaptive_depth_off_keeps_the_default_depth():
    policy = make_policy(SpecSettings(adaptive=False, throughput_gate=False), default_depth=5)
    for _ in range(200):
        policy.record_round("r", 1, drafted=5, accepted=0)
        policy.record_spec_tick(1, drafted=5, committed=1, seconds=0.02, rows=6)
    assert policy.plan(1) == TickPlan(5)


def test_adaptive_depth_shrinks_when_drafts_are_rejected():
    policy = make_policy(SpecSettings(throughput_gate=False, min_yield=0.0), default_depth=8)
    for _ in range(200):
        depth = policy.plan(1).depth
        policy.record_round("r", 1, drafted=depth, accepted=min(depth, 1))
        policy.record_spec_tick(
            1, drafted=depth, committed=2, seconds=0.01 * (1 + 0.17 * depth), rows=depth + 1
        )
    assert policy.plan(1).depth <= 2


def rounds_by_class(policy, rounds, accepted_by_class, *, lanes=1):
    """Record `rounds` rounds per class, each drafting the planned depth for its class and
    accepting `accepted_by_class[c](depth)` of it; each extra row costs a fifth of a step."""
    for _ in range(rounds):
        plan = policy.plan(lanes)
        for klass, accepted in enumerate(accepted_by_class):
            depth = plan.depth_for(klass)
            if depth:
                policy.record_round(
                    "r", lanes, drafted=depth, accepted=accepted(depth), klass=klass
                )
        rows = plan.depth + 1
        seconds = 0.01 * (1 + 0.2 * (rows - 1))
        policy.record_spec_tick(
            lanes, drafted=max(plan.depth, 1), committed=2, seconds=seconds, rows=rows
        )
        policy.record_plain_tick(lanes, committed=1, seconds=0.01)


def test_sure_drafts_go_deep_and_unsure_ones_stop_drafting():
    policy = make_policy(SpecSettings(throughput_gate=False, min_yield=0.0), match_classes=3)
    rounds_by_class(policy, 300, [lambda d: 0, lambda d: min(d, 1), lambda d: d])
    plan = policy.plan(1)
    assert plan.by_class[0] == 0  # never accepted: not worth a row
    assert plan.by_class[2] == 64  # always accepted: as deep as the runtime verifies
    assert plan.depth == 64
    assert plan.depth_for(0) == 0 and plan.depth_for(2) == 64


def test_from_four_lanes_a_tick_whose_classes_differ_is_filled():
    # Every class drafts well, but class 0's drafts are short: from 4 lanes the classes that
    # draft share one depth, and the one that does not draft fills the tick (TickPlan.fill).
    for lanes in (1, 2, 3, 4):
        policy = make_policy(SpecSettings(throughput_gate=False, min_yield=0.0), match_classes=3)
        rounds_by_class(policy, 300, [lambda d: 0, lambda d: d, lambda d: d], lanes=lanes)
        plan = policy.plan(lanes)
        assert plan.depth_for(0) == 0 < plan.depth_for(2), lanes
        assert plan.fill == (lanes >= SHARED_DEPTH_FROM_LANES), lanes


def test_a_drafter_without_match_classes_gets_one_depth():
    policy = make_policy(SpecSettings(throughput_gate=False, min_yield=0.0))
    rounds_by_class(policy, 300, [lambda d: d])
    assert policy.plan(1) == TickPlan(64)


def test_tuned_depths_verify_a_power_of_two_rows():
    policy = make_policy(SpecSettings(throughput_gate=False, min_yield=0.0), match_classes=3)
    seen = set()
    for accept in (lambda d: min(d, 2), lambda d: min(d, 5), lambda d: d // 2):
        rounds_by_class(policy, 100, [accept] * 3)
        seen |= set(policy.plan(1).by_class or (policy.plan(1).depth,))
    assert seen <= {0, 1, 3, 7, 15}


def test_match_classes_must_fit_the_controller():
    with pytest.raises(ValueError, match="match classes"):
        make_policy(match_classes=0)


def test_a_lane_count_below_one_is_refused():
    with pytest.raises(ValueError):
        make_policy().plan(0)


def test_invalid_settings_are_refused_at_construction():
    with pytest.raises(SettingsError, match="--spec-min-speedup"):
        make_policy(SpecSettings(min_speedup=0.5))


def test_lane_counts_with_state_are_listed():
    policy = make_policy()
    policy.plan(3)
    policy.plan(1)
    assert policy.lane_counts() == [1, 3]


def test_states_read_each_lane_count_without_creating_any():
    from superfluid.domain.gates.policy import SpecPolicy as Policy
    from superfluid.domain.spec_settings import SpecSettings as Settings

    policy = Policy(Settings(), default_depth=4)
    assert policy.states() == []
    policy.record_plain_tick(2, committed=2, seconds=0.1)
    (state,) = policy.states()
    assert state.lane_count == 2 and 1 <= state.depth <= 15 and state.phase is not None
    assert policy.lane_counts() == [2]
    assert policy.states() == [state]  # reading twice created nothing new


def test_ticks_drafted_at_a_learning_depth_are_not_shown_to_the_throughput_gate():
    def five_ticks(policy):
        for _ in range(5):
            policy.record_round("r", 1, drafted=3, accepted=3, klass=2)
            policy.record_spec_tick(1, drafted=3, committed=4, seconds=0.01, rows=4)

    learning = make_policy(match_classes=3)
    five_ticks(learning)  # class 2 has not finished learning its depth
    assert learning.gate(1).phase is Phase.WARM_UP
    assert learning.gate(1).spec_sample.ticks == 0

    tuned = make_policy(match_classes=3)
    for _ in range(ROUNDS_BEFORE_TUNING):
        tuned.record_round("r", 1, drafted=3, accepted=3, klass=2)
    tuned.record_plain_tick(1, committed=1, seconds=0.01)
    five_ticks(tuned)
    assert tuned.gate(1).phase in (Phase.PROBE_SPEC, Phase.PROBE_PLAIN)
    assert tuned.gate(1).spec_sample.ticks == 4  # the first was the warm-up tick


def test_rounds_drafted_at_a_learning_depth_do_not_count_for_the_yield_floor():
    policy = make_policy(SpecSettings(yield_rounds=4))
    policy.request_started("r")
    for _ in range(ROUNDS_BEFORE_TUNING):
        policy.record_round("r", 3, drafted=4, accepted=0)  # lane count 3 is still learning
    assert policy.request_verdict("r") is RequestYield.MEASURING
    for _ in range(4):
        policy.record_round("r", 3, drafted=4, accepted=0)  # now tuned: these count
    assert policy.request_verdict("r") is RequestYield.FAILED


def test_the_yield_floor_judges_a_shallow_draft_by_its_acceptance_not_its_length():
    """Where the depth controller asks one token a round (many lanes), a drafter right half the
    time passes; at the default depth the same yield per round fails (ADR 0013)."""
    policy = make_policy(SpecSettings(yield_rounds=4), default_depth=4)
    tune(policy, 8)
    for request_id, asked in (("shallow", 1), ("full", 4)):
        policy.request_started(request_id)
        for accepted in (1, 0, 1, 0):
            policy.record_round(request_id, 8, drafted=1, accepted=accepted, asked=asked)
    assert policy.request_verdict("shallow") is RequestYield.PASSED
    assert policy.request_verdict("full") is RequestYield.FAILED


def test_a_lane_count_where_no_class_would_draft_plans_plain_and_keeps_measuring():
    policy = make_policy(match_classes=1)
    tune(policy, 1)  # drafts at 1 lane are never accepted
    assert policy.plan(1) == PLAIN  # class 0 tuned to no draft
    gate = policy.gate(4)
    assert gate is not None and gate.phase is Phase.WARM_UP
    assert policy.plan(4) == PLAIN  # 4 lanes price drafts from what 1 lane learnt
    for _ in range(400):  # however long it plans plain, no verdict comes without drafts
        policy.record_plain_tick(4, committed=4, seconds=0.01)
    assert gate.speculate and gate.probing
    assert policy.states()[-1].speculating


def test_a_new_lane_count_starts_tuned_from_what_the_others_learnt():
    policy = make_policy(SpecSettings(throughput_gate=False, min_yield=0.0))
    for _ in range(ROUNDS_BEFORE_TUNING * 4):
        policy.record_round("r", 1, drafted=7, accepted=7)
    assert policy.depth(1).mode.value == "tuned"
    assert policy.depth(8).mode.value == "tuned"  # no learning rounds at 8 lanes
    assert policy.plan(8).depth > 3  # not the learning depth


def test_ticks_a_learning_class_drafted_count_towards_the_gates_deadline():
    policy = make_policy(tuning=GateTuning(probe_ticks=3, settle_ticks=5))
    for _ in range(5):
        policy.record_round("r", 2, drafted=3, accepted=1)  # class 0 still learning
        policy.record_spec_tick(2, drafted=3, committed=2, seconds=0.02, rows=4)
    gate = policy.gate(2)
    assert gate is not None and gate.speculate  # nothing measured: undecided, not a loss
    verdict = gate.last_verdict
    assert verdict is not None and verdict.undecided and verdict.spec_ticks == 0
