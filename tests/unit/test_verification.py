"""Verification rounds: what is committed, when the round stops, and how much KV stays."""

import numpy as np
import pytest

from superfluid.domain.rng import (
    STREAM_ACCEPT,
    STREAM_RESIDUAL,
    STREAM_SAMPLE,
    uniform,
)
from superfluid.domain.sampling import SamplingParams, sample, token_distribution
from superfluid.domain.verification import (
    RoundResult,
    acceptance_probability,
    residual_distribution,
    verify_by_matching,
    verify_by_rejection,
)

VOCAB = 6
EOS = 5
GREEDY = SamplingParams(temperature=0.0)
HISTORY = (3, 1, 4)
NO_STOPS: frozenset[int] = frozenset()


def favouring(*tokens: int) -> np.ndarray:
    """Logits rows where row i strongly prefers tokens[i]."""
    rows = np.zeros((len(tokens), VOCAB), dtype=np.float32)
    rows[np.arange(len(tokens)), tokens] = 10.0
    return rows


def match(rows: np.ndarray, draft: list[int], **overrides: object) -> RoundResult:
    arguments: dict[str, object] = {
        "params": GREEDY,
        "history": HISTORY,
        "start_pos": 0,
        "stops": frozenset({EOS}),
        "budget": 100,
    }
    arguments.update(overrides)
    return verify_by_matching(rows, draft, **arguments)  # type: ignore[arg-type]


def test_a_fully_accepted_draft_commits_every_draft_token_and_the_bonus() -> None:
    result = match(favouring(1, 2, 3, 4), [1, 2, 3])
    assert result == RoundResult(accepted=3, tokens=(1, 2, 3, 4), finished=False, keep_length=6)


def test_a_rejected_first_token_commits_the_targets_own_token_only() -> None:
    result = match(favouring(2, 2, 3), [1, 2])
    assert result == RoundResult(accepted=0, tokens=(2,), finished=False, keep_length=3)


def test_a_mismatch_mid_draft_commits_the_accepted_prefix_and_the_correction() -> None:
    result = match(favouring(1, 0, 3, 4), [1, 2, 3])
    assert result == RoundResult(accepted=1, tokens=(1, 0), finished=False, keep_length=4)


def test_an_empty_draft_is_one_step_of_plain_decoding() -> None:
    result = match(favouring(4), [])
    assert result == RoundResult(accepted=0, tokens=(4,), finished=False, keep_length=3)


def test_eos_inside_a_draft_ends_the_lane_at_that_token() -> None:
    result = match(favouring(1, EOS, 3, 4), [1, EOS, 3])
    assert result == RoundResult(accepted=2, tokens=(1, EOS), finished=True, keep_length=4)


def test_a_stop_token_as_the_correction_ends_the_lane() -> None:
    result = match(favouring(EOS, 2), [1])
    assert result == RoundResult(accepted=0, tokens=(EOS,), finished=True, keep_length=3)


def test_any_token_of_the_stop_set_ends_the_lane() -> None:
    result = match(favouring(1, 2, 3), [1, 2], stops=frozenset({2, EOS}))
    assert result.tokens == (1, 2)
    assert result.finished


def test_the_budget_cuts_a_round_short_and_finishes_the_lane() -> None:
    result = match(favouring(1, 2, 3, 4), [1, 2, 3], budget=2)
    assert result == RoundResult(accepted=2, tokens=(1, 2), finished=True, keep_length=4)
    assert match(favouring(1, 2), [1], budget=2).finished
    assert not match(favouring(1, 2), [1], budget=3).finished


def test_a_round_needs_one_row_more_than_the_draft_and_a_positive_budget() -> None:
    with pytest.raises(ValueError, match="2 draft tokens need 3 rows, got 2"):
        match(favouring(1, 2), [1, 2])
    with pytest.raises(ValueError, match="budget of at least one token"):
        match(favouring(1), [], budget=0)


