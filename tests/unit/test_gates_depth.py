import random
from collections import Counter

import pytest

from superfluid.domain.gates.depth import (
    EXPLORE_EVERY,
    MATCH_CLASSES,
    ROUNDS_BEFORE_TUNING,
    AcceptanceModel,
    DepthController,
    DepthMode,
    best_depth,
    match_class,
    power_of_two_rows,
)
from superfluid.domain.gates.step_cost import StepCosts, prior_row_cost


def goodput(cumulative, cost, k):
    return (1 + sum(cumulative[:k])) / cost(k + 1)


def brute_force_best(cumulative, cost):
    return max(range(1, len(cumulative) + 1), key=lambda k: (goodput(cumulative, cost, k), -k))


def simulate(controller, conditional, cost, ticks, seed=7):
    """Draft at the chosen depth, accept position i with probability conditional(i)."""
    rng = random.Random(seed)
    chosen = []
    for _ in range(ticks):
        depth = controller.choose()
        chosen.append(depth)
        accepted = 0
        while accepted < depth and rng.random() < conditional(accepted + 1):
            accepted += 1
        controller.record_round(depth, accepted)
        controller.record_step(depth + 1, cost(depth + 1))
    return chosen


def test_the_best_depth_maximises_expected_tokens_per_second_of_verify():
    cumulative = [0.9, 0.8, 0.7, 0.3, 0.1]
    cost = lambda rows: 1.0 + 0.17 * (rows - 1)  # noqa: E731
    assert best_depth(cumulative, cost) == brute_force_best(cumulative, cost) == 3


def test_an_expensive_extra_row_keeps_the_depth_at_one():
    assert best_depth([0.9, 0.8], lambda rows: float(rows)) == 1


def test_free_rows_take_every_position_that_can_be_accepted():
    assert best_depth([0.9, 0.8, 0.7, 0.6], lambda rows: 1.0) == 4


def test_before_enough_rounds_the_default_depth_is_used():
    controller = DepthController(default_depth=4, max_depth=15)
    for _ in range(ROUNDS_BEFORE_TUNING - 1):
        controller.record_round(4, 0)
    assert controller.mode is DepthMode.LEARNING
    assert controller.choose() == 4


def test_with_adaptive_depth_off_the_default_depth_is_always_used():
    controller = DepthController(default_depth=3, max_depth=15, adaptive=False)
    simulate(controller, lambda i: 0.99, lambda rows: 1.0, ticks=200)
    assert controller.mode is DepthMode.FIXED
    assert controller.choose() == 3


def test_the_default_depth_is_clamped_to_the_cap():
    assert DepthController(default_depth=15, max_depth=6).choose() == 6


@pytest.mark.parametrize(
    ("conditional", "slope", "start"),
    [
        (lambda i: 0.8, 0.17, 1),
        (lambda i: 0.8, 0.17, 15),
        (lambda i: 0.6, 0.17, 8),
        (lambda i: 0.3, 0.17, 4),
        (lambda i: 0.9 if i <= 3 else 0.2, 0.05, 1),
        (lambda i: 0.9 if i <= 3 else 0.2, 0.17, 15),
    ],
    ids=[
        "steady-0.8-from-shallow",
        "steady-0.8-from-deep",
        "steady-0.6",
        "poor-0.3",
        "cliff-after-3-cheap-rows",
        "cliff-after-3-from-deep",
    ],
)
def test_adaptive_depth_settles_on_the_argmax_of_goodput(conditional, slope, start):
    cost = lambda rows: 0.01 * (1 + slope * (rows - 1))  # noqa: E731
    cumulative, running = [], 1.0
    for i in range(1, 16):
        running *= conditional(i)
        cumulative.append(running)
    target = brute_force_best(cumulative, cost)
    controller = DepthController(default_depth=start, max_depth=15)
    chosen = simulate(controller, conditional, cost, ticks=3000)
    assert Counter(chosen[-1000:]).most_common(1)[0][0] == target


def test_a_measured_cost_cliff_overrules_the_prior_shape():
    # Rows beyond 4 cost a whole step each (say the kernel leaves its fast tile): where the
    # prior shape alone would go to depth 7, the measured costs hold the depth at 3.
    cost = lambda rows: 1 + 0.05 * (min(rows, 4) - 1) + 1.0 * max(rows - 4, 0)  # noqa: E731
    prior_only = best_depth([0.9**i for i in range(1, 16)], prior_row_cost)
    controller = DepthController(default_depth=2, max_depth=15)
    chosen = simulate(controller, lambda i: 0.9, cost, ticks=2000)
    assert prior_only == 7
    assert Counter(chosen[-500:]).most_common(1)[0][0] == 3


