"""The plain sampler: penalties, greedy, filters, and the inverse CDF over token_distribution."""

import math

import numpy as np
import pytest

from superfluid.domain.errors import SamplingParamsError, SuperfluidError
from superfluid.domain.sampling import (
    SamplingParams,
    apply_penalties,
    draw_index,
    sample,
    token_distribution,
)

RAW = SamplingParams(penalty_window=0)


def softmax(values: list[float]) -> np.ndarray:
    exps = np.exp(np.asarray(values, dtype=np.float64) - max(values))
    return exps / exps.sum()


def kept(distribution: np.ndarray) -> set[int]:
    return {int(i) for i in np.flatnonzero(distribution > 0.0)}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("temperature", -0.5, "temperature must be a finite number >= 0, got -0.5"),
        ("temperature", math.inf, "temperature must be a finite number >= 0, got inf"),
        ("top_k", -1, "top_k must be 0 (off) or positive, got -1"),
        ("top_p", 0.0, "top_p must be in (0, 1], got 0.0"),
        ("top_p", 1.5, "top_p must be in (0, 1], got 1.5"),
        ("min_p", -0.1, "min_p must be in [0, 1], got -0.1"),
        ("repeat_penalty", 0.0, "repeat_penalty must be a finite number > 0, got 0.0"),
        ("presence_penalty", math.nan, "presence_penalty must be finite, got nan"),
        ("penalty_window", -2, "penalty_window must be -1 (whole history), 0 (off) or positive"),
    ],
)
def test_out_of_range_parameters_are_refused_with_a_message_for_the_caller(
    field: str, value: float, message: str
) -> None:
    with pytest.raises(SamplingParamsError) as refused:
        SamplingParams(**{field: value})
    assert refused.value.message.startswith(message)
    assert isinstance(refused.value, SuperfluidError)
    assert isinstance(refused.value, ValueError)


def test_only_temperature_zero_is_greedy() -> None:
    assert SamplingParams(temperature=0.0).is_greedy
    assert not SamplingParams(temperature=1e-6).is_greedy


def test_greedy_takes_the_lowest_index_among_tied_maxima_and_ignores_the_uniform() -> None:
    logits = np.array([0.5, 3.0, -1.0, 3.0, 2.9], dtype=np.float32)
    greedy = SamplingParams(temperature=0.0)
    assert {sample(logits, greedy, [], u) for u in (0.0, 0.3, 0.999)} == {1}
    assert token_distribution(logits, greedy, []).tolist() == [0, 1, 0, 0, 0]


def test_without_active_penalties_the_row_is_not_copied() -> None:
    logits = np.array([1.0, 2.0, 3.0])
    off = SamplingParams(repeat_penalty=1.3, penalty_window=0)
    assert apply_penalties(logits, off, [2]) is logits
    assert apply_penalties(logits, SamplingParams(), [0, 1, 2]) is logits
    assert apply_penalties(logits, SamplingParams(repeat_penalty=1.3), []) is logits


def test_repeat_penalty_divides_positive_logits_and_multiplies_the_others() -> None:
    logits = np.array([4.0, -2.0, 0.0, 1.0])
    params = SamplingParams(repeat_penalty=2.0)
    penalised = apply_penalties(logits, params, [0, 1, 2, 0])
    assert penalised.tolist() == [2.0, -4.0, 0.0, 1.0]
    assert logits.tolist() == [4.0, -2.0, 0.0, 1.0]


def test_presence_counts_once_and_frequency_counts_every_occurrence() -> None:
    logits = np.zeros(3)
    params = SamplingParams(presence_penalty=0.5, frequency_penalty=0.25)
    assert apply_penalties(logits, params, [1, 1, 1, 2]).tolist() == [0.0, -1.25, -0.75]