def test_sampled_matching_draws_each_row_with_the_plain_uniform_at_its_stream_position() -> None:
    generator = np.random.default_rng(5)
    rows = generator.standard_normal((4, VOCAB))
    params = SamplingParams(temperature=0.9, top_k=4, seed=-12)
    history = [0, 1]
    expected = []
    for i in range(4):
        seen = history + expected
        expected.append(sample(rows[i], params, seen, uniform(params.seed, 40 + i)))
    result = match(rows, expected[:3], params=params, history=history, start_pos=40)
    assert result.tokens == tuple(expected)
    assert result.accepted == 3


def test_penalties_see_the_tokens_committed_earlier_in_the_round() -> None:
    rows = np.tile(np.array([0.0, 2.0, 1.5, 0.0, 0.0, 0.0]), (3, 1))
    params = SamplingParams(temperature=0.0, repeat_penalty=2.0)
    result = match(rows, [1, 1], params=params, history=[0])
    # Row 0 prefers 1; once 1 is committed the penalty halves it below token 2.
    assert result.tokens == (1, 2)
    assert result.accepted == 1


def test_acceptance_is_certain_when_the_target_likes_the_token_at_least_as_much() -> None:
    assert acceptance_probability(0.5, 0.25) == 1.0
    assert acceptance_probability(0.25, 0.25) == 1.0
    assert acceptance_probability(0.1, 0.4) == 0.25
    assert acceptance_probability(0.0, 0.4) == 0.0


def test_a_drafted_token_with_no_draft_probability_is_a_drafter_bug() -> None:
    with pytest.raises(ValueError, match="positive draft probability"):
        acceptance_probability(0.3, 0.0)


def test_the_residual_is_the_normalised_excess_of_target_over_draft() -> None:
    residual = residual_distribution(np.array([0.5, 0.3, 0.2, 0.0]), np.array([0.1, 0.5, 0.2, 0.2]))
    np.testing.assert_allclose(residual, [1.0, 0.0, 0.0, 0.0])
    residual = residual_distribution(np.array([0.4, 0.4, 0.2]), np.array([0.2, 0.3, 0.5]))
    np.testing.assert_allclose(residual, [2 / 3, 1 / 3, 0.0])


def test_an_empty_residual_falls_back_to_the_target_itself() -> None:
    p = np.array([0.25, 0.75])
    np.testing.assert_allclose(residual_distribution(p, p), p)


class RecordingUniforms:
    def __init__(self, value: float) -> None:
        self.value = value
        self.calls: list[tuple[int, int]] = []

    def __call__(self, stream: int, pos: int) -> float:
        self.calls.append((stream, pos))
        return self.value


def reject(
    rows: np.ndarray, q_rows: np.ndarray, draft: list[int], **overrides: object
) -> RoundResult:
    arguments: dict[str, object] = {
        "params": SamplingParams(penalty_window=0, seed=8),
        "history": HISTORY,
        "start_pos": 10,
        "stops": frozenset({EOS}),
        "budget": 100,
    }
    arguments.update(overrides)
    return verify_by_rejection(rows, q_rows, draft, **arguments)  # type: ignore[arg-type]


def distribution_rows(*rows: list[float]) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(np.array(rows, dtype=np.float64))


def test_a_draft_from_the_targets_own_distribution_is_always_accepted_with_a_plain_bonus() -> None:
    p = [0.1, 0.2, 0.3, 0.2, 0.1, 0.1]
    rows = distribution_rows(p, p, p)
    params = SamplingParams(penalty_window=0, seed=8)
    q_rows = np.array([token_distribution(row, params, []) for row in rows[:2]])
    uniforms = RecordingUniforms(0.999)
    result = reject(rows, q_rows, [2, 4], u_source=uniforms)
    assert result.accepted == 2
    assert result.tokens[:2] == (2, 4)
    assert result.tokens[2] == sample(rows[2], params, [], 0.999)
    # Certain acceptances draw no coin; the bonus is the plain draw at its stream position.
    assert uniforms.calls == [(STREAM_SAMPLE, 12)]