def test_the_choice_never_passes_the_cap():
    controller = DepthController(default_depth=2, max_depth=5)
    chosen = simulate(controller, lambda i: 0.99, lambda rows: 0.01, ticks=500)
    assert max(chosen) == 5
    assert min(chosen) >= 1


def test_exploration_tries_a_neighbour_on_a_fixed_schedule():
    controller = DepthController(default_depth=4, max_depth=15)
    for _ in range(ROUNDS_BEFORE_TUNING):
        controller.record_round(4, 2)
    best = controller.best()
    proposals = []
    for _ in range(4 * EXPLORE_EVERY):
        proposals.append(controller.choose())
        controller.record_step(proposals[-1] + 1, 0.01 * prior_row_cost(proposals[-1] + 1))
    explored = [i for i, depth in enumerate(proposals) if depth != best]
    assert explored == [EXPLORE_EVERY * n - 1 for n in range(1, 5)]
    assert [proposals[i] for i in explored] == [best + 1, best - 1, best + 1, best - 1]


def test_choosing_is_a_pure_question():
    controller = DepthController(default_depth=4, max_depth=15)
    for _ in range(ROUNDS_BEFORE_TUNING):
        controller.record_round(4, 4)
    assert len({controller.choose() for _ in range(50)}) == 1


def test_unmeasured_costs_follow_the_prior_shape_then_the_measured_line():
    controller = DepthController(default_depth=4, max_depth=15)
    assert controller.step_cost(5) == pytest.approx(1 + 0.17 * 4)
    controller.record_step(1, 0.02)
    assert controller.step_cost(1) == 0.02
    # One measurement: the prior shape, scaled from it.
    assert controller.step_cost(3) == pytest.approx(0.02 * 1.34)
    controller.record_step(4, 0.05)
    assert controller.step_cost(2) == pytest.approx(0.03)  # between 1 and 4: interpolated
    # Above the largest: along the line through the smallest and largest (0.01 a row here),
    # not the prior's 0.17 of a one-row step.
    assert controller.step_cost(5) == pytest.approx(0.06)
    assert controller.step_cost(16) == pytest.approx(0.17)


def test_a_falling_measured_line_is_not_extended_below_zero_slope():
    costs = StepCosts()
    costs.record(1, 0.05)
    costs.record(4, 0.04)  # noise: fewer rows cannot really cost more
    assert costs.cost(8) == pytest.approx(0.04 * prior_row_cost(8) / prior_row_cost(4))


def test_lane_counts_share_costs_by_total_rows():
    costs = StepCosts()
    one = DepthController(default_depth=4, max_depth=15, lanes=1, costs=costs)
    four = DepthController(default_depth=4, max_depth=15, lanes=4, costs=costs)
    one.record_step(1, 0.030)
    one.record_step(16, 0.200)
    four.record_step(1, 0.060)  # a plain 4-lane step: 4 rows
    # Four lanes verifying 4 rows each carry 16 rows: what the one-lane step measured.
    assert four.step_cost(4) == pytest.approx(0.200)
    assert one.step_cost(4) == pytest.approx(0.060)
    # And 4 lanes x 8 rows = 32 rows, on the line through 1 row and 16 rows.
    assert four.step_cost(8) == pytest.approx(0.200 + (0.200 - 0.030) / 15 * 16)


def test_a_step_with_unequal_drafts_is_recorded_at_the_rows_it_carried():
    costs = StepCosts()
    two = DepthController(default_depth=4, max_depth=15, lanes=2, costs=costs)
    two.record_step(9, 0.1, total_rows=11)  # one lane drafted 8, the other 1
    assert costs.measured() == {11: 0.1}


def test_dearer_rows_at_more_lanes_choose_a_shallower_depth():
    # Measured on a compute-bound CPU: each row costs a third of a one-row step.
    costs = StepCosts()
    for rows in (1, 2, 4, 8, 16):
        costs.record(rows, 0.03 * (1 + 0.33 * (rows - 1)))
    controllers = {
        lanes: DepthController(default_depth=4, max_depth=15, lanes=lanes, costs=costs)
        for lanes in (1, 4)
    }
    for controller in controllers.values():
        for _ in range(200):  # p_i ≈ 0.9 at every position
            for accepted in (15, 15, 15, 15, 15, 15, 8, 4, 2):
                controller.record_round(15, accepted)
    assert controllers[4].best() < controllers[1].best()


