import pytest

from superfluid.domain.gates.yield_floor import RequestYield, StrategyStanding, YieldFloor


def make_floor(min_yield=0.75, yield_rounds=4):
    return YieldFloor(min_yield=min_yield, yield_rounds=yield_rounds)


def run_request(floor, request_id, accepted_per_round, rounds=4, drafted=4):
    floor.request_started(request_id)
    for _ in range(rounds):
        floor.record_round(request_id, drafted, accepted_per_round)


def test_a_request_below_the_floor_fails_and_stops_drafting():
    floor = make_floor()
    run_request(floor, "a", accepted_per_round=0)
    assert floor.verdict("a") is RequestYield.FAILED
    assert not floor.may_draft("a")


def test_a_request_at_the_floor_passes_and_keeps_drafting():
    floor = make_floor(min_yield=0.75, yield_rounds=4)
    floor.request_started("a")
    for accepted in (1, 1, 1, 0):  # 3 accepted over 4 rounds: exactly 0.75
        floor.record_round("a", 4, accepted)
    assert floor.verdict("a") is RequestYield.PASSED
    assert floor.may_draft("a")


def test_no_verdict_before_yield_rounds_rounds():
    floor = make_floor(yield_rounds=4)
    run_request(floor, "a", accepted_per_round=0, rounds=3)
    assert floor.verdict("a") is RequestYield.MEASURING
    assert floor.may_draft("a")


def test_a_failed_request_does_not_stop_other_requests():
    floor = make_floor()
    run_request(floor, "a", accepted_per_round=0)
    floor.request_started("b")
    assert floor.may_draft("b")
    assert floor.standing is StrategyStanding.ONE_STRIKE


def test_two_failures_with_no_pass_between_abandon_the_strategy_for_good():
    floor = make_floor()
    run_request(floor, "a", accepted_per_round=0)
    run_request(floor, "b", accepted_per_round=0)
    assert floor.abandoned
    floor.request_started("c")
    assert not floor.may_draft("c")
    run_request(floor, "d", accepted_per_round=4)  # a good request can no longer revive it
    assert floor.abandoned
    assert floor.standing is StrategyStanding.ABANDONED


def test_a_passing_request_between_two_failures_resets():
    floor = make_floor()
    run_request(floor, "a", accepted_per_round=0)
    run_request(floor, "b", accepted_per_round=3)
    run_request(floor, "c", accepted_per_round=0)
    assert not floor.abandoned
    assert floor.standing is StrategyStanding.ONE_STRIKE
    run_request(floor, "d", accepted_per_round=0)
    assert floor.abandoned


def test_verdicts_count_in_the_order_they_are_reached_not_the_order_requests_began():
    floor = make_floor(yield_rounds=2)
    for request_id in ("early", "late"):
        floor.request_started(request_id)
    floor.record_round("early", 4, 0)  # early will fail, but only later
    floor.record_round("late", 4, 0)
    floor.record_round("late", 4, 0)  # late fails first
    floor.request_started("good")
    floor.record_round("good", 4, 4)
    floor.record_round("good", 4, 4)  # then a pass
    floor.record_round("early", 4, 0)  # then early fails: a pass came between
    assert (floor.failures, floor.passes) == (2, 1)
    assert not floor.abandoned


def test_a_request_that_ends_before_its_verdict_says_nothing():
    floor = make_floor()
    run_request(floor, "a", accepted_per_round=0)
    floor.request_started("short")
    floor.record_round("short", 4, 0)
    floor.request_finished("short")
    run_request(floor, "b", accepted_per_round=0)
    assert floor.abandoned  # "short" neither passed nor reset the strike
    assert floor.failures == 2


def test_rounds_that_drafted_nothing_do_not_count():
    floor = make_floor(yield_rounds=2)
    floor.request_started("a")
    for _ in range(10):
        floor.record_round("a", 0, 0)
    assert floor.verdict("a") is RequestYield.MEASURING


def test_min_yield_zero_disables_the_floor():
    floor = make_floor(min_yield=0.0)
    for request_id in range(5):
        run_request(floor, request_id, accepted_per_round=0)
    assert not floor.enabled
    assert not floor.abandoned
    assert all(floor.may_draft(request_id) for request_id in range(5))
    assert floor.failures == 0


def test_a_passed_request_is_judged_once():
    floor = make_floor()
    run_request(floor, "a", accepted_per_round=4)
    for _ in range(50):
        floor.record_round("a", 4, 0)
    assert floor.verdict("a") is RequestYield.PASSED
    assert (floor.failures, floor.passes) == (0, 1)


def test_finished_requests_are_forgotten():
    floor = make_floor()
    run_request(floor, "a", accepted_per_round=0)
    floor.request_finished("a")
    assert floor.open_requests == 0
    assert floor.verdict("a") is RequestYield.MEASURING


def test_an_impossible_round_is_refused():
    with pytest.raises(ValueError):
        make_floor().record_round("a", 2, 3)


def test_a_round_asked_for_fewer_than_the_full_depth_is_held_to_the_floor_in_proportion():
    # Asked for 1 token of a full depth of 4: the floor's 0.75 per round is 0.1875 per such
    # round, the same acceptance rate as 0.75 of 4 drafted tokens.
    floor = YieldFloor(min_yield=0.75, yield_rounds=4, full_depth=4)
    floor.request_started("shallow")
    for accepted in (1, 0, 1, 0):  # 0.5 per round: below 0.75, but half the drafts accepted
        floor.record_round("shallow", 1, accepted, asked=1)
    assert floor.verdict("shallow") is RequestYield.PASSED
    floor.request_started("useless")
    for _ in range(4):
        floor.record_round("useless", 1, 0, asked=1)  # a drafter that is never right still fails
    assert floor.verdict("useless") is RequestYield.FAILED


def test_a_round_asked_for_the_full_depth_or_more_is_held_to_the_whole_floor():
    for asked in (4, 5, 16, None):
        floor = YieldFloor(min_yield=0.75, yield_rounds=4, full_depth=4)
        floor.request_started("a")
        for accepted in (1, 0, 1, 0):  # 0.5 per round
            floor.record_round("a", 4, accepted, asked=asked)
        assert floor.verdict("a") is RequestYield.FAILED, asked


def test_a_draft_asked_for_nothing_or_a_floor_without_depth_is_refused():
    with pytest.raises(ValueError):
        YieldFloor(min_yield=0.75, yield_rounds=4, full_depth=0)
    floor = make_floor()
    with pytest.raises(ValueError):
        floor.record_round("a", 1, 0, asked=0)