def test_the_penalty_window_is_the_last_n_tokens_zero_is_off_and_minus_one_is_everything() -> None:
    logits = np.zeros(4)
    history = [0, 1, 2, 2]

    def penalised_ids(window: int) -> list[int]:
        params = SamplingParams(presence_penalty=1.0, penalty_window=window)
        return np.flatnonzero(apply_penalties(logits, params, history)).tolist()

    assert penalised_ids(2) == [2]
    assert penalised_ids(3) == [1, 2]
    assert penalised_ids(-1) == [0, 1, 2]
    assert penalised_ids(0) == []


def test_history_ids_outside_the_row_are_not_penalised() -> None:
    logits = np.zeros(3)
    params = SamplingParams(presence_penalty=1.0)
    assert apply_penalties(logits, params, [-4, 7, 1]).tolist() == [0.0, -1.0, 0.0]


def test_penalties_can_change_the_greedy_token() -> None:
    logits = np.array([2.0, 1.5, 0.0])
    params = SamplingParams(temperature=0.0, repeat_penalty=2.0)
    assert sample(logits, params, [5], 0.0) == 0
    assert sample(logits, params, [0], 0.0) == 1


def test_the_distribution_is_the_softmax_of_logits_over_temperature() -> None:
    logits = [1.0, 2.0, 0.5, -1.0]
    for temperature in (0.3, 1.0, 1.7):
        params = SamplingParams(temperature=temperature, penalty_window=0)
        expected = softmax([v / temperature for v in logits])
        got = token_distribution(np.array(logits, dtype=np.float32), params, [])
        np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_top_k_keeps_the_k_largest_and_every_token_tied_with_the_kth() -> None:
    logits = np.array([1.0, 5.0, 3.0, 3.0, 4.0, 0.0])
    assert kept(token_distribution(logits, SamplingParams(top_k=2), [])) == {1, 4}
    assert kept(token_distribution(logits, SamplingParams(top_k=3), [])) == {1, 2, 3, 4}
    assert kept(token_distribution(logits, SamplingParams(top_k=6), [])) == set(range(6))


def test_top_p_keeps_the_shortest_most_likely_prefix_reaching_the_mass() -> None:
    logits = np.log(np.array([0.2, 0.5, 0.3]))
    assert kept(token_distribution(logits, SamplingParams(top_p=0.4), [])) == {1}
    assert kept(token_distribution(logits, SamplingParams(top_p=0.6), [])) == {1, 2}
    assert kept(token_distribution(logits, SamplingParams(top_p=0.9), [])) == {0, 1, 2}
    kept_two = token_distribution(logits, SamplingParams(top_p=0.6), [])
    np.testing.assert_allclose(kept_two, [0.0, 0.625, 0.375])


def test_top_p_breaks_probability_ties_by_lower_token_id() -> None:
    logits = np.zeros(4)
    assert kept(token_distribution(logits, SamplingParams(top_p=0.5), [])) == {0, 1}


def test_min_p_keeps_tokens_at_least_that_fraction_of_the_most_likely() -> None:
    logits = np.log(np.array([0.05, 0.5, 0.2, 0.25]))
    assert kept(token_distribution(logits, SamplingParams(min_p=0.4), [])) == {1, 2, 3}
    assert kept(token_distribution(logits, SamplingParams(min_p=0.5), [])) == {1, 3}


def test_temperature_applies_before_top_p() -> None:
    logits = np.log(np.array([0.6, 0.4]))
    # At temperature 1 the top token alone holds 0.6 of the mass; cooled, it holds more.
    assert kept(token_distribution(logits, SamplingParams(top_p=0.65), [])) == {0, 1}
    cooled = SamplingParams(temperature=0.5, top_p=0.65)
    assert kept(token_distribution(logits, cooled, [])) == {0}