def test_a_rejection_counts_against_its_position_and_unreached_positions_learn_nothing():
    controller = DepthController(default_depth=4, max_depth=4)
    before = controller.conditional_acceptance()
    for _ in range(100):
        controller.record_round(4, 1)  # position 1 accepted, 2 rejected, 3-4 never reached
    p1, p2, p3, p4 = controller.conditional_acceptance()
    assert p1 > 0.95
    assert p2 < 0.05
    # Never reached: each borrows its predecessor's rate, not its own old prior.
    assert p3 == pytest.approx(p2)
    assert p4 == pytest.approx(p3)
    assert before[2] == pytest.approx(0.5)


def test_an_impossible_round_is_refused():
    with pytest.raises(ValueError):
        DepthController(default_depth=4, max_depth=15).record_round(2, 3)


def test_with_a_cap_of_one_exploration_has_nowhere_to_go():
    controller = DepthController(default_depth=1, max_depth=1)
    proposals = []
    for _ in range(ROUNDS_BEFORE_TUNING):
        controller.record_round(1, 1)
    for _ in range(3 * EXPLORE_EVERY):
        proposals.append(controller.choose())
        controller.record_step(2, 0.01)
    assert set(proposals) == {1}


def test_power_of_two_rows_are_the_depths_a_tiled_kernel_verifies_cheaply():
    assert power_of_two_rows(15) == (1, 3, 7, 15)
    assert power_of_two_rows(8) == (1, 3, 7, 8)  # the cap itself stays reachable
    assert power_of_two_rows(1) == (1,)


def test_match_classes_split_bare_bigrams_short_and_long_matches():
    assert [match_class(n) for n in (None, 0, 2, 3, 7, 8, 32)] == [0, 0, 0, 1, 1, 2, 2]
    assert MATCH_CLASSES == 3


def test_candidates_limit_the_best_depth_and_skipping_competes_with_plain():
    cost = lambda rows: 1.0 + 0.5 * (rows % 2) * (rows > 1) + 0.2 * (rows - 1)  # noqa: E731
    sure = [0.95**i for i in range(1, 16)]
    assert best_depth(sure, cost, (1, 3, 7, 15)) in (1, 3, 7, 15)
    assert best_depth([0.01] * 15, cost, (1, 3, 7, 15), may_skip=True) == 0
    assert best_depth([0.01] * 15, cost, (1, 3, 7, 15)) == 1  # without skipping, the least


def test_each_match_class_learns_its_own_depth():
    controller = DepthController(
        default_depth=4, max_depth=15, candidates=power_of_two_rows(15), may_skip=True
    )
    for _ in range(100):
        controller.record_round(15, 0, klass=0)
        controller.record_round(15, 15, klass=2)
        controller.record_step(16, 0.01 * (1 + 0.2 * 15))
    assert controller.mode_of(1) is DepthMode.LEARNING
    assert controller.choose(0) == 0
    assert controller.choose(1) == 3  # untried: the candidate nearest the default
    assert controller.choose(2) == 15


def test_exploration_walks_the_candidates_and_reaches_a_skipped_class():
    controller = DepthController(
        default_depth=4, max_depth=15, candidates=power_of_two_rows(15), may_skip=True
    )
    for _ in range(ROUNDS_BEFORE_TUNING * 4):
        controller.record_round(3, 0)
    proposals = []
    for _ in range(2 * EXPLORE_EVERY):
        proposals.append(controller.choose())
        controller.record_step(1, 0.01)  # plain steps keep the schedule going
    assert set(proposals) == {0, 1}
    assert proposals.index(1) == EXPLORE_EVERY - 1


def test_from_four_lanes_the_drafting_classes_share_the_depth_their_mixture_prices_best():
    # Bare bigrams never accepted, short matches half the time, long copies always.
    acceptance = AcceptanceModel(15)
    for i in range(64):
        acceptance.record(15, 0, 0)
        acceptance.record(3, 1 if i % 2 else 3, 1)
        acceptance.record(15, 15, 2)

    def controller(lanes):
        return DepthController(
            default_depth=4,
            max_depth=15,
            lanes=lanes,
            acceptance=acceptance,
            candidates=power_of_two_rows(15),
            may_skip=True,
        )

    four = controller(4)
    assert [four.best(klass) for klass in range(3)] == [0, 1, 15]  # each class alone
    assert four.depths() == (0, 15, 15)  # one width for the tick; bigrams still skip
    assert four.shared_depth([1, 2]) == 15
    assert controller(8).depths() == (0, 1, 1)  # dearer rows: the unsure class decides
    for lanes in (1, 2, 3):  # below SHARED_DEPTH_FROM_LANES each class keeps its own depth
        alone = controller(lanes)
        assert alone.depths() == tuple(alone.best(k) for k in range(3))
    assert len(set(controller(2).depths()) - {0}) == 2  # two widths in one tick at 2 lanes
