import pytest

from superfluid.domain.prompt_lookup import (
    MATCH_LENGTH_LIMIT,
    PromptLookupIndex,
    draft_from_history,
    match_length_from_history,
)

SPEC_EXAMPLES = [
    ([1, 2, 3, 4, 9, 9, 2, 3], 3, [4, 9, 9]),
    ([5, 6, 7, 8, 5, 6, 7], 4, [8, 5, 6, 7]),
    ([1, 1, 1], 2, [1]),
]


@pytest.mark.parametrize(("history", "k", "expected"), SPEC_EXAMPLES)
def test_a_draft_is_what_followed_the_last_occurrence_of_the_tail(history, k, expected):
    assert draft_from_history(history, k) == expected
    assert PromptLookupIndex(history).draft(k) == expected


def test_a_trigram_match_wins_over_a_more_recent_bigram_match():
    # The bigram (2, 3) last occurred at index 5, but the trigram (1, 2, 3) at index 0 wins.
    history = [1, 2, 3, 7, 9, 2, 3, 8, 1, 2, 3]
    assert draft_from_history(history, 2) == [7, 9]
    assert PromptLookupIndex(history).draft(2) == [7, 9]


def test_the_most_recent_earlier_occurrence_is_used():
    history = [4, 5, 10, 4, 5, 20, 4, 5]
    assert draft_from_history(history, 1) == [20]
    assert PromptLookupIndex(history).draft(1) == [20]


def test_a_draft_is_cut_at_the_end_of_the_history():
    history = [1, 2, 3, 9, 1, 2, 3]
    assert draft_from_history(history, 10) == [9, 1, 2, 3]


def test_nothing_is_drafted_where_nothing_repeats_or_k_is_zero():
    assert draft_from_history([1, 2, 3, 4, 5], 4) == []
    assert PromptLookupIndex([1, 2, 3, 4, 5]).draft(4) == []
    assert draft_from_history([1, 2, 1, 2], 0) == []
    assert PromptLookupIndex([]).draft(3) == []
    assert PromptLookupIndex([7, 7]).draft(3) == []


def test_the_index_follows_committed_tokens_as_they_arrive():
    index = PromptLookupIndex([1, 2, 3, 4])
    assert index.draft(2) == []
    index.extend([1, 2])
    assert index.draft(2) == [3, 4]
    index.extend([3])
    assert index.draft(2) == [4, 1]
    assert len(index) == 7


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        ([1, 2, 3, 4, 9, 9, 2, 3], 2),  # only the bigram (2, 3) repeats
        ([7, 1, 2, 3, 4, 8, 1, 2, 3], 3),  # the trigram, and 8 != 7 before it
        ([7, 1, 2, 3, 4, 7, 1, 2, 3], 4),  # the match reaches one token further back
        ([5, 6, 7, 8, 5, 6, 7], 3),
        ([1, 2, 3], 0),  # nothing repeats
    ],
)
def test_the_match_length_counts_how_far_back_the_tail_matches_the_source(history, expected):
    assert match_length_from_history(history) == expected
    assert PromptLookupIndex(history).match_length() == expected


def test_a_long_copy_is_measured_up_to_the_limit():
    text = list(range(100))
    history = text + text[:50]
    assert PromptLookupIndex(history).match_length() == MATCH_LENGTH_LIMIT
    assert PromptLookupIndex(history).match_length(limit=10) == 10