def test_sample_is_the_inverse_cdf_of_the_distribution_in_token_id_order() -> None:
    generator = np.random.default_rng(7)
    logits = generator.standard_normal(50)
    for params in (RAW, SamplingParams(temperature=0.7, top_k=9, top_p=0.8, min_p=0.1)):
        cumulative = np.cumsum(token_distribution(logits, params, []))
        for u in np.linspace(0.0, 0.999, 200):
            expected = int(np.searchsorted(cumulative, u, side="right"))
            assert sample(logits, params, [], float(u)) == expected


@pytest.mark.parametrize("spread", [4.0, 0.3], ids=["peaked nucleus", "nucleus of thousands"])
def test_large_vocabularies_sample_what_a_full_sort_and_running_sum_would(spread: float) -> None:
    generator = np.random.default_rng(11)
    vocabulary = 70_000
    logits = (generator.standard_normal(vocabulary) * spread).astype(np.float32)
    params = SamplingParams(temperature=0.8, top_p=0.9, repeat_penalty=1.2)
    history = [int(t) for t in generator.integers(0, vocabulary, 100)]
    scores = apply_penalties(logits, params, history).astype(np.float64) / params.temperature
    probabilities = softmax(scores.tolist())
    order = np.argsort(-probabilities, kind="stable")
    cut = int(np.searchsorted(np.cumsum(probabilities[order]), params.top_p))
    expected = np.zeros(vocabulary)
    expected[order[: cut + 1]] = probabilities[order[: cut + 1]]
    expected /= expected.sum()
    distribution = token_distribution(logits, params, history)
    np.testing.assert_allclose(distribution, expected, atol=1e-12)
    cumulative = np.cumsum(distribution)
    for u in generator.random(60):
        assert sample(logits, params, history, float(u)) == int(
            np.searchsorted(cumulative, u, side="right")
        )


def test_tokens_with_minus_infinite_logits_are_never_drawn() -> None:
    logits = np.array([-np.inf, 0.0, -np.inf, 0.0, -np.inf])
    assert {sample(logits, RAW, [], u) for u in np.linspace(0, 0.9999, 101)} == {1, 3}


def test_a_row_without_a_finite_maximum_is_refused() -> None:
    with pytest.raises(ValueError, match="finite maximum"):
        sample(np.full(3, -np.inf), RAW, [], 0.5)


def test_draw_index_never_draws_a_zero_weight_and_refuses_uniforms_outside_the_interval() -> None:
    weights = np.array([0.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    assert draw_index(weights, 0.0) == 1
    assert draw_index(weights, 0.5) == 4
    assert draw_index(weights, np.nextafter(1.0, 0.0)) == 4
    for u in (-0.1, 1.0):
        with pytest.raises(ValueError, match=r"\[0, 1\)"):
            draw_index(weights, u)
    with pytest.raises(ValueError, match="no positive mass"):
        draw_index(np.zeros(3), 0.5)


def test_a_long_weight_vector_draws_the_same_index_as_one_running_sum() -> None:
    generator = np.random.default_rng(3)
    weights = generator.random(100_000) * (generator.random(100_000) < 0.2)
    weights[-5000:] = 0.0
    cumulative = np.cumsum(weights)
    for u in [*generator.random(500), np.nextafter(1.0, 0.0)]:
        expected = min(int(np.searchsorted(cumulative, u * cumulative[-1], side="right")), 94_999)
        while weights[expected] == 0.0:
            expected -= 1
        assert draw_index(weights, float(u)) == expected


def test_logit_bias_is_added_before_sampling_and_can_ban_or_force_a_token():
    logits = np.array([3.0, 1.0, 0.5, 2.0], dtype=np.float32)
    greedy = SamplingParams(temperature=0.0)
    assert sample(logits, greedy, [], 0.0) == 0
    banned = SamplingParams(temperature=0.0, logit_bias=((0, -100.0),))
    assert sample(logits, banned, [], 0.0) == 3
    forced = SamplingParams(temperature=1.0, logit_bias=((2, 100.0), (99, 5.0)))
    assert token_distribution(logits, forced, [])[2] > 0.999
    assert logits[0] == 3.0  # the row itself is never mutated