def test_a_token_the_target_rules_out_is_rejected_and_redrawn_from_the_residual() -> None:
    p = [0.0, 0.5, 0.5, 0.0, 0.0, 0.0]
    q = [0.5, 0.5, 0.0, 0.0, 0.0, 0.0]
    uniforms = RecordingUniforms(0.0)
    result = reject(distribution_rows(p, p), np.array([q]), [0], u_source=uniforms)
    assert result == RoundResult(accepted=0, tokens=(2,), finished=False, keep_length=3)
    assert uniforms.calls == [(STREAM_RESIDUAL, 10)]


def test_the_accept_coin_decides_an_uncertain_draft_token() -> None:
    p = [0.2, 0.8, 0.0, 0.0, 0.0, 0.0]
    q = [0.8, 0.2, 0.0, 0.0, 0.0, 0.0]
    rows, q_rows = distribution_rows(p, p), np.array([q])
    low = RecordingUniforms(0.2)
    assert reject(rows, q_rows, [0], u_source=low).accepted == 1
    assert low.calls == [(STREAM_ACCEPT, 10), (STREAM_SAMPLE, 11)]
    high = RecordingUniforms(0.3)
    assert reject(rows, q_rows, [0], u_source=high).tokens == (1,)
    assert high.calls == [(STREAM_ACCEPT, 10), (STREAM_RESIDUAL, 10)]


def test_rejection_defaults_to_the_counter_uniforms_of_the_seed() -> None:
    generator = np.random.default_rng(1)
    rows = generator.standard_normal((3, VOCAB))
    q_rows = generator.dirichlet(np.ones(VOCAB), size=2)
    params = SamplingParams(seed=99, penalty_window=0)
    explicit = reject(
        rows,
        q_rows,
        [1, 3],
        params=params,
        u_source=lambda stream, pos: uniform(99, pos, stream),
    )
    assert reject(rows, q_rows, [1, 3], params=params) == explicit


def test_greedy_rejection_is_matching_and_consumes_no_randomness() -> None:
    def no_randomness(stream: int, pos: int) -> float:
        raise AssertionError("greedy drew a uniform")

    q_rows = np.full((2, VOCAB), 1.0 / VOCAB)
    rows = favouring(1, 0, 3)
    result = reject(rows, q_rows, [1, 2], params=GREEDY, u_source=no_randomness)
    assert result == match(rows, [1, 2])
    assert result.tokens == (1, 0)


def test_eos_and_the_budget_cut_rejection_rounds_too() -> None:
    p = [0.0, 0.0, 0.0, 0.0, 0.5, 0.5]
    rows = distribution_rows(p, p, p)
    q_rows = np.array([p, p])
    stopped = reject(rows, q_rows, [EOS, 4])
    assert stopped == RoundResult(accepted=1, tokens=(EOS,), finished=True, keep_length=3)
    cut = reject(rows, q_rows, [4, 4], budget=2)
    assert cut == RoundResult(accepted=2, tokens=(4, 4), finished=True, keep_length=4)


def test_rejection_needs_one_q_row_per_draft_token() -> None:
    with pytest.raises(ValueError, match="2 draft tokens need 2 q rows, got 1"):
        reject(favouring(1, 2, 3), np.full((1, VOCAB), 1 / VOCAB), [1, 2])


def test_penalised_rejection_compares_the_draft_with_the_penalised_target() -> None:
    rows = np.tile(np.array([0.0, 2.0, 1.5, 0.0, 0.0, 0.0]), (2, 1))
    params = SamplingParams(repeat_penalty=3.0, seed=4)
    q = np.zeros(VOCAB)
    q[1] = 1.0
    p_penalised = token_distribution(rows[0], params, [1])
    uniforms = RecordingUniforms(float(p_penalised[1]) + 1e-9)
    result = reject(rows, np.array([q]), [1], params=params, history=[1], u_source=uniforms)
    assert result.accepted == 0
    assert result.tokens[0] != 1
