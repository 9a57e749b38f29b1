import pytest

from superfluid.domain.prompt_lookup import PromptLookupIndex, draft_from_history

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


def test_a_key_seen_whole_drafts_deep_and_one_cut_short_drafts_what_it_earned_plus_one():
    from superfluid.domain.prompt_lookup import MatchHistory

    history = MatchHistory()
    assert history.size((1, 2, 3), 15) is None  # never drafted from: the caller decides
    history.record((1, 2, 3), drafted=8, accepted=8)
    assert history.size((1, 2, 3), 15) == 15
    history.record((1, 2, 3), drafted=15, accepted=4)
    assert history.size((1, 2, 3), 15) == 5
    assert history.size((1, 2, 3), 3) == 3
    history.record((1, 2, 3), drafted=5, accepted=0)
    assert history.size((1, 2, 3), 15) == 1
    assert history.size(None, 15) is None


def test_the_keyed_draft_names_the_n_gram_it_followed():
    index = PromptLookupIndex([5, 6, 7, 8, 9, 5, 6, 7])
    assert index.key() == (5, 6, 7)
    assert index.draft_keyed(2) == ([8, 9], (5, 6, 7))
    assert PromptLookupIndex([1, 2, 3]).draft_keyed(4) == ([], None)


def test_a_prompt_lookup_state_learns_what_its_drafts_earned():
    from superfluid.application.drafting import PromptLookupDrafter

    state = PromptLookupDrafter(sized_by_match=True).open([5, 6, 7, 8, 9, 10, 5, 6, 7], seq=0)
    assert state.draft_size(15) is None
    assert state.propose(4) == [8, 9, 10, 5]
    state.commit([8, 9, 42])  # two accepted, then the target's own token
    state.commit([5, 6, 7])  # a plain round: nothing drafted, nothing learnt
    assert state.draft_size(15) == 3  # (5, 6, 7) again: it earned 2 last time
    plain = PromptLookupDrafter().open([5, 6, 7, 8, 5, 6, 7], seq=0)
    assert plain.draft_size(15) is None
